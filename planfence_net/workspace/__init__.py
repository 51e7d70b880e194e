"""Workspace owners: the facts of a worktree (files, branch, HEAD, repository, evidence) as
records, drift classes for plans trusted against them, and the agents' PreToolUse hooks.

    facts      key names and roles (pure)
    observe    stat/hash/git observation of one worktree, with a stat cache
    owner      the workspace owner: an owner daemon that observes before it answers
    classify   the drift classifier (pure): none, informational, relevant, critical
    check      the check machine (sans-IO) and the thin loop that runs it against owners
    blocking   the gate driven over blocking sessions (the check, one-shot `authorize`)
    trust      writing evidence and the trusted-state plan record
    config     where a workspace's cluster folder, roster and plan selection live
    hook       the `planfence hook claude|codex` entry point (lean imports, fails closed)
    hooktext   the texts the model reads from the hook (why blocked, the command to run)
    hookrecord the hook's records of the agent's own writes (PostToolUse, calls in flight)
    inflight   the plan's own calls between PreToolUse and PostToolUse (parallel calls)
    paths      worktree roots, git dirs, the repository marker, the installed executable
    join       `workspace join`: another worktree's owner in the team's cluster
    install    merging our hooks into the agents' configs (project, shared, user scope)
    status     `hook status`: are our hooks active, and the step that activates them
    codexapp   asking `codex app-server` which hooks it runs (hooks/list), the trust hash
    codextrust `hook install codex --trust`: the user's trust decisions in config.toml

This package imports nothing on import, so the hook path stays lean.
"""
