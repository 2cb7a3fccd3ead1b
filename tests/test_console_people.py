"""The console's request page as a person reads it (issue 31): the header names the
token by its name, the timeline bar shows the time taken (not only the deadline tick),
and once the Evidence Pack is built the page offers its download, not the same build
button again (ADR 0048: the ledger keeps no copy of a pack and records none).

A ledger with alice erased (within minutes of a 48 h deadline) and carol's request open,
served on loopback; Chromium driven by Playwright at 1280 px, as tests/test_console.py.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from ledger.application import LedgerApp
from ledger.home import Config

from .conftest import run_cli
from .console_support import Served, at, build_ledger, serve, t0
from .test_audit_report import find_chromium

SHOTS = os.environ.get("LEDGER_SHOTS")  # a folder to keep the request page's screenshot in


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    home = tmp_path_factory.mktemp("console-people") / "home"
    start = t0()
    old = os.environ.get("LEDGER_NOW")
    build_ledger(home, start)
    try:
        os.environ["LEDGER_NOW"] = at(start + timedelta(minutes=10))
        r = run_cli("--home", str(home), "redact-user", "alice", "--reason", "asked",
                    "--operator", "operator", "--json")
        assert r.code == 0, r.err
        erased = json.loads(r.out)["request_id"]
        app = LedgerApp(Config.load(home))
        try:
            open_request = str(app.receive_request("carol", "asked", "operator", 24, 48))
        finally:
            app.close()
        os.environ["LEDGER_NOW"] = at(start + timedelta(hours=1, minutes=10))
        with serve(home) as s:
            yield {"served": s, "start": start, "erased": erased, "open": open_request}
    finally:
        if old is None:
            os.environ.pop("LEDGER_NOW", None)
        else:
            os.environ["LEDGER_NOW"] = old


@pytest.fixture(scope="module")
def page(served: dict[str, Any]) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    s: Served = served["served"]
    token = s.tokens.create("dpo-maria", "operator")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=find_chromium(), args=["--no-sandbox"])
        try:
            pg = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
            pg.goto(s.url + "/signin")
            pg.get_by_label("Token").fill(token)
            pg.get_by_role("button", name="Sign in").click()
            pg.wait_for_url("**/console/requests")
            yield pg
        finally:
            browser.close()


def test_header_names_the_token_not_its_id(served: dict[str, Any], page: Any) -> None:
    page.goto(f"{served['served'].url}/requests/{served['open']}")
    who = page.locator("#signed-in-as")
    assert who.inner_text() == "dpo-maria"
    token_id = who.get_attribute("title")
    assert token_id is not None and token_id.startswith("token tok_")
    assert "Signed in as dpo-maria operator" in " ".join(
        page.locator(".who").inner_text().split())


def test_timeline_bar_shows_the_time_taken(served: dict[str, Any], page: Any) -> None:
    s: Served = served["served"]
    page.goto(f"{s.url}/requests/{served['erased']}")
    elapsed = page.locator('svg.deadline rect[data-bar="elapsed"]')
    assert float(elapsed.get_attribute("width") or 0) >= 3  # done in minutes: still seen
    labels = page.locator("svg.deadline text").all_text_contents()
    assert labels == ["received", "completed", "deadline"]
    assert page.locator('svg.deadline line[data-bar="end"]').count() == 1
    assert page.locator("#deadline-words").inner_text() == \
        "Completed 0.0 h after receipt, within its 48.0 h deadline."
    page.goto(f"{s.url}/requests/{served['open']}")
    assert page.locator("svg.deadline text").all_text_contents() == \
        ["received", "now", "deadline"]
    assert page.locator("#deadline-words").inner_text() == \
        "Open for 1.0 h since receipt: 47.0 h left of its 48.0 h deadline."
    width = float(page.locator('svg.deadline rect[data-bar="elapsed"]').get_attribute(
        "width") or 0)
    assert 10 < width < 20  # 1 h of 48 h on a 600-unit bar scaled to 105 %


def test_build_button_gives_way_to_the_built_pack(served: dict[str, Any], page: Any) -> None:
    s: Served = served["served"]
    page.goto(f"{s.url}/requests/{served['erased']}")
    build = page.get_by_role("button", name="Build the Evidence Pack")
    assert build.count() == 1
    build.click()
    page.wait_for_selector("#pack-verdict", timeout=120_000)
    assert page.locator("#pack-verdict").inner_text() == "OK: the erasure is proven"
    assert page.get_by_role("button", name="Build the Evidence Pack").count() == 0
    assert page.locator("#pack-download").inner_text().startswith("Download evidence-pack-")
    again = page.locator("#pack-again")
    assert again.inner_text() == "build a new one against the latest checkpoint"
    if SHOTS:
        page.screenshot(path=os.path.join(SHOTS, "console-request-1280.png"), full_page=True)
    # the request's page, opened again in this session, still shows the pack built
    page.goto(f"{s.url}/requests/{served['erased']}")
    assert page.locator("#pack-verdict").count() == 1
    assert page.get_by_role("button", name="Build the Evidence Pack").count() == 0
