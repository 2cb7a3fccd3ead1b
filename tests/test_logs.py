"""Logs carry ids and counts, never memory content."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import structlog
from structlog.testing import capture_logs

from ledger.application import LedgerApp
from ledger.home import Config

from .conftest import run_cli


def test_adding_and_reading_atoms_logs_no_content(home: Path) -> None:
    marker = f"SECRET-{uuid.uuid4().hex}"
    with capture_logs() as logs:
        app = LedgerApp(Config.load(home))
        try:
            app.register_subject({"ref": "u1", "display_name": f"Name {marker}"})
            art = app.capture_artifact({"subject": "u1", "kind": "chat", "title": marker,
                                        "body": f"body {marker}"})
            atom = app.add_atom({"subject": "u1", "text": f"text {marker}", "gist": marker,
                                 "tags": [marker], "derivation": "observed",
                                 "artifact_ids": [str(art)]})
            new = app.correct_atom(str(atom), {"text": f"corrected {marker}", "reason": "r"})
            app.rehearse_atom(str(new))
            assert app.get_atom(new).text == f"corrected {marker}"
            app.history(str(new))
            app.destroy_data_key(atom, "erasure")
        finally:
            app.close()
    names = [entry["event"] for entry in logs]
    assert {"subject.registered", "artifact.captured", "atom.created", "atom.corrected",
            "atom.rehearsed", "data_key.destroyed"} <= set(names)
    assert marker not in repr(logs)
    assert all(str(atom) in repr(logs) for _ in [0])  # ids are logged


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
