"""What a user's executor runs: the session pool, the gate runner and the local replica.

The baselines, workloads, oracle and reports of the experiments live in `planfence_net.bench`.
"""
