"""Agent names become file names and key prefixes: only a safe set is accepted."""

from __future__ import annotations

import pytest

from planfence_net.core.errors import ConfigError
from planfence_net.core.roster import check_name

RULE = "use up to 64 letters, digits, '_', '.' or '-', starting with a letter or digit"


@pytest.mark.parametrize("name", ["ws", "planner", "agent-12", "w_1.feature", "A" * 64])
def test_safe_names_are_accepted(name: str) -> None:
    assert check_name(name) == name


@pytest.mark.parametrize(
    "name",
    ["", ".", "..", ".hidden", "-x", "a/b", "a\\b", "../../keys/ws", "ws\n", "w s", "A" * 65, 5],
)
def test_names_that_could_leave_a_folder_are_refused(name: object) -> None:
    with pytest.raises(ConfigError) as caught:
        check_name(name, "roster: agents[0]: 'name'")
    assert str(caught.value) == (
        f"roster: agents[0]: 'name' {name!r} is not a valid agent name: {RULE}"
    )
