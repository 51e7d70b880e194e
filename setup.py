"""The wheel's packages: every package of the code, found on disk (a hand-kept list once left
one out), and the project's top-level data folders mapped in as data packages
(pyproject.toml's package-dir), so that an installed wheel carries its defaults and never
reads a checkout. Everything else is in pyproject.toml."""

from setuptools import find_packages, setup

DATA = [
    "planfence_net.defaults.owners",
    "planfence_net.defaults.executor",
    "planfence_net.defaults.traces",
]

setup(packages=find_packages(include=["planfence_net", "planfence_net.*"]) + DATA)
