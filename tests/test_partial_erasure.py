"""Partial outcomes of an erasure (ADR 0047, governance/partial.py).

A read model's store made unreachable in the test (the keyword index: its model and its
route raise :class:`projections.routes.StoreUnavailable`, in process, as a server that
refuses connections would): `redact-user` ends ``partial`` (exit 1, ``PARTIAL:``), signed
(``batch.ended-partial``, ``request.ended-partial``) with the reason, every other route
purged and probed, the keys destroyed; `requests list` and the Evidence Pack say so and
the pack verifies (exit 1: what it proves is not a complete erasure). The store comes
back, `ledger requests resume` completes the same request and batch, both packs verify,
and the erased words are in no route (the thorough probe) and, on SQLite, in no file.

Legal holds (the memoryPolicy's ``rightToBeForgottenSla.legalHolds``): held items are kept
with their keys, the others erased and tombstoned, the request partial until the hold is
lifted. A rejected request is closed and never executed. A run killed after its partial
record is finished by the resume.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from governance import partial as part
from ledger.application import LedgerApp
from ledger.home import Config
from projections.keyword import KeywordIndex, KeywordRoute
from projections.routes import StoreUnavailable
from projections.service import Projections

from .conftest import CliResult, run_cli

SECRETS = [f"Quillon Averdisk secret {i:02d} goes kayaking at dawn" for i in range(3)]
KEPT = "Unrelated memory of another person entirely"
HOLD = "CASE-2031-7"


def seed(home: Path, privacy: bool = False) -> dict[str, list[str]]:
    """A target subject with three memories (the first one staff-pii when ``privacy``),
    another subject with one; every read model caught up."""
    app = LedgerApp(Config.load(home))
    try:
        app.register_subject({"ref": "target"})
        app.register_subject({"ref": "other"})
        ids = [str(app.add_atom({"subject": "target", "text": t,
                                 **({"privacy_class": "staff-pii" if i == 0 else "guest-pii"}
                                    if privacy else {})}))
               for i, t in enumerate(SECRETS)]
        other = str(app.add_atom({"subject": "other", "text": KEPT}))
        proj = Projections(app)
        try:
            proj.catch_up()
        finally:
            proj.close()
    finally:
        app.close()
    return {"target": ids, "other": [other]}


def cli(home: Path, *args: str) -> CliResult:
    """The command in process; its ``err`` holds the verdicts only (not the JSON logs)."""
    r = run_cli("--home", str(home), *args)
    r.err = "".join(line for line in r.err.splitlines(keepends=True)
                    if not line.startswith("{"))
    return r


def as_json(home: Path, *args: str, code: int = 0) -> Any:
    r = cli(home, *args, "--json")
    assert r.code == code, (args, r.code, r.err[-2000:])
    return json.loads(r.out)


@contextmanager
def keyword_store_down(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The keyword index's store refuses every call (its read model applies nothing, its
    route neither purges nor probes) until the block ends; no waits between retries."""
    calls: list[str] = []

    def refused(*_a: Any, **_k: Any) -> Any:
        calls.append("refused")
        raise StoreUnavailable("the keyword index's server refused the connection")

    with monkeypatch.context() as m:
        m.setattr(part, "BACKOFF_S", (0.0, 0.0))
        m.setattr(KeywordIndex, "apply", refused)
        for name in ("purge", "purge_many", "probe", "probe_many", "compact"):
            m.setattr(KeywordRoute, name, refused)
        yield calls


def found_in_files(home: Path, texts: list[str]) -> list[str]:
    """Files of the home holding any of ``texts`` as UTF-8 bytes (SQLite homes)."""
    wanted = [t.encode() for t in texts]
    return sorted(str(p.relative_to(home)) for p in home.rglob("*")
                  if p.is_file() and any(w in p.read_bytes() for w in wanted))


def predicate(pack: Path) -> dict[str, Any]:
    dsse = json.loads((pack / "statement.dsse.json").read_text())
    statement: dict[str, Any] = json.loads(base64.b64decode(dsse["payload"]))
    return dict(statement["predicate"])


def no_secret_in(folder: Path) -> None:
    for p in folder.rglob("*"):
        if p.is_file():
            data = p.read_bytes()
            assert not any(s.encode() in data for s in SECRETS), p


