"""Issue 20, item 2: a reader in another process never crashes or corrupts an erasure.

While `redact-user` erases a subject of 300 atoms, a second process reads
``events.sqlite``, ``keystore.sqlite`` and ``projections.sqlite`` in a loop: ``mode=ro``
connections that query them, and online backups (what the sqlite3 shell's ``.backup``
does). Before the fix the raw scan opened and closed the SQLite files in the erasing
process, which dropped that process's POSIX locks; a reader then reset the ``-shm`` it
had mapped (SIGBUS) or saw a malformed image. Ten runs: each erasure completes, every
database passes ``integrity_check``, the ledger verifies, the reader saw no error.
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

from tests.conftest import run_cli
from tests.test_erasure_crash import ATOMS, CHILD, build

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
