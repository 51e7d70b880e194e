"""How long to wait, named once.

A duration is a `timeout` (seconds, a float); an instant is a `deadline` (a value of the
clock in use: `time.monotonic()` for blocking code, `anyio.current_time()` for async code).
A timeout is set by the caller around a whole operation (an authorization, a check, one
owner's session), never per step: the total never grows with the number of rounds.
"""

from __future__ import annotations

DEFAULT_TIMEOUT = 5.0  # seconds for one whole operation against the owners
