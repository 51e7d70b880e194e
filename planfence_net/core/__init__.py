"""PlanFence itself as pure values: records, lineage, the gate, owner answers, the roster.

Nothing here opens a socket, reads the clock or imports anyio. The only I/O is local files
the layers above need before they connect: `identity` reads (or creates) a key file and
`roster` reads `cluster.toml`.
"""
