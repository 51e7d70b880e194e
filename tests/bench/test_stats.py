"""Exact binomial bounds, uninformative intervals and the load verdict of a report (no I/O)."""

from __future__ import annotations

import pytest

from planfence_net.bench.paper.hostload import HostLoad, host_load
from planfence_net.bench.paper.stats import binomial_upper, informative, rate_text


def test_zero_of_n_has_the_closed_form_upper_bound() -> None:
    assert binomial_upper(0, 330) == pytest.approx(1 - 0.05 ** (1 / 330), abs=1e-12)
    assert rate_text(0, 330) == "0/330 (95% upper bound 0.90%)"
    assert rate_text(0, 30) == "0/30 (95% upper bound 9.50%)"
    assert rate_text(3, 30) == "3/30"


def test_the_bound_is_the_p_at_which_the_count_has_5_percent_probability() -> None:
    # 3 of 30: P(X <= 3; p) = 0.05 at p = 0.2386 (Clopper-Pearson, one-sided)
    assert binomial_upper(3, 30) == pytest.approx(0.23860, abs=1e-4)
    assert binomial_upper(30, 30) == 1.0
    with pytest.raises(ValueError, match="need 0 <= successes <= trials"):
        binomial_upper(4, 3)


def test_an_interval_from_fewer_than_ten_workflows_says_so() -> None:
    assert informative("15.03 [15.03, 15.03]", 3) == (
        "15.03 [15.03, 15.03] (uninformative: 3 workflows)"
    )
    assert informative("15.0 [12.0, 18.0]", 10) == "15.0 [12.0, 18.0]"


def test_a_run_above_the_cpu_count_is_loaded() -> None:
    assert HostLoad(1.0, 2.0, 2).loaded is False
    assert HostLoad(1.5, 2.01, 2).loaded is True
    assert "LOADED" in HostLoad(3.0, 9.5, 2).text()
    assert host_load([{"load1": 1.0}, {"load1": 3.0}]).mean == 2.0
    assert host_load([{"load1": 1.0}, {}]).loaded is True  # unknown counts as loaded
