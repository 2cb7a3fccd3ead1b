"""The facade scopes every use case by its caller, once for every surface (ADR 0027):
a caller whose role or subjects do not cover an act is refused before anything is read
or written, and sees another's item as unknown (moved here from the retired
tests/test_cli_facade*.py, issue 32)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger.errors import NotFound
from service.caller import Caller, local_operator
from service.facade import Forbidden
from service.root import create_home, opened_service

from .conftest import run_cli
from .facade_seed import seed


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("LEDGER_HOME", raising=False)
    monkeypatch.delenv("LEDGER_NOW", raising=False)
    path = tmp_path / "home"
    create_home(path)
    seed(path, subjects=["u1", "u2"],
         atoms=[{"subject": "u1", "text": "fact", "ref": "a1"},
                {"subject": "u2", "text": "other", "ref": "a2"}])
    assert run_cli("--home", str(path), "checkpoint").code == 0
    return path


def test_ledger_wide_acts_are_refused_to_a_scoped_caller(home: Path, tmp_path: Path) -> None:
    auditor = Caller(credential_id="t1", role="auditor", subjects=frozenset({"u1"}))
    operator = Caller(credential_id="t2", role="operator", subjects=frozenset({"u2"}))
    assistant = Caller(credential_id="t3", role="assistant")
    with opened_service(home, lazy=True) as svc:
        head = svc.verify_log(local_operator()).as_json()["head_seq"]
        first = svc.history(local_operator(), "a1")[0].event_id
        proof = svc.prove_inclusion(local_operator(), first)
        assert proof["tree_size"] == head
        assert not svc.proj_opened  # verifying and proving need no read model
        for call in (lambda: svc.prove_inclusion(auditor, first),
                     lambda: svc.rotate_key(operator, "writer"),
                     lambda: svc.set_policy(operator, {"enabled": True}),
                     lambda: svc.sign_checkpoint(operator),
                     lambda: svc.probe_reach(operator, "a1"),
                     lambda: svc.check_policy(operator),
                     lambda: svc.sweep(operator, dry_run=True),
                     lambda: svc.rebuild_read_models(assistant),
                     lambda: svc.read_models_status(assistant),
                     lambda: svc.export_file(assistant, "konshus", tmp_path / "a.json", "u1"),
                     lambda: svc.import_file(assistant, tmp_path / "a.json", "konshus")):
            with pytest.raises(Forbidden):
                call()
        assert not (tmp_path / "a.json").exists()
        assert svc.verify_log(local_operator()).as_json()["head_seq"] == head  # nothing signed


def test_a_scoped_caller_sees_its_own_subjects_and_another_s_atom_as_unknown(
        home: Path) -> None:
    from ledger import clock

    scoped = Caller(credential_id="t1", role="operator", subjects=frozenset({"u2"}))
    with opened_service(home, lazy=True) as svc:
        assert [v["subject"]["ref"] for v in svc.state_views(scoped, None, clock.now())] \
            == ["u2"]
        assert {r.subject_id for r in svc.list_memories(scoped, "u2")} == \
            {svc.subject_id(local_operator(), "u2")}
        atom = svc.get_atom(local_operator(), "a1").atom_id
        with pytest.raises(NotFound):
            svc.inspect_memory(scoped, atom)
        assert svc.inspect_memory(local_operator(), atom)["atom_id"] == atom
