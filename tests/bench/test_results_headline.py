"""docs/results/README.md's headline claims nothing the committed runs do not back.

The headline is the part of the README between `<!-- headline -->` and `<!-- /headline -->`.
Its figures table names, per row, a committed run folder, a case, a policy and a figure; the
test recomputes each figure from that folder's rows (bench/paper/report.summarize, the same
seeded bootstrap the reports use) and compares the text exactly. Every number in the
headline's prose must be one of the table's figures or a figure of the paper's
(bench/paper/published.py) or a rate of the experiment.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

import pytest

from planfence_net.bench.paper.experiments import RATE_REVISION, RATES
from planfence_net.bench.paper.hostload import host_load
from planfence_net.bench.paper.published import PAPER_RATE, PAPER_SAFETY
from planfence_net.bench.paper.report import Summary, _when, summarize

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"
README = RESULTS / "README.md"
NUMBER = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*(?![\w])")


def headline() -> str:
    text = README.read_text(encoding="utf-8")
    start, end = text.index("<!-- headline -->"), text.index("<!-- /headline -->")
    return text[start:end]


def figure_rows(section: str) -> list[list[str]]:
    """The cells of the figures table (its header starts with `| run |`)."""
    lines = section.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("| run |"))
    rows = []
    for line in lines[first + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


@functools.cache
def _summaries(run: str) -> tuple[Summary, ...]:
    return tuple(summarize(_rows(run)))


def _rows(run: str) -> list[dict[str, Any]]:
    path = RESULTS / run / "rows.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def figure(run: str, case: str, policy: str, name: str) -> str:
    """The text of figure `name` of `policy` on `case` in the committed run `run`."""
    rows = _rows(run)
    if name == "load mean / peak":
        load = host_load(rows)
        assert load.mean is not None and load.peak is not None
        return f"{load.mean:.1f} / {load.peak:.1f}"
    if name == "when":
        return _when(rows)
    found = [s for s in _summaries(run) if s.case == case and s.policy == policy]
    assert len(found) == 1, f"{run}: no case {case!r} with policy {policy!r}"
    return _value(found[0], name)


def _value(s: Summary, name: str) -> str:
    if name == "invalid":
        return f"{s.invalid}/{s.issued}"
    if name == "stall ms":
        return f"{s.stall.value:.0f}"
    if name == "update ms":
        return f"{s.update.value:.0f}" if s.update is not None else "-"
    if name == "stall + update ms":
        return f"{s.total.value:.0f}" if s.total is not None else "-"
    if name == "stall / planfence's":
        return s.vs_base.text(2) if s.vs_base is not None else "-"
    if name == "(stall + update) / planfence's":
        return s.vs_base_total.text(2) if s.vs_base_total is not None else "-"
    raise AssertionError(f"unknown figure {name!r}")


def test_the_headline_has_a_figures_table_naming_committed_runs() -> None:
    rows = figure_rows(headline())
    assert len(rows) >= 10
    for run, *_ in rows:
        assert (RESULTS / run / "rows.jsonl").is_file(), run
        assert (RESULTS / run / "report.md").is_file(), run


@pytest.mark.parametrize("cells", figure_rows(headline()), ids=lambda c: " ".join(c[:4]))
def test_each_headline_figure_is_what_its_rows_give(cells: list[str]) -> None:
    run, case, policy, name, value = cells
    assert figure(run, case, policy, name) == value


def test_every_number_in_the_headline_prose_is_a_checked_figure_or_the_papers() -> None:
    section = headline()
    table = {line for line in section.splitlines() if line.startswith("|")}
    backed = {n for line in table for n in NUMBER.findall(line)}
    paper = {f"{v:g}" for v in PAPER_RATE.values()} | {
        f"{v:.2f}" for v in (PAPER_SAFETY["central"][1] / PAPER_SAFETY["planfence"][1],)
    }
    paper |= {f"{PAPER_SAFETY['sync'][1] / PAPER_SAFETY['planfence'][1]:.2f}", "1,196"}
    rates = {f"{r:g}" for r in RATES} | {f"{RATE_REVISION:g}"}
    prose = "\n".join(
        line for line in section.splitlines() if not line.startswith("|") and "<!--" not in line
    )
    prose = re.sub(r"`[^`]*`", "", prose)  # commands and folder names are not claims
    prose = re.sub(r"(\d)x\b", r"\1", prose)  # "7.1x" is the number 7.1
    unbacked = [n for n in NUMBER.findall(prose) if n not in backed | paper | rates]
    assert unbacked == []
