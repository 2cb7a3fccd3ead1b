"""Issue 20, item 2: a reader in another process never crashes or corrupts an erasure,
and one that holds a read transaction open makes it wait, then stop, naming the file.

While `redact-user` erases a subject of 120 atoms, a second process reads
``events.sqlite``, ``keystore.sqlite`` and ``projections.sqlite`` in a loop: ``mode=ro``
connections that query them, and online backups (what the sqlite3 shell's ``.backup``
does). Before the fix the raw scan opened and closed the SQLite files in the erasing
process, which dropped that process's POSIX locks; a reader then reset the ``-shm`` it
had mapped (SIGBUS) or saw a malformed image. Ten runs: each erasure completes, every
database passes ``integrity_check``, the ledger verifies, the reader saw no error.

A reader that holds a read transaction open (``BEGIN; SELECT ...``, as in the sqlite3
shell) keeps SQLite from checkpointing that file's write-ahead log; the erasure waits
the busy timeout, then stops with an error naming the file and how to finish, and the
same command, run once the reader has gone, completes the same request (ADR 0019).
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ledger.application import LedgerApp
from ledger.home import Config
from projections.service import Projections
from tests.conftest import run_cli
from tests.test_erasure_crash import ATOMS, CHILD, build, check_resumed, keystore_keys

READER = r"""
import sqlite3, sys, time, pathlib
home, stop, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3])
names = ["events.sqlite", "keystore.sqlite", "projections.sqlite"]
loops = errors = 0
last = ""
while not stop.exists():
    for name in names:
        try:
            c = sqlite3.connect(f"file:{home / name}?mode=ro", uri=True, timeout=10)
            c.execute("SELECT count(*) FROM sqlite_master").fetchone()
            tables = "SELECT name FROM sqlite_master WHERE type='table' LIMIT 3"
            for (t,) in c.execute(tables).fetchall():
                c.execute(f'SELECT count(*) FROM "{t}"').fetchone()
            if loops % 3 == 0:
                b = sqlite3.connect(str(out / f"{name}.bak"))
                c.backup(b)
                b.close()
            c.close()
        except sqlite3.OperationalError as e:  # busy/locked is a reader's lot; corruption is not
            if "malformed" in str(e) or "corrupt" in str(e):
                errors += 1
                last = str(e)
        except sqlite3.DatabaseError as e:
            errors += 1
            last = str(e)
    loops += 1
