"""The commands that moved onto the facade (issue 14) print what the layers gave before:
``keys list``, ``policy show``, ``atom history``, ``audit`` call ``MemoryService`` as the
local operator, and their output is the output of the direct calls they replaced."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ledger.application import LedgerApp
from ledger.home import Config

from .conftest import run_cli


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("LEDGER_NOW", raising=False)
    monkeypatch.delenv("LEDGER_HOME", raising=False)
    path = tmp_path / "home"
    LedgerApp.initialize(path)
    return path


def _cli(home: Path, *args: str) -> str:
    r = run_cli("--home", str(home), *args)
    assert r.code == 0, r.err
    return r.out


def test_keys_list_policy_and_history_print_what_the_layers_gave(home: Path,
                                                                  tmp_path: Path) -> None:
    _cli(home, "subject", "add", "u1")
    atom = _cli(home, "atom", "add", "--subject", "u1", "--text", "Works at Acme").strip()
    _cli(home, "atom", "correct", atom, "--text", "Works at Beta", "--reason", "job change")
    _cli(home, "keys", "rotate", "writer", "--reason", "routine")
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"enabled": True, "maxAtoms": 100}))
    _cli(home, "policy", "set", str(policy))

    app = LedgerApp(Config.load(home))
    try:  # the direct calls the commands made before they called the facade
        rows = app.roster().state.rows()
        local = set(app.keyring.names())
        vkeys = app.log_vkeys()
        for r in rows:
            r["private_key_here"] = r["name"] in local
            if r["role"] == "log" and r["kid"] in vkeys:
                r["vkey"] = vkeys[r["kid"]]
        history = app.history(atom)
        in_force = app.policy()
    finally:
        app.close()
    def expected(data: object) -> str:  # the CLI's JSON: indent 2, sorted keys, str()
        return json.dumps(data, indent=2, sort_keys=True, default=str) + "\n"

    assert _cli(home, "keys", "list", "--json") == expected(rows)
    assert any(r["revoked_from"] for r in rows) and any("vkey" in r for r in rows)
    text = _cli(home, "keys", "list")
    assert text.count("REVOKED from") == sum(1 for r in rows if r["revoked_from"])
    assert _cli(home, "atom", "history", atom, "--json") == expected(history)
    assert len(history) >= 2
    assert _cli(home, "policy", "show", "--json") == expected(in_force)
    r = run_cli("--home", str(home), "atom", "history", "no-such-atom")
    assert r.code != 0 and "no atom 'no-such-atom'" in r.err


def test_verify_and_prove_run_through_the_facade_scoped_by_the_caller(home: Path) -> None:
    from service.caller import Caller, local_operator
    from service.facade import Forbidden
    from service.root import opened_service

    _cli(home, "subject", "add", "u1")
    _cli(home, "atom", "add", "--subject", "u1", "--text", "fact")
    _cli(home, "checkpoint")
    printed = json.loads(_cli(home, "verify", "--json"))
    with opened_service(home, lazy=True) as svc:
        assert svc.verify_log(local_operator()).as_json() == printed
        event_id = next(iter(svc.app.stored_records()))
        eid = f"{event_id.originator_id}/{event_id.originator_version}"
        proof = svc.prove_inclusion(local_operator(), eid)
        assert proof["leaf_index"] == 0 and proof["tree_size"] == printed["head_seq"]
        scoped = Caller(credential_id="t1", role="auditor", subjects=frozenset({"u1"}))
        with pytest.raises(Forbidden):
            svc.prove_inclusion(scoped, eid)
        assert not svc.proj_opened  # the read models were never needed
    assert json.loads(_cli(home, "prove", eid, "--json")) == proof


# ---------------------------------------------------------------------------- subjects,
# artifacts, atoms (ADR 0040): the commands call the facade as the local operator; what
# they printed when they called the application is rendered here from direct calls.
def _as_printed(data: dict[str, object], as_json: bool) -> str:
    if as_json:
        return json.dumps(data, indent=2, sort_keys=True, default=str) + "\n"
    return "\n".join(f"{k}: {v}" for k, v in data.items()) + "\n"


def _atom_printed(data: dict[str, object], as_json: bool) -> str:
    if as_json:
        return _as_printed(data, True)
    return "\n".join(f"{k}: {v}" for k, v in data.items()
                     if v is not None and v != [] and v != {}) + "\n"


def test_shows_print_what_the_layers_gave(home: Path) -> None:
    from ledger.domain import ERASED

    _cli(home, "subject", "add", "u1", "--name", "J. Miller", "--locale", "en-US")
    for ref in ("art_1", "art_2"):
        _cli(home, "artifact", "add", "--subject", "u1", "--kind", "chat", "--ref", ref,
             "--title", f"Chat {ref}", "--body", f"we talked ({ref})", "--source", "manual")
    _cli(home, "atom", "add", "--subject", "u1", "--text", "Prefers tea", "--ref", "a1",
         "--derivation", "inferred", "--artifact", "art_1", "--extractor", "m1",
         "--detail", "green=0.4", "--tag", "drinks")
    _cli(home, "atom", "add", "--subject", "u1", "--text", "Lives in Oslo", "--ref", "a2")
    _cli(home, "delete", "a2", "--reason", "asked")
    _cli(home, "artifact", "delete", "art_2", "--reason", "asked")

    app = LedgerApp(Config.load(home))
    try:  # what the commands printed when they called the application
        s = app.get_subject("u1")
        subject = {"subject_id": str(s.id), "ref": s.ref, "display_name": s.display_name,
                   "locale": s.locale, "content_erased": s.content_erased}
        artifacts = {}
        for ref in ("art_1", "art_2"):
            a = app.get_artifact(ref)
            artifacts[ref] = {
                "artifact_id": str(a.id), "ref": a.ref, "subject_id": a.subject_id,
                "kind": a.kind, "captured_at": a.captured_at, "source": a.source,
                "private": a.private, "content_erased": a.content_erased,
                "title": ERASED if a.content_erased else a.title,
                "body": ERASED if a.content_erased else a.body}
        atoms = {}
        for ref in ("a1", "a2"):
            d = app.get_atom(ref).as_dict()
            if d["content_erased"]:
                for k in ("text", "gist", "details", "tags"):
                    d[k] = ERASED
            atoms[ref] = d
        subject_uuid = str(s.id)
    finally:
        app.close()
    assert artifacts["art_2"]["content_erased"] and atoms["a2"]["content_erased"]
    assert artifacts["art_1"]["source"] == "manual" and artifacts["art_2"]["source"] is None
    for as_json in (False, True):
        flag = ("--json",) if as_json else ()
        assert _cli(home, "subject", "show", "u1", *flag) == _as_printed(subject, as_json)
        for ref, data in artifacts.items():
            assert _cli(home, "artifact", "show", ref, *flag) == _as_printed(data, as_json)
        for ref, data in atoms.items():
            assert _cli(home, "atom", "show", ref, *flag) == _atom_printed(data, as_json)
    r = run_cli("--home", str(home), "atom", "show", "a2")
    assert r.err == (f"note: the content of atom {atoms['a2']['atom_id']} was erased "
                     f"(data key destroyed at {atoms['a2']['data_key_destroyed_at']})\n")
    # not found: the application's words, not the API's
    r = run_cli("--home", str(home), "subject", "show", "nobody")
    assert (r.code, r.err) == (2, "error: no subject 'nobody' in this ledger\n"
                                  "hint: register it first with `ledger subject add`\n")
    r = run_cli("--home", str(home), "atom", "show", subject_uuid)
    assert r.code == 2 and r.err == f"error: {subject_uuid} is not an atom\n"
    r = run_cli("--home", str(home), "artifact", "show", "nothing")
    assert r.code == 2 and r.err == "error: no artifact 'nothing' in this ledger\n"


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
    new = _cli(home, "atom", "correct", atom, "--text", "t2", "--as", "writer2",
               "--valid-from", "2020-01-01T00:00:00Z", "--json")
    new_id = json.loads(new)["atom_id"]
    assert json.loads(new)["supersedes"] == atom
    assert _cli(home, "atom", "rehearse", new_id, "--reason", "asked", "--as",
                "writer2") == "1\n"
    assert _cli(home, "atom", "expire", new_id, "--as", "writer2") == "expired\n"
    history = json.loads(_cli(home, "atom", "history", new_id, "--json"))
    assert len(history) >= 4 and {h["signer"] for h in history} == {kid}
    assert any(h["summary"].get("reason") == "asked" for h in history)
    shown = json.loads(_cli(home, "atom", "show", new_id, "--json"))
    assert shown["valid_from"].startswith("2020-01-01") and shown["min_sources"] == 200
    assert shown["status"] == "expired" and "subject" not in shown

    def refused(*args: str) -> str:
        r = run_cli("--home", str(home), *args)
        assert r.code == 2, (r.code, r.out)
        return r.err

    # refusals in the application's words and order (input checked before the lookup)
    assert refused("atom", "add", "--subject", "nobody", "--text", "").startswith(
        "error: invalid input: text: String should have at least 1 character")
    assert "details.0.content: String should have at most 2000 characters" in refused(
        "atom", "add", "--subject", "u9", "--text", "t", "--detail", "x" * 2001 + "=0.5")
    assert refused("atom", "expire", new_id) == \
        f"error: atom {new_id} is already expired\n"
    assert refused("atom", "rehearse", new_id).startswith(f"error: atom {new_id} is expired")
    r = run_cli("--home", str(home), "subject", "add", "u10", "--as", "nokey")
    assert r.code == 3 and r.err.startswith("error: no private key named 'nokey'")


def test_keys_policy_and_checkpoint_commands_run_through_the_facade(home: Path,
                                                                    tmp_path: Path) -> None:
    from service.caller import Caller
    from service.facade import Forbidden
    from service.root import opened_service

    kid = _cli(home, "keys", "authorize", "dpo", "--role", "operator").strip()
    rotated = json.loads(_cli(home, "keys", "rotate", "dpo", "--json"))
    assert rotated["name"] == "dpo" and rotated["old_kid"] == kid
    assert _cli(home, "keys", "revoke", rotated["new_kid"], "--reason", "left") == "revoked\n"
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"enabled": True, "maxAtoms": 100}))
    r = run_cli("--home", str(home), "policy", "set", str(policy), "--as", "writer")
    assert r.code == 2 and r.err.startswith("error: writer may not sign this command")
    event_id = _cli(home, "policy", "set", str(policy), "--json")
    r = run_cli("--home", str(home), "checkpoint", "--witness-key", "k")
    assert (r.code, r.err) == (2, "error: --witness-key needs a --witness URL\n")
    out = tmp_path / "cp.note"
    signed = json.loads(_cli(home, "checkpoint", "--json", "--out", str(out)))
    vkey = _cli(home, "checkpoint", "--vkey").strip()

    app = LedgerApp(Config.load(home))
    try:
        from ledger.transparency import b64

        cp = app.latest_checkpoint()
        rows = {r["kid"]: r for r in app.roster().state.rows()}
        assert vkey == app.log_vkey()
    finally:
        app.close()
    assert signed == {"origin": cp.checkpoint.origin, "size": cp.size, "root": b64(cp.root),
                      "note": cp.note, "witnesses": []}
    assert out.read_text() == cp.note
    assert rows[kid]["revoked_from"] and rows[rotated["new_kid"]]["revoked_from"]
    assert json.loads(event_id)["event_id"].count("/") == 1
    scoped = Caller(credential_id="t1", role="operator", subjects=frozenset({"u1"}))
    with opened_service(home, lazy=True) as svc:
        for call in (lambda: svc.rotate_key(scoped, "writer"),
                     lambda: svc.set_policy(scoped, {"enabled": True}),
                     lambda: svc.sign_checkpoint(scoped)):
            with pytest.raises(Forbidden):
                call()
