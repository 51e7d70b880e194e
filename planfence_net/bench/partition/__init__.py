"""Partitions on separate network stacks: namespaces, a workload, an independent checker."""
