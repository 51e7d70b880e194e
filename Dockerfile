# One image for every service of docker-compose.yml: owners, shapers and the executor.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md /app/
COPY planfence_net /app/planfence_net
COPY owners /app/owners
COPY executor /app/executor
COPY traces /app/traces
RUN pip install --no-cache-dir -e /app
# Mount Mahimahi traces here to use the att-lte, tmobile-lte and verizon-lte profiles.
ENV PLANFENCE_TRACES=/traces
ENTRYPOINT ["planfence"]
CMD ["--help"]
