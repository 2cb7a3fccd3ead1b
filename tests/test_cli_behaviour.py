"""What the ``ledger`` commands print, their exit codes and their refusals, through the
command alone: keys, policy, checkpoints, shows and writes, the read models, recall,
memory, state, export and import, policy check, sweep, requests and receipts (moved here
from the retired tests/test_cli_facade*.py, issue 32; that the command goes through the
facade is the import contract ``cli-through-facade``). Each text output is checked against
the same command's ``--json`` output, so a change to either rendering fails here."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from ledger import clock
from service.root import create_home

from .conftest import CliResult, run_cli
from .facade_seed import seed

T0 = clock.parse_instant("2031-01-01T00:00:00Z")
ERASED = "[erased]"
POLICY = {"memoryPolicy": {
    "enabled": True,
    "retentionPolicy": {"defaultRetentionDays": 10, "perPrivacyClass": {"guest-pii": 90}},
    "rightToBeForgottenSla": {"acknowledgmentHours": 24, "completionHours": 720}}}


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A SQLite ledger with the clock pinned at T0 (the commands are one code path over
    both backends; the storage tests run both)."""
    monkeypatch.delenv("LEDGER_HOME", raising=False)
    monkeypatch.setenv("LEDGER_NOW", clock.format_instant(T0))
    path = tmp_path / "home"
    create_home(path)
    return path


def _at(monkeypatch: pytest.MonkeyPatch, days: float) -> None:
    monkeypatch.setenv("LEDGER_NOW", clock.format_instant(T0 + timedelta(days=days)))


def _run(home: Path, *args: str, code: int = 0) -> CliResult:
    r = run_cli("--home", str(home), *args)
    assert r.code == code, (r.code, r.err)
    return r


def _cli(home: Path, *args: str) -> str:
    return _run(home, *args).out


def _json(home: Path, *args: str, code: int = 0) -> Any:
    return json.loads(_run(home, *args, "--json", code=code).out)


def verdicts(r: CliResult) -> str:
    """stderr less the log lines (JSON objects, one a line)."""
    return "".join(line for line in r.err.splitlines(keepends=True)
                   if not line.startswith("{"))


def as_lines(data: dict[str, Any], *, skip_empty: bool = False) -> set[str]:
    """The ``key: value`` lines a show command prints for the object its ``--json`` gave
    (as a set: the JSON's keys are sorted, the text keeps the model's order)."""
    return {f"{k}: {v}" for k, v in data.items()
            if not (skip_empty and (v is None or v == [] or v == {}))
            and not (isinstance(v, list) and any(isinstance(x, dict) for x in v))}


# ---------------------------------------------------------------------------- keys, policy,
# history, checkpoints
def test_keys_list_policy_show_and_history_print_the_ledger_s_state(home: Path,
                                                                   tmp_path: Path) -> None:
    [atom] = seed(home, subjects=["u1"], atoms=[{"subject": "u1", "text": "Works at Acme"}])
    _cli(home, "atom", "correct", atom, "--text", "Works at Beta", "--reason", "job change")
    _cli(home, "keys", "rotate", "writer", "--reason", "routine")
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"enabled": True, "maxAtoms": 100}))
    _cli(home, "policy", "set", str(policy))

    rows = _json(home, "keys", "list")
    revoked = [r for r in rows if r["revoked_from"]]
    assert [(r["name"], r["role"]) for r in revoked] == [("writer", "writer")]
    assert all(isinstance(r["private_key_here"], bool) for r in rows)
    logs = [r for r in rows if r["role"] == "log"]
    assert logs and all("vkey" in r for r in logs)
    assert not any("vkey" in r for r in rows if r["role"] != "log")
    text = _cli(home, "keys", "list")
    assert text.count("REVOKED from") == len(revoked)
    history = _json(home, "atom", "history", atom)
    assert [h["topic"] for h in history] == ["memory-ledger:atom.created.v1",
                                              "memory-ledger:atom.superseded.v1",
                                              "memory-ledger:atom.created.v1"]
    in_force = _json(home, "policy", "show")
    assert in_force["memoryPolicy"] == {"enabled": True, "maxAtoms": 100}
    assert in_force["set_at"] == "2031-01-01T00:00:00+00:00"
    assert in_force["event_id"].count("/") == 1
    r = _run(home, "atom", "history", "no-such-atom", code=2)
    assert "no atom 'no-such-atom'" in r.err


