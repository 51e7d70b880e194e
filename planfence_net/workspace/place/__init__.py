"""The place on disk: worktree roots and git dirs, the cluster anchor, the workspace config,
the hook's caches, observing a worktree, and the calls in flight between two hook events.
"""
