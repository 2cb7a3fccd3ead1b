"""Logs carry ids and counts, never memory content: the use cases through the facade, and
the ``ledger`` command's JSON log lines."""

from __future__ import annotations

import uuid
from pathlib import Path
from uuid import UUID

import pytest
import structlog
from structlog.testing import capture_logs

from service.caller import local_operator
from service.models import ArtifactIn, AtomCorrectionIn, AtomIn, SubjectIn
from service.root import opened_service

from .conftest import run_cli


def test_adding_and_reading_atoms_logs_no_content(home: Path) -> None:
    marker = f"SECRET-{uuid.uuid4().hex}"
    op = local_operator()
    with capture_logs() as logs, opened_service(home, lazy=True) as svc:
        svc.register_subject(op, SubjectIn(ref="u1", display_name=f"Name {marker}"))
        art = svc.capture_artifact(op, ArtifactIn(subject="u1", kind="chat", title=marker,
                                                  body=f"body {marker}")).artifact_id
        atom = svc.add_atom(op, AtomIn(subject="u1", text=f"text {marker}", gist=marker,
                                       tags=[marker], derivation="observed",
                                       artifact_ids=[art], on_similar=None)).atom_id
        new = svc.correct_atom(op, atom, AtomCorrectionIn(text=f"corrected {marker}",
                                                          reason="r")).new_atom_id
        svc.rehearse_atom(op, new)
        assert svc.get_atom(op, new).text == f"corrected {marker}"
        svc.history(op, new)
        svc.app.destroy_data_key(UUID(atom), "erasure")  # an erasure's step (a whole one:
        # tests/test_erasure*.py)
    names = [entry["event"] for entry in logs]
    assert {"subject.registered", "artifact.captured", "atom.created", "atom.corrected",
            "atom.rehearsed", "data_key.destroyed"} <= set(names)
    assert marker not in repr(logs)
    assert atom in repr(logs)  # ids are logged


def test_cli_json_logs_have_no_content(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = f"SECRET-{uuid.uuid4().hex}"
    structlog.reset_defaults()
    import ledger.logs

    monkeypatch.setattr(ledger.logs, "_configured", False)
    monkeypatch.setenv("LEDGER_LOG_LEVEL", "debug")
    r1 = run_cli("--home", str(home), "subject", "add", "u1", "--name", marker)
    r2 = run_cli("--home", str(home), "atom", "add", "--subject", "u1", "--text", marker)
    r3 = run_cli("--home", str(home), "atom", "show", r2.out.strip())
    assert r1.code == r2.code == r3.code == 0
    err = r1.err + r2.err + r3.err
    assert '"event": "atom.created"' in err  # JSON log lines went to stderr
    assert marker not in err
    assert marker in r3.out  # content only where the user asked for it: stdout of `show`
    structlog.reset_defaults()
    monkeypatch.setattr(ledger.logs, "_configured", False)
    ledger.logs.configure()  # back to JSON on stderr for the tests that follow
