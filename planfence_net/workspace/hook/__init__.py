"""The hook client: `planfence hook claude|codex` (lean imports, fails closed), its automatic
mode, its records of the agent's own writes, the texts the model reads, and the fast path
to the running workspace owner.
"""
