"""Start-up: `ledger --help` and `ledger --version` import typer and the command
declarations only (issue 15, ADR 0026); `ledger --help` builds no command's parameters, and
command-line values of plain types are converted without pydantic (issue 30, ADR 0060).
Timings are in benchmarks/startup.py; these tests check the causes, which do not depend on
how busy the machine is."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import run_cli

# Modules a command imports when it runs, never to show help or the version.
HEAVY = ("sqlalchemy", "pydantic", "psycopg", "cryptography", "nacl", "eventsourcing",
         "structlog", "jsonschema", "orjson", "rich", "sqlean", "hyperscan", "numpy",
         "ledger.application", "ledger.domain", "ledger.home", "ledger.transparency",
         "keys.keyring", "keys.keystore", "projections.service", "projections.runner",
         "governance.audit", "governance.erasure", "governance.pack", "governance.sweep",
         "governance.scan", "portability.service", "portability.konshus",
         "typer._adapters", "numpy", "wordllama", "fastapi", "starlette", "uvicorn", "mcp",
         "server", "service")


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


@pytest.mark.parametrize("args", [("--help",), ("--version",), ("-h",), ("atom", "--help"),
                                  ("redact-user", "--help"), ("import", "-h"),
                                  ("tokens", "create", "--help")])
def test_help_and_version_import_no_heavy_module(args: tuple[str, ...]) -> None:
    names = imported_modules(*args)
    heavy = sorted(n for n in names if any(n == h or n.startswith(h + ".") for h in HEAVY))
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
    for argv in (["atm", "add"], []):  # a typo, completion
        assert command(argv) is whole, argv
    assert {"atom", "verify", "import", "redact-user"} <= set(whole.commands)


def _leaf_params(group: Any) -> Iterator[Any]:
    for sub in getattr(group, "commands", {}).values():
        if getattr(sub, "commands", None) is not None:
            yield from _leaf_params(sub)
        else:
            yield from sub.params


def test_help_lists_every_command_without_building_their_parameters() -> None:
    """`ledger --help` (and `-h`) is built from the commands' names and help alone: no
    command's parameters are converted (ADR 0060); the listing is the whole tree's."""
    from cli.main import command

    listing, whole = command(["--help"]), command()
    assert command(["-h"]) is listing and listing is not whole
    assert list(listing.commands) == list(whole.commands)
    assert [p for p in _leaf_params(listing) if p.name not in ("home", "quiet", "verbose")] \
        == []
    assert len(list(_leaf_params(whole))) > 300


@pytest.mark.parametrize("columns", ["80", "120", "50"])
def test_help_is_the_whole_trees_help(columns: str) -> None:
    """Byte for byte what the whole command tree prints, at any terminal width."""
    code = ("import sys; from cli.main import command\n"
            "command(None if sys.argv[1] == 'whole' else ['--help'])"
            ".main(['--help'], prog_name='ledger')")
    env = {**os.environ, "COLUMNS": columns}
    outputs = [subprocess.run([sys.executable, "-c", code, which], capture_output=True,
                              text=True, env=env, timeout=60, check=False).stdout
               for which in ("whole", "listing")]
    assert outputs[0].startswith("Usage: ledger [OPTIONS] COMMAND [ARGS]...")
    assert outputs[0] == outputs[1]
    r = subprocess.run([sys.executable, "-m", "ledger", "--help"], capture_output=True,
                       text=True, env=env, timeout=60, check=False)
    assert r.returncode == 0 and r.stdout == outputs[0]


SAMPLES: dict[Any, list[Any]] = {
    str: ["abc", " a b ", "", "-", "ünï", "--x"],
    bool: [True, False, "true", "0", "maybe"],
    int: ["3", "-2", "+4", "007", "3.0", " 4", "x", "", "1_000", "99999999999999999999"],
    float: ["1.5", "2", "-0.25", "1e3", ".5", "5.", "abc", "nan", "inf", " 1", "1_0"],
    Path: ["a/b", ".", "", "-", "/", "no/such/file", "~/x"],
}


def _converted(runtime: Any, value: Any, param: Any, ctx: Any) -> tuple[str, Any]:
    from typer._click.exceptions import BadParameter  # typer's own copy of click

    try:
        return "ok", repr(runtime.coerce(value, param=param, ctx=ctx))
    except BadParameter as e:
        return "error", e.format_message()


def test_plain_values_convert_as_typer_does() -> None:
    """Every parameter the plain converter takes: the same value as typer's pydantic
    conversion, or the same error, for ordinary and odd inputs alike."""
    from typing import get_args, get_origin

    from cli import values
    from cli.main import command

    checked = 0
    whole = command()
    ctx = whole.make_context("ledger", [], resilient_parsing=True)
    for param in _leaf_params(whole):
        runtime = param.get_runtime_param()
        if not isinstance(runtime, values.PlainValue):
            continue
        annotation = param.type_descriptor.annotation
        item = get_args(annotation)[0] if get_origin(annotation) is list else annotation
        samples: list[Any] = [None, *SAMPLES[item]]
        if param.multiple or param.nargs == -1:
            samples = [None, (), *[(v,) for v in SAMPLES[item]], tuple(SAMPLES[item][:2])]
        for value in samples:
            assert _converted(runtime, value, param, ctx) == \
                _converted(values.typers(param), value, param, ctx), (param.name, value)
        checked += 1
    assert checked > 250  # nearly every parameter is plain


def test_the_benchmark_measures_every_command_of_the_readme_use_block() -> None:
    """benchmarks/startup.py reads its commands from the README's "Use" block: one per
    `ledger` call, those inside ``$( ... )`` and continued over lines included."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "startup.py"
    spec = importlib.util.spec_from_file_location("startup_benchmark", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    script = bench.use_block()
    names = bench.ledger_commands(script)
    calls = sum(line.lstrip().startswith("ledger ") + line.count("$(ledger ")
                for line in script.splitlines())
    assert len(names) == calls >= 30
    assert all(n.startswith("ledger ") for n in names)
    assert "ledger atom add --subject user_9f4e --ref atom_001 --text Prefers direct " \
           "feedback --derivation inferred --artifact art_101 --extractor claude-opus-4" \
           in names  # a command continued over two lines is one
    assert sum(n.startswith("ledger redact-user user_9f4e") for n in names) == 3
    block = "ledger init\nx=\"$(ledger a --json | jq .)\"\nledger b \\\n  --c d  # note\n"
    assert bench.ledger_commands(block) == ["ledger init", "ledger a --json", "ledger b --c d"]
