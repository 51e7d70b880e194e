"""PlanFence in front of MCP servers: the state behind a server as an owner, its write tools
checked against what the session read through it."""
