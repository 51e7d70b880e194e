"""The crowd-out attacker, run as its own process: `python crowd.py PORT COUNT`.

Holds COUNT TCP connections to 127.0.0.1:PORT that never send a byte, and opens a new one
whenever one is closed (or cannot be opened). Prints `ready` once COUNT connections have
been opened; when its stdin closes, prints how many connections it opened in all and exits.
Standard library only: it needs no key and no part of planfence.
"""

from __future__ import annotations

import asyncio
import sys


async def hold(port: int, opened: list[int], ready: asyncio.Event, count: int) -> None:
    while True:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0)  # refused: try again at once, as an attacker would
            continue
        opened[0] += 1
        if opened[0] >= count:
            ready.set()
        try:
            await reader.read(1)  # b"" (or a reset) once the owner closes it
        except OSError:
            pass
        writer.close()


async def main(port: int, count: int) -> None:
    opened = [0]
    ready = asyncio.Event()
    tasks = [asyncio.create_task(hold(port, opened, ready, count)) for _ in range(count)]
    await ready.wait()
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    for task in tasks:
        task.cancel()
    print(opened[0], flush=True)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2])))
