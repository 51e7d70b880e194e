# One image for every service of docker-compose.yml: owners, shapers and the executor.
# Dependencies first, in their own stage: rebuilding after a code change needs no network.
FROM python:3.11-slim AS deps
WORKDIR /app
COPY pyproject.toml setup.py /app/
RUN python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb')); \
print('\n'.join(p['project']['dependencies'] + p['build-system']['requires']))" > /tmp/requirements.txt \
 && pip install --no-cache-dir -r /tmp/requirements.txt && rm /tmp/requirements.txt
FROM deps
COPY README.md /app/
COPY planfence_net /app/planfence_net
COPY owners /app/owners
COPY executor /app/executor
COPY traces /app/traces
RUN pip install --no-cache-dir --no-deps --no-build-isolation /app && rm -rf /app/build
# Not root. docker-compose.yml runs the services as ${PLANFENCE_UID}:${PLANFENCE_GID} (your
# own uid and gid) so they can read the 0600 keys you made and you can read what they write.
RUN useradd --uid 1000 --user-group --create-home planfence
USER planfence
ENV HOME=/home/planfence
# Mount Mahimahi traces here to use the att-lte, tmobile-lte and verizon-lte profiles.
ENV PLANFENCE_TRACES=/traces
ENTRYPOINT ["planfence"]
CMD ["--help"]
