"""The read-side commands, mounted on a CLI the way ``ledger`` mounts them."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from datetime import timedelta
from pathlib import Path

import pytest
import typer

import ledger.logs
from cli.reads import register
from ledger.application import LedgerApp
from ledger.errors import LedgerError
from service.caller import Caller, local_operator
from service.facade import MemoryService
from service.root import opened_service

from .conftest import CliResult
from .test_projections_contract import T0, Clock


@pytest.fixture(autouse=True)
def _logs_on_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    """Log lines belong on stderr; re-apply the ledger's logging setup in case an earlier
    test left structlog at its defaults (which print to stdout)."""
    monkeypatch.setattr(ledger.logs, "_configured", False)
    ledger.logs.configure()


@pytest.fixture(autouse=True)
def _restore_the_ledger_cli_opener(monkeypatch: pytest.MonkeyPatch) -> None:
    """make_cli() mounts the commands with an opener of this test's home; put back the
    ``ledger`` command's own afterwards, or a later test's ``ledger memory list --home H``
    opens this test's (deleted) home and answers "no subject"."""
    import cli.reads

    monkeypatch.setattr(cli.reads.CONTEXT, "served", cli.reads.CONTEXT.served)


def make_cli(home: Path) -> typer.Typer:
    cli = typer.Typer(no_args_is_help=True, add_completion=False,
                      pretty_exceptions_enable=False)

    @contextmanager
    def served() -> Iterator[tuple[MemoryService, Caller]]:
        with opened_service(home, lazy=True) as svc:  # as cli/main.py's served()
            yield svc, local_operator()

    register(cli, served)
    return cli


