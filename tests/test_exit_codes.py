"""One exit-code table for every command (README "Exit codes", ledger/errors.py):

    0 ok · 1 verification failed · 2 usage (the command as typed cannot run: unknown
    option, missing or bad value, a named file that is missing or unreadable, an unknown
    id) · 3 environment (no ledger home, unusable keys or database)

The test walks the command tree itself, so a command added later is checked too.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cli.main import command

from .conftest import run_cli, snapshot


def _walk(group: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    for name, sub in sorted(group.commands.items()):
        if getattr(sub, "commands", None) is not None:
            yield from _walk(sub, (*prefix, name))
        else:
            yield (*prefix, name), sub


LEAVES = dict(_walk(command()))
# Commands that work on files and public keys alone, or on a witness's own home, or make
# a new home (init, restore).
NO_HOME = {("init",), ("restore",), ("verify-pack",), ("tenants", "init"),
           *(p for p in LEAVES if p[0] == "audit-tools"),
           *(p for p in LEAVES if p[0] == "witness" and p[1] not in ("use", "forget",
                                                                        "policy"))}
VALUES = {"mode": "soft", "fmt": "konshus", "kind": "fact", "role": "operator",
          "action": "dismiss", "as_of": "2026-01-01", "operator": "operator", "query": "tea",
          "url": "http://127.0.0.1:9"}


def ids(path: tuple[str, ...]) -> str:
    return " ".join(path)


def test_the_walk_sees_every_command() -> None:
    assert len(LEAVES) > 40
    assert ("atom", "add") in LEAVES and ("redact-user",) in LEAVES


@pytest.mark.parametrize("path", sorted(LEAVES), ids=ids)
def test_unknown_option_is_a_usage_error(path: tuple[str, ...]) -> None:
    r = run_cli(*path, "--no-such-option")
    assert r.code == 2, r
    assert "No such option" in r.err and "--no-such-option" in r.err


@pytest.mark.parametrize("path", sorted(p for p, c in LEAVES.items()
                                        if any(x.required for x in c.params)), ids=ids)
def test_missing_required_value_is_a_usage_error(path: tuple[str, ...]) -> None:
    r = run_cli(*path)
    assert r.code == 2, r
    assert "Missing" in r.err


EXTRA = {("prove",): ["x/1"]}  # one of EVENT_ID or --consistency is required


def _required_args(path: tuple[str, ...], cmd: Any, tmp: Path) -> list[str]:
    args: list[str] = list(EXTRA.get(path, []))
    existing = tmp / "input.json"
    existing.write_text("{}")
    for p in cmd.params:
        if not p.required:
            continue
        is_path = getattr(p.type_descriptor.annotation, "__name__", "") == "Path"
        value = VALUES.get(p.name, "x")
        if is_path:
            value = str(tmp / "new-output") if p.name == "out" else str(existing)
        args += [value] if not p.opts[0].startswith("-") else [p.opts[0], value]
    return args


@pytest.mark.parametrize("path", sorted(set(LEAVES) - NO_HOME), ids=ids)
def test_no_ledger_home_is_an_environment_problem(path: tuple[str, ...], tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LEDGER_HOME", raising=False)
    monkeypatch.chdir(tmp_path)  # no .ledger/ upward either
    missing = tmp_path / "no-home"
    args = _required_args(path, LEAVES[path], tmp_path)
    if path == ("witness", "use"):  # a well-formed key, so that only the home is missing
        w = run_cli("witness", "init", "--home", str(tmp_path / "w"), "--name", "w.example")
        assert w.code == 0, w
        args[args.index("--key") + 1] = w.out.strip().splitlines()[-1]
    r = run_cli("--home", str(missing), *path, *args)
    assert r.code == 3, r
    assert "not a ledger home" in r.err and "hint:" in r.err
    assert not missing.exists()


# --------------------------------------------------------------- with a real ledger home
@pytest.fixture(scope="module")
def kept(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("codes") / "home"
    assert run_cli("--home", str(home), "init").code == 0
    assert run_cli("--home", str(home), "subject", "add", "u1").code == 0
    assert run_cli("--home", str(home), "atom", "add", "--subject", "u1", "--ref", "a1",
                   "--text", "Likes tea").code == 0
    assert run_cli("--home", str(home), "projections", "rebuild").code == 0  # caught up
    return home


MISSING = "/nonexistent/file"
MISSING_FILE_CASES = [
    ("verify", "--root-key", MISSING), ("verify", "--checkpoint", MISSING),
    ("verify", "--since", MISSING), ("prove", "--consistency", MISSING),
    ("verify-pack", MISSING), ("import", MISSING, "--format", "konshus"),
    ("import", "{file}", "--format", "konshus", "--trust", MISSING),
    ("artifact", "add", "--subject", "u1", "--kind", "chat", "--body-file", MISSING),
    ("keys", "authorize", "k2", "--role", "writer", "--public-key", MISSING),
    ("policy", "set", MISSING),
    ("audit-tools", "verify-checkpoint", MISSING, "--key", "{pub}"),
    ("audit-tools", "verify-checkpoint", "{note}", "--key", MISSING),
    ("audit-tools", "verify-inclusion", MISSING, "--key", "{pub}"),
    ("audit-tools", "verify-consistency", MISSING, "--key", "{pub}"),
    ("verify-pack", "{note}", "--root-key", MISSING),
]


@pytest.mark.parametrize("args", MISSING_FILE_CASES, ids=" ".join)
def test_a_named_file_that_is_missing_is_a_usage_error(kept: Path, tmp_path: Path,
                                                       args: tuple[str, ...]) -> None:
    note = tmp_path / "kept.checkpoint"
    r = run_cli("--home", str(kept), "checkpoint", "--out", str(note))
    assert r.code == 0, r
    doc = tmp_path / "doc.json"
    doc.write_text("{}")
    fill = {"{pub}": str(kept / "keys" / "log.pub"), "{note}": str(note), "{file}": str(doc)}
    before = snapshot(kept)
    r = run_cli("--home", str(kept), *[fill.get(a, a) for a in args])
    assert r.code == 2, r
    assert MISSING in r.err
    assert snapshot(kept) == before  # refused: nothing written


UNKNOWN_ID_CASES = [
    ("atom", "show", "nope"), ("atom", "history", "nope"),
    ("atom", "correct", "nope", "--text", "x"), ("atom", "rehearse", "nope"),
    ("atom", "expire", "nope"), ("subject", "show", "nope"), ("artifact", "show", "nope"),
    ("redact", "nope", "--mode", "soft", "--reason", "r"),
    ("unredact", "nope", "--reason", "r"), ("delete", "nope", "--reason", "r"),
    ("artifact", "delete", "nope", "--reason", "r"),
    ("redact-user", "nope", "--reason", "r", "--operator", "operator"),
    ("review", "resolve", "nope", "--action", "dismiss"),
    ("recall", "tea", "--subject", "nope"), ("memory", "inspect", "nope"),
    ("export", "--format", "konshus", "--subject", "nope", "--out", "{out}"),
    ("keys", "revoke", "ed25519:nope"),
    ("atom", "add", "--subject", "nope", "--text", "x"),
    ("tokens", "revoke", "tok_0000000000000000"), ("tokens", "revoke", "nope"),
]


@pytest.mark.parametrize("args", UNKNOWN_ID_CASES, ids=" ".join)
def test_an_unknown_id_is_a_usage_error(kept: Path, tmp_path: Path,
                                        args: tuple[str, ...]) -> None:
    before = snapshot(kept)
    r = run_cli("--home", str(kept), *[str(tmp_path / "out.json") if a == "{out}" else a
                                       for a in args])
    assert r.code == 2, r
    assert r.err.startswith("error: ") and "Traceback" not in r.err
    assert snapshot(kept) == before or args[0] in ("recall",)  # recall may catch up


REFUSED_INPUT_CASES = [
    ("tokens", "create", "t", "--role", "admin"),
    ("tokens", "create", "t", "--role", "assistant", "--expires", "soon"),
    ("tokens", "create", "t", "--role", "assistant", "--expires", "2001-01-01"),
    ("tokens", "create", "t", "--role", "assistant", "--key", "operator"),
    ("tokens", "create", "t", "--role", "operator", "--key", "nope"),
]


@pytest.mark.parametrize("args", REFUSED_INPUT_CASES, ids=" ".join)
def test_input_refused_by_a_rule_is_a_usage_error(kept: Path, args: tuple[str, ...]) -> None:
    before = snapshot(kept)
    r = run_cli("--home", str(kept), *args)
    assert r.code == 2, r
    assert "error: " in r.err and "hint: " in r.err and "Traceback" not in r.err
    assert snapshot(kept) == before  # refused: nothing written


def test_a_private_key_missing_here_is_an_environment_problem(kept: Path) -> None:
    before = snapshot(kept)
    for args in (("keys", "rotate", "nope"), ("subject", "add", "u2", "--as", "nope")):
        r = run_cli("--home", str(kept), *args)
        assert r.code == 3, r
        assert "no private key named 'nope'" in r.err
    assert snapshot(kept) == before


def test_verification_failure_exits_1(kept: Path, tmp_path: Path) -> None:
    bad = tmp_path / "pack.zip"
    bad.write_bytes(b"not a zip")
    r = run_cli("verify-pack", str(bad))
    assert r.code == 1, r
    assert r.err.startswith("FAIL: ")
