"""The keystore of data keys: one AES-256 key per atom, artifact or subject.

A separate database from the event store (SQLAlchemy Core; SQLite by default,
PostgreSQL when configured). Destroying a key is crypto-shredding: the row is
deleted with SQLite's ``secure_delete`` (freed bytes overwritten with zeros),
the write-ahead log is checkpointed and truncated, so no file keeps the key.
On PostgreSQL the table is rewritten with ``VACUUM FULL``; see ADR 0003 for
what PostgreSQL cannot promise (WAL archives, replicas, backups).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import sqlite3
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import sqlalchemy as sa
import structlog
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.pool import NullPool

from keys import aead
from keys.aead import new_data_key
from keys.errors import DataKeyUnavailable, KeystoreBlocked, KeystoreError
from keys.kek import UNWRAPPED_EPOCH, FileKekStore, KekRing, KekStore
from rawfiles.bytescan import ByteMatcher
from rawfiles.sqlitepages import scrub_pages, write_transaction

log = structlog.get_logger("keys")


STORE_SQLITE_ENV = "LEDGER_STORE_SQLITE"
"""``sqlean`` or ``sqlite3``: which SQLite library the projections database and the
keystore use (ADR 0012). Unset: sqlean (a newer SQLite) when installed, else the
standard library's."""


def store_sqlite() -> ModuleType:
    """The DB-API module for the projections database and the SQLite keystore.

    ``sqlean`` (the ``sqlean.py`` wheel: the standard ``sqlite3`` module built against a
    newer SQLite, 3.50) gives FTS5 ``secure-delete`` (3.44+), so an erasure does not
    have to merge the whole keyword index, and ``sqlite_dbpage``, through which the
    residue repairs of both files zero the unused bytes of single pages
    (rawfiles/sqlitepages.py, ADR 0012). The event store stays on the standard library: it
    is opened by ``eventsourcing`` through ``sqlite3``, and one file must never be
    opened through two SQLite libraries in one process (each keeps its own table of
    POSIX locks, so closing a file through one drops the locks the other holds; the
    configuration refuses a keystore in the event store's file).
    """
    choice = os.environ.get(STORE_SQLITE_ENV, "").strip().lower()
    if choice in ("sqlite3", "stdlib"):
        return sqlite3
    try:
        import sqlean  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        if choice == "sqlean":
            raise
        log.warning("store.sqlite_fallback", using=sqlite3.sqlite_version)
        return sqlite3
    return sqlean  # type: ignore[no-any-return,unused-ignore]


BUSY_TIMEOUT_S = 10
"""How long an SQLite connection of the ledger waits for a lock (``busy_timeout``): also
how long a ``wal_checkpoint(TRUNCATE)`` waits for readers in other processes to move on."""


def make_engine(url: str, schema: str | None = None, pooled: bool = False,
                module: ModuleType | None = None) -> Engine:
    """Create an engine; SQLite connections get WAL and ``secure_delete``.

    SQLite engines do not pool by default, so that no idle connection of this process is
    open when a key destruction truncates the WAL; ``pooled`` is for stores that never
    shred, and for the keystore, whose ``compact`` closes its pool first (ADR 0003).
    ``module`` is the SQLite DB-API module (default: the standard library's ``sqlite3``;
    the projections and the keystore pass :func:`store_sqlite`).
    """
    if url.startswith("sqlite"):
        dbapi = module or sqlite3
        kwargs: dict[str, Any] = {"module": dbapi}
        if not pooled:
            kwargs["poolclass"] = NullPool
        engine = sa.create_engine(url, **kwargs)
        busy_errors = tuple({sqlite3.OperationalError, dbapi.OperationalError})

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            # first: the next pragmas may wait
            cur.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_S * 1000}")
            _wal(cur, busy_errors)
            cur.execute("PRAGMA secure_delete=ON")
            cur.close()

        return engine
    engine = sa.create_engine(url, pool_pre_ping=True)
    if schema:
        with engine.begin() as conn:
            conn.execute(sa.text(f'CREATE SCHEMA IF NOT EXISTS "{schema}"'))
    return engine


