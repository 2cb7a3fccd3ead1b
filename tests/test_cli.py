"""The `ledger` command: stdout data, stderr verdicts, exit codes, --json, clear errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import run_cli, snapshot


def test_full_flow_with_json(home: Path) -> None:
    h = ("--home", str(home))
    assert run_cli(*h, "subject", "add", "user_9f4e", "--name", "J. Miller", "--json").code == 0
    art = run_cli(*h, "artifact", "add", "--subject", "user_9f4e", "--kind", "chat",
                  "--ref", "art_101", "--body", "transcript", "--json")
    assert art.code == 0 and json.loads(art.out)["artifact_id"]
    add = run_cli(*h, "atom", "add", "--subject", "user_9f4e", "--text", "Prefers tea",
                  "--derivation", "inferred", "--artifact", "art_101", "--extractor", "m",
                  "--detail", "green tea=0.8", "--tag", "drinks", "--json")
    assert add.code == 0, add.err
    atom_id = json.loads(add.out)["atom_id"]
    shown = json.loads(run_cli(*h, "atom", "show", atom_id, "--json").out)
    assert shown["text"] == "Prefers tea" and shown["details"][0]["brightness"] == 0.8
    corr = run_cli(*h, "atom", "correct", atom_id, "--text", "Prefers coffee", "--json")
    assert corr.code == 0
    reh = run_cli(*h, "atom", "rehearse", json.loads(corr.out)["atom_id"], "--json")
    assert json.loads(reh.out)["rehearsal_count"] == 1
    hist = json.loads(run_cli(*h, "atom", "history", atom_id, "--json").out)
    assert [r["seq"] for r in hist] == sorted(r["seq"] for r in hist) and len(hist) == 4
    text = run_cli(*h, "atom", "history", atom_id)
    assert "atom.superseded.v1" in text.out
    v = run_cli(*h, "verify")
    assert v.code == 0 and v.out == "" and v.err.startswith("OK:")


def test_atom_add_prints_only_the_id(home: Path) -> None:
    run_cli("--home", str(home), "subject", "add", "u1")
    r = run_cli("--home", str(home), "atom", "add", "--subject", "u1", "--text", "t")
    assert r.code == 0 and len(r.out.strip()) == 36 and r.out.count("\n") == 1


@pytest.mark.parametrize(("args", "code", "message"), [
    (["atom", "add", "--subject", "u1", "--text", "t", "--derivation", "inferred"], 2,
     "Konshus provenance rule"),
    (["atom", "add", "--subject", "u1", "--text", "t", "--confidence", "1.5"], 2,
     "confidence: Input should be less than or equal to 1"),
    (["atom", "add", "--subject", "u1", "--text", "t", "--detail", "nobrightness"], 2,
     "must look like 'TEXT=BRIGHTNESS'"),
    (["atom", "add", "--subject", "u1", "--text", "t", "--valid-from", "yesterday"], 2,
     "is not an ISO 8601 date or time"),
    (["atom", "show", "00000000-0000-0000-0000-000000000000"], 2, "no atom"),
    (["atom", "add", "--subject", "u1"], 2, "Missing option"),
    (["subject", "add", "bad id with spaces"], 2, "ref: String should match pattern"),
    (["keys", "authorize", "x", "--role", "emperor"], 2, "unknown role"),
])
def test_bad_input_is_refused_clearly_and_changes_nothing(
        home: Path, args: list[str], code: int, message: str) -> None:
    run_cli("--home", str(home), "subject", "add", "u1")
    before = snapshot(home)
    r = run_cli("--home", str(home), *args)
    assert r.code == code
    assert message in r.err
    assert r.out == ""
    after = snapshot(home)
    assert after == before


def test_missing_home_is_an_environment_error(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LEDGER_HOME", raising=False)
    r = run_cli("verify")
    assert r.code == 3 and "no ledger home found" in r.err and "ledger init" in r.err


def test_home_found_upward_from_working_directory(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LEDGER_HOME", raising=False)
    monkeypatch.chdir(tmp_path)
    assert run_cli("init").code == 0
    sub = tmp_path / "a" / "b"
    sub.mkdir(parents=True)
    monkeypatch.chdir(sub)
    assert run_cli("verify").code == 0
    assert run_cli("init").code == 0  # a nested ledger is allowed where asked for
    assert run_cli("init").code == 2  # but never over an existing one


def test_init_refuses_bad_db_url_and_leaves_nothing(tmp_path: Path) -> None:
    r = run_cli("--home", str(tmp_path / "h"), "init", "--db", "mysql://x/y")
    assert r.code == 2 and "unsupported database URL" in r.err
    assert not (tmp_path / "h").exists()


def test_a_keystore_in_another_store_s_file_is_refused(tmp_path: Path) -> None:
    """The data keys never share a file with what they encrypt (`init --keystore` takes
    PostgreSQL URLs only): a config.toml edited to do it does not open, nothing written."""
    assert run_cli("--home", str(tmp_path / "h"), "init").code == 0
    config = tmp_path / "h" / "config.toml"
    config.write_text(config.read_text().replace('"keystore.sqlite"', '"events.sqlite"'))
    before = {p.name: p.read_bytes() for p in (tmp_path / "h").glob("*.sqlite")}
    r = run_cli("--home", str(tmp_path / "h"), "subject", "add", "u1")
    assert r.code == 3 and "configured in events.sqlite" in r.err
    assert {p.name: p.read_bytes() for p in (tmp_path / "h").glob("*.sqlite")} == before


def test_unreachable_database_is_an_environment_error(tmp_path: Path) -> None:
    r = run_cli("--home", str(tmp_path / "h"), "init", "--db",
                "postgresql://postgres@127.0.0.1:1/none")
    assert r.code == 3 and "cannot open the event store" in r.err
    assert not (tmp_path / "h").exists()


def test_private_keys_are_0600_and_loose_permissions_refused(home: Path) -> None:
    for key in (home / "keys").glob("*.key"):
        assert key.stat().st_mode & 0o777 == 0o600
    (home / "keys" / "writer.key").chmod(0o644)
    r = run_cli("--home", str(home), "subject", "add", "u1")
    assert r.code == 3 and "chmod 600" in r.err


def test_console_script_runs(home: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "ledger", "--home", str(home), "verify", "--json"],
                       capture_output=True, text=True, check=False)
    assert r.returncode == 0 and json.loads(r.stdout)["ok"] is True


@pytest.mark.slow
def test_demo_runs_the_whole_flow(tmp_path: Path) -> None:
    """`make demo` runs this module: keep the README's first command true."""
    r = subprocess.run([sys.executable, "-m", "cli.demo", str(tmp_path / "demo")],
                       capture_output=True, text=True, check=False, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "OK: pack verified against the trusted root key" in r.stdout
    assert "nothing recalled" in r.stdout


def test_global_options_work_after_the_command_too(home: Path) -> None:
    """`--home`, `-q` and `-v` mean the same after a command's name as before it
    (issue 32), on every command that has no option of that name of its own."""
    from cli.main import _leaves, command

    for path, leaf in _leaves(command()):
        opts = {o for p in leaf.params for o in (*p.opts, *p.secondary_opts)}
        for wanted in (("--home",), ("-q", "--quiet"), ("-v", "--verbose")):
            assert opts & set(wanted), (path, wanted)
    h = str(home)
    assert run_cli("--home", h, "subject", "add", "u1").code == 0
    for args in (["--home", h, "-q", "memory", "list", "--subject", "u1"],
                 ["memory", "list", "--subject", "u1", "-q", "--home", h],
                 ["memory", "list", "--subject", "u1", "--verbose", "--home", h]):
        r = run_cli(*args)
        assert r.code == 0, (args, r.err)
        assert "No such option" not in r.err