def run(home: Path, *args: str) -> CliResult:
    """Run like ``cli.main.main``: errors become exit codes and a line on stderr."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            make_cli(home)(args=list(args), prog_name="ledger")
            code = 0
        except SystemExit as e:
            code = int(e.code or 0)
        except LedgerError as e:
            err.write(f"error: {e}\n")
            code = e.exit_code
    return CliResult(code, out.getvalue(), err.getvalue())


@pytest.fixture
def seeded(app: LedgerApp, home: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    clock = Clock(monkeypatch)
    app.register_subject({"ref": "u1"})
    old = app.add_atom({"subject": "u1", "ref": "job", "text": "Works at Acme",
                        "privacy_class": "staff-pii"})
    gone = app.add_atom({"subject": "u1", "text": "Secret hobby", "salience": 0.9})
    clock.tick(days=2)
    new = app.correct_atom(str(old), {"text": "Works at Beta as a manager"})
    app.destroy_data_key(gone, "erasure")
    clock.tick(days=1)
    return {"old": str(old), "new": str(new), "gone": str(gone)}


def test_status_and_rebuild(seeded: dict[str, str], home: Path) -> None:
    r = run(home, "projections", "status", "--json")
    assert r.code == 0, r.err
    assert {row["state"] for row in json.loads(r.out)} == {"stale"}
    assert "not current" in r.err
    r = run(home, "projections", "rebuild", "--json")
    assert r.code == 0, r.err
    data = json.loads(r.out)
    assert set(data["models"]) == {"atoms", "keyword", "vectors", "audit", "asof"}
    assert "OK: rebuilt 5 read model(s)" in r.err
    r = run(home, "projections", "rebuild", "keyword")
    assert r.code == 0 and r.out.startswith("keyword")
    r = run(home, "projections", "status")
    assert r.code == 0 and "OK: 5 read models at position" in r.err
    assert all(" current " in line for line in r.out.splitlines())
    r = run(home, "projections", "rebuild", "nonsense")
    assert r.code == 2 and "unknown read model nonsense" in r.err


def test_rebuild_shows_progress_on_a_terminal_only(seeded: dict[str, str], home: Path) -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    for args in (["projections", "rebuild"], ["projections", "rebuild", "--json"]):
        out, err = io.StringIO(), Terminal()
        with redirect_stdout(out), redirect_stderr(err):
            with pytest.raises(SystemExit) as exit_:
                make_cli(home)(args=args, prog_name="ledger")
        assert exit_.value.code in (0, None)
        if "--json" in args:  # --json: no bar, and stdout is pure JSON
            assert "Rebuilding" not in err.getvalue() and "%" not in err.getvalue()
            assert json.loads(out.getvalue())["head"] > 0
        else:
            assert "Rebuilding read models" in err.getvalue() and "100%" in err.getvalue()
    r = run(home, "projections", "rebuild")  # not a terminal: no bar
    assert "100%" not in r.err


def test_recall_rehearses_unless_told_not_to(seeded: dict[str, str], home: Path,
                                             app: LedgerApp) -> None:
    r = run(home, "recall", "where does she work", "--subject", "u1", "--json",
            "--no-rehearse")
    assert r.code == 0, r.err
    data = json.loads(r.out)["items"]  # the recalled memories (ADR 0051: an object)
    assert [d["atom_id"] for d in data] == [seeded["new"]]
    assert data[0]["rehearsed"] is False and data[0]["marker"] in ("recent, vivid", "vivid")
    assert {"atom_id", "text", "salience", "marker"} <= set(data[0])
    assert app.reader.get_atom(seeded["new"]).rehearsal_count == 0
    r = run(home, "recall", "where does she work", "--subject", "u1", "-k", "3",
            "--session", "sess:9")
    assert r.code == 0, r.err
    assert r.out.startswith("## What you remember")
    assert "Works at Beta as a manager" in r.out and "Acme" not in r.out
    assert "OK: recalled 1 of 1 matching memories; rehearsals recorded" in r.err
    assert app.reader.get_atom(seeded["new"]).rehearsal_count == 1
    r = run(home, "recall", "", "--subject", "u1")
    assert r.code == 2 and "query is empty" in r.err


def test_memory_list_and_inspect(seeded: dict[str, str], home: Path) -> None:
    r = run(home, "memory", "list", "--json")
    assert r.code == 0, r.err
    rows = {row["atom_id"]: row for row in json.loads(r.out)}
    assert rows[seeded["gone"]]["text"] == "[erased]"
    assert rows[seeded["old"]]["status"] == "superseded"
    r = run(home, "memory", "list", "--privacy-class", "staff-pii", "--subject", "u1")
    assert r.code == 0 and len(r.out.splitlines()) == 2  # the old atom and its correction
    r = run(home, "memory", "list", "--privacy-class", "nope")
    assert r.code == 2 and "unknown privacy class" in r.err
    r = run(home, "memory", "inspect", "job", "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["superseded_by"] == seeded["new"]
    r = run(home, "memory", "inspect", seeded["gone"])
    assert r.code == 0 and "text: [erased]" in r.out
    assert f"note: the content of atom {seeded['gone']} was erased" in r.err


def test_state_as_of_and_valid_at(seeded: dict[str, str], home: Path) -> None:
    t1 = (T0 + timedelta(days=1)).isoformat()
    r = run(home, "state", "--as-of", t1, "--subject", "u1", "--json")
    assert r.code == 0, r.err
    data = json.loads(r.out)
    # both were valid then; the one whose key was destroyed later reads as erased
    assert {a["atom_id"]: a["text"] for a in data["valid"]} == {
        seeded["old"]: "Works at Acme", seeded["gone"]: "[erased]"}
    assert data["not_valid"] == []
    r = run(home, "state", "--as-of", (T0 + timedelta(days=5)).isoformat(),
            "--valid-at", t1)
    assert r.code == 0, r.err
    assert "Works at Acme" in r.out and "\n2 fact(s) valid at" in r.out
    r = run(home, "state", "--as-of", "yesterday-ish")
    assert r.code == 2 and "--as-of" in r.err
