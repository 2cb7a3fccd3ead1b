"""The write lock's connection kept between commands (ledger/locks.py, LockSession).

On PostgreSQL a ledger's write side holds its write lock on one connection from command
to command instead of connecting for each: the lock still excludes every other holder
between and during commands, a nested hold never shares the connection (a session
advisory lock is reentrant), a connection the server closed in between is replaced, and
closing the ledger leaves nothing of it connected. On SQLite the session changes nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger import locks
from ledger.application import LedgerApp
from ledger.errors import ConflictError
from ledger.home import Config

from .conftest import pg_connect


def _backend_pid(conn: object) -> int:
    return int(conn.execute("SELECT pg_backend_pid()").fetchone()[0])  # type: ignore[attr-defined]


def _connected(pid: int) -> bool:
    with pg_connect() as c:
        row = c.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s",
                        (pid,)).fetchone()
    return bool(row and row[0])


def test_commands_keep_one_lock_connection_and_the_lock_still_excludes(
        home: Path, backend: str) -> None:
    config = Config.load(home)
    busy = ConflictError("busy")
    app = LedgerApp(config)
    try:
        app.register_subject({"ref": "u1"})
        session = app._lock_session
        if backend == "sqlite":
            app.add_atom({"subject": "u1", "text": "Has a cat named Mochi"})
            assert session.conn is None  # flock: no connection to keep
            return
        first = session.conn
        assert first is not None and not first.closed
        pid = _backend_pid(first)
        ids = [app.add_atom({"subject": "u1", "text": text})
               for text in ("Has a cat named Mochi", "Lives in Oslo")]
        assert session.conn is first and _backend_pid(first) == pid and not session.busy

        # between commands the kept connection holds no lock: another holder gets it
        with locks.held(config, "write", busy=busy):
            pass
        # during a block, nobody else does: another process's hold, and a nested hold
        # on the same session, which must not ride on the same (reentrant) session
        with locks.held(config, "write", session=session) as conn:
            assert conn is first and session.busy
            with pytest.raises(ConflictError, match="busy"):
                with locks.held(config, "write", busy=busy):
                    pass
            with pytest.raises(ConflictError, match="busy"):
                with locks.held(config, "write", busy=busy, session=session):
                    pass
        assert not session.busy

        # the server ends the kept connection between two commands: replaced, once
        with pg_connect() as c:
            c.execute("SELECT pg_terminate_backend(%s)", (pid,))
        ids.append(app.add_atom({"subject": "u1", "text": "Plays the violin"}))
        assert session.conn is not first and not session.conn.closed
        new_pid = _backend_pid(session.conn)
        assert new_pid != pid and _connected(new_pid)
        assert [app.reader.get_atom(a).text for a in ids] == [
            "Has a cat named Mochi", "Lives in Oslo", "Plays the violin"]
    finally:
        app.close()
    if backend == "postgresql":
        assert session.conn is None and not _connected(new_pid)
