"""The library's public API: `planfence_net.__all__`, loaded lazily, and the README's example
run as written against a live cluster."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys

import pytest

import planfence_net
from support.cluster import REPO, ClusterHandle


def test_every_public_name_is_its_home_module_object() -> None:
    homes = vars(planfence_net)["_HOMES"]
    assert planfence_net.__all__ == sorted(homes)
    for name, home in homes.items():
        module = importlib.import_module(f"planfence_net.{home}")
        assert getattr(planfence_net, name) is getattr(module, name), name
    with pytest.raises(AttributeError, match="has no attribute 'walk'"):
        planfence_net.walk  # noqa: B018 - internal names are not exported


def test_importing_the_package_loads_none_of_it() -> None:
    code = (
        "import sys, planfence_net\n"
        "print(sorted(m for m in sys.modules if m.startswith('planfence_net.')))\n"
        "planfence_net.Action\n"
        "print('planfence_net.core.gate' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert out == "[]\nTrue\n"


def readme_example() -> str:
    text = (REPO / "README.md").read_text()
    section = text.split("## As a library", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match is not None
    return match.group(1)


def test_the_readme_example_authorizes_on_a_live_cluster(live_cluster: ClusterHandle) -> None:
    code = readme_example()
    code = code.replace('"mycluster"', repr(str(live_cluster.path)))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stderr) == (0, "")
    lines = proc.stdout.splitlines()
    assert lines[:2] == ["ship: authorized", "  the 1 declared key matches its owner's head"]
