"""The audit report's HTML as an officer reads it (issue 31): the request table fits a
1280 px window with every header in view, figures are written as words with their counts,
requests name the subject by its reference, times are written for people, and the
Evidence packs section says where the evidence is instead of "0 recorded" (ADR 0048).

One small SQLite ledger, made with the CLI at pinned times: three subjects (one with a
long e-mail-like reference), an erasure completed, one completed late, one still open
and overdue at the report's time.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from typing import Any

import pytest

from ledger.application import LedgerApp
from ledger.home import Config

from .conftest import run_cli
from .test_audit_report import _pointer_value, _shown, find_chromium

LONG_REF = "customer:with.a.rather.long.reference.1234567890.at.accounts.example.org"


def _ok(*args: str) -> str:
    r = run_cli(*args)
    assert r.code == 0, (args, r.err)
    return r.out


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("audit-people")
    home = tmp / "home"
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("LEDGER_HOME", raising=False)
        mp.setenv("LEDGER_NOW", "2026-03-01T09:00:00Z")
        LedgerApp.initialize(home)
        h = ("--home", str(home))
        policy = tmp / "policy.json"
        policy.write_text(json.dumps({"memoryPolicy": {"enabled": True, "rightToBeForgottenSla":
                                                       {"acknowledgmentHours": 24,
                                                        "completionHours": 48}}}))
        _ok(*h, "policy", "set", str(policy))
        for ref in ("alice", "bob", LONG_REF):
            _ok(*h, "subject", "add", ref)
            _ok(*h, "atom", "add", "--subject", ref, "--text", f"{ref[:5]} likes tea")
        _ok(*h, "artifact", "add", "--subject", "alice", "--kind", "chat", "--ref", "c1",
            "--body", "a chat")
        mp.setenv("LEDGER_NOW", "2026-03-02T10:00:00Z")
        erased = json.loads(_ok(*h, "redact-user", "alice", "--reason", "asked",
                                "--operator", "operator", "--json"))
        app = LedgerApp(Config.load(home))
        try:  # received, then completed three days later: late
            late = str(app.receive_request("bob", "asked", "operator", 24, 48))
            mp.setenv("LEDGER_NOW", "2026-03-03T10:00:00Z")
            overdue = str(app.receive_request(LONG_REF, "asked", "operator", 24, 48))
        finally:
            app.close()
        mp.setenv("LEDGER_NOW", "2026-03-05T11:00:00Z")
        _ok(*h, "redact-user", "bob", "--reason", "asked", "--operator", "operator",
            "--resume")
        mp.setenv("LEDGER_NOW", "2026-03-06T12:00:00Z")
        page = tmp / "audit.html"
        _ok(*h, "audit", "--format", "html", "--out", str(page))
        report = json.loads(_ok(*h, "audit", "--json"))
    yield {"home": home, "page": page, "report": report, "erased": erased, "late": late,
           "overdue": overdue}


def _text(page: str) -> str:
    import html

    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", page))).strip()


def test_figures_are_words_with_their_counts(ledger: dict[str, Any]) -> None:
    text = _text(ledger["page"].read_text(encoding="utf-8"))
    assert "creations logCreation 3 atoms, 1 artifact, 3 subjects; 7 in all" in text
    assert "retrievals logRetrieval 0 recall events on 0 atoms in 0 sessions" in text
    assert "atoms 3 artifacts" not in text and "total 7" not in text
    assert ("redactions logRedaction by mode: 0 soft, 0 archive, 2 hard, 0 delete; 0 "
            "unredactions; 1 artifact deletion; data keys destroyed: 2 atom keys, 1 artifact "
            "key, 2 subject keys, 2 request keys") in text


def test_requests_name_the_subject_and_times_are_for_people(ledger: dict[str, Any]) -> None:
    page = ledger["page"].read_text(encoding="utf-8")
    rows = {r["request_id"]: r for r in ledger["report"]["erasure_requests"]["items"]}
    assert {r["subject_ref"] for r in rows.values()} == {"alice", "bob", LONG_REF}
    late = rows[ledger["late"]]
    assert (f'<td class="ref" title="subject {late["subject_id"]}">bob'
            f'<small>{late["subject_id"][:8]}…</small></td>') in page
    text = _text(page)
    assert (f"{ledger['late']} bob {late['subject_id'][:8]}… 2026-03-02 10:00 UTC "
            "2026-03-02 10:00 UTC due 2026-03-03 10:00 UTC 2026-03-05 11:00 UTC due "
            "2026-03-04 10:00 UTC taken 73.0 h of 48.0 h completed-late") in text
    assert (f"{ledger['overdue']} {LONG_REF}") in text and "open for 74.0 h of 48.0 h" in text
    assert "period from the start of the log to 2026-03-06 12:00 UTC · generated " \
           "2026-03-06 12:00 UTC" in text
    for iso in re.findall(r"\d{4}-\d\d-\d\dT\d\d:\d\d[^ <]*", text):
        pytest.fail(f"a machine time on the page: {iso}")


def test_evidence_section_says_where_the_evidence_is(ledger: dict[str, Any]) -> None:
    """After an erasure the section must not read as "no evidence" (the log holds it)."""
    rep = ledger["report"]["evidence_packs"]
    assert rep["closed_batches"] == 2 and rep["evidence_events"] > 0
    text = _text(ledger["page"].read_text(encoding="utf-8"))
    section = text.split("Evidence packs", 1)[1].split("Sweeps", 1)[0]
    assert "0 recorded" not in section and "no record of evidence packs" not in section
    assert section.strip().startswith(
        "The evidence is in the log. Each closed erasure left its signed tombstones and key "
        "destructions in the log, checked by the verification above: 2 closed batches with "
        f"{rep['evidence_events']} signed events.")
    assert ledger["erased"]["batch_id"] in section
    assert "ledger evidence-pack BATCH --out DIR" in section
    assert "ledger verify-pack DIR --root-key root.pub" in section
    assert "building one appends nothing to the log (ADR 0048)" in section
    assert rep["note"].startswith("The evidence of every closed erasure is in the signed log "
                                  "itself: 2 closed redaction batches in this report")
    r = run_cli("--home", str(ledger["home"]), "audit", "--format", "text")
    assert f"EVIDENCE PACKS: {rep['note']}" in r.out


def test_request_table_fits_a_1280_px_window(ledger: dict[str, Any]) -> None:
    """Every table region at 1280 px: no horizontal scroll, every header inside the window,
    and each number shown equals the JSON report's."""
    chromium = find_chromium()
    from playwright.sync_api import sync_playwright

    rep = ledger["report"]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(ledger["page"].as_uri(), wait_until="load")
            regions = page.eval_on_selector_all(
                ".scroll", "els => els.map(e => [e.getAttribute('aria-label'), e.scrollWidth, "
                           "e.clientWidth])")
            headers = page.eval_on_selector_all(
                "th", "els => els.map(e => [e.textContent, e.getBoundingClientRect().right])")
            requests = page.eval_on_selector(
                "[aria-label='Erasure requests and turnaround']",
                "e => [e.scrollWidth, e.clientWidth, [...e.querySelectorAll('th')]"
                ".map(t => t.textContent)]")
            shown = page.eval_on_selector_all(
                "[data-json-pointer]",
                "els => els.map(e => [e.dataset.jsonPointer, e.textContent.trim()])")
            width = page.evaluate("document.documentElement.scrollWidth")
        finally:
            browser.close()
    assert requests[2] == ["request", "subject", "received", "acknowledged", "completed",
                           "time taken", "status"]
    assert requests[0] <= requests[1], f"the request table overflows: {requests[:2]}"
    assert [r for r in regions if r[1] > r[2]] == []
    assert [h for h in headers if h[1] > 1280] == [] and width <= 1280
    for pointer, text in shown:
        assert text == _shown(_pointer_value(rep, pointer)), pointer


def test_no_memory_content_and_refs_only_in_the_request_rows(ledger: dict[str, Any]) -> None:
    for fmt in ("html", "text", "json"):
        os.environ["LEDGER_NOW"] = "2026-03-06T12:00:00Z"
        try:
            out = run_cli("--home", str(ledger["home"]), "audit", "--format", fmt).out
        finally:
            del os.environ["LEDGER_NOW"]
        assert "likes tea" not in out and "a chat" not in out and "asked" not in out
        assert out.count("bob") == 1 and out.count(LONG_REF) == 1, fmt
