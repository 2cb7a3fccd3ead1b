"""`ledger audit`: the memory audit report (Persona Schema §9), on SQLite and PostgreSQL.

One small ledger per backend is built with the CLI at pinned times (LEDGER_NOW, always
moving forward) and the report's numbers are checked against what was done, and
against the stored rows themselves. The HTML report is opened in headless Chromium
(Debian's /usr/bin/chromium, driven by Playwright): no console error, no request other
than the file, and every number on the page equals the JSON report's.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ledger import envelope
from ledger.application import LedgerApp
from ledger.home import Config

from .conftest import BACKENDS, PG_URL, RawStore, drop_schema, run_cli

# Content that must never reach a report, whatever the format.
MARKERS = ("ZEBRA-7f3a", "OKAPI-91c2", "QUOLL-55de", "NARWHAL-0b1e", "Alice Marchetti-Quist",
           "TAPIR-3c9d", "Art Title KUDU-4e21")


def _at(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _policy(retrieval: bool = True) -> dict[str, Any]:
    return {"memoryPolicy": {
        "enabled": True, "maxAtoms": 200,
        "rightToBeForgottenSla": {"acknowledgmentHours": 24, "completionHours": 48},
        "auditPolicy": {"logCreation": True, "logRetrieval": retrieval, "logRedaction": True,
                        "logRehearsal": True}}}


@dataclass
class Built:
    home: Path
    backend: str
    d0: datetime
    recalled: list[str]
    bob_request: str
    alice_request: str
    batch_id: str

    def day(self, n: float, hour: int = 10) -> datetime:
        return self.d0 + timedelta(days=n, hours=hour)


def _ok(*args: str) -> str:
    r = run_cli(*args)
    assert r.code == 0, (args, r.err)
    return r.out


def build(home: Path, backend: str, tmp: Path, mp: pytest.MonkeyPatch) -> Built:
    """Day 0 creations, day 1 policy, day 2 recall and rehearsals, day 3 a key, day 10 a
    right-to-be-forgotten erasure, day 11 an open request (48 h deadline), an archive
    redaction and an expiry. The home was initialised at the real clock, before day 0."""
    d0 = (datetime.now(UTC) + timedelta(days=2)).replace(hour=0, minute=0, second=0,
                                                         microsecond=0)
    h = ("--home", str(home))

    def at(days: float, hour: int = 10) -> None:
        mp.setenv("LEDGER_NOW", _at(d0 + timedelta(days=days, hours=hour)))

    at(0)
    _ok(*h, "subject", "add", "alice", "--name", MARKERS[4])
    _ok(*h, "subject", "add", "bob")
    _ok(*h, "artifact", "add", "--subject", "alice", "--kind", "chat", "--ref", "art1",
        "--title", MARKERS[6], "--body", f"chat about {MARKERS[5]}")
    _ok(*h, "atom", "add", "--subject", "alice", "--ref", "a1", "--session", "s1",
        "--text", f"{MARKERS[0]} drinks green tea every morning")
    _ok(*h, "atom", "add", "--subject", "alice", "--ref", "a2", "--derivation", "inferred",
        "--artifact", "art1", "--extractor", "test-model",
        "--text", f"{MARKERS[1]} prefers tea to coffee",
        "--gist", f"{MARKERS[2]} gist", "--detail", f"{MARKERS[3]} detail=0.8")
    _ok(*h, "atom", "add", "--subject", "bob", "--ref", "b1", "--text", "bob plays chess")
    _ok(*h, "atom", "add", "--subject", "bob", "--ref", "b2", "--text", "bob owns a bike")
    at(1)
    policy = tmp / "policy.json"
    policy.write_text(json.dumps(_policy()))
    _ok(*h, "policy", "set", str(policy))
    at(2)
    recalled = [x["atom_id"] for x in json.loads(
        _ok(*h, "recall", "green tea", "--subject", "alice", "--json", "--session", "s9")
    )["items"]]
    assert recalled
    _ok(*h, "atom", "rehearse", "b1")
    _ok(*h, "atom", "rehearse", "b1", "--session", "x")
    at(3)
    _ok(*h, "keys", "authorize", "dpo", "--role", "operator")
    at(10)
    erased = json.loads(_ok(*h, "redact-user", "alice", "--reason", "GDPR Art. 17",
                            "--operator", "operator", "--identifier", "alice.m@example.org",
                            "--json"))
    at(11)
    app = LedgerApp(Config.load(home))
    try:
        bob_request = str(app.receive_request("bob", "ERASE-REASON-K9", "operator", 24, 48))
    finally:
        app.close()
    _ok(*h, "redact", "b1", "--mode", "archive", "--reason", "ARCHIVE-REASON-XJ2")
    _ok(*h, "atom", "expire", "b2")
    return Built(home, backend, d0, recalled, bob_request, erased["request_id"],
                 erased["batch_id"])


@pytest.fixture(scope="module", params=BACKENDS)
def built(request: pytest.FixtureRequest,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Built]:
    """One ledger per backend for the read-only tests of this module."""
    tmp = tmp_path_factory.mktemp("audit")
    schema = f"t_{uuid.uuid4().hex[:12]}"
    db = None if request.param == "sqlite" else f"{PG_URL}?schema={schema}"
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("LEDGER_NOW", raising=False)
        mp.delenv("LEDGER_HOME", raising=False)
        LedgerApp.initialize(tmp / "home", db=db)
        b = build(tmp / "home", str(request.param), tmp, mp)
    try:
        yield b
    finally:
        if db is not None:
            drop_schema(schema)


def audit(b: Built, *args: str, now: datetime | None = None, code: int = 0) -> Any:
    os.environ["LEDGER_NOW"] = _at(now or b.day(12))
    try:
        r = run_cli("--home", str(b.home), "audit", "--format", "json", *args)
    finally:
        del os.environ["LEDGER_NOW"]
    assert r.code == code, r.err
    return json.loads(r.out)


def _deadline_hours(b: Built, request_id: str) -> float:
    """Completion deadline of a request, from its aggregate (not from the report's path)."""
    app = LedgerApp(Config.load(b.home))
    try:
        req: Any = app.reader.aggregate(uuid.UUID(request_id))
    finally:
        app.close()
    due = datetime.fromisoformat(req.complete_due.replace("Z", "+00:00"))
    return (due - datetime.fromisoformat(req.received_at)).total_seconds() / 3600


def stored(b: Built) -> list[tuple[str, str]]:
    """(topic, timestamp) of every stored event, read from the rows themselves."""
    return [(topic, envelope.open_state(state).envelope["timestamp"])
            for _pos, _oid, _v, topic, state in RawStore(b.home).rows()]


# ----------------------------------------------------------------------------- numbers
def test_whole_log_numbers_match_what_was_done(built: Built) -> None:
    rep = audit(built)
    rows = stored(built)
    a = rep["activity"]
    assert a["events"] == len(rows) == rep["verification"]["events_verified"]
    assert a["by_topic"] == dict(Counter(t for t, _ in rows))
    assert sum(a["by_category"].values()) == a["reported"] == a["events"]
    assert sum(sum(d.values()) for d in a["per_day"].values()) == a["events"]
    assert sum(x["events"] for x in a["by_actor"]) == a["events"]
    names = {x["name"]: x["events"] for x in a["by_actor"]}
    assert set(names) == {"root", "writer", "operator"}
    assert names["root"] == a["by_topic"]["memory-ledger:roster.key-authorized.v1"] + 1
    assert rep["creations"] == {"audit_flag": "logCreation", "reported": True, "atoms": 4,
                                "artifacts": 1, "subjects": 2, "total": 7}
    assert rep["retrievals"]["events"] == len(built.recalled)
    assert rep["retrievals"]["atoms"] == len(set(built.recalled))
    # the recall's session id was sealed under alice's atoms' keys, destroyed by her
    # erasure (ADR 0004, issue 20 item 7): the events are counted, the session is gone
    assert rep["retrievals"]["sessions"] == 0
    assert rep["rehearsals"]["events"] == 2 and rep["rehearsals"]["atoms"] == 1
    red = rep["redactions"]
    assert red["by_mode"] == {"soft": 0, "archive": 1, "hard": 2, "delete": 0}
    assert red["data_keys_destroyed"] == {"atom": 2, "artifact": 1, "subject": 1,
                                          "request": 1}
    assert red["artifact_deletions"] == 1 and red["unredactions"] == 0
    assert rep["sweeps"] == {"events": 2, "by_topic": {
        "memory-ledger:atom.expired.v1": 1, "memory-ledger:atom.redacted.v1 (mode archive)": 1}}
    req = {r["request_id"]: r for r in rep["erasure_requests"]["items"]}
    assert set(req) == {built.alice_request, built.bob_request}
    assert req[built.alice_request]["status"] == "completed"
    assert req[built.alice_request]["batch_id"] == built.batch_id
    assert req[built.alice_request]["deadline_hours"] == _deadline_hours(built,
                                                                         built.alice_request)
    assert req[built.bob_request]["status"] == "open"
    assert req[built.bob_request]["deadline_hours"] == 48.0
    assert req[built.bob_request]["hours_open"] == 24.0
    assert rep["erasure_requests"]["overdue"] == 0
    [batch] = rep["batches"]["items"]
    assert batch["batch_id"] == built.batch_id and batch["status"] == "closed"
    assert batch["targets"] == {"atoms": 2, "artifacts": 1, "subjects": 1}
    assert batch["approved_by_name"] == "operator"
    assert rep["key_roster"]["changes"] == 5
    assert [c["name"] for c in rep["key_roster"]["items"]][-1] == "dpo"
    assert len(rep["policy"]["changes"]) == 1
    assert rep["policy"]["in_force"]["rightToBeForgottenSla"]["completionHours"] == 48
    assert rep["evidence_packs"]["recorded"] is False
    assert rep["evidence_packs"]["note"].startswith(  # where the evidence is (ADR 0048)
        "The evidence of every closed erasure is in the signed log itself: 1 closed redaction "
        "batch in this report, with 7 signed events")
    assert rep["evidence_packs"]["evidence_events"] == 7
    v = rep["verification"]
    assert v["ok"] is True and v["status"] == "verified" and v["scope"] == "full"
    assert v["checkpoints"]["recorded"] == v["checkpoints"]["checked"] >= 2
    assert rep["findings"] == []


def test_period_from_to_selects_by_event_time(built: Built) -> None:
    day2 = built.day(2).strftime("%Y-%m-%d")
    day3 = built.day(3).strftime("%Y-%m-%d")
    rep = audit(built, "--from", day2, "--to", day3)  # a bare --to date: the whole day
    rows = stored(built)
    lo, hi = day2 + "T", (built.d0 + timedelta(days=4)).strftime("%Y-%m-%dT")
    inside = [t for t, ts in rows if lo <= ts < hi]
    assert rep["activity"]["events"] == len(inside) == len(built.recalled) + 2 + 1
    assert rep["activity"]["by_topic"] == dict(Counter(inside))
    assert set(rep["activity"]["per_day"]) == {day2, day3}
    assert rep["creations"]["total"] == 0
    assert rep["rehearsals"]["events"] == 2
    assert rep["key_roster"]["changes"] == 1 and rep["policy"]["changes"] == []
    assert rep["erasure_requests"]["count"] == 0 and rep["batches"]["count"] == 0
    assert rep["period"]["first_seq"] is not None
    # A time as --to is exclusive: the day-2 events at 10:00 are left out.
    rep = audit(built, "--from", day2, "--to", _at(built.day(2)))
    assert rep["activity"]["events"] == 0 and rep["period"]["first_seq"] is None
    assert "no events in the period" in rep["findings"]
    # The erasure day: the request is received and completed in the period.
    day10 = built.day(10).strftime("%Y-%m-%d")
    rep = audit(built, "--from", day10, "--to", day10)
    [req] = rep["erasure_requests"]["items"]
    assert req["request_id"] == built.alice_request
    assert req["received_in_period"] and req["completed_in_period"]
    assert rep["redactions"]["by_mode"]["hard"] == 2 and rep["creations"]["total"] == 0
    # The policy in force at the end of a period before it was set: none.
    rep = audit(built, "--to", built.d0.strftime("%Y-%m-%d"))
    assert rep["policy"]["in_force"] is None and rep["creations"]["atoms"] == 4


def test_subject_filter_restricts_per_subject_sections(built: Built) -> None:
    alice = audit(built, "--subject", "alice")
    assert alice["creations"]["atoms"] == 2 and alice["creations"]["subjects"] == 1
    assert alice["creations"]["artifacts"] == 1
    assert alice["retrievals"]["events"] == len(built.recalled)
    assert alice["rehearsals"]["events"] == 0
    assert [r["request_id"] for r in alice["erasure_requests"]["items"]] == \
        [built.alice_request]
    assert alice["batches"]["count"] == 1
    assert alice["redactions"]["by_mode"]["hard"] == 2
    assert "memory-ledger:roster.started.v1" not in alice["activity"]["by_topic"]
    bob = audit(built, "--subject", "bob")
    assert bob["creations"]["atoms"] == 2 and bob["retrievals"]["events"] == 0
    assert bob["rehearsals"]["events"] == 2
    assert [r["request_id"] for r in bob["erasure_requests"]["items"]] == [built.bob_request]
    assert bob["batches"]["count"] == 0
    assert bob["redactions"]["by_mode"]["archive"] == 1
    assert bob["sweeps"]["events"] == 2
    # Atoms created before the period: their subject comes from their creation event.
    day2 = built.day(2).strftime("%Y-%m-%d")
    bob2 = audit(built, "--subject", "bob", "--from", day2, "--to", day2)
    assert bob2["rehearsals"]["events"] == 2 and bob2["retrievals"]["events"] == 0
    assert bob2["activity"]["events"] == 2
    alice2 = audit(built, "--subject", "alice", "--from", day2, "--to", day2)
    assert alice2["activity"]["events"] == len(built.recalled)
    assert alice2["rehearsals"]["events"] == 0
    # Ledger-wide sections stay whole; the subject parts add up to the whole.
    assert bob["key_roster"]["changes"] == 5 and bob["verification"]["ok"] is True
    whole = audit(built)
    assert alice["subject"]["subject_id"] != bob["subject"]["subject_id"]
    assert alice["activity"]["events"] + bob["activity"]["events"] == \
        whole["activity"]["events"] - whole["activity"]["by_category"]["keys"] \
        - sum(n for t, n in whole["activity"]["by_topic"].items()
              if t.split(":")[1].startswith(("policy.",)))
    r = run_cli("--home", str(built.home), "audit", "--subject", "nobody")
    assert r.code == 2 and "no subject 'nobody'" in r.err


def test_overdue_request_flagged_after_its_deadline(built: Built) -> None:
    before = audit(built, now=built.day(13, hour=9))  # 47 h after receipt
    assert before["erasure_requests"]["overdue"] == 0
    os.environ["LEDGER_NOW"] = _at(built.day(13, hour=11))  # 49 h after receipt
    try:
        r = run_cli("--home", str(built.home), "audit", "--format", "json")
        text = run_cli("--home", str(built.home), "audit")
    finally:
        del os.environ["LEDGER_NOW"]
    assert r.code == 0 and text.code == 0
    rep = json.loads(r.out)
    e = rep["erasure_requests"]
    assert e["overdue"] == 1 and e["overdue_ids"] == [built.bob_request]
    bob = next(x for x in e["items"] if x["request_id"] == built.bob_request)
    assert bob["status"] == "overdue" and bob["overdue"] is True
    assert bob["hours_open"] == 49.0
    assert any(built.bob_request in f and "overdue" in f for f in rep["findings"])
    assert f"WARNING: 1 erasure request(s) overdue: {built.bob_request}" in r.err
    assert "OVERDUE" in text.out and built.bob_request in text.out


def test_no_memory_content_in_any_format(built: Built, tmp_path: Path) -> None:
    outputs: list[tuple[tuple[str, ...], str]] = []
    for fmt in ("text", "json", "html"):
        for extra in ((), ("--subject", "bob"), ("--subject", "alice")):
            os.environ["LEDGER_NOW"] = _at(built.day(12))
            try:
                r = run_cli("--home", str(built.home), "audit", "--format", fmt, *extra)
            finally:
                del os.environ["LEDGER_NOW"]
            assert r.code == 0, r.err
            outputs.append((extra, r.out + r.err))
    # bob's atoms were never erased: their text is still readable in the ledger ...
    assert run_cli("--home", str(built.home), "atom", "show", "b1").out.count("chess") == 1
    for extra, out in outputs:
        for marker in (*MARKERS, "chess", "bike", "GDPR Art. 17", "ERASE-REASON",
                       "ARCHIVE-REASON"):
            assert marker not in out, marker
        # a subject's own reference names it in its request's row, once, and nowhere else
        # (issue 31: an officer cannot match a bare UUID to a case)
        assert out.count("alice") == (0 if extra == ("--subject", "bob") else 1), extra
        assert out.count("bob") == (0 if extra == ("--subject", "alice") else 1), extra


def test_bad_input_exits_2_with_a_clear_message(built: Built) -> None:
    h = ("--home", str(built.home))
    r = run_cli(*h, "audit", "--from", "2026-13-45")
    assert r.code == 2 and r.out == ""
    assert "error: --from '2026-13-45' is not a date or time" in r.err
    assert "hint: use a date like 2026-01-31" in r.err
    r = run_cli(*h, "audit", "--to", "last tuesday")
    assert r.code == 2 and "--to 'last tuesday' is not a date or time" in r.err
    r = run_cli(*h, "audit", "--from", "2026-03-02", "--to", "2026-03-01")
    assert r.code == 2 and "the period is empty" in r.err
    r = run_cli(*h, "audit", "--format", "pdf")
    assert r.code == 2 and "unknown format 'pdf'" in r.err
    r = run_cli(*h, "audit", "--verify", "some")
    assert r.code == 2 and "unknown --verify 'some'" in r.err


def test_out_writes_atomically_and_equals_stdout(built: Built, tmp_path: Path) -> None:
    out = tmp_path / "reports" / "audit.json"
    out.parent.mkdir()
    os.environ["LEDGER_NOW"] = _at(built.day(12))
    try:
        to_file = run_cli("--home", str(built.home), "audit", "--json", "--out", str(out))
        to_stdout = run_cli("--home", str(built.home), "audit", "--json")
    finally:
        del os.environ["LEDGER_NOW"]
    assert to_file.code == 0 and to_file.out == ""
    assert f"OK: audit report written to {out}" in to_file.err
    assert out.read_text() == to_stdout.out
    assert [p.name for p in out.parent.iterdir()] == ["audit.json"]  # no temporary left
    missing = run_cli("--home", str(built.home), "audit", "--out", str(tmp_path / "no" / "x"))
    assert missing.code == 2 and "cannot write" in missing.err


def test_verify_since_checks_only_after_the_last_checkpoint_before_the_period(
        built: Built) -> None:
    full = audit(built)
    since = audit(built, "--verify", "since", "--from", built.day(11).strftime("%Y-%m-%d"))
    v = since["verification"]
    assert v["ok"] is True and v["scope"] == "since"
    assert 0 < v["events_verified"] < full["verification"]["events_verified"]
    assert v["since_checkpoint_size"] + v["events_verified"] == v["head_seq"]
    # No checkpoint before the period: the whole log is verified.
    early = audit(built, "--verify", "since", "--to", built.d0.strftime("%Y-%m-%d"))
    assert early["verification"]["scope"] == "full"
    none = audit(built, "--verify", "none")
    assert none["verification"]["status"] == "not-verified"
    assert none["activity"] == full["activity"]


# ----------------------------------------------------------------------------- state changes
def test_audit_flags_of_the_policy_in_force_at_the_period_end(home: Path,
                                                              tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    b = build(home, "any", tmp_path, monkeypatch)
    monkeypatch.setenv("LEDGER_NOW", _at(b.day(12)))
    policy = tmp_path / "quiet.json"
    policy.write_text(json.dumps(_policy(retrieval=False)))
    _ok("--home", str(home), "policy", "set", str(policy))
    monkeypatch.delenv("LEDGER_NOW")
    rep = audit(b, now=b.day(12, hour=11))
    assert rep["retrievals"] == {
        "audit_flag": "logRetrieval", "reported": False,
        "note": "auditPolicy.logRetrieval is false in the policy in force: not reported"}
    assert rep["activity"]["not_reported"] == len(b.recalled)
    assert rep["activity"]["by_category"]["recalled"] == 0
    assert rep["activity"]["by_topic"]["memory-ledger:atom.rehearsed.v1"] == 2
    assert rep["rehearsals"]["events"] == 2
    earlier = audit(b, "--to", b.day(11).strftime("%Y-%m-%d"), now=b.day(12, hour=11))
    assert earlier["retrievals"]["events"] == len(b.recalled)


def test_tampered_log_reported_as_failed_with_exit_1(home: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    b = build(home, "any", tmp_path, monkeypatch)
    raw = RawStore(home)
    pos, *_rest, state = raw.rows()[8]
    raw.set_state(pos, state.replace(b'"seq":', b'"seq": ', 1))
    monkeypatch.delenv("LEDGER_NOW")
    os.environ["LEDGER_NOW"] = _at(b.day(12))
    try:
        r = run_cli("--home", str(home), "audit", "--format", "json")
    finally:
        del os.environ["LEDGER_NOW"]
    assert r.code == 1
    rep = json.loads(r.out)
    assert rep["verification"]["ok"] is False and rep["verification"]["status"] == "failed"
    assert rep["verification"]["failure"]["position"] == pos
    assert "FAIL: audit report, but the log did not verify" in r.err


# ----------------------------------------------------------------------------- browser
def _pointer_value(doc: Any, pointer: str) -> Any:
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


def find_chromium() -> str:
    """LEDGER_CHROMIUM (set by `make test`), else what scripts/ensure-chromium.sh finds or
    installs: the same documented step, so `pytest` alone works too."""
    given = os.environ.get("LEDGER_CHROMIUM")
    if given:
        return given
    script = Path(__file__).resolve().parents[1] / "scripts" / "ensure-chromium.sh"
    r = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=600,
                       check=False)
    if r.returncode != 0:
        pytest.fail(f"no Chromium for the browser test: {r.stderr.strip()}")
    os.environ["LEDGER_CHROMIUM"] = r.stdout.strip().splitlines()[-1]
    return os.environ["LEDGER_CHROMIUM"]


def test_html_report_in_headless_chromium_shows_the_json_numbers(built: Built,
                                                                 tmp_path: Path) -> None:
    chromium = find_chromium()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("the playwright package is missing: pip install -e '.[dev]'")
    page_file = tmp_path / "audit.html"
    os.environ["LEDGER_NOW"] = _at(built.day(13, hour=11))  # bob's request is overdue
    try:
        r = run_cli("--home", str(built.home), "audit", "--format", "html", "--out",
                    str(page_file))
        rep = json.loads(run_cli("--home", str(built.home), "audit", "--json").out)
    finally:
        del os.environ["LEDGER_NOW"]
    assert r.code == 0, r.err
    url = page_file.as_uri()
    requests: list[str] = []
    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            page = browser.new_page()

            def route(rt: Any) -> None:
                if rt.request.url == url:
                    rt.continue_()
                else:
                    requests.append(rt.request.url)
                    rt.abort()

            page.route("**/*", route)
            page.on("request", lambda req: req.url != url and requests.append(req.url))
            page.on("console", lambda m: m.type == "error" and errors.append(m.text))
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(url, wait_until="load")
            shown = page.eval_on_selector_all(
                "[data-json-pointer]",
                "els => els.map(e => [e.dataset.jsonPointer, e.textContent.trim()])")
            bars = page.eval_on_selector_all(
                "svg[data-chart=activity] rect[data-count]",
                "els => els.map(e => Number(e.dataset.count))")
            turnaround = page.eval_on_selector_all(
                "svg[data-chart=turnaround] g[data-request]",
                "els => els.map(e => [e.dataset.request, e.dataset.status])")
            title = page.title()
        finally:
            browser.close()
    assert requests == [], requests
    assert errors == [], errors
    assert title.startswith("Memory audit report")
    pointers = {p for p, _ in shown}
    for pointer, text in shown:
        assert text == _shown(_pointer_value(rep, pointer)), pointer
    a = rep["activity"]
    expected = {"/activity/events", "/activity/reported", "/erasure_requests/overdue",
                "/verification/events_verified", "/retrievals/events", "/creations/total",
                *(f"/activity/by_topic/{t}" for t in a["by_topic"]),
                *(f"/activity/per_day/{d}/{c}" for d, cs in a["per_day"].items() for c in cs),
                *(f"/activity/by_actor/{i}/events" for i in range(len(a["by_actor"]))),
                *(f"/erasure_requests/items/{i}/status"
                  for i in range(len(rep["erasure_requests"]["items"])))}
    assert expected <= pointers, expected - pointers
    assert sum(bars) == a["reported"]
    assert sorted(map(tuple, turnaround)) == sorted((x["request_id"], x["status"])
                                                    for x in rep["erasure_requests"]["items"])
    assert [built.bob_request, "overdue"] in turnaround
