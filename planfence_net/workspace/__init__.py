"""Workspace owners: the facts of a worktree (files, branch, HEAD, repository, evidence) as
records, drift classes for plans trusted against them, and the agents' hooks.

One folder per layer, each importing only the folders above it in this list:

    model       pure values: fact keys, drift classes, the check machine, hook payloads,
                read-command parsing, dependency lists, intents
    place       the place on disk: worktree paths, the cluster anchor, config, caches,
                observation of a worktree, calls in flight
    plans       the use cases every front door calls: trust, check, show and list plans,
                refresh, join, intents, the agent's own writes, automatic plans
    installers  the clients' settings, Codex trust, the git gate, the recovery text
    hook        the hook client: `planfence hook claude|codex` and its fast path
    owner       the workspace owner: an owner daemon that observes before it answers

This package imports nothing on import, so the hook path stays lean.
"""