def test_verify_and_prove_agree_on_the_tree(home: Path) -> None:
    [atom] = seed(home, subjects=["u1"], atoms=[{"subject": "u1", "text": "fact"}])
    _cli(home, "checkpoint")
    printed = _json(home, "verify")
    assert printed["head_seq"] > 0
    created = _json(home, "atom", "history", atom)[0]
    eid = created["event_id"]
    proof = _json(home, "prove", eid)
    assert proof["leaf_index"] == created["seq"] - 1
    assert proof["tree_size"] == printed["head_seq"]


def test_keys_policy_and_checkpoint_commands(home: Path, tmp_path: Path) -> None:
    kid = _cli(home, "keys", "authorize", "dpo", "--role", "operator").strip()
    rotated = _json(home, "keys", "rotate", "dpo")
    assert rotated["name"] == "dpo" and rotated["old_kid"] == kid
    assert _cli(home, "keys", "revoke", rotated["new_kid"], "--reason", "left") == "revoked\n"
    rows = {r["kid"]: r for r in _json(home, "keys", "list")}
    assert rows[kid]["revoked_from"] and rows[rotated["new_kid"]]["revoked_from"]
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"enabled": True, "maxAtoms": 100}))
    r = _run(home, "policy", "set", str(policy), "--as", "writer", code=2)
    assert r.err.startswith("error: writer may not sign this command")
    assert _json(home, "policy", "set", str(policy))["event_id"].count("/") == 1
    r = _run(home, "checkpoint", "--witness-key", "k", code=2)
    assert r.err == "error: --witness-key needs a --witness URL\n"
    out = tmp_path / "cp.note"
    signed = _json(home, "checkpoint", "--out", str(out))
    assert set(signed) == {"origin", "size", "root", "note", "witnesses"}
    assert signed["witnesses"] == [] and out.read_text() == signed["note"]
    assert signed["note"].startswith(f"{signed['origin']}\n{signed['size']}\n"
                                     f"{signed['root']}\n\n")
    assert signed["size"] == _json(home, "verify")["head_seq"]
    vkey = _cli(home, "checkpoint", "--vkey").strip()
    assert [r["vkey"] for r in rows.values() if r["role"] == "log"] == [vkey]
    r = _run(home, "audit-tools", "verify-checkpoint", str(out), "--key", vkey)
    assert r.err.startswith("OK:")


# ---------------------------------------------------------------------------- subjects,
# artifacts, atoms: shows, writes and their refusals
def test_shows_print_each_field_and_erased_content_as_erased(home: Path) -> None:
    seed(home, subjects=[{"ref": "u1", "display_name": "J. Miller", "locale": "en-US"}],
         artifacts=[{"subject": "u1", "ref": ref, "title": f"Chat {ref}",
                     "body": f"we talked ({ref})", "source": "manual"}
                    for ref in ("art_1", "art_2")],
         atoms=[{"subject": "u1", "text": "Prefers tea", "ref": "a1", "derivation": "inferred",
                 "artifact_ids": ["art_1"], "extractor": "m1",
                 "details": [{"content": "green", "brightness": 0.4}], "tags": ["drinks"]},
                {"subject": "u1", "text": "Lives in Oslo", "ref": "a2"}])
    _cli(home, "delete", "a2", "--reason", "asked")
    _cli(home, "artifact", "delete", "art_2", "--reason", "asked")

    subject = _json(home, "subject", "show", "u1")
    assert (subject["ref"], subject["display_name"], subject["locale"]) == \
        ("u1", "J. Miller", "en-US")
    assert set(_cli(home, "subject", "show", "u1").splitlines()) == as_lines(subject)
    art = {ref: _json(home, "artifact", "show", ref) for ref in ("art_1", "art_2")}
    assert (art["art_1"]["title"], art["art_1"]["body"]) == ("Chat art_1", "we talked (art_1)")
    assert art["art_2"]["content_erased"] and art["art_2"]["title"] == ERASED == \
        art["art_2"]["body"]
    for ref, data in art.items():
        assert set(_cli(home, "artifact", "show", ref).splitlines()) == as_lines(data)
    atoms = {ref: _json(home, "atom", "show", ref) for ref in ("a1", "a2")}
    assert atoms["a1"]["text"] == "Prefers tea" and atoms["a1"]["tags"] == ["drinks"]
    assert atoms["a1"]["details"] == [{"content": "green", "brightness": 0.4}]
    assert atoms["a2"]["content_erased"] and atoms["a2"]["text"] == ERASED
    for ref, data in atoms.items():
        lines = set(_cli(home, "atom", "show", ref).splitlines())
        assert as_lines(data, skip_empty=True) <= lines
        assert {line.split(":")[0] for line in lines} == \
            {k for k, v in data.items() if v is not None and v != [] and v != {}}
    r = _run(home, "atom", "show", "a2")
    a2 = atoms["a2"]
    assert r.err == (f"note: the content of atom {a2['atom_id']} was erased "
                     f"(data key destroyed at {a2['data_key_destroyed_at']})\n")
    r = _run(home, "subject", "show", "nobody", code=2)
    assert r.err == ("error: no subject 'nobody' in this ledger\n"
                     "hint: register it first with `ledger subject add`\n")
    r = _run(home, "atom", "show", subject["subject_id"], code=2)
    assert r.err == f"error: {subject['subject_id']} is not an atom\n"
    r = _run(home, "artifact", "show", "nothing", code=2)
    assert r.err == "error: no artifact 'nothing' in this ledger\n"


