"""Speed benchmarks: warm authorize against etcd's Txn, owner load and growth curves, the
raw-socket floor.
"""
