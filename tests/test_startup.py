"""Start-up: `ledger --help` and `ledger --version` import typer and the command
declarations only (issue 15, ADR 0026). Timings are in benchmarks/startup.py; this test
checks the cause, which does not depend on how busy the machine is."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import run_cli

# Modules a command imports when it runs, never to show help or the version.
HEAVY = ("sqlalchemy", "pydantic", "psycopg", "cryptography", "nacl", "eventsourcing",
         "structlog", "jsonschema", "orjson", "rich", "sqlean", "hyperscan", "numpy",
         "ledger.application", "ledger.domain", "ledger.home", "ledger.transparency",
         "keys.keyring", "keys.keystore", "projections.service", "projections.runner",
         "governance.audit", "governance.erasure", "governance.pack", "governance.sweep",
         "governance.scan", "ledger.portability.service", "ledger.portability.konshus")


def imported_modules(*args: str) -> set[str]:
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "ledger", *args],
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    names = set()
    for line in r.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip())
    assert "typer" in names  # the parse worked
    return names


# typer itself converts a group's options with pydantic and rich once a subcommand is
# named (`ledger atom --help`), so there those two are typer's cost, not ours.
TYPERS_OWN = ("pydantic", "rich")


@pytest.mark.parametrize("args", [("--help",), ("--version",), ("-h",), ("atom", "--help"),
                                  ("redact-user", "--help"), ("import", "-h"),
                                  ("tokens", "create", "--help")])
def test_help_and_version_import_no_heavy_module(args: tuple[str, ...]) -> None:
    names = imported_modules(*args)
    forbidden = HEAVY if len(args) == 1 else tuple(h for h in HEAVY if h not in TYPERS_OWN)
    heavy = sorted(n for n in names
                   if any(n == h or n.startswith(h + ".") for h in forbidden))
    assert heavy == [], f"`ledger {' '.join(args)}` imports {heavy}: import them inside " \
                        "the command function that uses them"


def test_version_prints_the_package_version() -> None:
    from importlib.metadata import version

    r = subprocess.run([sys.executable, "-m", "ledger", "--version"], capture_output=True,
                       text=True, timeout=60, check=False)
    assert r.returncode == 0
    assert r.stdout.strip() == f"ledger (memory-ledger) {version('memory-ledger')}"


def test_a_one_atom_add_imports_what_it_writes_with_only(tmp_path: Path) -> None:
    """A quick `ledger atom add --on-similar none` loads the application (SQLAlchemy,
    pydantic, eventsourcing ...) but not what only draws or serves: rich and pygments
    (structlog's coloured tracebacks), the read models, governance, the server. (Without
    it, atom add looks for similar memories in the read models first, ADR 0052.)"""
    home = str(tmp_path / "home")
    assert run_cli("--home", home, "init").code == 0
    assert run_cli("--home", home, "subject", "add", "u1").code == 0
    names = imported_modules("--home", home, "atom", "add", "--subject", "u1",
                             "--text", "Prefers tea.", "--on-similar", "none")
    assert "ledger.application" in names
    unwanted = ("pygments", "projections.service", "governance.erasure", "governance.audit",
                "fastapi", "jsonschema")  # and rich's modules ("rich" alone: a refused try)
    loaded = sorted(n for n in names if n.startswith("rich.")
                    or any(n == u or n.startswith(u + ".") for u in unwanted))
    assert loaded == [], f"a one-atom add imports {loaded}"


def test_a_command_line_builds_only_the_branch_it_names() -> None:
    from cli.main import command

    assert set(command(["--home", "atom", "verify", "--json"]).commands) == {"verify"}
    assert set(command(["-q", "atom", "add", "--subject", "u1"]).commands) == {"atom"}
    assert command(["--version"]).commands == {}
    whole = command()
    for argv in (["--help"], ["atm", "add"], ["-h"], []):  # help, a typo, completion
        assert command(argv) is whole, argv
    assert {"atom", "verify", "import", "redact-user"} <= set(whole.commands)
