"""The executor side: session pool, gate runner, local replica, baselines and experiments."""
