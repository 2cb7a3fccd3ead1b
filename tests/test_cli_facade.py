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
