"""planfence-net: dependency-scoped plan validation for teams of LLM agents."""

__version__ = "0.1.0"
