"""Workspace owners: the facts of a worktree (files, branch, HEAD, repository, evidence) as
records, drift classes for plans trusted against them, and the agents' PreToolUse hooks.

    facts      key names and roles (pure)
    observe    stat/hash/git observation of one worktree, with a stat cache
    owner      the workspace owner: an owner daemon that observes before it answers
    classify   the drift classifier (pure): none, informational, relevant, critical
    check      the check machine (sans-IO) and the thin loop that runs it against owners
    trust      writing evidence and the trusted-state plan record
    config     where a workspace's cluster folder, roster and plan selection live
    hook       the `planfence hook claude|codex` entry point (lean imports, fails closed)
    install    merging our hook into .claude/settings.json and .codex/hooks.json|config.toml

This package imports nothing on import, so the hook path stays lean.
"""