def test_writes_sign_with_the_chosen_key_and_take_the_applications_limits(
        home: Path) -> None:
    kid = _cli(home, "keys", "authorize", "writer2", "--role", "writer").strip()
    # " u9": the application strips it; the API's model would refuse it
    assert _cli(home, "subject", "add", " u9", "--as", "writer2", "--json") != ""
    art = _cli(home, "artifact", "add", "--subject", "u9", "--kind", "chat", "--body", "b",
               "--as", "writer2").strip()
    # min_sources 200: over the API's limit (100), within the application's (1000)
    atom = _cli(home, "atom", "add", "--subject", "u9", "--text", "t", "--artifact", art,
                "--min-sources", "200", "--as", "writer2").strip()
    new = _json(home, "atom", "correct", atom, "--text", "t2", "--as", "writer2",
                "--valid-from", "2020-01-01T00:00:00Z")
    new_id = new["atom_id"]
    assert new["supersedes"] == atom
    assert _cli(home, "atom", "rehearse", new_id, "--reason", "asked", "--as",
                "writer2") == "1\n"
    assert _cli(home, "atom", "expire", new_id, "--as", "writer2") == "expired\n"
    history = _json(home, "atom", "history", new_id)
    assert len(history) >= 4 and {h["signer"] for h in history} == {kid}
    assert any(h["summary"].get("reason") == "asked" for h in history)
    shown = _json(home, "atom", "show", new_id)
    assert shown["valid_from"].startswith("2020-01-01") and shown["min_sources"] == 200
    assert shown["status"] == "expired" and "subject" not in shown

    def refused(*args: str) -> str:
        return _run(home, *args, code=2).err

    # refusals in the application's words and order (input checked before the lookup)
    assert refused("atom", "add", "--subject", "nobody", "--text", "").startswith(
        "error: invalid input: text: String should have at least 1 character")
    assert "details.0.content: String should have at most 2000 characters" in refused(
        "atom", "add", "--subject", "u9", "--text", "t", "--detail", "x" * 2001 + "=0.5")
    assert refused("atom", "expire", new_id) == \
        f"error: atom {new_id} is already expired\n"
    assert refused("atom", "rehearse", new_id).startswith(f"error: atom {new_id} is expired")
    r = _run(home, "subject", "add", "u10", "--as", "nokey", code=3)
    assert r.err.startswith("error: no private key named 'nokey'")


