"""Shared fixtures. Every storage test runs on SQLite and on PostgreSQL.

PostgreSQL is required, not optional: ``.ci/run`` starts the server on
127.0.0.1:5432 and the tests fail (never skip) when it is not reachable.
Each test gets its own schema, dropped afterwards.
"""

from __future__ import annotations

import io
import os
import uuid
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from ledger.application import LedgerApp
from ledger.cli import main
from ledger.home import Config

os.environ.setdefault("LEDGER_LOG_LEVEL", "debug")  # so capture_logs() sees every line
PG_URL = os.environ.get("LEDGER_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
BACKENDS = ["sqlite", "postgres"]


def pg_connect() -> psycopg.Connection:
    from sqlalchemy.engine import make_url

    u = make_url(PG_URL)
    return psycopg.connect(dbname=u.database, host=u.host, port=u.port or 5432,
                           user=u.username, password=u.password, autocommit=True)


def drop_schema(schema: str) -> None:
    with pg_connect() as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@dataclass
class CliResult:
    code: int
    out: str
    err: str


def run_cli(*args: str) -> CliResult:
    """Run ``ledger`` in-process with the exit code, stdout and stderr it produced."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(args))
    return CliResult(code, out.getvalue(), err.getvalue())


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def db_url(backend: str) -> Iterator[str | None]:
    if backend == "sqlite":
        yield None
        return
    schema = f"t_{uuid.uuid4().hex[:12]}"
    yield f"{PG_URL}?schema={schema}"
    drop_schema(schema)


@pytest.fixture
def home(tmp_path: Path, db_url: str | None, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("LEDGER_NOW", raising=False)
    monkeypatch.delenv("LEDGER_HOME", raising=False)
    path = tmp_path / "home"
    LedgerApp.initialize(path, db=db_url)
    return path


@pytest.fixture
def other_home(tmp_path: Path, backend: str) -> Iterator[Path]:
    """A second, independent ledger on the same backend."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    path = tmp_path / "other-home"
    LedgerApp.initialize(path, db=None if backend == "sqlite" else f"{PG_URL}?schema={schema}")
    yield path
    if backend != "sqlite":
        drop_schema(schema)


@pytest.fixture
def app(home: Path) -> Iterator[LedgerApp]:
    a = LedgerApp(Config.load(home))
    yield a
    a.close()


def files_under(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()]


def snapshot(folder: Path) -> dict[str, bytes]:
    """Byte-for-byte contents of every file below ``folder`` (for 'nothing changed')."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in files_under(folder)}


class RawStore:
    """Direct access to the event table, as an attacker with database access has it."""

    def __init__(self, home: Path) -> None:
        self.config = Config.load(home)
        self.pg = self.config.events.is_postgres
        self.schema = self.config.events.schema

    def _conn(self):  # type: ignore[no-untyped-def]
        if self.pg:
            return pg_connect()
        import sqlite3

        return sqlite3.connect(self.config.events.sqlite_path, isolation_level=None)

    @property
    def table(self) -> str:
        return f'"{self.schema}".ledger_events' if self.pg else "stored_events"

    @property
    def pos(self) -> str:
        return "notification_id" if self.pg else "rowid"

    def _q(self, sql: str) -> str:
        return sql.replace("?", "%s") if self.pg else sql

    def rows(self) -> list[tuple[int, str, int, str, bytes]]:
        with self._conn() as conn:
            cur = conn.execute(
                f"SELECT {self.pos}, originator_id, originator_version, topic, state "
                f"FROM {self.table} ORDER BY {self.pos}")
            return [(int(r[0]), str(r[1]), int(r[2]), str(r[3]), bytes(r[4]))
                    for r in cur.fetchall()]

    def set_state(self, position: int, state: bytes) -> None:
        with self._conn() as conn:
            conn.execute(self._q(f"UPDATE {self.table} SET state=? WHERE {self.pos}=?"),
                         (state, position))

    def delete(self, position: int) -> None:
        with self._conn() as conn:
            conn.execute(self._q(f"DELETE FROM {self.table} WHERE {self.pos}=?"), (position,))

    def swap(self, a: int, b: int) -> None:
        """Exchange the events stored at two log positions (a reordering attack)."""
        rows = {r[0]: r for r in self.rows()}
        ra, rb = rows[a], rows[b]
        with self._conn() as conn:
            upd = self._q(f"UPDATE {self.table} SET originator_id=?, originator_version=?, "
                          f"topic=?, state=? WHERE {self.pos}=?")
            oid = (lambda v: uuid.UUID(v)) if self.pg else (lambda v: v)
            conn.execute(upd, (oid(str(uuid.uuid4()) if self.pg else uuid.uuid4().hex), -1,
                               ra[3], ra[4], a))
            conn.execute(upd, (oid(ra[1]), ra[2], ra[3], ra[4], b))
            conn.execute(upd, (oid(rb[1]), rb[2], rb[3], rb[4], a))

    def insert(self, originator_id: str, version: int, topic: str, state: bytes) -> None:
        with self._conn() as conn:
            if self.pg:
                conn.execute(
                    f"INSERT INTO {self.table} (originator_id, originator_version, topic, state)"
                    " VALUES (%s, %s, %s, %s)", (uuid.UUID(originator_id), version, topic, state))
            else:
                conn.execute(f"INSERT INTO {self.table} VALUES (?,?,?,?)",
                             (uuid.UUID(originator_id).hex, version, topic, state))


@pytest.fixture
def raw(home: Path) -> RawStore:
    return RawStore(home)
