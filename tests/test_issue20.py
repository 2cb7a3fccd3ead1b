"""Issue 20, items 3, 4, 5, 7 and 8 (item 1: test_erasure_crash.py; item 2:
test_erasure_readers.py; item 6: test_portability_sealed_source.py, ``test_item6_*``).
Each test fails on the code before the issue's fixes (7571491)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from keys.roster import ROOT
from keys.signing import Signer
from ledger.application import LedgerApp
from ledger.home import Config
from rawfiles.bytescan import ByteMatcher
from tests.conftest import run_cli, snapshot

CHILD = "import sys; from cli.main import main; sys.exit(main(sys.argv[1:]))"


@pytest.fixture
def cli_home(home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LEDGER_HOME", str(home))
    monkeypatch.delenv("LEDGER_FAULT", raising=False)
    return home


def ok(*args: str) -> str:
    r = run_cli(*args)
    assert r.code == 0, (args, r.code, r.err[-1500:])
    return r.out


def files_with(home: Path, texts: list[str]) -> list[str]:
    forms = sorted({f.encode() for t in texts for f in (t, t.lower(), json.dumps(t)[1:-1])})
    m = ByteMatcher(forms)
    return [str(p.relative_to(home)) for p in sorted(home.rglob("*"))
            if p.is_file() and m.file_found(p)]


# ----------------------------------------------------------------------------- item 3
def test_item3_corrected_atom_with_gist_and_details_is_hard_erased(cli_home: Path) -> None:
    """`atom correct` copies gist and details into the new atom; a hard erasure of the
    old version completes (the copies are the correction's own content, ADR 0019),
    the old text is gone from every file, the new atom keeps its fields."""
    ok("subject", "add", "u1")
    old_id = json.loads(ok("atom", "add", "--subject", "u1", "--text",
                           "Lives at 12 Quarry Lane, Dunmore", "--gist",
                           "Home address on Quarry Lane", "--detail",
                           "Blue door beside the bakery=0.6", "--json"))["atom_id"]
    new = ok("atom", "correct", old_id, "--text", "Lives at 40 Harbour Road, Dunmore",
             "--reason", "moved", "--json")
    new_id = json.loads(new)["atom_id"]
    r = run_cli("redact", old_id, "--mode", "hard", "--reason", "old address",
                "--operator", "operator", "--json")
    assert r.code == 0, r.err[-1500:]
    data = json.loads(r.out)
    assert data["reach"]["kept_by_successor"] == {old_id: [new_id]}
    assert files_with(cli_home, ["Lives at 12 Quarry Lane, Dunmore"]) == []
    shown = json.loads(ok("atom", "show", new_id, "--json"))
    assert shown["gist"] == "Home address on Quarry Lane"
    assert shown["text"] == "Lives at 40 Harbour Road, Dunmore"
    assert run_cli("verify").code == 0
    pack = cli_home.parent / "pack3"
    ok("evidence-pack", data["batch_id"], "--out", str(pack))
    assert run_cli("verify-pack", str(pack)).code == 0


# ----------------------------------------------------------------------------- item 4
def test_item4_orphan_keys_are_discarded_not_a_permanent_refusal(cli_home: Path) -> None:
    """A key stored for an event that never committed (the window between the two
    commits of `subject add --name`, `atom add --ref` and an import) does not block the
    command for good: the next run discards it; `ledger repair` finds the others."""
    app = LedgerApp(Config.load(cli_home))
    try:
        from datetime import UTC, datetime

        at = datetime.now(UTC)
        app.datakeys.store({str(app.reader.subject_id("u1")): os.urandom(32),
                            str(app.reader.ref_id("atom", "a1")): os.urandom(32),
                            str(app.reader.subject_id("imp")): os.urandom(32),
                            "7f0c2f0e-6f41-4d55-9d56-0d4b1f3a0001": os.urandom(32)}, at)
    finally:
        app.close()
    ok("subject", "add", "u1", "--name", "Ann Orphan")
    ok("atom", "add", "--subject", "u1", "--ref", "a1", "--text", "An orphaned key's atom")
    app = LedgerApp(Config.load(cli_home))
    try:
        app.import_records([{"ref": "imp", "display_name": "Imported Person"}], [], [])
    finally:
        app.close()
    shown = json.loads(ok("subject", "show", "u1", "--json"))
    assert shown["display_name"] == "Ann Orphan"
    listed = json.loads(ok("repair", "--dry-run", "--json"))
    assert listed["orphan_keys"] == ["7f0c2f0e-6f41-4d55-9d56-0d4b1f3a0001"]
    assert json.loads(ok("repair", "--json"))["discarded"] == 1
    assert json.loads(ok("repair", "--json"))["orphan_keys"] == []
    assert run_cli("verify").code == 0


def test_item4_kill_between_keystore_and_event_commit(cli_home: Path) -> None:
    """The real window: `subject add --name` killed (SIGKILL) right after the keystore
    committed its key; the same command then succeeds."""
    env = {**os.environ, "LEDGER_FAULT": "keys-stored", "LEDGER_HOME": str(cli_home)}
    r = subprocess.run([sys.executable, "-c", CHILD, "subject", "add", "u9", "--name",
                        "Kim Killed"], env=env, capture_output=True, text=True, timeout=120,
                       check=False)
    assert r.returncode == -9, r.stderr[-1500:]
    ok("subject", "add", "u9", "--name", "Kim Killed")
    assert json.loads(ok("subject", "show", "u9", "--json"))["display_name"] == "Kim Killed"
    assert run_cli("verify").code == 0


# ----------------------------------------------------------------------------- item 5
def test_item5_foreign_root_key_is_refused_before_writing(cli_home: Path,
                                                          tmp_path: Path) -> None:
    """`keys authorize|revoke|rotate` with another ledger's root.key in the home: refused,
    nothing written (the key files and the databases are unchanged)."""
    other = tmp_path / "other"
    LedgerApp.initialize(other)
    mine = cli_home / "keys" / "root.key"
    saved = mine.read_bytes()
    shutil.copy(other / "keys" / "root.key", mine)
    before = snapshot(cli_home)
    for args in (("keys", "authorize", "auditor2", "--role", "auditor"),
                 ("keys", "rotate", "writer")):
        r = run_cli(*args)
        assert r.code == 2 and "not this ledger's root key" in r.err, (args, r.err)
    assert snapshot(cli_home) == before
    mine.write_bytes(saved)
    assert run_cli("verify").code == 0
    ok("keys", "authorize", "auditor2", "--role", "auditor")


def test_item5_bad_roster_event_gives_a_clear_error_not_recursion(cli_home: Path) -> None:
    """A roster event signed by a foreign key (appended by the old code): every command
    reports the bad event clearly (exit 1), never a RecursionError."""
    app = LedgerApp(Config.load(cli_home))
    try:
        foreign = Signer.generate("root")
        with app._write_lock():  # what the old `keys authorize` did with a foreign root.key
            seq, _ = app.reader.head()
            app.mapper.begin(foreign, seq + 1)  # type: ignore[attr-defined]
            try:
                roster = app.reader.roster()
                roster.authorize(Signer.generate("x").public_key, "x", "auditor",
                                 app.reader.head()[1], app.reader.head()[1])
                app.commit(roster)
            finally:
                app.mapper.end()  # type: ignore[attr-defined]
        assert ROOT == "root"
    finally:
        app.close()
    for args in (("keys", "list"), ("verify",)):
        r = run_cli(*args)
        assert r.code in (1, 3), (args, r.code, r.err[-800:])
        assert "RecursionError" not in r.err and "recursion" not in r.err.lower()
        assert "event" in r.err and ("verif" in r.err.lower() or "not in the roster" in r.err
                                     or "not the trusted root key" in r.err), r.err


# ----------------------------------------------------------------------------- item 7
def test_item7_reasons_sessions_sources_extractors_are_sealed(cli_home: Path) -> None:
    """Correction and erasure reasons, session ids, artifact sources and extractors are
    sealed; after `redact-user` none of them is in any file, nor in the pack's HTML."""
    ok("subject", "add", "u7")
    ok("artifact", "add", "--subject", "u7", "--ref", "art7", "--kind", "chat",
       "--source", "whatsapp:+44-7700-900777", "--body", "Chat body of Pria Vandermolen")
    aid = json.loads(ok("atom", "add", "--subject", "u7", "--text",
                        "Pria Vandermolen is allergic to shellfish", "--derivation",
                        "inferred", "--artifact", "art7", "--extractor",
                        "extractor-for-pria.vandermolen@example.org", "--session",
                        "session-of-pria-vandermolen", "--json"))["atom_id"]
    ok("atom", "correct", aid, "--text", "Pria Vandermolen is allergic to prawns",
       "--reason", "Pria Vandermolen phoned to correct it")
    secrets = ["whatsapp:+44-7700-900777", "extractor-for-pria.vandermolen@example.org",
               "session-of-pria-vandermolen", "Pria Vandermolen phoned to correct it",
               "Request by Pria Vandermolen, ref 7781"]
    r = run_cli("redact-user", "u7", "--reason", "Request by Pria Vandermolen, ref 7781",
                "--operator", "operator", "--json")
    assert r.code == 0, r.err[-1500:]
    batch = json.loads(r.out)["batch_id"]
    pack = cli_home.parent / "pack7"
    ok("evidence-pack", batch, "--out", str(pack))
    assert run_cli("verify-pack", str(pack)).code == 0
    assert files_with(cli_home, secrets) == []
    assert files_with(pack, secrets) == []
    assert "Pria" not in (pack / "report.html").read_text("utf-8")


# ----------------------------------------------------------------------------- item 8
def _erased(home: Path) -> str:
    ok("subject", "add", "u8")
    ok("atom", "add", "--subject", "u8", "--text", "Something to erase for item 8")
    out = json.loads(ok("redact-user", "u8", "--reason", "item 8", "--operator",
                        "operator", "--json"))
    return str(out["batch_id"])


def test_item8_writer_cannot_build_or_countersign_a_pack(cli_home: Path) -> None:
    batch = _erased(cli_home)
    before = snapshot(cli_home)
    pack = cli_home.parent / "pack8"
    r = run_cli("evidence-pack", batch, "--out", str(pack), "--as", "writer")
    assert r.code == 2 and "operator" in r.err
    assert not pack.exists() and snapshot(cli_home) == before
    ok("evidence-pack", batch, "--out", str(pack))
    signed = snapshot(pack)
    r = run_cli("evidence-pack", "sign", str(pack), "--as", "writer")
    assert r.code == 2 and snapshot(pack) == signed
    assert run_cli("verify-pack", str(pack)).code == 0


def test_item8_files_get_explicit_modes_under_umask_000(cli_home: Path) -> None:
    old = os.umask(0)
    try:
        batch = _erased(cli_home)
        ok("keys", "authorize", "auditor8", "--role", "auditor")
        pack = cli_home.parent / "pack8m"
        ok("evidence-pack", batch, "--out", str(pack), "--zip")
        cp = cli_home.parent / "kept.checkpoint"
        ok("checkpoint", "--out", str(cp))
        ok("evidence-pack", "sign", str(pack), "--as", "auditor8")
    finally:
        os.umask(old)
    written = [cli_home / "keys" / "auditor8.pub", cp, pack.with_suffix(".zip"), pack,
               *pack.rglob("*")]
    for p in written:
        mode = stat.S_IMODE(p.stat().st_mode)
        assert mode & 0o022 == 0, (str(p), oct(mode))
    assert stat.S_IMODE((cli_home / "keys" / "auditor8.key").stat().st_mode) == 0o600
