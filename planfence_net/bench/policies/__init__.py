"""The policies the experiments compare (PlanFence and its baselines), where their records
are written, and the central store.
"""