def _wal(cur: Any, busy_errors: tuple[type[Exception], ...] = (sqlite3.OperationalError,),
         attempts: int = 100) -> None:
    """Put a new SQLite database in WAL mode. Two processes opening a new file at once
    race for the switch, and the loser gets SQLITE_BUSY at once (the busy handler does
    not cover a journal-mode change); it waits and looks again, since the winner's switch
    is all it needed."""
    for attempt in range(attempts):
        if cur.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal":
            return
        try:
            cur.execute("PRAGMA journal_mode=WAL")
            return
        except busy_errors:
            if attempt == attempts - 1:
                raise
            time.sleep(0.02)


REWRAP_BATCH = 20000
"""Data keys re-wrapped per transaction by a KEK rotation (benchmarks/kek.py: the rate
stops growing past about 20,000; a batch is a few MB of memory)."""
WRITER_MIN_KEYS = 50000


class _Writer:
    """The rotation's writer process on an SQLite keystore (keys/rewrap_writer.py): one
    batch in flight while the next is re-wrapped."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process
        self.in_flight = False

    @classmethod
    def start(cls, store: DataKeyStore) -> _Writer:
        import sys

        module = store_sqlite().__name__.split(".")[0]
        process = subprocess.Popen(  # noqa: S603 (this interpreter, our own module)
            [sys.executable, "-m", "keys.rewrap_writer", str(store.engine.url.database),
             module, str(BUSY_TIMEOUT_S * 1000)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True)
        return cls(process)

    def write(self, params: list[tuple[Any, ...]]) -> None:
        assert self.process.stdin is not None
        try:
            pickle.dump(params, self.process.stdin, protocol=pickle.HIGHEST_PROTOCOL)
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            raise KeystoreError("the keystore's rewrap writer process ended; run the "
                                "rotation again (it resumes)") from None
        self.in_flight = True

    def written(self) -> int:
        """Wait for the batch in flight (0 when none); raise if the writer failed."""
        if not self.in_flight:
            return 0
        self.in_flight = False
        assert self.process.stdout is not None
        try:
            status, value = pickle.load(self.process.stdout)  # noqa: S301 (our own child)
        except EOFError:
            raise KeystoreError("the keystore's rewrap writer process ended; run the "
                                "rotation again (it resumes)") from None
        if status != "ok":
            raise KeystoreError(f"re-wrapped keys could not be written: {value}; run the "
                                "rotation again (it resumes)")
        return int(value)

    def stop(self) -> None:
        with contextlib.suppress(BrokenPipeError, OSError):
            assert self.process.stdin is not None
            pickle.dump(None, self.process.stdin)
            self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


class DataKeyStore:
    """Create, fetch and destroy data keys. Keys are cached for this process only.

    A row holds its data key wrapped under the KEK of the epoch in its ``epoch`` column
    (``keys/kek.py``, ADR 0044); ``kek_epochs`` says which epochs exist, which one new
    keys are wrapped under (``active``), which are being left (``retiring``) and which
    KEKs are destroyed. Epoch 0 is a ledger made before wrapping: its rows hold the key
    as it is, until the first rotation wraps them.
    """

    def __init__(self, engine: Engine, schema: str | None = None,
                 keks: KekRing | None = None) -> None:
        self.engine = engine
        self.schema = schema
        self.keks = keks or KekRing(None)
        md = sa.MetaData(schema=schema)
        self.keys = sa.Table(
            "data_keys", md,
            sa.Column("key_id", sa.String(64), primary_key=True),
            sa.Column("key_material", sa.LargeBinary, nullable=False),
            sa.Column("created_at", sa.String(40), nullable=False),
            sa.Column("epoch", sa.Integer, nullable=False, server_default="0"),
        )
        self.epoch_table = sa.Table(
            "kek_epochs", md,
            sa.Column("epoch", sa.Integer, primary_key=True, autoincrement=False),
            sa.Column("store", sa.String(1000), nullable=False),
            sa.Column("state", sa.String(16), nullable=False),  # active|retiring|destroyed
            sa.Column("started_at", sa.String(40), nullable=False),
            sa.Column("destroyed_at", sa.String(40)),
        )
        self.destroyed = sa.Table(
            "destroyed_keys", md,
            sa.Column("key_id", sa.String(64), primary_key=True),
            sa.Column("destroyed_at", sa.String(40), nullable=False),
        )
        self.notes = sa.Table(  # sealed working notes of an erasure (ADR 0019)
            "sealed_notes", md,
            sa.Column("key_id", sa.String(64), primary_key=True),
            sa.Column("nonce", sa.LargeBinary, nullable=False),
            sa.Column("ct", sa.LargeBinary, nullable=False),
        )
        md.create_all(engine)
        self._add_epoch_column()
        self._statistics_off()
        table, ph = (engine.dialect.identifier_preparer.format_table(self.keys),
                     "?" if engine.dialect.paramstyle == "qmark" else "%s")
        self._insert_key_sql = (
            f"INSERT INTO {table} (key_id, key_material, created_at, epoch) "  # noqa: S608
            f"VALUES ({ph}, {ph}, {ph}, {ph})")
        self._rewrap_sql = (
            f"UPDATE {table} SET key_material = {ph}, epoch = {ph} "  # noqa: S608 (own table)
            f"WHERE key_id = {ph} AND epoch = {ph}")
        epochs = engine.dialect.identifier_preparer.format_table(self.epoch_table)
        self._active_sql = (f"SELECT epoch FROM {epochs} "  # noqa: S608 (own table)
                            "WHERE state = 'active'")
        self._cache: dict[str, bytes] = {}
        self._destroyed: dict[str, str] = {}  # destruction is final: safe to remember
        self._checks: list[tuple[list[bytes], Future[dict[Path, list[int]]]]] = []  # see settle()
        self._deferred: list[bytes] = []  # see destroy(defer=True), finish_deferred()
        self._stores: dict[int, str] | None = None  # epoch -> KEK store spec

    @property
    def is_sqlite(self) -> bool:
        return self.engine.dialect.name == "sqlite"

    def create_many(self, key_ids: Iterable[str], at: datetime) -> dict[str, bytes]:
        """Create fresh keys for new items, in one transaction."""
        new = self.generate(key_ids)
        self.store(new, at)
        return new

    @staticmethod
    def generate(key_ids: Iterable[str]) -> dict[str, bytes]:
        """Fresh keys for new items, not stored yet: :meth:`store` them before anything
        they encrypt is committed (``create_many`` does both)."""
        return {kid: new_data_key() for kid in key_ids}

    def store(self, new: dict[str, bytes], at: datetime) -> None:
        """Store keys made by :meth:`generate`, in one transaction; then they are cached."""
        if not new:
            return
        created = at.isoformat()
        try:
            with self.engine.begin() as conn:
                # the epoch read in the transaction that stores under it: a rotation
                # retires an epoch only when no row is left under it (ledger/epochs.py)
                epoch = self._active_epoch(conn)
                items = list(new.items())
                wrapped = self._wrap(epoch, items)
                # One executemany of plain tuples: a bulk append creates a key per atom, and
                # SQLAlchemy's per-row parameter processing cost more than the insert.
                conn.exec_driver_sql(self._insert_key_sql,
                                     [(k, w, created, epoch)
                                      for (k, _v), w in zip(items, wrapped, strict=True)])
        except sa.exc.IntegrityError as e:
            raise KeystoreError("a data key with one of these ids already exists") from e
        self._cache.update(new)

    def get(self, key_id: str) -> bytes:
        key = self._cache.get(key_id) or self.get_many([key_id]).get(key_id)
        if key is None:
            raise DataKeyUnavailable(self._why_missing(key_id))
        return key

    def get_many(self, key_ids: Iterable[str]) -> dict[str, bytes]:
        """Return the keys that exist; destroyed or unknown ids are absent."""
        wanted = [k for k in set(key_ids) if k not in self._cache and k not in self._destroyed]
        if wanted:
            with self.engine.connect() as conn:
                for i in range(0, len(wanted), 500):
                    chunk = wanted[i:i + 500]
                    rows = conn.execute(
                        sa.select(self.keys.c.key_id, self.keys.c.key_material,
                                  self.keys.c.epoch)
                        .where(self.keys.c.key_id.in_(chunk))
                    ).all()
                    self._cache.update(self._unwrap_rows(rows))
        return {k: self._cache[k] for k in key_ids if k in self._cache}

    # ------------------------------------------------------------------ epochs
    def _wrap(self, epoch: int, items: list[tuple[str, bytes]]) -> list[bytes]:
        if epoch == UNWRAPPED_EPOCH:
            return [v for _k, v in items]
        return self.keks.store_of(epoch, self.epoch_stores()).wrap(epoch, items)

    def _unwrap_rows(self, rows: Iterable[Any]) -> dict[str, bytes]:
        """``key_id -> data key`` for rows ``(key_id, stored bytes, epoch)``."""
        by_epoch: dict[int, list[tuple[str, bytes]]] = {}
        for key_id, material, epoch in rows:
            by_epoch.setdefault(int(epoch or 0), []).append((key_id, bytes(material)))
        out: dict[str, bytes] = {}
        for epoch, items in by_epoch.items():
            if epoch == UNWRAPPED_EPOCH:
                out.update(items)
                continue
            store = self.keks.store_of(epoch, self.epoch_stores())
            out.update(zip((k for k, _w in items), store.unwrap(epoch, items), strict=True))
        return out

    def _active_epoch(self, conn: Any) -> int:
        rows = conn.exec_driver_sql(self._active_sql).all()
        if len(rows) > 1:
            raise KeystoreError(f"the keystore names {len(rows)} active KEK epochs; run "
                                "`ledger keys rotate-kek` to finish the rotation")
        return int(rows[0][0]) if rows else UNWRAPPED_EPOCH

    def check_wrapping(self) -> None:
        """Raise what wrapping a new data key would raise now (the active epoch's KEK
        unreadable, say), writing nothing: a command can refuse before it touches any
        other store."""
        self._wrap(self.current_epoch(), [("probe", bytes(32))])

    def current_epoch(self) -> int:
        """The epoch new data keys are wrapped under (0: not wrapped, a ledger made before
        wrapping that was never rotated)."""
        with self.engine.connect() as conn:
            return self._active_epoch(conn)

    def epoch_rows(self) -> list[EpochRow]:
        """Every epoch the keystore knows, ascending."""
        t = self.epoch_table
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(t.c.epoch, t.c.store, t.c.state, t.c.started_at,
                                          t.c.destroyed_at).order_by(t.c.epoch)).all()
        return [EpochRow(int(r[0]), str(r[1]), str(r[2]), str(r[3]),
                         None if r[4] is None else str(r[4])) for r in rows]

    def epoch_stores(self) -> dict[int, str]:
        if self._stores is None:
            self._stores = {r.epoch: r.store for r in self.epoch_rows()}
        return self._stores

    def begin_epoch(self, epoch: int, store: str, at: datetime) -> None:
        """Make ``epoch`` the one new keys are wrapped under; the epoch active until now
        is ``retiring`` (its rows are re-wrapped by :meth:`rewrap`). Its KEK must exist
        in ``store`` already. Nothing when ``epoch`` is active already."""
        t = self.epoch_table
        with self.engine.begin() as conn:
            states = dict(conn.execute(sa.select(t.c.epoch, t.c.state)).all())
            if states.get(epoch) == "active":
                return
            if epoch in states or any(e > epoch for e in states):
                raise KeystoreError(f"KEK epoch {epoch} is not newer than every epoch the "
                                    "keystore knows")
            conn.execute(t.update().where(t.c.state == "active").values(state="retiring"))
            conn.execute(t.insert().values(epoch=epoch, store=store, state="active",
                                           started_at=at.isoformat()))
        self._stores = None

    def keys_under(self, epochs: Iterable[int]) -> int:
        """How many data keys are wrapped under these epochs (0: unwrapped)."""
        wanted = sorted(set(epochs))
        if not wanted:
            return 0
        with self.engine.connect() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(self.keys)
                                    .where(self.keys.c.epoch.in_(wanted))).scalar() or 0)

    def rewrap(self, epoch: int, batch: int | None = None,
               progress: Callable[[int], None] | None = None) -> int:
        """Re-wrap every data key not under ``epoch`` under it, ``batch`` keys per
        transaction (default :data:`REWRAP_BATCH`; resumable: each row carries its epoch).
        Returns how many moved.

        SQLite takes the rows in the file's order (``rowid``), so that a batch rewrites a
        run of neighbouring pages: in key order, each batch of random key ids rewrote
        most of the table's pages (benchmarks/kek.py measures the rate against the raw
        AES-GCM rate). The update names the key id and the old epoch too: a VACUUM by
        another process may renumber the rowids between the read and the write, and an
        erasure may delete a row meanwhile (then nothing is updated for it). Writing a
        batch on a thread while the next is re-wrapped was tried and was slower: both
        sides take the GIL for every row (sqlite3 binds each row's parameters under it,
        and AES-GCM holds it)."""
        todo = self._to_rewrap(epoch)
        # about eight batches at least, so the writer process has work to overlap
        batch = batch or min(REWRAP_BATCH, max(2000, todo // 8))
        target = self.keks.store_of(epoch, self.epoch_stores())
        table = self.engine.dialect.identifier_preparer.format_table(self.keys)
        sqlite = self.is_sqlite
        ph = "?" if sqlite else "%s"
        pos = "rowid" if sqlite else "key_id"
        after: int | str = 0 if sqlite else ""
        select = (f"SELECT {pos}, key_id, key_material, epoch FROM {table} "  # noqa: S608
                  f"WHERE {pos} > {ph} AND epoch <> {ph} ORDER BY {pos} LIMIT {ph}")
        update = (f"UPDATE {table} SET key_material = ?, epoch = ? "  # noqa: S608 (own table)
                  "WHERE rowid = ? AND key_id = ? AND epoch = ?") if sqlite else self._rewrap_sql
        moved = 0
        # a writer process (keys/rewrap_writer.py) pays for its start-up from about
        # WRITER_MIN_KEYS keys on
        writer = _Writer.start(self) if sqlite and todo >= WRITER_MIN_KEYS else None
        try:
            while True:
                with self.engine.connect() as conn:
                    cur = conn.connection.cursor()  # plain tuples: cheaper than rows
                    cur.execute(select, (after, epoch, batch))
                    rows = cur.fetchall()
                    cur.close()
                if rows:
                    after = rows[-1][0]
                    wrapped = self._rewrapped(rows, epoch, target)
                    params = [(w, epoch, r[0], r[1], r[3]) if sqlite else
                              (w, epoch, r[1], r[3]) for r, w in zip(rows, wrapped, strict=True)]
                if writer is not None:  # the batch before, written meanwhile
                    done = writer.written()
                    if done:
                        moved += done
                        if progress is not None:
                            progress(done)
                    if not rows:
                        return moved
                    writer.write(params)
                    continue
                if not rows:
                    return moved
                with self.engine.begin() as conn:
                    conn.exec_driver_sql(update, params)
                moved += len(rows)
                if progress is not None:
                    progress(len(rows))
        finally:
            if writer is not None:
                writer.stop()

    def _to_rewrap(self, epoch: int) -> int:
        """How many data keys are not wrapped under ``epoch``."""
        with self.engine.connect() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(self.keys)
                                    .where(self.keys.c.epoch != epoch)).scalar() or 0)

    def _rewrapped(self, rows: Sequence[Any], epoch: int, target: KekStore) -> list[bytes]:
        """Rows ``(pos, key_id, stored bytes, epoch)`` wrapped under ``epoch``: in one pass
        when they share an epoch in the target's own store (``rewrap``), else unwrapped
        from each epoch's store and wrapped in the target's."""
        old = {int(r[3] or 0) for r in rows}
        if len(old) == 1 and isinstance(target, FileKekStore):
            (source,) = old
            if source != UNWRAPPED_EPOCH and \
                    self.keks.store_of(source, self.epoch_stores()) is target:
                return target.rewrap(source, epoch, [(r[1], bytes(r[2])) for r in rows])
        return list(target.wrap(epoch, list(zip(
            (r[1] for r in rows), self._unwrap_in_order(rows), strict=True))))

    def _unwrap_in_order(self, rows: Sequence[Any]) -> list[bytes]:
        """The data keys of rows ``(pos, key_id, stored bytes, epoch)``, in their order."""
        old = {int(r[3] or 0) for r in rows}
        if len(old) == 1 and UNWRAPPED_EPOCH not in old:  # one epoch: in order, no dict
            (source,) = old
            return self.keks.store_of(source, self.epoch_stores()).unwrap(
                source, [(r[1], bytes(r[2])) for r in rows])
        by_id = self._unwrap_rows([r[1:] for r in rows])
        return [by_id[r[1]] for r in rows]

    def retire(self, epoch: int, at: datetime) -> None:
        """Destroy the KEK of a ``retiring`` epoch that no row is wrapped under any more,
        and record it. Refused while a row is left under it (it would be lost)."""
        if self.keys_under([epoch]):
            raise KeystoreError(f"KEK epoch {epoch} still wraps data keys; it is not "
                                "destroyed (run `ledger keys rotate-kek` again)")
        if epoch != UNWRAPPED_EPOCH:
            self.keks.store_of(epoch, self.epoch_stores()).destroy(epoch)
        t = self.epoch_table
        with self.engine.begin() as conn:
            conn.execute(t.update().where(t.c.epoch == epoch, t.c.state != "destroyed")
                         .values(state="destroyed", destroyed_at=at.isoformat()))

    def _add_epoch_column(self) -> None:
        """A keystore made before wrapping has no ``epoch`` column: add it (every row is
        epoch 0, unwrapped). Nothing is rewritten."""
        cols = {c["name"] for c in sa.inspect(self.engine).get_columns("data_keys",
                                                                        schema=self.schema)}
        if "epoch" in cols:
            return
        table = self.engine.dialect.identifier_preparer.format_table(self.keys)
        with self.engine.begin() as conn:
            conn.exec_driver_sql(f"ALTER TABLE {table} ADD COLUMN epoch INTEGER "
                                 "NOT NULL DEFAULT 0")

    def _statistics_off(self) -> None:
        """PostgreSQL: no planner statistics on key bytes. ANALYZE (autovacuum runs it)
        copies sampled values of a column into ``pg_statistic``, which :meth:`compact`'s
        ``VACUUM FULL`` does not rewrite: a destroyed key would stay there, wrapped, or at
        epoch 0 as it is (tests/test_copies_postgres.py). Altered once per column."""
        if self.is_sqlite:
            return
        prep = self.engine.dialect.identifier_preparer
        for table, column in ((self.keys, "key_material"), (self.notes, "nonce"),
                              (self.notes, "ct")):
            name = prep.format_table(table)
            try:
                with self.engine.begin() as conn:
                    target = conn.exec_driver_sql(
                        "SELECT attstattarget FROM pg_attribute WHERE attrelid = "
                        "%s::regclass AND attname = %s", (name, column)).scalar()
                    if target != 0:
                        conn.exec_driver_sql(f'ALTER TABLE {name} ALTER COLUMN "{column}" '
                                             "SET STATISTICS 0")
            except sa.exc.DBAPIError as e:  # a role that does not own the table: go on
                log.warning("keystore.statistics_kept", table=name, column=column,
                            error=e.orig.__class__.__name__ if e.orig else "DBAPIError")

    def _why_missing(self, key_id: str) -> str:
        at = self.destroyed_at(key_id)
        if at:
            return f"data key {key_id} was destroyed at {at}"
        return f"data key {key_id} does not exist in this keystore"

    def destroyed_at(self, key_id: str) -> str | None:
        if key_id in self._destroyed:
            return self._destroyed[key_id]
        with self.engine.connect() as conn:
            value = conn.execute(
                sa.select(self.destroyed.c.destroyed_at).where(self.destroyed.c.key_id == key_id)
            ).scalar()
        if value is None:
            return None
        self._destroyed[key_id] = str(value)
        return str(value)

    def seal_note(self, key_id: str, data: bytes) -> None:
        """Keep ``data`` in the keystore sealed under the data key ``key_id`` (AES-256-GCM),
        until that key is destroyed (:meth:`destroy` deletes the note with the key): where
        crypto-shredding itself reaches, for a working copy that must outlive other keys
        (an erasure's needles, ADR 0019). Replaces an earlier note of the same key."""
        nonce, ct = aead.seal(self.get(key_id), data, _note_aad(key_id))
        with self.engine.begin() as conn:
            conn.execute(self.notes.delete().where(self.notes.c.key_id == key_id))
            conn.execute(self.notes.insert(), [{"key_id": key_id, "nonce": nonce, "ct": ct}])

    def open_note(self, key_id: str) -> bytes | None:
        """The note sealed under ``key_id``; None when there is none or the key is gone."""
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(self.notes.c.nonce, self.notes.c.ct)
                               .where(self.notes.c.key_id == key_id)).first()
        key = self.get_many([key_id]).get(key_id) if row is not None else None
        if row is None or key is None:
            return None
        return aead.open_sealed(key, bytes(row[0]), bytes(row[1]), _note_aad(key_id))

    def present(self, key_ids: Iterable[str]) -> set[str]:
        """Which of these key ids have a key in the store (not cached: the store's rows)."""
        return self._ids_in(self.keys, key_ids)

    def destroyed_among(self, key_ids: Iterable[str]) -> set[str]:
        """Which of these key ids the store records as destroyed."""
        return self._ids_in(self.destroyed, key_ids)

    def _ids_in(self, table: sa.Table, key_ids: Iterable[str]) -> set[str]:
        ids = sorted(set(key_ids))
        out: set[str] = set()
        with self.engine.connect() as conn:
            for i in range(0, len(ids), 500):
                out.update(r[0] for r in conn.execute(
                    sa.select(table.c.key_id).where(table.c.key_id.in_(ids[i:i + 500]))))
        return out

    def all_key_ids(self) -> list[str]:
        with self.engine.connect() as conn:
            return [r[0] for r in conn.execute(sa.select(self.keys.c.key_id))]

    def finish_deferred(self, vacuum: bool = False) -> None:
        """After ``destroy(defer=True)`` calls: compact once, then look for the destroyed
        keys' bytes and repair (as :meth:`destroy` does). ``vacuum``: rebuild the file
        from its live rows first, so no page keeps a key destroyed by an earlier,
        interrupted process whose bytes this one never knew (ADR 0019)."""
        material, self._deferred = self._deferred, []
        if vacuum:
            self.vacuum()
        else:
            self.compact()
        if material and self.is_sqlite:
            self._repair(material, self._residue(material))

    def destroy(self, key_ids: Iterable[str], at: datetime, *,
                check_later: bool = False, defer: bool = False) -> list[str]:
        """Crypto-shred: delete keys and compact so no copy stays in the keystore files.

        Returns the ids that were destroyed by this call (already destroyed ids are
        skipped, which makes a repeated erasure a no-op). The keystore files are then read
        for the destroyed keys' bytes (the pages holding them scrubbed, then VACUUM, if
        found; :class:`KeystoreError` if they survive both); ``check_later`` reads them
        on a thread instead, and :meth:`settle` waits for it: a batch erasure commits its
        events meanwhile.
        """
        ids = sorted(set(key_ids))
        with self.engine.begin() as conn:
            rows = [] if not ids else list(conn.execute(
                sa.select(self.keys.c.key_id, self.keys.c.key_material)
                .where(self.keys.c.key_id.in_(ids))))
            present = {r[0] for r in rows}
            material = [bytes(r[1]) for r in rows]  # only to look for leftovers below
            if present:
                conn.execute(self.keys.delete().where(self.keys.c.key_id.in_(present)))
                conn.execute(self.destroyed.insert(), [
                    {"key_id": k, "destroyed_at": at.isoformat()} for k in sorted(present)])
                conn.execute(self.notes.delete().where(self.notes.c.key_id.in_(present)))
        for k in ids:
            self._cache.pop(k, None)
        self._destroyed.update({k: at.isoformat() for k in present})
        if defer:
            self._deferred.extend(material)
            return sorted(present)
        if ids:
            # Always compact, even when nothing was present: a previous attempt may have
            # deleted the row and then failed to truncate the WAL.
            self.compact()
        if material and self.is_sqlite:
            if check_later:
                ex = ThreadPoolExecutor(1, thread_name_prefix="keystore-residue")
                self._checks.append((material, ex.submit(self._residue, material)))
                ex.shutdown(wait=False)  # the thread ends after the check
            else:
                self._repair(material, self._residue(material))
        return sorted(present)

    def settle(self) -> None:
        """Wait for the residue checks ``destroy(check_later=True)`` started, and repair
        or refuse (:class:`KeystoreError`) as :meth:`destroy` does."""
        checks, self._checks = self._checks, []
        for material, found in checks:
            self._repair(material, found.result())

    def _repair(self, material: list[bytes], found: dict[Path, list[int]]) -> None:
        """Remove the destroyed keys' bytes the check found, smallest repair first, each
        followed by a new check: the pages holding them get their unused bytes zeroed
        (rawfiles/sqlitepages.py; SQLite can keep an old copy of a cell in a page's gap after
        it rebalanced the page), then, if any are left, VACUUM (every page rebuilt from
        the live rows). Still there: :class:`KeystoreError`."""
        if not found:
            return
        log.warning("keystore.residue_found", keys=len(material),
                    files=sorted(p.name for p in found))
        files = self.files()
        if files and set(found) == {files[0]}:
            with write_transaction(self.engine) as c:
                pages = scrub_pages(c, found[files[0]])
            if pages is not None:
                self.compact()
                found = self._residue(material)
                log.info("keystore.residue_scrubbed", pages=pages, left=len(found))
        if found:
            self.vacuum()
            if self._residue(material):
                raise KeystoreError(
                    "a destroyed data key's bytes are still in the keystore files after "
                    "VACUUM. Close other ledger processes and run the erasure again")

    def files(self) -> list[Path]:
        """The SQLite keystore file and its WAL and shared-memory files (those that exist)."""
        name = self.engine.url.database
        if not self.is_sqlite or not name:
            return []
        base = Path(name)
        return [p for p in (base, base.with_name(base.name + "-wal"),
                            base.with_name(base.name + "-shm")) if p.exists()]

    def _residue(self, material: list[bytes]) -> dict[Path, list[int]]:
        """Where any of these key bytes still are: keystore file -> byte offsets, files
        with a match only (one pass per file; Hyperscan where installed, else an
        Aho-Corasick automaton)."""
        matcher = ByteMatcher(material)
        found = {path: matcher.file_starts(path) for path in self.files()}
        return {path: starts for path, starts in found.items() if starts}

    def vacuum(self) -> None:
        """Rebuild the keystore file from its live rows, then empty the WAL."""
        with self.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("VACUUM")
        self.compact()

    def discard(self, key_ids: Iterable[str]) -> None:
        """Roll back keys created for a command that then failed (no tombstone)."""
        ids = list(key_ids)
        if not ids:
            return
        with self.engine.begin() as conn:
            conn.execute(self.keys.delete().where(self.keys.c.key_id.in_(ids)))
        for k in ids:
            self._cache.pop(k, None)
        self.compact()

    def compact(self) -> None:
        """Make deleted key bytes unrecoverable from the store's own files."""
        if self.is_sqlite:
            # A pooled engine (ADR 0003) keeps idle connections open between commands;
            # close them first, so the checkpoint runs as with an unpooled engine: on a
            # fresh connection, with no other connection of this process open.
            self.engine.dispose()
            with self.engine.connect() as conn:
                busy, _log, _ckpt = conn.exec_driver_sql(
                    "PRAGMA wal_checkpoint(TRUNCATE)").one()
            if busy:  # after waiting busy_timeout for the readers to move on
                name = Path(self.engine.url.database or "keystore.sqlite").name
                raise KeystoreBlocked(
                    f"could not settle {name}: an open read transaction in another process "
                    f"(a reader, a backup, an sqlite3 shell) blocked the checkpoint of its "
                    f"write-ahead log {name}-wal for the {BUSY_TIMEOUT_S} s this command "
                    "waited; a destroyed data key's bytes may still be in it. End "
                    "that transaction, then run the command again (an erasure resumes)",
                    str(self.engine.url.database or name), BUSY_TIMEOUT_S)
            return
        table = f'"{self.schema}".data_keys' if self.schema else "data_keys"
        with self.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql(f"VACUUM FULL {table}")

    def count(self) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(self.keys)).scalar()
                       or 0)

    def close(self) -> None:
        self.engine.dispose()
        self.keks.close()


@dataclass(frozen=True)
class EpochRow:
    """One KEK epoch as the keystore records it."""

    epoch: int
    store: str
    state: str
    started_at: str
    destroyed_at: str | None


def _note_aad(key_id: str) -> bytes:
    return b"memory-ledger/sealed-note/" + key_id.encode()
