"""An owner's answers in the socket's callback (`owners/now.py`), with no socket: a row's
typed error is left to the session's loop, anything else a row raises is a bug, not caught."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from planfence_net.owners.now import AnswersNow
from planfence_net.owners.service import Call, Operation, Service, answers_now
from planfence_net.protocol.messages import BadRequest, encode_request
from planfence_net.protocol.requestread import SCALAR


def _answers(now: Any) -> AnswersNow:
    async def handle(call: Call, parsed: Any) -> dict[str, Any]:
        raise AssertionError("the session's loop is not run here")

    row = Operation("probe", {"x": SCALAR}, dict, answers_now(now)(handle))
    service = Service([row])
    daemon = SimpleNamespace(store=SimpleNamespace(commits=0))
    return AnswersNow(daemon, service.schema, service)  # type: ignore[arg-type]


def _connection() -> Any:
    return SimpleNamespace(stream=SimpleNamespace(writable=True))


def test_a_rows_bad_request_is_left_to_the_sessions_loop() -> None:
    def refuse(call: Call, parsed: Any) -> dict[str, Any] | None:
        raise BadRequest("not_owner", "not mine")

    answers = _answers(refuse)
    assert answers.answer(_connection(), encode_request(7, "probe", {"x": 1})) is False  # type: ignore[arg-type]


def test_a_bug_in_a_row_is_not_swallowed() -> None:
    def broken(call: Call, parsed: Any) -> dict[str, Any] | None:
        raise KeyError("a bug")

    answers = _answers(broken)
    with pytest.raises(KeyError, match="a bug"):
        answers.answer(_connection(), encode_request(7, "probe", {"x": 1}))  # type: ignore[arg-type]
