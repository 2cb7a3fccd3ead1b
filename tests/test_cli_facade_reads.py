"""The read-side, portability, policy and receipt commands moved onto the facade (issue 14)
print what the direct calls they replaced gave: ``projections status|probe|rebuild``,
``recall``, ``memory list|inspect``, ``state``, ``import``, ``export``, ``sweep``,
``requests list``, ``policy check`` and ``receipt`` call ``MemoryService`` as the local
operator; each expected output here is rendered from the layers' own calls, as the
commands rendered them when they called the layers (the clock pinned by LEDGER_NOW)."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from ledger import clock
from ledger.application import LedgerApp
from ledger.domain import ERASED
from ledger.home import Config

from .conftest import CliResult, opened_layers, run_cli

T0 = clock.parse_instant("2031-01-01T00:00:00Z")
POLICY = {"memoryPolicy": {
    "enabled": True,
    "retentionPolicy": {"defaultRetentionDays": 10, "perPrivacyClass": {"guest-pii": 90}},
    "rightToBeForgottenSla": {"acknowledgmentHours": 24, "completionHours": 720}}}
TIMING = ("seconds", "read_seconds", "decode_seconds", "index_seconds", "apply_seconds")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("LEDGER_HOME", raising=False)
    monkeypatch.setenv("LEDGER_NOW", clock.format_instant(T0))
    path = tmp_path / "home"
    LedgerApp.initialize(path)
    return path


def _at(monkeypatch: pytest.MonkeyPatch, days: float) -> None:
    monkeypatch.setenv("LEDGER_NOW", clock.format_instant(T0 + timedelta(days=days)))


def _run(home: Path, *args: str, code: int = 0) -> CliResult:
    r = run_cli("--home", str(home), *args)
    assert r.code == code, r.err
    return r


def _verdicts(r: CliResult) -> str:
    """stderr less the log lines (JSON objects, one a line)."""
    return "".join(line for line in r.err.splitlines(keepends=True)
                   if not line.startswith("{"))


def _json(data: Any) -> str:
    """The CLI's JSON: indent 2, sorted keys, ``str()`` for the rest."""
    return json.dumps(data, indent=2, sort_keys=True, default=str) + "\n"


