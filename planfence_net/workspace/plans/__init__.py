"""The workspace's use cases: trust a plan, check it, show and list plans, join a worktree,
publish and end intents, record the agent's own writes, automatic plans. The CLI, the MCP
server and the hook call these; a rule about who may do what lives here, never in a door.
"""
