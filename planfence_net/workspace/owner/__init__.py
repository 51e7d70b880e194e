"""The workspace owner: an owner daemon whose keys are the facts of one worktree, with the
hook's Unix socket and the intents it serves.
"""