# ---------------------------------------------------------------------------- the read side
def _seed(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(POLICY))
    _cli(home, "policy", "set", str(policy))
    old, gone, _ = seed(
        home, subjects=[{"ref": "u1", "display_name": "Ann Example"}, "u2"],
        artifacts=[{"subject": "u1", "ref": "art_1", "title": "Chat",
                    "body": "we talked about work"}],
        atoms=[{"subject": "u1", "text": "Works at Acme", "ref": "job",
                "privacy_class": "guest-pii", "consent_basis": "service-delivery",
                "artifact_ids": ["art_1"], "tags": ["work"],
                "details": [{"content": "open plan office", "brightness": 0.4}]},
               {"subject": "u1", "text": "Secret hobby is chess", "salience": 0.9},
               {"subject": "u2", "text": "Likes green tea"}])
    _at(monkeypatch, 2)
    new = _json(home, "atom", "correct", "job", "--text", "Works at Beta as a manager")
    _cli(home, "delete", gone, "--reason", "asked")
    _at(monkeypatch, 3)
    return {"old": old, "new": new["atom_id"], "gone": gone}


def test_projections_status_probe_and_rebuild(
        home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ids = _seed(home, tmp_path, monkeypatch)

    def status_text(rows: list[dict[str, Any]]) -> str:
        return "\n".join(f"{r['name']:<9} {r['state']:<8} position {r['position']:>9}  "
                         f"lag {r['lag']:>7}  version {r['version']}" for r in rows) + "\n"

    _cli(home, "projections", "rebuild")
    r = _run(home, "projections", "status", "--json")
    rows = json.loads(r.out)
    assert {row["state"] for row in rows} == {"current"} and len(rows) == 5
    assert verdicts(r) == f"OK: 5 read models at position {rows[0]['head']}\n"
    assert _cli(home, "projections", "status") == status_text(rows)
    seed(home, atoms=[{"subject": "u2", "text": "Walks to work"}])  # one event behind
    r = _run(home, "projections", "status", "--json")
    rows = json.loads(r.out)
    behind = [row["name"] for row in rows if row["state"] != "current"]
    assert behind and verdicts(r) == (
        f"note: {len(behind)} read model(s) not current ({', '.join(behind)}); they catch "
        "up on the next query, or run `ledger projections rebuild`\n")
    assert _cli(home, "projections", "status") == status_text(rows)

    text = tmp_path / "text.txt"
    text.write_text("Secret hobby is chess\n")
    # the erased atom, its words given: no route reaches it (exit 0); the live atom is
    # reached by the routes that hold it (exit 1)
    for item, args, code in ((ids["gone"], ("--content-file", str(text)), 0),
                             (ids["new"], (), 1)):
        r = _run(home, "projections", "probe", item, *args, "--json", code=code)
        data = json.loads(r.out)
        reached = [p["route"] for p in data["routes"] if p["reach"] == "reachable"]
        assert data["item_id"] == item and data["reachable"] == reached
        assert len(data["routes"]) >= 5 and bool(reached) == bool(code)
        assert verdicts(r) == (f"REACHABLE: {item} is still reached by {', '.join(reached)}\n"
                               if reached else f"OK: no route reaches {item}\n")
        lines = [f"{p['route']:<15} {p['reach']:<14} "
                 + ", ".join(f"{h['where']} by {h['by']} x{h['count']}" for h in p["hits"])
                 for p in data["routes"]]
        r = _run(home, "projections", "probe", item, *args, code=code)
        assert r.out == "\n".join(lines) + "\n"

    r = _run(home, "projections", "rebuild", "keyword", "--json")
    rebuilt = json.loads(r.out)
    assert verdicts(r).startswith(f"OK: rebuilt 1 read model(s) to position {rebuilt['head']} "
                                  f"({rebuilt['notifications']} events in ")
    assert set(rebuilt["models"]) == {"keyword"}


def test_recall_memory_and_state_print_what_they_found(
        home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ids = _seed(home, tmp_path, monkeypatch)
    query = ("where does she work", "--subject", "u1", "-k", "3")
    r = _run(home, "recall", *query, "--no-rehearse", "--json")
    recalled = json.loads(r.out)
    assert [d["atom_id"] for d in recalled["items"]] == [ids["new"]]
    assert verdicts(r) == f"OK: recalled 1 of {recalled['eligible']} matching memories\n"
    assert _cli(home, "recall", *query, "--no-rehearse") == recalled["prompt"]
    r = _run(home, "recall", *query, "--session", "s1")
    assert r.out == recalled["prompt"] and verdicts(r).endswith("; rehearsals recorded\n")
    assert _json(home, "atom", "show", ids["new"])["rehearsal_count"] == 1
    # the query is checked before the subject is looked up
    r = _run(home, "recall", " ", "--subject", "nobody", code=2)
    assert "the recall query is empty" in r.err
    r = _run(home, "recall", "tea", "--subject", "nobody", code=2)
    assert "nobody" in r.err

    rows = _json(home, "memory", "list")
    assert {row["atom_id"]: row["text"] for row in rows}[ids["gone"]] == ERASED
    staff = _json(home, "memory", "list", "--subject", "u1", "--privacy-class", "guest-pii",
                  "--min-salience", "0.1")
    assert {row["atom_id"] for row in staff} == {ids["old"], ids["new"]}
    r = _run(home, "memory", "list", "--subject", "u1", "--privacy-class", "guest-pii",
             "--min-salience", "0.1")
    assert r.out == "\n".join(
        f"{row['atom_id']}  {row['status']:<10} {row['salience_now']:.3f} "
        f"{','.join(row['markers']):<12} {row['text']}" for row in staff) + "\n"
    assert verdicts(r) == "2 memories\n"
    r = _run(home, "memory", "list", "--subject", "nobody", "--privacy-class", "nope", code=2)
    assert "unknown privacy class" in r.err

    for key in ("new", "gone"):
        data = _json(home, "memory", "inspect", ids[key])
        assert (data["text"] == ERASED) == (key == "gone")
        r = _run(home, "memory", "inspect", ids[key])
        lines = [f"{k}: {v}" for k, v in data.items()
                 if k not in ("decay", "details_now", "rehearsals", "events")
                 and v not in (None, [], {})]
        assert set(r.out.split("\nsalience now: ")[0].splitlines()) == set(lines)
        assert ("note: the content of atom" in r.err) == (key == "gone")
    r = _run(home, "memory", "inspect", "nope", code=2)
    assert "nope" in r.err

    r = _run(home, "state", "--json")
    views = json.loads(r.out)
    assert [v["subject"]["ref"] for v in views] == ["u1", "u2"]
    facts = sum(len(v["valid"]) for v in views)
    assert verdicts(r) == (f"{facts} fact(s) valid at {views[0]['valid_at']} across 2 "
                           "subject(s)\n")
    assert "Secret hobby" not in r.out  # an erased atom's content is never printed
    then = ("--subject", "u1", "--as-of", clock.format_instant(T0 + timedelta(days=1)),
            "--valid-at", clock.format_instant(T0 + timedelta(hours=1)))
    one = _json(home, "state", *then)
    assert {a["atom_id"]: a["text"] for a in one["valid"]} == \
        {ids["old"]: "Works at Acme", ids["gone"]: ERASED}
    r = _run(home, "state", *then)
    assert r.out.startswith(f"subject u1 as of {one['as_of']}, valid at {one['valid_at']}:\n")
    assert all(a["atom_id"] in r.out for a in one["valid"]) and "Works at Acme" in r.out
    r = _run(home, "state", "--as-of", "yesterday-ish", code=2)
    assert "--as-of" in r.err


def test_export_and_import_print_what_they_wrote(
        home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _seed(home, tmp_path, monkeypatch)
    for fmt in ("konshus", "persona", "mem"):
        out = tmp_path / ("u1.mem" if fmt == "mem" else f"u1-{fmt}.json")
        r = _run(home, "export", "--format", fmt, "--subject", "u1", "--out", str(out),
                 "--sign", "--json")
        data = json.loads(r.out)
        assert (data["format"], data["subject"]) == (fmt, "u1")
        assert data["written"][0] == str(out) and out.exists()
        assert len(data["written"]) == (1 if fmt == "mem" else 2)  # the document, its sig
        assert all(Path(p).exists() for p in data["written"])
        assert data["counts"]["atoms"] >= 2, data["counts"]  # the fact and its correction
        assert verdicts(r).startswith(f"OK: exported subject u1 as {fmt} (")
    r = _run(home, "export", "--format", "konshus", "--out", str(tmp_path / "x.json"),
             code=2)
    assert "this ledger holds 2 subjects" in r.err and not (tmp_path / "x.json").exists()

    source = tmp_path / "u1-konshus.json"
    fresh = tmp_path / "fresh"
    create_home(fresh)
    for target in (home, fresh):
        r = _run(target, "import", str(source), "--format", "konshus", "--dry-run", "--json")
        report = json.loads(r.out)
        assert verdicts(r).endswith(f"OK: checked (dry run) {source} as konshus for subject "
                                    f"{report['subject']}\n")
    assert report["created"]["atoms"] > 0
    r = _run(fresh, "import", str(source), "--format", "konshus", "--json")
    assert json.loads(r.out)["created"] == report["created"]
    r = _run(fresh, "import", str(source), "--format", "konshus", "--dry-run")
    assert r.out.startswith("would create: ") and "refused: " in r.out


# ---------------------------------------------------------------------------- policy check,
# sweep, requests, receipt
def test_policy_check_sweep_requests_and_receipt(
        home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from service.caller import local_operator
    from service.models import ErasureRequestIn
    from service.root import opened_service

    _seed(home, tmp_path, monkeypatch)
    _cli(home, "redact-user", "u2", "--operator", "operator", "--reason", "asked", "--yes")
    with opened_service(home, lazy=True) as svc:  # arrange: a request never executed
        svc.file_request(local_operator(), ErasureRequestIn(subject="u1", reason="asked"))
    _at(monkeypatch, 100)  # past the guest-pii retention (90 days) and the SLA
    r = _run(home, "policy", "check", "--json")
    warnings = json.loads(r.out)
    n = len(warnings)
    assert verdicts(r) == (f"WARN: {n} warning(s)\n" if n else "OK: no warnings\n")
    assert _cli(home, "policy", "check") == "".join(
        f"{w['rule']}  {w['id']}  {w['message']}  -> {w['fix']}\n" for w in warnings)

    r = _run(home, "sweep", "--dry-run", "--json")
    swept = json.loads(r.out)
    assert swept["status"] == "planned"
    a, e, t = (swept["archived"]["count"], swept["erased"]["count"],
               swept["tombstone_records_dropped"]["count"])
    assert e and verdicts(r) == (f"dry run: would archive {a}, erase {e} and drop {t} "
                                 "tombstone records; nothing changed\n")
    assert _cli(home, "sweep", "--dry-run") == "".join(
        f"{d['action']}  {d['atom_id']}  {d['rule']}  due {d['due_at']}\n"
        for d in swept["due"])
    r = _run(home, "sweep", "--as", "writer", code=2)  # refused in the sweep's words
    assert "not an authorized operator" in r.err

    r = _run(home, "requests", "list", "--json")
    requests = json.loads(r.out)
    assert len(requests) == 2 and verdicts(r).startswith("WARN: 1 erasure request(s) overdue: ")
    r = _run(home, "requests", "list", "--overdue", "--json", code=1)
    overdue = json.loads(r.out)
    assert [q["request_id"] for q in overdue] == \
        [q["request_id"] for q in requests if not q["completed_at"]]
    assert verdicts(r) == f"FAIL: 1 erasure request(s) overdue: {overdue[0]['request_id']}\n"
    listed = _cli(home, "requests", "list").splitlines()
    assert [line.split("  ")[0] for line in listed] == [q["request_id"] for q in requests]
    for q, line in zip(requests, listed, strict=True):
        assert line.startswith(f"{q['request_id']}  {q['status']:<14} due {q['complete_due']}"
                               f"  left {q['time_left'] or '-'}")

    done = next(q["request_id"] for q in requests if q["completed_at"])
    out, page = tmp_path / "receipt.json", tmp_path / "receipt.html"
    r = _run(home, "receipt", done, "--out", str(out), "--html", str(page), "--json")
    data = out.read_bytes()
    assert r.out == json.dumps({"receipt": str(out), "bytes": len(data),
                                "html": str(page)}) + "\n"
    assert verdicts(r) == f"OK: erasure receipt written to {out} ({len(data)} bytes)\n"
    assert done in page.read_text(encoding="utf-8")
    r = _run(home, "audit-tools", "verify-receipt", str(out))
    assert verdicts(r).startswith("OK:")
    r = _run(home, "receipt", done, "--out", str(tmp_path / "again.json"))
    assert r.out == f"{tmp_path / 'again.json'}\n"
    _run(home, "receipt", "no-such-request", "--out", str(tmp_path / "x.json"), code=2)
    assert not (tmp_path / "x.json").exists()
