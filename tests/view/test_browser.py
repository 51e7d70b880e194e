"""`planfence view` in a real headless browser (the OS's Chromium and chromedriver, driven by
Selenium): two sessions in two worktrees read and write through the installed hooks; the
page lists both with their files; a drift then a blocked write makes the block appear on the
open page within 2 s without a reload, naming the writer session and showing the diff;
clicking it shows the lineage graph; closing a session greys it.

The `browser` group (`.ci/run`); skips with one line where chromium or chromedriver is
missing. With PLANFENCE_VIEW_SCREENSHOT=1 it also writes the README's screenshot,
docs/view.png.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.cluster import ClusterHandle

from .scenario import (
    A,
    B,
    C,
    block_line,
    end_session,
    executor_replans,
    installed,
    step_drift,
    step_read_only,
    step_reads,
    view_page,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "view.png"
GREY = "rgb(140, 149, 159)"  # --ended in page.html


@pytest.fixture
def browser() -> Iterator[object]:
    if CHROMIUM is None or DRIVER is None:
        pytest.skip("chromium or chromedriver missing (apt-get install chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1500,1100"):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=DRIVER))
    try:
        yield driver
    finally:
        driver.quit()


def test_the_page_shows_the_team_live(tmp_path: Path, browser: object) -> None:
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.support.ui import WebDriverWait

    driver = browser
    assert isinstance(driver, WebDriver)
    with installed(tmp_path) as team, view_page(team.cluster) as url:
        step_reads(team)
        driver.get(url)
        driver.execute_script("window.pfLoaded = 'first load'")
        wait = WebDriverWait(driver, 10)

        def text(selector: str) -> str:
            """The text of the first element `selector` names, read in one script (the page
            redraws a section as its rows change: an element found earlier may be gone)."""
            found = driver.execute_script(
                "const e = document.querySelector(arguments[0]); return e ? (e.innerText ?? e.textContent) : ''",
                selector,
            )
            return str(found)

        def style(selector: str, name: str) -> str:
            return str(
                driver.execute_script(
                    "return getComputedStyle(document.querySelector(arguments[0]))[arguments[1]]",
                    selector,
                    name,
                )
            )

        def session_row(session: str) -> str:
            return text(f'#sessions tr[data-id="{session}"]')

        # Both sessions, each in its worktree, and their plans with their files.
        wait.until(lambda _: "api" in session_row(A) and "web" in session_row(B))
        assert "main" in session_row(A) and "claude" in session_row(A)
        wait.until(lambda _: "src/lib.py" in text("#plans") and "src/other.py" in text("#plans"))
        plan_sessions = driver.execute_script(
            "return [...document.querySelectorAll('#plans tbody tr td:nth-child(2)')]"
            ".map((td) => td.innerText)"
        )
        assert sorted(plan_sessions) == [A[:8], B[:8]]

        # The drift, the blocked write, and the block on the open page within 2 s.
        step_drift(team)
        block = block_line(team)
        WebDriverWait(driver, 2).until(
            lambda _: B[:8] in text("#blocks .block") and "+v = 2" in text("#blocks .block")
        )
        shown = text("#blocks .block")
        assert style("#blocks .block .title", "fontWeight") in ("700", "bold")
        assert shown.startswith("BLOCKED Write of src/other.py · relevant drift\n")
        # The writer the hook named (session B, which wrote the file A read) and its change.
        assert f"src/lib.py: {block['writers'][0]['writer']} at " in shown
        assert f"written by session {B} of claude in {team.web}" in shown
        assert "-v = 1\n+v = 2" in shown
        assert driver.execute_script("return window.pfLoaded") == "first load"  # no reload
        plan = driver.execute_script("return document.querySelector('#blocks .block').dataset.plan")
        assert plan == block["plan"]
        wait.until(lambda _: session_row(A).startswith("blocked"))

        # The executors panel: the hook's validations (it asks as the planner).
        wait.until(lambda _: "validations" in text('#executors [data-peer="planner"]'))
        assert "heads of " in text('#executors [data-peer="planner"]')

        # Click: the lineage graph, with the version of src/lib.py the plan did not see.
        clicking = WebDriverWait(driver, 10, ignored_exceptions=[StaleElementReferenceException])
        clicking.until(lambda d: d.find_element(By.CSS_SELECTOR, "#blocks .block").click() or True)
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#lineage svg .node-head"))
        assert "api:file/src/lib.py" in text("#lineage svg")
        assert driver.find_elements(By.CSS_SELECTOR, "#lineage svg .node-plan")
        assert driver.find_elements(By.CSS_SELECTOR, "#lineage svg .node-drift")
        if os.environ.get("PLANFENCE_VIEW_SCREENSHOT") == "1":
            driver.save_screenshot(str(SCREENSHOT))

        # Closing session B greys its row.
        end_session(team, team.web, B)
        wait.until(lambda _: session_row(B).startswith("ended"))
        assert style(f'#sessions tr[data-id="{B}"]', "color") == GREY

        # A session that only read greys when it ends too, its client named by its end.
        step_read_only(team)
        wait.until(lambda _: session_row(C).startswith("working"))
        end_session(team, team.web, C)
        wait.until(lambda _: session_row(C).startswith("ended"))
        assert "claude" in session_row(C) and "web" in session_row(C)
        assert style(f'#sessions tr[data-id="{C}"]', "color") == GREY
        assert driver.execute_script("return window.pfLoaded") == "first load"


def test_the_page_shows_an_executors_replan_and_the_writer_of_its_drift(
    live_cluster: ClusterHandle, browser: object
) -> None:
    import anyio
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.support.ui import WebDriverWait

    driver = browser
    assert isinstance(driver, WebDriver)
    with view_page(live_cluster.path) as url:
        driver.get(url)
        done = anyio.run(executor_replans, live_cluster)  # the page is open: it comes in live

        def gate_text(_: object) -> str:
            found = driver.execute_script(
                "const e = document.querySelector('#executors [data-peer=\"ops\"] .gate');"
                "return e ? e.innerText : ''"
            )
            return str(found)

        shown = WebDriverWait(driver, 10).until(gate_text)
        assert shown.startswith("1 decision · 1 authorized · 0 blocked · 1 replanned · last stall ")
        assert f"last: ship authorized, replanned onto {done.new_plan.id.hex()[:10]}" in shown
        assert f"drift found by ship: req/order seq {done.r3.seq} → {done.r4.seq} by reqs" in shown