def _erased(d: dict[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    if d.get("content_erased"):
        return {k: (ERASED if k in fields else v) for k, v in d.items()}
    return d


CONTENT = ("text", "gist", "details", "tags")


def _seed(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(POLICY))
    _run(home, "policy", "set", str(policy))
    _run(home, "subject", "add", "u1", "--name", "Ann Example")
    _run(home, "subject", "add", "u2")
    _run(home, "artifact", "add", "--subject", "u1", "--kind", "chat", "--ref", "art_1",
         "--title", "Chat", "--body", "we talked about work")
    old = _run(home, "atom", "add", "--subject", "u1", "--text", "Works at Acme", "--ref",
               "job", "--privacy-class", "guest-pii", "--consent-basis", "service-delivery",
               "--artifact", "art_1",
               "--detail", "open plan office=0.4", "--tag", "work").out.strip()
    gone = _run(home, "atom", "add", "--subject", "u1", "--text", "Secret hobby is chess",
                "--salience", "0.9").out.strip()
    _run(home, "atom", "add", "--subject", "u2", "--text", "Likes green tea")
    _at(monkeypatch, 2)
    new = json.loads(_run(home, "atom", "correct", "job", "--text",
                          "Works at Beta as a manager", "--json").out)["atom_id"]
    _run(home, "delete", gone, "--reason", "asked")
    _at(monkeypatch, 3)
    return {"old": old, "new": new, "gone": gone}


# ---------------------------------------------------------------------------- read models
def _status_text(rows: list[dict[str, Any]]) -> str:
    return "\n".join(f"{r['name']:<9} {r['state']:<8} position {r['position']:>9}  "
                     f"lag {r['lag']:>7}  version {r['version']}" for r in rows) + "\n"


def test_projections_status_probe_and_rebuild_print_what_the_layers_gave(
        home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ids = _seed(home, tmp_path, monkeypatch)
    with opened_layers(home) as (_app, proj):
        rows = [s.as_json() for s in proj.status()]
    r = _run(home, "projections", "status", "--json")
    assert r.out == _json(rows)
    assert {row["state"] for row in rows} == {"current"}
    assert _verdicts(r) == f"OK: 5 read models at position {rows[0]['head']}\n"
    assert _run(home, "projections", "status").out == _status_text(rows)
    _run(home, "atom", "add", "--subject", "u2", "--text", "Walks to work")  # one behind
    with opened_layers(home) as (_app, proj):
        rows = [s.as_json() for s in proj.status()]
    r = _run(home, "projections", "status", "--json")
    assert r.out == _json(rows)
    behind = [row["name"] for row in rows if row["state"] != "current"]
    assert behind and _verdicts(r) == (
        f"note: {len(behind)} read model(s) not current ({', '.join(behind)}); they catch "
        "up on the next query, or run `ledger projections rebuild`\n")

    text = tmp_path / "text.txt"
    text.write_text("Secret hobby is chess\n")
    for item, content in ((ids["gone"], str(text)), (ids["new"], None)):
        with opened_layers(home) as (_app, proj):
            proj.catch_up()
            results = [p.as_json() for p in proj.probe(item, None if content is None
                                                       else "Secret hobby is chess")]
        reached = [p["route"] for p in results if p["reach"] == "reachable"]
        args = ("--content-file", content) if content else ()
        r = _run(home, "projections", "probe", item, *args, "--json",
                 code=1 if reached else 0)
        assert r.out == _json({"item_id": item, "routes": results, "reachable": reached})
        assert _verdicts(r) == (f"REACHABLE: {item} is still reached by {', '.join(reached)}\n"
                         if reached else f"OK: no route reaches {item}\n")
        lines = [f"{p['route']:<15} {p['reach']:<14} "
                 + ", ".join(f"{h['where']} by {h['by']} x{h['count']}" for h in p["hits"])
                 for p in results]
        r = _run(home, "projections", "probe", item, *args, code=1 if reached else 0)
        assert r.out == "\n".join(lines) + "\n"
    assert not any(p["reach"] == "reachable" for p in results if "Secret" in str(p))

    def untimed(data: Any) -> Any:
        if isinstance(data, dict):
            return {k: untimed(v) for k, v in data.items() if k not in TIMING}
        return data

    with opened_layers(home) as (_app, proj):
        expected = proj.rebuild("keyword").as_json()
    r = _run(home, "projections", "rebuild", "keyword", "--json")
    assert untimed(json.loads(r.out)) == untimed(expected)
    assert _verdicts(r).startswith(f"OK: rebuilt 1 read model(s) to position {expected['head']} "
                            f"({expected['notifications']} events in ")
    r = _run(home, "projections", "rebuild", "nonsense", code=2)
    assert "unknown read model nonsense" in r.err


def test_recall_memory_and_state_print_what_the_layers_gave(
        home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ids = _seed(home, tmp_path, monkeypatch)
    query = ("where does she work", "--subject", "u1", "-k", "3")
    with opened_layers(home) as (_app, proj):
        result = proj.recall("where does she work", "u1", 3)
    recalled = [{**item.as_json(), "marker": ", ".join(item.markers), "rehearsed": False}
                for item in result.items]
    r = _run(home, "recall", *query, "--no-rehearse", "--json")  # the API's answer (ADR 0051)
    assert json.loads(r.out)["items"] == json.loads(_json(recalled))
    assert [d["atom_id"] for d in recalled] == [ids["new"]]
    assert _verdicts(r) == f"OK: recalled 1 of {result.eligible} matching memories\n"
    assert _run(home, "recall", *query, "--no-rehearse").out == result.prompt
    r = _run(home, "recall", *query, "--session", "s1")
    assert r.out == result.prompt and _verdicts(r).endswith("; rehearsals recorded\n")
    app = LedgerApp(Config.load(home))
    try:  # the rehearsal the command recorded, as ``app.rehearse_atoms`` records it
        assert app.get_atom(ids["new"]).rehearsal_count == 1
    finally:
        app.close()
    # the read models check the query before they look the subject up (their order)
    r = _run(home, "recall", " ", "--subject", "nobody", code=2)
    assert "the recall query is empty" in r.err
    r = _run(home, "recall", "tea", "--subject", "nobody", code=2)
    assert "nobody" in r.err

    with opened_layers(home) as (_app, proj):
        rows = [_erased(row, ("text",)) for row in proj.memory_list()]
        staff = [_erased(row, ("text",)) for row in proj.memory_list("u1", "guest-pii", 0.1)]
        inspected = {k: proj.memory_inspect(ids[k]) for k in ("new", "gone")}
        views = [v.as_json() for v in proj.state_all(clock.now())]
        one = proj.state_as_of("u1", T0 + timedelta(days=1), T0 + timedelta(hours=1))
    assert _run(home, "memory", "list", "--json").out == _json(rows)
    assert any(row["text"] == ERASED for row in rows)
    r = _run(home, "memory", "list", "--subject", "u1", "--privacy-class", "guest-pii",
             "--min-salience", "0.1")
    assert r.out == "\n".join(
        f"{row['atom_id']}  {row['status']:<10} {row['salience_now']:.3f} "
        f"{','.join(row['markers']):<12} {row['text']}" for row in staff) + "\n"
    assert _verdicts(r) == f"{len(staff)} memories\n" and len(staff) == 2
    r = _run(home, "memory", "list", "--subject", "nobody", "--privacy-class", "nope", code=2)
    assert "unknown privacy class" in r.err

    for key, data in inspected.items():
        if data["content_erased"]:
            data = _erased(data, (*CONTENT, "details_now"))
        assert _run(home, "memory", "inspect", ids[key], "--json").out == _json(data)
        r = _run(home, "memory", "inspect", ids[key])
        lines = [f"{k}: {v}" for k, v in data.items()
                 if k not in ("decay", "details_now", "rehearsals", "events")
                 and v not in (None, [], {})]
        assert r.out.startswith("\n".join(lines) + "\nsalience now: ")
        assert ("note: the content of atom" in r.err) == (key == "gone")
    r = _run(home, "memory", "inspect", "nope", code=2)
    assert "nope" in r.err

    def masked(d: dict[str, Any]) -> dict[str, Any]:
        d["valid"] = [_erased(a, CONTENT) for a in d["valid"]]
        d["not_valid"] = [_erased(a, CONTENT) for a in d["not_valid"]]
        d["artifacts"] = [_erased(a, ("title", "body", "media_url")) for a in d["artifacts"]]
        if d["subject"] is not None:
            d["subject"] = _erased(d["subject"], ("display_name",))
        return d

    views = [masked(v) for v in views]
    r = _run(home, "state", "--json")
    assert r.out == _json(views) and len(views) == 2
    facts = sum(len(v["valid"]) for v in views)
    assert _verdicts(r) == (f"{facts} fact(s) valid at {views[0]['valid_at']} across 2 "
                     "subject(s)\n")
    r = _run(home, "state", "--subject", "u1", "--as-of", clock.format_instant(
        T0 + timedelta(days=1)), "--valid-at", clock.format_instant(T0 + timedelta(hours=1)))
    d = masked(one.as_json())
    assert r.out.startswith(f"subject u1 as of {d['as_of']}, valid at {d['valid_at']}:\n")
    assert all(a["atom_id"] in r.out for a in d["valid"]) and "Works at Acme" in r.out
    r = _run(home, "state", "--as-of", "yesterday-ish", code=2)
    assert "--as-of" in r.err


# ---------------------------------------------------------------------------- portability
def _exported_by_the_layers(home: Path, fmt: str, out: Path) -> dict[str, Any]:
    """What `ledger export --format FMT --subject u1 --sign` wrote and printed when it
    called the portability modules itself."""
    from ledger.portability import konshus, mem, persona, service, view
    from ledger.portability.record import tally

    app = LedgerApp(Config.load(home))
    try:
        v = view.load(app, "u1")
        signer = app.signer(None)
        if fmt == "mem":
            stats = mem.export(v, out, include_private=False,
                               key=mem.signing_key(bytes(signer.signing_key)),
                               sign_manifest=True)
            written = [str(out)]
        else:
            module = konshus if fmt == "konshus" else persona
            doc, stats = module.export(v, include_private=False, now=clock.now())
            written = service.write_document(
                out, doc, signer, f"application/vnd.memory-ledger.{fmt}-export.v1+json")
        stats = {**stats, **tally(v.atoms)}
        if fmt != "mem":
            stats["records_not_carried"] = sum(r.content is not None for r in v.records)
        return {"format": fmt, "subject": v.ref, "written": written, "counts": stats}
    finally:
        app.close()


def _files(path: Path) -> dict[str, bytes]:
    if path.is_file():
        return {"": path.read_bytes()}
    files = {p.relative_to(path).as_posix(): p.read_bytes()
             for p in sorted(path.rglob("*")) if p.is_file()}
    # a .mem bundle's manifest carries the wall-clock second of its export (portable-memory
    # stamps createdAt, not the ledger clock) and manifest.sig signs the manifest: two
    # exports made a second apart differ there, and only there
    files["manifest.json"] = re.sub(rb'"createdAt":"[^"]+"', b'"createdAt":"..."',
                                    files["manifest.json"])
    assert files.pop("manifest.sig").startswith(b"ed25519:")
    return files


def test_export_and_import_print_and_write_what_the_layers_gave(
        home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ledger.portability import service

    _seed(home, tmp_path, monkeypatch)
    for fmt in ("konshus", "persona", "mem"):
        mine, theirs = tmp_path / f"cli-{fmt}", tmp_path / f"direct-{fmt}"
        mine.mkdir()
        theirs.mkdir()
        name = "u1.mem" if fmt == "mem" else "u1.json"
        expected = _exported_by_the_layers(home, fmt, theirs / name)
        r = _run(home, "export", "--format", fmt, "--subject", "u1", "--out",
                 str(mine / name), "--sign", "--json")
        assert r.out == json.dumps(expected, indent=2, sort_keys=True).replace(
            str(theirs), str(mine)) + "\n"
        assert len(expected["written"]) == (1 if fmt == "mem" else 2)
        for written in expected["written"]:
            assert _files(Path(written.replace(str(theirs), str(mine)))) == \
                _files(Path(written))
        assert _verdicts(r).startswith(f"OK: exported subject u1 as {fmt} (")
    r = _run(home, "export", "--format", "konshus", "--out", str(tmp_path / "x.json"),
             code=2)
    assert "this ledger holds 2 subjects" in r.err

    source = tmp_path / "cli-konshus" / "u1.json"
    fresh = tmp_path / "fresh"
    LedgerApp.initialize(fresh)
    for target in (home, fresh):
        app = LedgerApp(Config.load(target))
        try:
            plan = service.plan_file(app, source, "konshus", subject=None, trusted=[],
                                     max_bytes=None, skip_unsupported=False)
            report = service.apply_plan(app, plan, dry_run=True)
        finally:
            app.close()
        r = _run(target, "import", str(source), "--format", "konshus", "--dry-run", "--json")
        assert r.out == json.dumps(report, indent=2, sort_keys=True) + "\n"
        assert _verdicts(r).endswith(f"OK: checked (dry run) {source} as konshus for subject "
                              f"{report['subject']}\n")
    r = _run(fresh, "import", str(source), "--format", "konshus", "--json")
    assert json.loads(r.out)["created"] == report["created"]
    assert report["created"]["atoms"] > 0
    r = _run(fresh, "import", str(source), "--format", "konshus", "--dry-run")
    assert r.out.startswith("would create: ") and "refused: " in r.out


# ---------------------------------------------------------------------------- policy,
# sweep, requests, receipt
def test_policy_check_sweep_and_requests_print_what_the_layers_gave(
        home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from governance.policy_check import check_policy
    from governance.requests import list_requests
    from governance.sweep import sweep

    _seed(home, tmp_path, monkeypatch)
    _run(home, "redact-user", "u2", "--operator", "operator", "--reason", "asked", "--yes")
    app = LedgerApp(Config.load(home))
    try:  # an open request, never executed: overdue once its 720 hours pass
        app.receive_request(str(app.resolve_subject("u1")), "asked", "operator", 24.0, 720.0)
    finally:
        app.close()
    _at(monkeypatch, 100)  # past the guest-pii retention (90 days) and the SLA
    with opened_layers(home) as (app, proj):
        checked = check_policy(app, proj)
        swept = sweep(app, proj, dry_run=True)
        requests = list_requests(app)
        overdue = list_requests(app, overdue_only=True)
    r = _run(home, "policy", "check", "--json")
    assert r.out == _json(checked["warnings"])
    n = len(checked["warnings"])
    assert _verdicts(r) == (f"WARN: {n} warning(s)\n" if n else "OK: no warnings\n")
    r = _run(home, "policy", "check")
    assert r.out == "".join(f"{w['rule']}  {w['id']}  {w['message']}  -> {w['fix']}\n"
                            for w in checked["warnings"])

    r = _run(home, "sweep", "--dry-run", "--json")
    assert r.out == _json(swept) and swept["status"] == "planned"
    a, e, t = (swept["archived"]["count"], swept["erased"]["count"],
               swept["tombstone_records_dropped"]["count"])
    assert e and _verdicts(r) == (f"dry run: would archive {a}, erase {e} and drop {t} tombstone "
                           "records; nothing changed\n")
    r = _run(home, "sweep", "--dry-run")
    assert r.out == "".join(f"{d['action']}  {d['atom_id']}  {d['rule']}  due {d['due_at']}\n"
                            for d in swept["due"])
    r = _run(home, "sweep", "--as", "writer", code=2)  # refused in the sweep's words
    assert "not an authorized operator" in r.err

    r = _run(home, "requests", "list", "--json")
    assert r.out == _json(requests) and len(requests) == 2
    assert _verdicts(r).startswith("WARN: 1 erasure request(s) overdue: ")
    r = _run(home, "requests", "list", "--overdue", "--json", code=1)
    assert r.out == _json(overdue) and len(overdue) == 1
    assert _verdicts(r) == f"FAIL: 1 erasure request(s) overdue: {overdue[0]['request_id']}\n"
    r = _run(home, "requests", "list", code=0)
    assert r.out == "".join(f"{q['request_id']}  {q['status']:<14} due {q['complete_due']}  "
                            f"left {q['time_left'] or '-'}{_copies(q)}\n" for q in requests)

    done = next(q["request_id"] for q in requests if q["completed_at"])
    _receipt_is_written_as_before(home, tmp_path, done)


def _copies(row: dict[str, Any]) -> str:
    """What `requests list` adds to a completed request whose older copies are still
    decryptable (governance/copies.py)."""
    from governance.copies import UNRECOVERABLE, copies_line

    copies = row["copies"]
    return "" if not copies or copies["state"] == UNRECOVERABLE else f"  {copies_line(copies)}"


def _receipt_is_written_as_before(home: Path, tmp_path: Path, request: str) -> None:
    from governance.receipt import render_html, verify_receipt

    out, page = tmp_path / "receipt.json", tmp_path / "receipt.html"
    r = _run(home, "receipt", request, "--out", str(out), "--html", str(page), "--json")
    data = out.read_bytes()
    assert r.out == json.dumps({"receipt": str(out), "bytes": len(data),
                                "html": str(page)}) + "\n"
    assert _verdicts(r) == f"OK: erasure receipt written to {out} ({len(data)} bytes)\n"
    assert page.read_text(encoding="utf-8") == render_html(data)
    assert verify_receipt(data).request_id == request
    r = _run(home, "receipt", request, "--out", str(tmp_path / "again.json"))
    assert r.out == f"{tmp_path / 'again.json'}\n"
    r = _run(home, "receipt", "no-such-request", "--out", str(tmp_path / "x.json"), code=2)
    assert not (tmp_path / "x.json").exists()


# ---------------------------------------------------------------------------- scope
def test_the_new_facade_methods_are_scoped_by_the_caller(
        home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from service.caller import Caller, local_operator
    from service.facade import Forbidden
    from service.root import opened_service

    ids = _seed(home, tmp_path, monkeypatch)
    scoped = Caller(credential_id="t1", role="operator", subjects=frozenset({"u2"}))
    assistant = Caller(credential_id="t2", role="assistant")
    with opened_service(home, lazy=True) as svc:
        for call in (lambda: svc.probe_reach(scoped, ids["new"]),
                     lambda: svc.check_policy(scoped),
                     lambda: svc.sweep(scoped, dry_run=True),
                     lambda: svc.rebuild_read_models(assistant),
                     lambda: svc.read_models_status(assistant),
                     lambda: svc.export_file(assistant, "konshus", tmp_path / "a.json", "u1"),
                     lambda: svc.import_file(assistant, tmp_path / "a.json", "konshus")):
            with pytest.raises(Forbidden):
                call()
        assert not (tmp_path / "a.json").exists()
        # a scoped caller sees its own subjects only, and another's atom as unknown
        assert [v["subject"]["ref"] for v in svc.state_views(scoped, None, clock.now())] \
            == ["u2"]
        assert {r.subject_id for r in svc.list_memories(scoped, "u2")} == \
            {svc.subject_id(local_operator(), "u2")}
        from ledger.errors import NotFound

        with pytest.raises(NotFound):
            svc.inspect_memory(scoped, ids["new"])
        assert svc.inspect_memory(local_operator(), ids["new"])["atom_id"] == ids["new"]
