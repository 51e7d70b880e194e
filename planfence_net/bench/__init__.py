"""The lab: baselines, workloads, writers, the oracle, the experiment harness and reports.

Nothing a user's executor runs lives here; it builds on `planfence_net.executor` and the core.
"""
