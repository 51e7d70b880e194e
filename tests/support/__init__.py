"""Helpers shared by the tests (importable as `support`: pyproject sets pytest's pythonpath)."""