(out / "reader.json").write_text(f'{{"loops": {loops}, "errors": {errors}, "last": "{last}"}}')
"""


def integrity(path: Path) -> str:
    conn = sqlite3.connect(path)
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        conn.close()


@pytest.mark.slow
def test_erasure_with_a_reader_in_another_process(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    template = tmp_path / "template"
    build(template, None, ATOMS)
    env = {k: v for k, v in os.environ.items() if k not in ("LEDGER_NOW", "LEDGER_FAULT")}
    env["LEDGER_LOG_LEVEL"] = "warning"
    for run in range(10):
        home = tmp_path / f"home-{run}"
        shutil.copytree(template, home)
        out = tmp_path / f"reader-{run}"
        out.mkdir()
        stop = out / "stop"
        reader = subprocess.Popen([sys.executable, "-c", READER, str(home), str(stop),
                                   str(out)])
        try:
            time.sleep(0.3)  # the reader is in its loop
            erase = subprocess.run(
                [sys.executable, "-c", CHILD, "redact-user", "target", "--reason", "test",
                 "--operator", "operator", "--json"],
                env={**env, "LEDGER_HOME": str(home)}, capture_output=True, text=True,
                timeout=300, check=False)
        finally:
            stop.touch()
            reader.wait(timeout=60)
        assert erase.returncode == 0, (run, erase.returncode, erase.stderr[-2000:])
        assert json.loads(erase.stdout)["status"] == "completed"
        seen = json.loads((out / "reader.json").read_text())
        assert seen["errors"] == 0 and seen["loops"] > 0, (run, seen)
        for name in ("events.sqlite", "keystore.sqlite", "projections.sqlite"):
            assert integrity(home / name) == "ok", (run, name)
        monkeypatch.setenv("LEDGER_HOME", str(home))
        verify = run_cli("verify")
        assert verify.code == 0, (run, verify.err[-2000:])
        shutil.rmtree(home)
        shutil.rmtree(out)


HOLDER = r"""
import sqlite3, sys
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute("BEGIN")  # what `sqlite3 FILE` then `BEGIN; SELECT ...;` at its prompt does
c.execute("SELECT count(*) FROM sqlite_master").fetchone()  # the snapshot is taken
print("held", flush=True)
sys.stdin.read()  # held until the test closes this process's stdin
c.execute("COMMIT")
"""


BUSY_S = 3
"""The erasing process's ``keys.datakeys.BUSY_TIMEOUT_S`` (10 s) in the holder test: the
same wait and the same error, twice, in less time."""
WAITING_CHILD = f"import keys.datakeys as d; d.BUSY_TIMEOUT_S = {BUSY_S}; {CHILD}"


@pytest.mark.slow
def test_a_reader_holding_a_transaction_makes_the_erasure_wait_name_the_file_and_resume(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """For each SQLite file of the home, a second process holds a read transaction open
    on it during `redact-user`. The projections file and the keystore, which an erasure
    must checkpoint: the erasure waits (at least the busy timeout), then exits 3 with
    "could not settle FILE", what is left unsettled and how to finish it; the request
    stays open; once the reader has gone the same command completes the same request and
    leaves nothing (check_resumed: no key bytes, no erased text in any file, verify, the
    pack). The event store, which an erasure never checkpoints: no wait, no error."""
    monkeypatch.delenv("LEDGER_NOW", raising=False)
    atoms = 60
    template = tmp_path / "template"
    build(template, None, atoms)
    app = LedgerApp(Config.load(template))
    proj = Projections(app)
    proj.catch_up()  # the read models hold the content, as in any home in use
    proj.close()
    app.close()
    env = {k: v for k, v in os.environ.items() if k not in ("LEDGER_NOW", "LEDGER_FAULT")}
    env["LEDGER_LOG_LEVEL"] = "warning"
    for name in ("projections.sqlite", "keystore.sqlite", "events.sqlite"):
        home = tmp_path / f"home-{name}"
        shutil.copytree(template, home)
        known = keystore_keys(home)
        holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(home / name)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout is not None and holder.stdout.readline() == "held\n"
            t0 = time.monotonic()
            erase = subprocess.run(
                [sys.executable, "-c", WAITING_CHILD, "redact-user", "target", "--reason",
                 "test", "--operator", "operator", "--json"],
                env={**env, "LEDGER_HOME": str(home)}, capture_output=True, text=True,
                timeout=300, check=False)
            waited = time.monotonic() - t0
            assert holder.poll() is None  # the transaction was held throughout
        finally:
            assert holder.stdin is not None
            holder.stdin.close()  # the reader goes
            holder.wait(timeout=60)
        assert holder.returncode == 0
        if name == "events.sqlite":
            assert erase.returncode == 0, erase.stderr[-2000:]
            assert json.loads(erase.stdout)["status"] == "completed"
            assert "could not settle" not in erase.stderr
            shutil.rmtree(home)
            continue
        assert erase.returncode == 3, (name, erase.returncode, erase.stderr[-2000:])
        assert waited >= BUSY_S, (name, waited)
        assert "Traceback" not in erase.stderr
        app = LedgerApp(Config.load(home))
        try:
            from governance.requests import list_requests

            [row] = list_requests(app)
            assert row["status"] == "open"
        finally:
            app.close()
        left = "a destroyed data key's bytes" if name == "keystore.sqlite" else \
            "erased content may still be in the file's old pages"
        assert f"error: could not settle {name}: an open read transaction in another " \
               f"process" in erase.stderr, erase.stderr
        assert left in erase.stderr
        assert f"then run the same command again or `ledger requests resume " \
               f"{row['request_id']}`" in erase.stderr
        known.update(keystore_keys(home))
        data = check_resumed(tmp_path, home, name, atoms, known, monkeypatch)
        assert data["resumed"] and data["request_id"] == row["request_id"], name
