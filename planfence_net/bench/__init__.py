"""The lab: baselines, workloads, writers, the oracle, the experiment harness and reports.

Nothing a user's executor runs lives here; it builds on `planfence_net.executor` and the core.
"""

# The experiment names, here so that `planfence bench --help` lists them without loading the lab.
EXPERIMENTS = ("safety", "rate", "keyspace", "scope", "ablations")