# ----------------------------------------------------------------------------- store down
def test_a_read_model_store_down_ends_partial_and_the_resume_completes_it(
        home: Path, backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ids = seed(home)
    with keyword_store_down(monkeypatch) as calls:
        r = cli(home, "redact-user", "target", "--reason", "GDPR Art. 17", "--operator",
                "operator", "--yes", "--json")
        assert calls, "the fault was never reached"
    # ended partial: exit 1, never an OK
    assert r.code == 1, r.err[-2000:]
    assert r.err.startswith("PARTIAL: the erasure of request ") and "OK" not in r.err
    assert "keyword-index could not be reached" in r.err and "requests resume" in r.err
    data = json.loads(r.out)
    assert data["status"] == "partial"
    [reason] = data["reasons"]
    assert reason == {"code": "store-unreachable", "route": "keyword-index",
                      "model": "keyword", "stage": "catch-up", "attempts": part.ATTEMPTS,
                      "error": "StoreUnavailable"}
    routes = {x["route"]: x["reach"] for x in data["reach"]["routes"]}
    assert routes.pop("keyword-index") == "not-checked"
    assert routes and set(routes.values()) == {"not-reachable"}  # the others were reached
    rid, batch = data["request_id"], data["batch_id"]
    if backend == "sqlite":  # the keyword store still holds the words: recorded, not hidden
        assert data["reach"]["raw_scan"]["hits"] == [{"file": "projections.sqlite",
                                                      "count": 3}]
        assert found_in_files(home, SECRETS) == ["projections.sqlite"]

    [row] = as_json(home, "requests", "list")
    assert row["status"] == "partial" and row["completed_at"] is None
    assert row["partial_reasons"] == [reason] and row["batch_id"] == batch
    listed = cli(home, "requests", "list")
    assert "partial" in listed.out and "store-unreachable:keyword-index" in listed.out

    # the pack of the partial run: says so, verifies, exit 1
    p1 = tmp_path / "pack-partial"
    assert cli(home, "evidence-pack", batch, "--out", str(p1)).code == 0
    v1 = cli(home, "verify-pack", str(p1), "--json")
    assert v1.code == 1 and v1.err.startswith("PARTIAL: pack verified"), v1.err
    rep1 = json.loads(v1.out)
    assert rep1["ok"] is True and rep1["outcome"] == "partial"
    assert rep1["partial_reasons"] == [reason]
    pred = predicate(p1)
    assert pred["batch"]["outcome"] == "partial" and pred["request"]["completed_at"] is None
    assert [x["reasons"] for x in pred["partial_outcomes"]] == [[reason]]
    topics = {e["topic"] for e in pred["events"]}
    assert {"memory-ledger:batch.ended-partial.v1",
            "memory-ledger:request.ended-partial.v1"} <= topics
    assert "memory-ledger:batch.executed.v1" not in topics
    destroyed = {e["event_id"].split("/")[0] for e in pred["events"]
                 if e["topic"] == "memory-ledger:atom.data-key-destroyed.v1"}
    assert destroyed == set(ids["target"])  # the keys are gone already
    assert not any(e["topic"] == "memory-ledger:atom.redacted.v1" for e in pred["events"])
    html = (p1 / "report.html").read_text()
    assert "PARTIAL: this erasure did not finish" in html and "not-checked" in html
    no_secret_in(p1)

    # the store is back: the same request and batch complete
    r = cli(home, "requests", "resume", rid, "--json")
    assert r.code == 0, r.err[-2000:]
    done = json.loads(r.out)
    assert done["status"] == "completed" and done["batch_id"] == batch
    assert [x["reasons"] for x in done["partial_before"]] == [[reason]]
    assert "earlier partial record" in r.err
    [row] = as_json(home, "requests", "list")
    assert row["status"] == "completed" and row["partial_at"] is not None
    assert row["partial_reasons"] == [reason]  # the partial record is kept

    p2 = tmp_path / "pack-completed"
    assert cli(home, "evidence-pack", batch, "--out", str(p2)).code == 0
    v2 = cli(home, "verify-pack", str(p2), "--json")
    assert v2.code == 0 and v2.err.startswith("OK: pack verified"), v2.err
    rep2 = json.loads(v2.out)
    assert rep2["outcome"] == "completed" and rep2["earlier_partials"] == 1
    pred2 = predicate(p2)
    assert pred2["batch"]["outcome"] == "completed"
    assert pred2["partial_outcomes"] == pred["partial_outcomes"]  # both records, one log
    assert {x["reach"] for x in pred2["reach"]["routes"]} == {"not-reachable"}
    assert "Earlier partial outcomes" in (p2 / "report.html").read_text()
    no_secret_in(p2)
    # the first record still verifies, as the partial record it is
    again = cli(home, "verify-pack", str(p1), "--json")
    assert again.code == 1 and json.loads(again.out)["ok"] is True

    # gone from every route, by the thorough probe, and from every file
    for atom, text in zip(ids["target"], SECRETS, strict=True):
        f = tmp_path / f"{atom}.txt"
        f.write_text(text)
        probe = cli(home, "projections", "probe", atom, "--content-file", str(f))
        assert probe.code == 0, probe.err
    if backend == "sqlite":
        assert found_in_files(home, SECRETS) == []
    assert cli(home, "verify").code == 0


def test_a_run_killed_after_its_partial_record_is_finished_by_the_resume(
        home: Path, tmp_path: Path) -> None:
    """``LEDGER_FAULT=after-partial`` (SQLite): the child process, whose keyword store is
    down, is killed right after the partial record is committed; the resume, with the
    store back, completes the same request and batch."""
    seed(home)
    down = ("import governance.partial as p; p.BACKOFF_S = (0.0, 0.0)\n"
            "from projections.keyword import KeywordIndex, KeywordRoute\n"
            "from projections.routes import StoreUnavailable\n"
            "def refused(*a, **k): raise StoreUnavailable('down')\n"
            "KeywordIndex.apply = refused\n"
            "for n in ('purge', 'purge_many', 'probe', 'probe_many', 'compact'):\n"
            "    setattr(KeywordRoute, n, refused)\n"
            "from cli.main import main; sys.exit(main(sys.argv[1:]))")
    env = {**os.environ, "LEDGER_FAULT": "after-partial", "LEDGER_HOME": str(home),
           "LEDGER_LOG_LEVEL": "warning"}
    env.pop("LEDGER_NOW", None)
    r = subprocess.run([sys.executable, "-c", "import sys\n" + down, "redact-user",
                        "target", "--reason", "GDPR", "--operator", "operator", "--yes"],
                       env=env, capture_output=True, text=True, timeout=300, check=False,
                       cwd=Path(__file__).resolve().parents[1])
    assert r.returncode == -9, r.stderr[-2000:]
    [row] = as_json(home, "requests", "list")
    assert row["status"] == "partial"
    r2 = cli(home, "requests", "resume", row["request_id"], "--json")
    assert r2.code == 0, r2.err[-2000:]
    assert json.loads(r2.out)["batch_id"] == row["batch_id"]
    [row] = as_json(home, "requests", "list")
    assert row["status"] == "completed"
    assert found_in_files(home, SECRETS) == []
    pack = tmp_path / "pack"
    assert cli(home, "evidence-pack", row["batch_id"], "--out", str(pack)).code == 0
    assert cli(home, "verify-pack", str(pack)).code == 0


# ----------------------------------------------------------------------------- legal holds
def hold_policy(**hold: Any) -> dict[str, Any]:
    return {"memoryPolicy": {"enabled": True, "rightToBeForgottenSla": {
        "legalHolds": {HOLD: {"reason": "litigation hold, matter 2031-7", **hold}}}}}


def set_policy(home: Path, tmp_path: Path, doc: dict[str, Any]) -> CliResult:
    f = tmp_path / f"policy-{abs(hash(json.dumps(doc, sort_keys=True)))}.json"
    f.write_text(json.dumps(doc))
    return cli(home, "policy", "set", str(f))


@pytest.mark.parametrize("backend", ["sqlite"])
def test_a_legal_hold_keeps_its_items_and_the_request_stays_partial_until_lifted(
        home: Path, tmp_path: Path) -> None:
    ids = seed(home, privacy=True)
    held, erased = ids["target"][0], ids["target"][1:]
    assert set_policy(home, tmp_path, hold_policy(privacyClasses=["staff-pii"])).code == 0
    dry = as_json(home, "redact-user", "target", "--reason", "GDPR", "--operator",
                  "operator", "--dry-run")
    assert [h["atoms"] for h in dry["held"]] == [[held]]
    assert any("legal hold" in w for w in dry["warnings"])

    r = cli(home, "redact-user", "target", "--reason", "GDPR", "--operator", "operator",
            "--plan", dry["plan_digest"], "--json")
    verdicts = r.err.splitlines()
    assert r.code == 1 and verdicts[0].startswith("warning: 2 items under legal hold")
    assert verdicts[1].startswith("PARTIAL:") and HOLD in verdicts[1] and len(verdicts) == 2
    data = json.loads(r.out)
    [reason] = data["reasons"]
    assert reason["code"] == "legal-hold" and reason["hold"] == HOLD
    assert reason["atoms"] == [held] and reason["subjects"] == data["targets"]["subjects"]
    # the others are erased and tombstoned; the held one is there, readable, key and all
    listed = {a["atom_id"]: a for a in as_json(home, "memory", "list", "--subject", "target")}
    assert all(listed[a]["status"] == "hard-redacted" for a in erased)
    assert listed[held]["status"] == "active"
    assert SECRETS[1] not in json.dumps(listed) and SECRETS[0] in json.dumps(listed)
    assert found_in_files(home, SECRETS[1:]) == []
    [row] = as_json(home, "requests", "list")
    assert row["status"] == "partial" and row["partial_reasons"] == [reason]

    pack = tmp_path / "pack-held"
    assert cli(home, "evidence-pack", data["batch_id"], "--out", str(pack)).code == 0
    v = cli(home, "verify-pack", str(pack), "--json")
    assert v.code == 1 and json.loads(v.out)["outcome"] == "partial" and HOLD in v.err
    stones = {e["event_id"].split("/")[0] for e in predicate(pack)["events"]
              if e["topic"] == "memory-ledger:atom.redacted.v1"}
    assert stones == set(erased)

    # still held: the resume ends partial again; lifted: it completes
    again = cli(home, "requests", "resume", row["request_id"])
    assert again.code == 1 and again.err.startswith("PARTIAL:")
    assert set_policy(home, tmp_path, {"memoryPolicy": {"enabled": True}}).code == 0
    done = cli(home, "requests", "resume", row["request_id"], "--json")
    assert done.code == 0, done.err[-2000:]
    [row] = as_json(home, "requests", "list")
    assert row["status"] == "completed"
    assert found_in_files(home, SECRETS) == []
    final = tmp_path / "pack-final"
    assert cli(home, "evidence-pack", data["batch_id"], "--out", str(final)).code == 0
    v = cli(home, "verify-pack", str(final), "--json")
    assert v.code == 0 and json.loads(v.out)["earlier_partials"] == 2


@pytest.mark.parametrize("backend", ["sqlite"])
def test_a_hold_is_validated_and_a_deletion_of_a_held_item_writes_nothing(
        home: Path, tmp_path: Path) -> None:
    ids = seed(home)
    for bad in (hold_policy(), hold_policy(subjects=[]),
                hold_policy(subjects=["target"], privacyClasses=["top-secret"]),
                {"memoryPolicy": {"enabled": True, "rightToBeForgottenSla": {
                    "legalHolds": {"has space": {"reason": "x", "subjects": ["target"]}}}}}):
        r = set_policy(home, tmp_path, bad)
        assert r.code == 2 and "legalHolds" in r.err, r.err
    assert set_policy(home, tmp_path, hold_policy(subjects=["target"])).code == 0
    before = as_json(home, "memory", "list", "--subject", "target")
    r = cli(home, "delete", ids["target"][0], "--reason", "asked")
    assert r.code == 2 and f"legal hold {HOLD}" in r.err and "nothing was erased" in r.err
    assert as_json(home, "memory", "list", "--subject", "target") == before


# ----------------------------------------------------------------------------- rejection
@pytest.mark.parametrize("backend", ["sqlite"])
def test_a_rejected_request_is_closed_never_executed_and_says_why(home: Path) -> None:
    seed(home)
    app = LedgerApp(Config.load(home))
    try:
        rid = str(app.receive_request("target", "asked by e-mail", "operator", 24, 720,
                                      identifiers=["q.averdisk@example.org"]))
    finally:
        app.close()
    r = cli(home, "requests", "reject", rid, "--code", "identity-not-verified",
            "--reason", "identity could not be verified", "--json")
    assert r.code == 0, r.err
    row = json.loads(r.out)
    assert row["status"] == "rejected" and row["rejected_at"]
    assert row["rejection"] == {"code": "identity-not-verified",
                                "reason": "identity could not be verified",
                                "operator": "operator"}
    assert not row["overdue"]
    # closed: neither resumed, executed nor rejected again
    r = cli(home, "requests", "resume", rid)
    assert r.code == 2 and "rejected" in r.err
    r = cli(home, "requests", "reject", rid, "--reason", "again")
    assert r.code == 2 and "already rejected" in r.err
    assert cli(home, "requests", "reject", rid, "--code", "bogus", "--reason", "x").code == 2
    # the request's own key (its reason, its identifiers) went with it
    app = LedgerApp(Config.load(home))
    try:
        assert app.reader.data_keys_present([rid]) == set()
    finally:
        app.close()
    # a new request for the subject is a new request, completed as usual
    r = cli(home, "redact-user", "target", "--reason", "GDPR", "--operator", "operator",
            "--yes", "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["request_id"] != rid
    rows = as_json(home, "requests", "list")
    assert [x["status"] for x in rows] == ["rejected", "completed"]
    # a request whose erasure started cannot be rejected
    r = cli(home, "requests", "reject", rows[1]["request_id"], "--reason", "late")
    assert r.code == 2 and "has an erasure" in r.err


@pytest.mark.parametrize("backend", ["sqlite"])
@pytest.mark.parametrize(("change", "why"), [
    ("outcome", "step 6: the batch's signed events are missing"),
    ("reasons", "step 6: the partial outcomes differ"),
    ("not-checked", "step 6: the reach results differ from the signed batch outcome"),
    ("dropped", "step 6: the partial outcomes differ"),
])
def test_a_partial_pack_that_claims_more_than_its_signed_record_fails_step_6(
        home: Path, tmp_path: Path, change: str, why: str) -> None:
    """Re-signed by an operator key (a valid signature): claiming completed, naming
    another reason, reaching the route that was not checked, or hiding the partial
    record, each fails step 6."""
    from governance.dsse import sign_envelope
    from ledger import envelope

    ids = seed(home, privacy=True)
    assert set_policy(home, tmp_path, hold_policy(privacyClasses=["staff-pii"])).code == 0
    data = json.loads(cli(home, "redact-user", "target", "--reason", "GDPR", "--operator",
                          "operator", "--yes", "--json").out)
    pack = tmp_path / "pack"
    assert cli(home, "evidence-pack", data["batch_id"], "--out", str(pack)).code == 0
    dsse = json.loads((pack / "statement.dsse.json").read_text())
    statement = json.loads(base64.b64decode(dsse["payload"]))
    p = statement["predicate"]
    if change == "outcome":
        p["batch"]["outcome"] = "completed"
        del p["partial_outcomes"]
    elif change == "reasons":
        p["partial_outcomes"][0]["reasons"][0]["atoms"] = []
    elif change == "not-checked":
        p["reach"]["routes"][0]["reach"] = "not-checked"
    else:
        del p["partial_outcomes"]
    app = LedgerApp(Config.load(home))
    try:
        resigned = sign_envelope(envelope.canonical(statement), app.signer("operator"))
    finally:
        app.close()
    (pack / "statement.dsse.json").write_text(json.dumps(resigned))
    r = cli(home, "verify-pack", str(pack))
    assert r.code == 1 and why in r.err, r.err
    assert ids


@pytest.mark.parametrize("backend", ["sqlite"])
def test_the_sweep_leaves_held_atoms_past_their_retention(
        home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ids = seed(home, privacy=True)
    doc = hold_policy(privacyClasses=["staff-pii"])
    doc["memoryPolicy"]["retentionPolicy"] = {"defaultRetentionDays": 1}
    assert set_policy(home, tmp_path, doc).code == 0
    monkeypatch.setenv("LEDGER_NOW", "2099-01-01T00:00:00Z")
    r = cli(home, "sweep", "--json")
    assert r.code == 0, r.err
    listed = {a["atom_id"]: a["status"]
              for a in as_json(home, "memory", "list", "--subject", "target")}
    assert listed[ids["target"][0]] == "active"  # held
    assert {listed[a] for a in ids["target"][1:]} == {"deleted"}
