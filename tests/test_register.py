"""The request register (ADR 0048, governance/register.py): `ledger requests export` and
the console's download, on SQLite and PostgreSQL.

One ledger, its clock moved with ``LEDGER_NOW``, holds a request completed in time, one
completed late, one partial (a legal hold keeps an item), one overdue, one open and one
rejected. The CSV is read back with the ``csv`` module and every row is checked against
what `ledger requests list --json`, `ledger keys list --json` and the Evidence Packs kept
in a folder say, and against what the test itself did; the deadlines and the SLA verdicts
are computed here from the listed times, not by the register's code.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import re
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from ledger import clock
from ledger.application import LedgerApp
from ledger.home import Config

from .conftest import CliResult, run_cli

T0 = clock.parse_instant("2031-01-05T09:00:00Z")
REPORT_AT = T0 + timedelta(hours=72)
COLUMNS = ["request_id", "subject_ref", "legal_basis", "received_at", "acknowledged_at",
           "ack_due", "complete_due", "completed_at", "partial_at", "rejected_at", "status",
           "overdue", "sla_met", "reasons", "rejection_reason", "approver", "approver_key",
           "countersigners", "batch_id", "pack_digest"]
HOLD = "MATTER-31"
REJECTION = "=identity not verified; two letters unanswered"  # a formula-like start


def at(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def cli(home: Path, *args: str) -> CliResult:
    r = run_cli("--home", str(home), *args)
    r.err = "".join(x for x in r.err.splitlines(keepends=True) if not x.startswith("{"))
    return r


def ok(home: Path, *args: str) -> str:
    r = cli(home, *args)
    assert r.code == 0, (args, r.err[-2000:])
    return r.out


def build(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The six requests; Evidence Packs of the completed and the partial one kept in
    ``packs/`` (the first countersigned by an auditor key), beside a pack that fails."""
    def now(hours: float) -> None:
        monkeypatch.setenv("LEDGER_NOW", at(T0 + timedelta(hours=hours)))

    now(0)
    app = LedgerApp(Config.load(home))
    try:
        app.set_policy({"memoryPolicy": {"enabled": True, "rightToBeForgottenSla": {
            "acknowledgmentHours": 24, "completionHours": 48,
            "legalHolds": {HOLD: {"reason": "litigation, matter 31", "subjects": ["held"]}}}}})
        for ref in ("done", "late", "held", "over", "rej", "open"):
            app.register_subject({"ref": ref})
            app.add_atom({"subject": ref, "text": f"Memory number one of subject {ref} here"})
    finally:
        app.close()
    ids: dict[str, str] = {}

    def execute(ref: str) -> dict[str, Any]:
        r = cli(home, "redact-user", ref, "--reason", "GDPR Art. 17", "--legal-basis",
                "RGPD art. 17, apartado 1 (España)", "--operator", "operator", "--yes",
                "--json")
        assert r.code in (0, 1), r.err[-2000:]
        data: dict[str, Any] = json.loads(r.out)
        ids[ref] = data["request_id"]
        return data

    def file(ref: str) -> None:
        app = LedgerApp(Config.load(home))
        try:
            ids[ref] = str(app.receive_request(ref, "asked", "operator", 24, 48))
        finally:
            app.close()

    done = execute("done")
    now(1)
    file("late")
    now(2)
    held = execute("held")
    assert held["status"] == "partial"
    now(3)
    file("over")
    now(4)
    file("rej")
    now(5)
    ok(home, "requests", "reject", ids["rej"], "--code", "identity-not-verified",
       "--reason", REJECTION)
    now(60)
    assert execute("late")["status"] == "completed"  # finishes the filed request, late
    now(70)
    file("open")
    now(71)
    packs = tmp_path / "packs"
    packs.mkdir()
    ok(home, "keys", "authorize", "dpo", "--role", "auditor")
    ok(home, "evidence-pack", done["batch_id"], "--out", str(packs / "done"))
    ok(home, "evidence-pack", "sign", str(packs / "done"), "--as", "dpo")
    ok(home, "evidence-pack", held["batch_id"], "--out", str(packs / "held"), "--zip")
    ok(home, "evidence-pack", done["batch_id"], "--out", str(packs / "tampered"))
    report = packs / "tampered" / "report.html"
    report.write_text(report.read_text() + "<!-- changed -->")
    now(72)
    return {"ids": ids, "packs": packs, "done": done, "held": held}


def digest_of(pack: Path) -> str:
    """The pack's digest, computed here: SHA-256 of its DSSE payload."""
    if pack.suffix == ".zip":
        import zipfile

        with zipfile.ZipFile(pack) as z:
            dsse = json.loads(z.read("statement.dsse.json"))
    else:
        dsse = json.loads((pack / "statement.dsse.json").read_text())
    return "sha256:" + hashlib.sha256(base64.b64decode(dsse["payload"])).hexdigest()


def second(value: str | None) -> str:
    return at(clock.parse_instant(value)) if value else ""


