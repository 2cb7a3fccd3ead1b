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
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
from collections.abc import Iterator
from typing import Any

from ledger.home import Config

__all__ = ["held", "lock_key"]


def lock_key(ledger_id: str, name: str) -> int:
    """The PostgreSQL advisory-lock key of the lock ``name`` of a ledger."""
    text = ledger_id if name == "write" else f"{ledger_id}/{name}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big", signed=True)


@contextlib.contextmanager
def held(config: Config, name: str, busy: Exception | None = None) -> Iterator[Any]:
    """Hold the lock ``name`` of this ledger for the block; wait for it, or raise
    ``busy`` at once when it is given and another process holds the lock. The block gets
    the lock's own connection on PostgreSQL (autocommit), ``None`` on SQLite."""
    if config.events.is_postgres:
        import psycopg

        env = config.events.eventsourcing_env()
        key = lock_key(config.ledger_id, name)
        with psycopg.connect(
                dbname=env["POSTGRES_DBNAME"], host=env["POSTGRES_HOST"],
                port=int(env["POSTGRES_PORT"]), user=env["POSTGRES_USER"],
                password=env["POSTGRES_PASSWORD"] or None, autocommit=True) as conn:
            if busy is None:
                conn.execute("SELECT pg_advisory_lock(%s)", (key,))
            else:
                row = conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
                if not row or not row[0]:
                    raise busy
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
