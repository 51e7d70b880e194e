"""`planfence view`: the team's sessions, plans, blocks and owners, live. One collector
(`collect`, folding the owners' logs with `team` into `rows`) and three readers of its stream: the web
page (`page`), the terminal UI (`tui`) and JSON lines (`command`); the lineage graph
(`graph`) and Claude Code's status line (`statusline`)."""
