"""The paper's experiments: workloads and schedules, the harness with its shaped links, the
oracle, request counts, statistics, reports, plots and the paper's own figures.
"""
