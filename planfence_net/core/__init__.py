"""PlanFence itself as pure values: records, lineage, the gate, owner answers, the roster.

No I/O: nothing here opens a socket, reads the clock or imports anyio.
"""