def expected_rows(home: Path, built: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Each request's row as the test reads it from `requests list --json` (the log's
    requests), `keys list --json` and the packs, with the SLA decided here."""
    listed = json.loads(ok(home, "requests", "list", "--json"))
    keys = {k["name"]: k["kid"] for k in json.loads(ok(home, "keys", "list", "--json"))}
    ids = built["ids"]
    ref_of = {v: k for k, v in ids.items()}
    out = {}
    for r in listed:
        ref = ref_of[r["request_id"]]
        due, ack_due = clock.parse_instant(r["complete_due"]), clock.parse_instant(r["ack_due"])
        decided = r["completed_at"] or r.get("rejected_at")
        assert r["acknowledged_at"] and clock.parse_instant(r["acknowledged_at"]) <= ack_due
        sla = ("yes" if clock.parse_instant(decided) <= due else "no") if decided else \
            ("no" if REPORT_AT >= due else "")
        reasons: list[str] = []
        if r["status"] == "partial":
            reasons = [f"legal-hold:{HOLD}"]
        elif r["status"] == "rejected":
            reasons = ["rejected:identity-not-verified"]
        elif r["copies"] and r["copies"]["state"] == "pending":
            reasons = [f"copies-pending:{second(r['copies']['until']) or 'unscheduled'}"]
        batch = r["batch_id"] or ""
        pack = {"done": built["packs"] / "done", "held": built["packs"] / "held.zip"}.get(ref)
        out[r["request_id"]] = {
            "request_id": r["request_id"], "subject_ref": ref,
            "legal_basis": "RGPD art. 17, apartado 1 (España)"
            if ref in ("done", "held") else "",
            "received_at": second(r["received_at"]),
            "acknowledged_at": second(r["acknowledged_at"]),
            "ack_due": second(r["ack_due"]), "complete_due": second(r["complete_due"]),
            "completed_at": second(r["completed_at"]),
            "partial_at": second(r.get("partial_at")),
            "rejected_at": second(r.get("rejected_at")), "status": r["status"],
            "overdue": "yes" if r["overdue"] else "no", "sla_met": sla,
            "reasons": ";".join(reasons),
            "rejection_reason": "'" + REJECTION if ref == "rej" else "",
            "approver": "operator" if batch or ref == "rej" else "",
            "approver_key": keys["operator"] if batch or ref == "rej" else "",
            "countersigners": "dpo" if ref == "done" else "", "batch_id": batch,
            "pack_digest": digest_of(pack) if pack else ""}
    return out


def read_csv(data: bytes) -> list[dict[str, str]]:
    assert data.startswith(b"\xef\xbb\xbf")  # UTF-8 with a byte order mark
    text = data.decode("utf-8-sig")
    assert "\r\n" in text and "\n" not in text.replace("\r\n", "")
    reader = csv.DictReader(io.StringIO(text, newline=""))
    assert reader.fieldnames == COLUMNS
    return list(reader)


def test_the_register_rows_equal_the_logs_requests(
        home: Path, backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    built = build(home, tmp_path, monkeypatch)
    expected = expected_rows(home, built)
    statuses = sorted(r["status"] for r in expected.values())
    assert statuses == ["completed", "completed-late", "open", "overdue", "partial",
                        "rejected"]

    out = tmp_path / "register.csv"
    r = cli(home, "requests", "export", "--format", "csv", "--packs", str(built["packs"]),
            "--out", str(out))
    assert r.code == 0, r.err
    assert r.err.splitlines() == [
        "warning: pack tampered not cited: step 2",
        f"OK: 6 requests; 3 packs verified; written to {out}"]
    rows = read_csv(out.read_bytes())
    assert len(rows) == 6 and len({x["request_id"] for x in rows}) == 6  # one per request
    for row in rows:
        assert row == expected[row["request_id"]], row["subject_ref"]
    assert [x["received_at"] for x in rows] == sorted(x["received_at"] for x in rows)
    for row in rows:  # ISO 8601 instants to the second, UTC
        for k in ("received_at", "ack_due", "complete_due", "completed_at", "rejected_at"):
            assert row[k] == "" or re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", row[k])

    # JSON: the same rows, typed
    doc = json.loads(ok(home, "requests", "export", "--format", "json", "--packs",
                        str(built["packs"])))
    assert doc["columns"] == COLUMNS and doc["generated_at"].startswith("2031-01-08T09:00")
    assert doc["packs"] == {"verified": 3, "refused": {"tampered": "step 2"}}
    by_id = {x["request_id"]: x for x in doc["rows"]}
    for row in rows:
        typed = by_id[row["request_id"]]
        assert typed["overdue"] is (row["overdue"] == "yes")
        assert typed["sla_met"] == {"yes": True, "no": False, "": None}[row["sla_met"]]
        assert ";".join(typed["reasons"]) == row["reasons"]
        assert (typed["rejection_reason"] or "") == row["rejection_reason"].lstrip("'")
        assert (typed["pack_digest"] or "") == row["pack_digest"]

    # the period: received on the 5th, or from the 6th on (the open request only)
    first = read_csv(cli(home, "requests", "export", "--to", "2031-01-05").out.encode())
    assert sorted(x["subject_ref"] for x in first) == ["done", "held", "late", "over", "rej"]
    later = read_csv(cli(home, "requests", "export", "--from", "2031-01-06").out.encode())
    assert [x["subject_ref"] for x in later] == ["open"]
    bad = cli(home, "requests", "export", "--from", "2031-02-01", "--to", "2031-01-01")
    assert bad.code == 2 and "is before --from" in bad.err
    # without a packs folder the pack columns are empty; nothing else changes
    plain = read_csv(cli(home, "requests", "export").out.encode())
    for row in plain:
        want = {**expected[row["request_id"]], "countersigners": "", "pack_digest": ""}
        assert row == want
    # no memory content, no reason the subject gave
    text = out.read_text("utf-8-sig")
    assert "Memory number one" not in text and "GDPR Art. 17" not in text


@pytest.mark.parametrize("backend", ["sqlite"])
def test_the_console_downloads_the_register_and_rejects_with_its_token(
        home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from .console_support import serve

    built = build(home, tmp_path, monkeypatch)
    expected = expected_rows(home, built)
    with serve(home) as s:
        c = httpx.Client(base_url=s.origin, follow_redirects=False, timeout=60)
        form = c.get("/console/signin")
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert csrf is not None
        r = c.post("/console/signin", data={"csrf": csrf.group(1),
                                            "token": s.tokens.create("op", "operator")})
        assert r.status_code == 303
        page = c.get("/console/requests")
        assert page.status_code == 200 and "Download the register (CSV)" in page.text
        assert 'data-count="partial">1<' in page.text and 'data-count="rejected">1<' in page.text
        got = c.get("/console/requests/register.csv")
        assert got.status_code == 200
        assert got.headers["content-type"] == "text/csv; charset=utf-8"
        assert got.headers["content-disposition"].startswith(
            'attachment; filename="request-register-20310108T090000Z.csv"')
        assert "default-src 'self'" in got.headers["content-security-policy"]
        for row in read_csv(got.content):  # no packs folder: no pack columns
            assert row == {**expected[row["request_id"]], "countersigners": "",
                           "pack_digest": ""}
        assert [x["subject_ref"] for x in read_csv(
            c.get("/console/requests/register.csv?from=2031-01-06").content)] == ["open"]
        # the partial request's page says why and offers the resume
        detail = c.get(f"/console/requests/{built['ids']['held']}")
        assert "Partial: this erasure did not finish" in detail.text
        assert f"legal hold {HOLD}" in detail.text and "Resume the erasure" in detail.text
        # a reject without the session's CSRF token writes nothing; with it, it rejects
        rid = built["ids"]["open"]
        page = c.get(f"/console/requests/{rid}")
        assert "Or reject this request" in page.text
        token = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert token is not None
        r = c.post(f"/console/requests/{rid}/reject", data={"csrf": "wrong",
                                                             "reason": "duplicate"})
        assert r.status_code == 403
        r = c.post(f"/console/requests/{rid}/reject",
                   data={"csrf": token.group(1), "code": "duplicate",
                         "reason": "repeats an earlier request"})
        assert r.status_code == 303
        after = c.get(f"/console/requests/{rid}")
        assert 'id="request-status">rejected<' in after.text
        assert "repeats an earlier request" in after.text
        # an auditor may download the register, not reject
        a = httpx.Client(base_url=s.origin, follow_redirects=False, timeout=60)
        form = a.get("/console/signin")
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert csrf is not None
        a.post("/console/signin", data={"csrf": csrf.group(1),
                                        "token": s.tokens.create("aud", "auditor")})
        assert a.get("/console/requests/register.csv").status_code == 200
        page = a.get(f"/console/requests/{built['ids']['over']}")
        assert "Or reject this request" not in page.text
        token = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert token is not None
        r = a.post(f"/console/requests/{built['ids']['over']}/reject",
                   data={"csrf": token.group(1), "reason": "no"})
        assert r.status_code == 403
        [row] = [x for x in json.loads(ok(home, "requests", "list", "--json"))
                 if x["request_id"] == built["ids"]["over"]]
        assert row["status"] == "overdue"
        # the HTTP API: the statuses filter, and a rejection by an operator token
        bearer = {"Authorization": f"Bearer {s.tokens.create('api', 'operator')}"}
        listed = httpx.get(f"{s.origin}/v1/requests?status=partial", headers=bearer)
        assert [x["request_id"] for x in listed.json()] == [built["ids"]["held"]]
        r = httpx.post(f"{s.origin}/v1/requests/{built['ids']['over']}/reject",
                       json={"code": "excessive", "reason": "the fourth in a month"},
                       headers=bearer, timeout=60)
        assert r.status_code == 200 and r.json()["status"] == "rejected", r.text
        r = httpx.post(f"{s.origin}/v1/requests/{built['ids']['done']}/reject",
                       json={"reason": "too late"}, headers=bearer, timeout=60)
        assert r.status_code == 409  # an erasure started (and completed): not rejected
