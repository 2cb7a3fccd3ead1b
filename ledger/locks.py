"""The ledger's named locks: one process at a time holds each, across processes.

``write`` serialises every signed command (``LedgerApp.writing``: head, clock, sign,
insert); ``sweep`` keeps a second ``ledger sweep`` from starting while one runs
(``governance/sweep.py``). Both are the same implementation:

* PostgreSQL: a session advisory lock on the event database, keyed by the first 8 bytes
  of SHA-256 of the ledger id (``write``) or ``<ledger id>/<name>`` (any other name),
  held on a connection of its own for the block.
* SQLite: ``flock`` on ``<home>/<name>.lock``.

Waiting is the default; with ``busy`` given, a lock another process holds raises it at
once instead (cron-safe).

On PostgreSQL a :class:`LockSession` keeps the lock's connection open between the blocks
of one holder (a ledger's write side takes its write lock once per command): connecting
cost the server a new backend process and the command a few milliseconds, a large share
of a small command's time.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import threading
from collections.abc import Iterator
from typing import Any

from ledger.home import Config

__all__ = ["LockSession", "held", "lock_key"]


def lock_key(ledger_id: str, name: str) -> int:
    """The PostgreSQL advisory-lock key of the lock ``name`` of a ledger."""
    text = ledger_id if name == "write" else f"{ledger_id}/{name}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big", signed=True)


def _connect(config: Config) -> Any:
    import psycopg

    env = config.events.eventsourcing_env()
    return psycopg.connect(
        dbname=env["POSTGRES_DBNAME"], host=env["POSTGRES_HOST"],
        port=int(env["POSTGRES_PORT"]), user=env["POSTGRES_USER"],
        password=env["POSTGRES_PASSWORD"] or None, autocommit=True)


def _lock(conn: Any, key: int, busy: Exception | None) -> None:
    if busy is None:
        conn.execute("SELECT pg_advisory_lock(%s)", (key,))
        return
    row = conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
    if not row or not row[0]:
        raise busy


class LockSession:
    """One holder's lock connection, kept open between its blocks (PostgreSQL).

    Never shared by two blocks at once: a session advisory lock is reentrant, so two
    holders on one connection would both get it. A block that finds the session in use
    (a nested hold), or in a process forked from its owner's, connects for itself as
    :func:`held` does without a session. A kept connection that the server closed in
    between (a restart, an idle timeout) is replaced once, before the lock is taken."""

    def __init__(self) -> None:
        self.conn: Any = None
        self.busy = False
        self.pid = os.getpid()
        self._claim = threading.Lock()

    def claim(self) -> bool:
        """Take the session for one block, if no block has it and this is its owner's
        process (one check and set, whatever the threads)."""
        with self._claim:
            if self.busy or self.pid != os.getpid():
                return False
            self.busy = True
            return True

    def connection(self, config: Config) -> Any:
        if self.conn is None or self.conn.closed:
            self.conn = _connect(config)
        return self.conn

    def close(self) -> None:
        """Close the kept connection (its owner closes): nothing of this holder stays
        connected to the database."""
        if self.conn is not None and self.pid == os.getpid():
            self.conn.close()
        self.conn = None


@contextlib.contextmanager
def _kept(config: Config, key: int, busy: Exception | None, session: LockSession
          ) -> Iterator[Any]:
    """The block of :func:`held` on a claimed session's connection; the session is
    free again after it."""
    import psycopg

    try:
        conn = session.connection(config)
        try:
            _lock(conn, key, busy)
        except psycopg.Error:
            died = conn.broken or conn.closed  # the server closed it in between
            session.close()
            if not died:
                raise
            conn = session.connection(config)
            _lock(conn, key, busy)
        except BaseException as e:
            if e is not busy:  # interrupted in the middle of its query: not kept
                session.close()
            raise
        try:
            yield conn
        finally:
            try:
                conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
            except psycopg.Error:
                session.close()  # its end released the lock with it
                raise
    finally:
        session.busy = False


@contextlib.contextmanager
def held(config: Config, name: str, busy: Exception | None = None,
         session: LockSession | None = None) -> Iterator[Any]:
    """Hold the lock ``name`` of this ledger for the block; wait for it, or raise
    ``busy`` at once when it is given and another process holds the lock. The block gets
    the lock's own connection on PostgreSQL (autocommit), ``None`` on SQLite.
    ``session``: the connection is kept there for the holder's next block."""
    if config.events.is_postgres:
        key = lock_key(config.ledger_id, name)
        if session is not None and session.claim():
            with _kept(config, key, busy, session) as conn:
                yield conn
            return
        with _connect(config) as conn:
            _lock(conn, key, busy)
            try:
                yield conn
            finally:
                conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
        return
    with open(config.home / f"{name}.lock", "a+b") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX if busy is None else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            assert busy is not None  # only a non-blocking flock says so
            raise busy from None
        try:
            yield None
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
