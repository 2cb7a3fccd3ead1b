"""The console in a browser, as a person uses it: Playwright drives Debian's Chromium
(scripts/ensure-chromium.sh, as tests/test_audit_report.py does) against the server's app
(/v1 and the console at /console) served on loopback in this process, so ``LEDGER_NOW``
set here is the server's clock at its next request.

Every page visited is saved as a screenshot at 1280 px and at 390 px (under this test's
tmp folder, ``shots/``), checked with axe-core (npm, scripts/ensure-axe-core.sh; no
serious or critical violation), searched for memory content, and every request the browser
makes is logged: none may leave the server's origin, and no console error (a CSP refusal
is one) may occur.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from .conftest import run_cli
from .console_support import (
    IDENTIFIER,
    MARKERS,
    Served,
    at,
    build_ledger,
    home_digest,
    serve,
    t0,
)
from .test_audit_report import find_chromium

pytestmark = pytest.mark.slow

WIDTHS = (1280, 390)


def find_axe() -> str:
    given = os.environ.get("LEDGER_AXE")
    if given:
        return given
    script = Path(__file__).resolve().parents[1] / "scripts" / "ensure-axe-core.sh"
    r = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=600,
                       check=False)
    if r.returncode != 0:
        pytest.fail(f"no axe-core for the accessibility check: {r.stderr.strip()}")
    os.environ["LEDGER_AXE"] = r.stdout.strip().splitlines()[-1]
    return os.environ["LEDGER_AXE"]


@dataclass
class Browser:
    """One browser context with its logs; ``visit`` checks and photographs a page."""

    served: Served
    browser: Any
    shots: Path
    axe: str
    requests: list[str] = field(default_factory=list)
    outside: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    pages_html: dict[str, str] = field(default_factory=dict)
    violations: dict[str, list[str]] = field(default_factory=dict)

    def page(self) -> Any:
        """A page in a new context: a person of their own, with an empty cookie jar."""
        context = self.browser.new_context(viewport={"width": WIDTHS[0], "height": 900},
                                           accept_downloads=True)
        context.route("**/*", self._route)
        page = context.new_page()
        page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        return page

    def _route(self, rt: Any) -> None:
        url = rt.request.url
        self.requests.append(url)
        if url.startswith(self.served.origin + "/"):
            rt.continue_()
        else:
            self.outside.append(url)
            rt.abort()

    def visit(self, page: Any, name: str) -> str:
        """Check the page as it is now: axe, screenshots at both widths, its HTML kept for
        the marker search. Returns the HTML."""
        page.wait_for_load_state("load")
        html: str = page.content()
        self.pages_html[name] = html
        page.evaluate(self.axe)
        result = page.evaluate("""async () => {
            const r = await axe.run(document, {resultTypes: ['violations']});
            return r.violations.map(v => ({id: v.id, impact: v.impact,
                nodes: v.nodes.map(n => n.target.join(' ')).slice(0, 5)}));
        }""")
        bad = [f"{v['id']} ({v['impact']}): {v['nodes']}" for v in result
               if v["impact"] in ("serious", "critical")]
        if bad:
            self.violations[name] = bad
        for width in WIDTHS:
            page.set_viewport_size({"width": width, "height": 900})
            page.screenshot(path=str(self.shots / f"{name}-{width}.png"), full_page=True)
            overflow = page.evaluate(
                "() => document.documentElement.scrollWidth - window.innerWidth")
            assert overflow <= 1, f"{name} at {width} px scrolls sideways by {overflow} px"
        page.set_viewport_size({"width": WIDTHS[0], "height": 900})
        return html


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, datetime]]:
    home = tmp_path_factory.mktemp("console") / "home"
    start = t0()
    old = os.environ.get("LEDGER_NOW")
    build_ledger(home, start)
    os.environ["LEDGER_NOW"] = at(start + timedelta(hours=1))
    try:
        with serve(home) as s:
            yield s, start
    finally:
        if old is None:
            os.environ.pop("LEDGER_NOW", None)
        else:
            os.environ["LEDGER_NOW"] = old


@pytest.fixture(scope="module")
def browser(served: tuple[Served, datetime], tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[Browser]:
    chromium = find_chromium()
    axe = Path(find_axe()).read_text()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("the playwright package is missing: pip install -e '.[dev]'")
    s = served[0]
    shots = tmp_path_factory.mktemp("console-shots")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            yield Browser(s, b, shots, axe)
            print(f"console screenshots: {shots}")
        finally:
            b.close()
    print(f"console screenshots: {shots}")


def sign_in(br: Browser, token: str) -> Any:
    page = br.page()
    page.goto(br.served.url + "/signin")
    br.visit(page, "signin")
    page.get_by_label("Token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url("**/console/requests")
    return page


def nav(page: Any, label: str) -> None:
    page.get_by_role("navigation", name="Console").get_by_role("link", name=label,
                                                               exact=True).click()
    page.wait_for_load_state("load")


def no_markers(html: str, where: str) -> None:
    for marker in (*MARKERS.values(), IDENTIFIER):
        assert marker not in html, f"{marker!r} in {where}"


# ----------------------------------------------------------------------------- the flow
def test_operator_files_executes_and_proves_an_erasure(served: tuple[Served, datetime],
                                                       browser: Browser,
                                                       tmp_path: Path) -> None:
    s, start = served
    br = browser
    os.environ["LEDGER_NOW"] = at(start + timedelta(hours=1))
    page = sign_in(br, s.tokens.create("dpo", "operator"))
    br.visit(page, "requests-empty")
    assert page.title().startswith("Requests ·")

    # file a request for alice, who has memories, naming her e-mail
    page.get_by_label("Subject (its ref or id)").fill("alice")
    page.get_by_label("Reason").fill("GDPR Art. 17 (1)(a), asked by e-mail")
    page.get_by_label("Legal basis (optional)").fill("GDPR Art. 17")
    page.get_by_label("Identifiers the subject gave (optional, one per line)").fill(IDENTIFIER)
    page.get_by_role("button", name="File the request").click()
    page.wait_for_url(re.compile(r".*/console/requests/[0-9a-f-]{36}$"))
    rid = page.url.rsplit("/", 1)[1]
    assert "filed; completion due" in page.locator(".flash").inner_text()

    # it is due: open, the policy's 48 h left
    nav(page, "Requests")
    row = page.locator(f'tr[data-request="{rid}"]')
    assert row.get_attribute("data-status") == "open"
    assert "2d 00:00:00" in row.inner_text()
    br.visit(page, "requests")

    # the plan: alice's 2 atoms, 1 artifact, 1 subject; bob's memory flagged, not erased
    row.get_by_role("link").click()
    page.wait_for_url(f"**/requests/{rid}")
    html = br.visit(page, "request-plan")
    counts = {k: page.locator(f'tr[data-kind="{k}"] td[data-count]').get_attribute(
        "data-count") for k in ("atoms", "artifacts", "subjects", "flag_for_review")}
    assert counts == {"atoms": "2", "artifacts": "1", "subjects": "1", "flag_for_review": "1"}
    flagged = page.locator('tr[data-kind="flag_for_review"] li')
    assert flagged.get_attribute("data-flag") == "identifier"  # why, in ids and positions
    assert "identifier #1 of the erasure request matched" in (flagged.text_content() or "")
    assert page.locator('tr[data-kind="review_artifacts"] td[data-count]').get_attribute(
        "data-count") is not None
    digest = page.locator("#plan-digest").inner_text()
    assert digest.startswith("sha256:") and f'value="{digest}"' in html

    # approve and execute: the box must be ticked first (a native required field)
    button = page.get_by_role("button", name="Approve and execute")
    button.click()
    assert page.url.endswith(f"/requests/{rid}")  # the browser refused the unticked form
    page.get_by_label(re.compile("I reviewed this plan")).check()
    button.click()
    page.wait_for_selector("#reach-h", timeout=120_000)
    assert "signed events" in page.locator(".flash").inner_text()
    assert page.locator("#request-status").inner_text() == "completed"
    reach = page.locator("table.reach tbody tr")
    assert reach.count() >= 3
    assert {r.get_attribute("data-reach") for r in reach.all()} == {"not-reachable"}
    assert page.locator("#raw-hits").inner_text() == "0 hits"
    br.visit(page, "request-reach")

    # build the Evidence Pack, see verify-pack's verdict, download it, verify it ourselves
    page.get_by_role("button", name="Build the Evidence Pack").click()
    page.wait_for_selector("#pack-verdict", timeout=120_000)
    assert page.locator("#pack-verdict").inner_text() == "OK: the erasure is proven"
    br.visit(page, "request-pack")
    with page.expect_download() as dl:
        page.locator("#pack-download").click()
    pack = tmp_path / dl.value.suggested_filename
    dl.value.save_as(pack)
    assert pack.name.startswith("evidence-pack-") and pack.suffix == ".zip"
    r = run_cli("verify-pack", str(pack), "--root-key", str(s.home / "keys" / "root.pub"))
    assert r.code == 0, r.err
    assert "OK" in r.err

    # the review queue: bob's memory, flagged; its content hidden until revealed
    nav(page, "Review queue")
    flagged = page.locator("table.flags tbody tr[data-atom]")
    assert flagged.count() == 1
    atom = flagged.get_attribute("data-atom")
    html = br.visit(page, "review")
    assert MARKERS["bob_atom"] not in html
    for name in ("audit", "integrity"):
        nav(page, name.capitalize())
        br.visit(page, name)
    page.get_by_role("button", name="Verify since the last checkpoint").click()
    assert page.locator("#verify-result").inner_text().startswith("Verified now: OK")
    br.visit(page, "integrity-verified")
    nav(page, "Policy")
    br.visit(page, "policy")
    page.get_by_role("button", name="Sweep dry run").click()
    assert page.locator("#sweep-result").is_visible()
    br.visit(page, "policy-sweep")

    # nothing visited so far holds memory content
    for name, seen in br.pages_html.items():
        no_markers(seen, name)

    # reveal: a signed retrieval event first, then the content, on this answer only
    before = audit_json(s)["retrievals"]["events"]
    nav(page, "Review queue")
    page.get_by_role("button", name=f"Reveal content of {atom}").click()
    page.wait_for_selector("#revealed-text")
    assert MARKERS["bob_atom"] in page.locator("#revealed-text").inner_text()
    br.visit(page, "review-revealed")
    assert audit_json(s)["retrievals"]["events"] == before + 1
    page.reload()  # the one-time view: a reload shows nothing, writes nothing
    assert MARKERS["bob_atom"] not in page.content()
    assert audit_json(s)["retrievals"]["events"] == before + 1

    # resolve it by re-anonymising: a correction, the flag closed
    page.get_by_text(f"Resolve {atom}").click()
    page.get_by_role("radio", name=re.compile("re-anonymise")).check()
    page.get_by_label("New wording (re-anonymise only)").fill(
        "A colleague met someone at the board meeting")
    page.get_by_role("button", name="Resolve", exact=True).click()
    page.wait_for_url("**/console/review")
    assert "resolved (reanonymise)" in page.locator(".flash").inner_text()
    assert page.locator("table.flags tbody tr[data-atom]").count() == 0
    no_markers(br.visit(page, "review-resolved"), "review-resolved")

    # the keyboard: the first Tab reaches the skip link, which moves focus to the content
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.className") == "skip"
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "main"

    # sign out: the session ends
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url("**/console/signin?ended=out")
    page.goto(s.url + "/requests")
    assert page.url.endswith("/console/signin")

    assert br.outside == [], br.outside
    assert all(u.startswith(s.origin) for u in br.requests)
    assert br.errors == [], br.errors
    assert br.violations == {}, br.violations


def audit_json(s: Served, *args: str) -> Any:
    r = run_cli("--home", str(s.home), "audit", "--format", "json", *args)
    assert r.code == 0, r.err
    return json.loads(r.out)


def open_request(s: Served, subject: str) -> str:
    """An open request for ``subject``, filed through the JSON API if there is none."""
    op = s.tokens.create(f"api-{subject}", "operator")
    with httpx.Client(base_url=s.origin, headers={"Authorization": f"Bearer {op}"},
                      timeout=60) as c:
        for r in c.get("/v1/requests").json():
            if r["subject_ref"] == subject and r["completed_at"] is None:
                return str(r["request_id"])
        r = c.post("/v1/requests", json={"subject": subject, "reason": "asked"})
        assert r.status_code == 201, r.text
        return str(r.json()["request_id"])


def test_auditor_finds_no_approve_button_and_a_crafted_post_is_refused(
        served: tuple[Served, datetime], browser: Browser) -> None:
    s = served[0]
    rid = open_request(s, "carol")
    page = sign_in(browser, s.tokens.create("auditor", "auditor"))
    assert page.get_by_role("button", name="File the request").count() == 0
    page.goto(f"{s.url}/requests/{rid}")
    browser.visit(page, "auditor-request")
    assert page.locator("#plan-h").is_visible()  # the plan, read-only
    assert page.get_by_role("button", name="Approve and execute").count() == 0
    assert page.locator('input[name="plan_digest"]').count() == 0
    assert "Read-only" in page.locator(".readonly").first.inner_text()
    page.goto(f"{s.url}/policy")
    assert page.get_by_role("button", name="Run the sweep").count() == 0
    page.goto(f"{s.url}/review")
    assert page.get_by_role("button", name=re.compile("Reveal")).count() == 0

    # the POST itself, crafted in the auditor's signed-in browser with its own CSRF token
    csrf = page.locator('input[name="csrf"]').first.get_attribute("value")
    digest = page.request.get(f"{s.url}/requests/{rid}").text()
    plan = re.search(r'id="plan-digest">([^<]+)<', digest)
    assert plan
    before = home_digest(s.home)
    r = page.request.post(f"{s.url}/requests/{rid}/execute", form={
        "csrf": csrf or "", "plan_digest": plan[1], "reviewed": "yes"},
        headers={"origin": s.origin})
    assert r.status == 403 and "nothing was written" in r.text()
    assert home_digest(s.home) == before
    page.goto(f"{s.url}/requests/{rid}")
    assert page.locator("#request-status").inner_text() == "open"
    assert browser.errors == [] and browser.outside == []
    assert browser.violations == {}, browser.violations


def test_overdue_count_follows_ledger_now(served: tuple[Served, datetime],
                                          browser: Browser) -> None:
    s = served[0]
    rid = open_request(s, "carol")
    with httpx.Client(base_url=s.origin, timeout=60, headers={
            "Authorization": f"Bearer {s.tokens.create('api-due', 'auditor')}"}) as c:
        due = c.get(f"/v1/requests/{rid}").json()["complete_due"]
    page = sign_in(browser, s.tokens.create("clock", "auditor"))
    due_t = datetime.fromisoformat(due.replace("Z", "+00:00"))
    old = os.environ["LEDGER_NOW"]
    try:
        os.environ["LEDGER_NOW"] = at(due_t - timedelta(minutes=1))
        page.reload()
        assert "overdue" not in page.title()
        assert page.locator('[data-count="overdue"]').inner_text() == "0"
        assert page.locator(f'tr[data-request="{rid}"]').get_attribute("data-status") == "open"
        os.environ["LEDGER_NOW"] = at(due_t + timedelta(minutes=1))
        page.reload()
        assert page.title().startswith("Requests (1 overdue)")
        row = page.locator(f'tr[data-request="{rid}"]')
        assert row.get_attribute("data-status") == "overdue"
        assert "overdue" in (row.get_attribute("class") or "")
        color = row.locator(".status-overdue").evaluate("e => getComputedStyle(e).color")
        assert color == "rgb(185, 28, 28)"  # red
        assert row.locator("td.n").inner_text() == "overdue by 0d 00:01:00"
        browser.visit(page, "requests-overdue")
        page.goto(f"{s.url}/requests?status=overdue")
        assert page.locator("tr[data-request]").count() == 1
    finally:
        os.environ["LEDGER_NOW"] = old


def test_console_numbers_equal_the_json_api_and_ledger_audit(
        served: tuple[Served, datetime], browser: Browser) -> None:
    s, start = served
    open_request(s, "carol")
    page = sign_in(browser, s.tokens.create("numbers", "auditor"))
    frm = start.strftime("%Y-%m-%d")
    to = (start + timedelta(days=1)).strftime("%Y-%m-%d")
    page.goto(f"{s.url}/audit?from={frm}&to={to}")
    browser.visit(page, "audit-period")
    shown = page.eval_on_selector_all(
        "[data-json-pointer]", "els => els.map(e => [e.dataset.jsonPointer, "
                               "e.textContent.trim()])")
    rep = audit_json(s, "--from", frm, "--to", to)
    assert len(shown) > 20
    for pointer, text in shown:
        assert text == _shown(_pointer(rep, pointer)), pointer
    downloaded = json.loads(page.request.get(
        f"{s.url}/audit/report.json?from={frm}&to={to}").text())
    assert {k: v for k, v in downloaded.items() if k != "generated_at"} == \
        {k: v for k, v in rep.items() if k != "generated_at"}

    # the requests page's counts, the JSON API's list, and the audit's erasure figures
    page.goto(f"{s.url}/requests")
    tiles = {e.get_attribute("data-count"): int(e.inner_text())
             for e in page.locator("[data-count]").all()}
    with httpx.Client(base_url=s.origin, timeout=60, headers={
            "Authorization": f"Bearer {s.tokens.create('api-numbers', 'auditor')}"}) as c:
        api = c.get("/v1/requests").json()
    whole = audit_json(s)["erasure_requests"]
    assert tiles["total"] == len(api) == whole["count"]
    for status in ("open", "overdue", "completed", "completed-late"):
        assert tiles[status] == sum(r["status"] == status for r in api), status
    assert tiles["overdue"] == whole["overdue"]
    assert tiles["open"] == whole["open"] and tiles["completed"] == whole["completed"]
    rows = page.locator("tr[data-request]").all()
    assert sorted(r.get_attribute("data-request") for r in rows) == \
        sorted(r["request_id"] for r in api)


def _pointer(doc: Any, pointer: str) -> Any:
    for part in pointer.split("/")[1:]:
        key = part.replace("~1", "/").replace("~0", "~")
        doc = doc[int(key)] if isinstance(doc, list) else doc[key]
    return doc


def _shown(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)
