"""The asyncio edge of the library: sockets, the Noise session over TCP, clients."""
