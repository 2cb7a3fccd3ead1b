"""The projections database: an SQLite file in the home, or the configured PostgreSQL schema.

One SQLAlchemy Core code path for both. The engine comes from
``keys.datakeys.make_engine``, so SQLite connections run in WAL mode with
``secure_delete`` on (deleted cells and freed pages are overwritten with zeros).
All read-model tables are prefixed ``proj_``; on PostgreSQL they share the event
store's schema.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa
import structlog
from sqlalchemy.engine import Connection, Engine

from keys.datakeys import BUSY_TIMEOUT_S, make_engine, store_sqlite
from ledger.errors import CheckpointBlocked, EnvironmentProblem
from ledger.home import StorageURL
from projections.routes import ProbeHit, ProbeResult
from rawfiles.bytescan import file_identity
from rawfiles.heldfiles import HeldFile, read_file
from rawfiles.sqlitepages import freelist_trunks, scrub_pages, wal_frames, write_transaction

log = structlog.get_logger("projections")

_LOCK_KEY = 0x6D656D6C  # "meml": projections schema lock

__all__ = ["FREE_PAGE", "CompactionReport", "FilesRoute", "Store", "content_digest",
           "content_needles", "dumps"]

FREE_PAGE = "(freelist)"
"""What :meth:`Store.page_owners` calls a page on the freelist."""


def dumps(value: Any) -> str | None:
    """Canonical JSON text for stored lists and dicts (None stays NULL)."""
    if value is None:
        return None
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def content_needles(content: str) -> list[bytes]:
    """Byte forms under which ``content`` could sit in a file: as is, lower case, JSON."""
    forms = {content, content.lower(), json.dumps(content)[1:-1],
             json.dumps(content.lower())[1:-1]}
    return sorted({f.encode("utf-8") for f in forms if f})


def content_digest(value: str) -> str:
    """Domain-separated SHA-256 of a content value, case-folded like the probe needles.

    Read models index these digests (never the text) so that an erasure can ask "is this
    exact value still stored under any id?" with an index lookup instead of a scan.
    """
    data = b"memory-ledger/content-digest/v1\x00" + value.lower().encode("utf-8")
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class CompactionReport:
    """What compaction did; ``complete`` is False when a reader blocked WAL truncation."""

    backend: str
    steps: tuple[str, ...]
    complete: bool

    def as_json(self) -> dict[str, Any]:
        return {"backend": self.backend, "steps": list(self.steps), "complete": self.complete}


class Store:
    """Engine, schema and the store-wide operations (compaction, raw-file scan)."""

    def __init__(self, engine: Engine, schema: str | None, sqlite_path: Path | None) -> None:
        self.engine = engine
        self.schema = schema
        self.sqlite_path = sqlite_path
        self._held = False
        if self.is_sqlite:
            @sa.event.listens_for(engine, "connect")
            def _pragmas(dbapi_conn: Any, _record: Any) -> None:
                # the read models are derived from the log: a commit lost to a power cut
                # is applied again on the next catch-up (position and rows commit
                # together), and every checkpoint, an erasure's compaction included, still
                # syncs the file (ADR 0078)
                dbapi_conn.execute("PRAGMA synchronous=NORMAL")
                if self._held:  # see checkpoints_held
                    dbapi_conn.execute("PRAGMA wal_autocheckpoint=0")

    @classmethod
    def open(cls, url: StorageURL) -> Store:
        if not url.is_postgres and url.sqlite_path is not None \
                and not url.sqlite_path.exists():
            # decrypted content lives here: owner-only from the first byte (SQLite gives
            # its -wal and -shm files the same mode)
            os.close(os.open(url.sqlite_path, os.O_WRONLY | os.O_CREAT, 0o600))
        try:
            engine = make_engine(url.sqlalchemy_url(), url.schema,
                                 module=None if url.is_postgres else store_sqlite())
        except Exception as e:
            raise EnvironmentProblem(
                f"cannot open the projections database: {e.__class__.__name__}",
                hint="check the projections setting in config.toml") from e
        return cls(engine, url.schema, None if url.is_postgres else url.sqlite_path)

    @property
    def is_sqlite(self) -> bool:
        return self.engine.dialect.name == "sqlite"

    @property
    def backend(self) -> str:
        return "sqlite" if self.is_sqlite else "postgresql"

    def metadata(self) -> sa.MetaData:
        return sa.MetaData(schema=self.schema)

    def q(self, name: str) -> str:
        """A table name for raw SQL, schema-qualified on PostgreSQL."""
        return f'"{self.schema}"."{name}"' if self.schema else f'"{name}"'

    def sqlite_version(self) -> tuple[int, ...]:
        dbapi = self.engine.dialect.dbapi
        return tuple(getattr(dbapi, "sqlite_version_info", (0, 0, 0)))

    def lock(self, conn: Connection) -> None:
        """Serialise schema changes: hold a store-wide lock until ``conn`` commits.

        PostgreSQL: a transaction-scoped advisory lock. SQLite: a write to ``proj_lock``,
        which takes the database write lock for the rest of the transaction.
        """
        if self.is_sqlite:
            with self.engine.connect() as c:  # DDL outside the transaction; atomic itself
                c.exec_driver_sql('CREATE TABLE IF NOT EXISTS "proj_lock" '
                                  "(id INTEGER PRIMARY KEY, n INTEGER NOT NULL)")
                c.commit()
            conn.exec_driver_sql('INSERT INTO "proj_lock" (id, n) VALUES (1, 1) '
                                 "ON CONFLICT (id) DO UPDATE SET n = n + 1")
            return
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"),
                     {"k": (_LOCK_KEY << 32) | zlib.crc32((self.schema or "").encode())})

    def transaction(self) -> contextlib.AbstractContextManager[Connection]:
        """One transaction on the store, committed when the block ends (rolled back if it
        raises): the unit several routes' purges share."""
        return self.engine.begin()

    def table_exists(self, conn: Connection, name: str) -> bool:
        return bool(sa.inspect(conn).has_table(name, schema=self.schema))

    # ------------------------------------------------------------------ compaction
    def vacuum(self) -> None:
        """SQLite: rebuild the whole file from the live rows, then empty the WAL. The cost
        follows the file's size; erasure uses it only when the raw scan found residue
        that ``compact`` left (see governance/erasure.py). PostgreSQL: nothing to do
        beyond ``compact`` (its files are not scanned)."""
        if not self.is_sqlite:
            return
        with self.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
            c.exec_driver_sql("VACUUM")
        self._truncate_wal(required=True)

    def compact(self, tables: Iterable[str]) -> CompactionReport:
        """Store-wide compaction after a purge (outside any transaction).

        SQLite: deletes already overwrote the freed cells and pages with zeros
        (``secure_delete``, set on every connection); ``wal_checkpoint(TRUNCATE)`` then
        writes the zeroed pages into the database file and empties the write-ahead log
        that held the old page images. No ``VACUUM``: it rewrites the whole file, a cost
        that follows the store's size, not the erased items (ADR 0012).
        PostgreSQL: ``VACUUM FULL`` of each content table (a new relation file; the old
        one is unlinked). See ADR 0007 for what neither can promise.
        """
        if self.is_sqlite:
            if self._held:  # checkpoints_held: the caller compacts when the block ends
                return CompactionReport("sqlite", ("secure_delete",), complete=False)
            done = self._truncate_wal()
            return CompactionReport("sqlite", ("secure_delete", "wal_checkpoint(truncate)"),
                                    complete=done)
        names = sorted(set(tables))
        with self.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
            for name in names:
                if self.table_exists(c, name):
                    c.exec_driver_sql(f"VACUUM FULL {self.q(name)}")
        return CompactionReport("postgresql", tuple(f"vacuum full {n}" for n in names), True)

    def statistics_off(self, conn: Connection, tables: Iterable[str]) -> int:
        """PostgreSQL: no planner statistics on the columns of ``tables`` that can hold
        memory content or a digest of it (``text``, ``character varying``, ``tsvector``,
        ``bytea``; not the primary key, not the ``*_id`` columns, which hold random ids).
        ANALYZE, which autovacuum runs on its own, copies sampled values (histogram
        bounds, most common values) and a tsvector's most common lexemes into the
        ``pg_statistic`` catalog; an erasure purges and compacts the read models' tables
        but cannot rewrite that catalog (its owner's ``VACUUM FULL``), so an erased
        memory's words stayed in its file. With the target at 0, ANALYZE leaves these
        columns out (tests/test_copies_postgres.py) and the planner takes its default
        estimates for them (0.5 % of the rows per value looked up). Only columns not at 0
        yet are altered; returns how many. SQLite: nothing (the ledger runs no ANALYZE)."""
        if self.is_sqlite:
            return 0
        names = sorted(set(tables))
        if not names:
            return 0
        rows = conn.execute(sa.text(
            "SELECT c.relname, a.attname FROM pg_attribute a "
            "JOIN pg_class c ON c.oid = a.attrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = :schema AND c.relname = ANY(:tables) AND a.attnum > 0 "
            "AND NOT a.attisdropped AND COALESCE(a.attstattarget, -1) <> 0 "
            "AND a.attname NOT LIKE '%\\_id' "
            "AND a.atttypid IN ('text'::regtype, 'varchar'::regtype, 'tsvector'::regtype, "
            "'bytea'::regtype) AND NOT EXISTS (SELECT 1 FROM pg_index i WHERE "
            "i.indrelid = c.oid AND i.indisprimary AND a.attnum = ANY(i.indkey))"),
            {"schema": self.schema or "public", "tables": names}).all()
        done = 0
        for table, column in rows:
            try:
                with conn.begin_nested():  # a role that does not own the table: warn, go on
                    conn.exec_driver_sql(f'ALTER TABLE {self.q(table)} ALTER COLUMN '
                                         f'"{column}" SET STATISTICS 0')
                done += 1
            except sa.exc.DBAPIError as e:
                log.warning("projections.statistics_kept", table=table, column=column,
                            error=e.orig.__class__.__name__ if e.orig else "DBAPIError")
        return done

    @contextlib.contextmanager
    def kept_open(self) -> Iterator[None]:
        """While the block runs, one idle connection of this process stays open on the
        SQLite file, so that no other close of this process is the last one. The last
        close checkpoints the WAL into the file, syncs it and removes the WAL: on a
        server's writer process, which catches the read models up and searches them for
        every group of adds, those closes cost more than the applies (ADR 0078). Kept
        open, the WAL is checkpointed by SQLite's automatic checkpoint, by compaction's
        ``TRUNCATE`` after a purge, and when the block ends. The kept connection holds no
        read snapshot (it ran its one read and ended it), so it blocks no checkpoint, an
        erasure's included. Nothing on PostgreSQL."""
        if not self.is_sqlite or self.sqlite_path is None:
            yield
            return
        keep = self.engine.connect()
        try:
            # a read opens the WAL; ended at once, so no snapshot is held
            keep.exec_driver_sql("SELECT count(*) FROM sqlite_master").scalar()
            keep.rollback()
            yield
        finally:
            keep.close()

    # ------------------------------------------------------------ page-exact raw scan
    @contextlib.contextmanager
    def checkpoints_held(self) -> Iterator[bool]:
        """While the block runs, this process leaves the SQLite file as it is: every
        write stays in the WAL (no automatic checkpoint on its connections, no
        checkpoint on close: one idle connection stays open, so no close is the last;
        :meth:`compact` skips its checkpoint and reports itself incomplete). Yields
        False, and holds nothing, on PostgreSQL. An erasure reads the file while it
        purges, then learns from :meth:`checkpoint_pages` which pages changed (ADR
        0012). Another process may still checkpoint: the file's identity then changes,
        and the raw scan reads it again in full."""
        if not self.is_sqlite or self.sqlite_path is None:
            yield False
            return
        keep = self.engine.connect()
        # a read opens the WAL, and from then on this connection holds the shared lock
        # that keeps any other close from being the last
        keep.exec_driver_sql("SELECT count(*) FROM sqlite_master").scalar()
        self._held = True
        try:
            yield True
        finally:
            self._held = False
            keep.close()

    def checkpoint_pages(self) -> tuple[tuple[int, int, int], tuple[int, int, int],
                                        frozenset[int], int] | None:
        """Checkpoint the WAL into the file, say exactly which pages that changed, and
        empty the WAL (inside :meth:`checkpoints_held`, after the last write).

        Holding the write lock (``BEGIN IMMEDIATE`` on one connection: no frame can be
        added), the WAL's frame headers are read (:func:`rawfiles.sqlitepages.wal_frames`),
        a ``PASSIVE`` checkpoint runs on a second connection, and its frame counts must
        equal the headers' (every committed frame copied, none other); the write lock is
        kept until the clock that stamps file writes has passed the file's modification
        time, so any later write shows as a new time. Then ``wal_checkpoint(TRUNCATE)``
        empties the WAL (it copies nothing unless another writer came in between, which
        then shows in the file's identity). Returns the file's identity (size, mtime_ns,
        inode) before and after the copy, the page numbers copied and the page size;
        None (nothing is claimed) when the checkpoint was partial (a reader on an older
        snapshot), the counts differ, the write lock could not be had, or there is no
        WAL.
        """
        if not self.is_sqlite or self.sqlite_path is None:
            return None
        main = self.sqlite_path
        wal = main.with_name(main.name + "-wal")
        out = None
        try:
            with write_transaction(self.engine):
                frames = wal_frames(wal)
                before = file_identity(main)
                if frames is not None:
                    with self.engine.connect().execution_options(
                            isolation_level="AUTOCOMMIT") as c:
                        busy, logged, copied = c.exec_driver_sql(
                            "PRAGMA wal_checkpoint(PASSIVE)").one()
                    if not busy and logged == frames.frames and copied == frames.frames:
                        _wait_past_mtime(main)
                        out = (before, file_identity(main), frames.pages, frames.page_size)
                    else:
                        log.info("projections.checkpoint_partial", frames=frames.frames,
                                 logged=logged, copied=copied)
        except sa.exc.OperationalError as e:  # another writer held the lock past the timeout
            log.warning("projections.checkpoint_unnamed", error=e.__class__.__name__)
        self._truncate_wal(required=True)
        return out

    def _truncate_wal(self, *, required: bool = False) -> bool:
        """``wal_checkpoint(TRUNCATE)`` on a connection of its own: the WAL copied into the
        file and emptied. It waits up to the busy timeout for every reader to be on the
        newest snapshot. Still blocked (a read transaction held open in another process):
        False and a warning, or :class:`~ledger.errors.CheckpointBlocked` when
        ``required`` (an erasure, which cannot call the file settled: the old pages may
        still hold what it erased)."""
        with self.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
            busy, _log, _done = c.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)").one()
        if busy:
            log.warning("projections.compaction_blocked", backend="sqlite",
                        file=self.sqlite_path.name if self.sqlite_path else None)
            if required:
                raise CheckpointBlocked(str(self.sqlite_path), BUSY_TIMEOUT_S)
        return not busy

    # ------------------------------------------------------------------ residue repair
    def page_owners(self, offsets: Iterable[int]) -> dict[int, str | None]:
        """Which b-tree owns the page each byte offset of the database file falls in.

        Returns page number -> table or index name (``dbstat``; overflow pages count for
        their table), :data:`FREE_PAGE` for a page on the freelist, or None for a page
        found in neither (or any page, when this SQLite has no ``dbstat``). Content
        tables are looked at first and the search stops when every page is named, so
        the cost is a read of the b-trees that hold the residue, rarely of the file.
        Only meaningful after ``compact`` (the WAL checkpointed into the file).
        """
        if not self.is_sqlite or self.sqlite_path is None:
            return {}
        with self.engine.connect() as c:
            size = int(c.exec_driver_sql("PRAGMA page_size").scalar_one())
            pages = {off // size + 1 for off in offsets}
            out: dict[int, str | None] = {p: None for p in pages}
            out.update({p: FREE_PAGE for p in self._freelist(size) & pages})
            todo = {p for p, owner in out.items() if owner is None}
            names = [str(r[0]) for r in c.exec_driver_sql(
                "SELECT name FROM sqlite_schema WHERE rootpage > 0")]
            names.sort(key=lambda n: (not any(k in n for k in ("content", "_data")), n))
            try:
                for name in names:
                    if not todo:
                        break
                    for (pageno,) in c.exec_driver_sql(
                            "SELECT pageno FROM dbstat WHERE name = ?", (name,)):
                        if pageno in todo:
                            out[int(pageno)] = name
                            todo.discard(int(pageno))
            except sa.exc.OperationalError:  # an SQLite built without dbstat
                log.warning("projections.no_dbstat")
        return out

    def _freelist(self, page_size: int) -> set[int]:
        """Pages on the freelist (trunk and leaf), read from the file's own header."""
        trunks = freelist_trunks(self._file_page_reader(page_size))
        return set(trunks) | {p for leaves in trunks.values() for p in leaves}

    def _file_page_reader(self, page_size: int) -> Callable[[int], bytes]:
        assert self.sqlite_path is not None
        path = self.sqlite_path

        def read(pgno: int) -> bytes:
            with HeldFile(path) as f:  # never close a file SQLite has open
                f.seek((pgno - 1) * page_size)
                return f.read(page_size)

        return read

    def scrub(self, offsets: Iterable[int]) -> int | None:
        """Zero the bytes no row uses in the pages these file offsets fall in
        (:func:`rawfiles.sqlitepages.scrub_pages`, one transaction), then checkpoint and
        truncate the WAL; returns how many pages changed, or None when this SQLite cannot
        write pages (no ``sqlite_dbpage``). The cost follows the number of pages, not the
        tables or the file.
        """
        if not self.is_sqlite or self.sqlite_path is None:
            return None
        with write_transaction(self.engine) as c:
            changed = scrub_pages(c, offsets)
        if changed is None:
            log.warning("projections.no_dbpage")  # an SQLite built without it
            return None
        self._truncate_wal(required=True)
        return changed

    def rebuild(self, name: str) -> str:
        """Rewrite one b-tree from its live rows, so that nothing else of its old pages
        survives; returns what was done (``reindex`` or ``rebuild``).

        An index: ``REINDEX`` (its old pages are freed). A table (FTS5 shadow tables
        included): its rows are copied aside, the table is cleared (SQLite frees every
        page but the root and zeroes the root; ``secure_delete`` zeroes the freed
        pages), the rows are put back with their rowids, and the copy is dropped (zeroed
        too). Its indexes are rebuilt by the reinsert. No schema change, so FTS5 and
        the read models see the same tables. One transaction; the WAL is then
        checkpointed and truncated. Cost: the b-tree's size, not the file's.
        """
        with write_transaction(self.engine) as c:
            row = c.exec_driver_sql(
                "SELECT type, tbl_name, sql FROM sqlite_schema WHERE name = ?", (name,)).first()
            if row is None or (name.startswith("sqlite_") and row[0] != "index"):
                raise ValueError(f"no table or index {name!r} to rebuild")
            kind, table, sql = str(row[0]), _ident(str(row[1])), str(row[2] or "")
            if kind == "index":
                c.exec_driver_sql(f"REINDEX {_ident(name)}")
                done = "reindex"
            else:
                # identifiers below are this database's own table and column names, read
                # from its schema and quoted; no value is ever substituted
                cols = [(_ident(str(r[1])), str(r[2]).upper(), int(r[5]))
                        for r in c.exec_driver_sql(f"PRAGMA table_info({table})")]
                names = ", ".join(n for n, _t, _pk in cols)
                pks = [t for _n, t, pk in cols if pk]
                keeps_rowid = ("WITHOUT ROWID" not in sql.upper()
                               and not (len(pks) == 1 and pks[0] == "INTEGER"))
                copy = _ident("__residue_copy")
                rid = '"rowid" AS "__residue_rid", ' if keeps_rowid else ""
                c.exec_driver_sql(f"DROP TABLE IF EXISTS {copy}")
                c.exec_driver_sql(f"CREATE TABLE {copy} AS "  # noqa: S608
                                  f"SELECT {rid}{names} FROM {table}")
                c.exec_driver_sql(f"DELETE FROM {table}")  # noqa: S608
                if keeps_rowid:
                    c.exec_driver_sql(
                        f'INSERT INTO {table} ("rowid", {names}) SELECT "__residue_rid", '  # noqa: S608
                        f'{names} FROM {copy} ORDER BY "__residue_rid"')
                else:
                    c.exec_driver_sql(f"INSERT INTO {table} ({names}) "  # noqa: S608
                                      f"SELECT {names} FROM {copy}")
                c.exec_driver_sql(f"DROP TABLE {copy}")
                done = "rebuild"
        self._truncate_wal(required=True)
        return done

    # ------------------------------------------------------------------ raw files
    def files(self) -> list[Path]:
        """The SQLite database file and its WAL and shared-memory files (those that exist)."""
        if self.sqlite_path is None:
            return []
        base = self.sqlite_path
        return [p for p in (base, base.with_name(base.name + "-wal"),
                            base.with_name(base.name + "-shm"),
                            base.with_name(base.name + "-journal")) if p.exists()]

    def scan_files(self, needles: Sequence[bytes]) -> dict[str, int]:
        """Occurrences of any needle per file name (raw bytes, no SQL)."""
        found: dict[str, int] = {}
        for path in self.files():
            data = read_file(path)  # never close a file SQLite has open
            count = sum(data.count(n) for n in needles)
            if count:
                found[path.name] = count
        return found

    def close(self) -> None:
        self.engine.dispose()


def _wait_past_mtime(path: Path) -> None:
    """Return once the clock that stamps file writes has moved past ``path``'s
    modification time, so that any later write gives it a new one (Linux stamps writes
    from its coarse real-time clock, a tick of 1-10 ms; elsewhere: wait 50 ms)."""
    mtime = path.stat().st_mtime_ns
    coarse = getattr(time, "CLOCK_REALTIME_COARSE", None)
    for _ in range(1000):
        now = (time.clock_gettime_ns(coarse) if coarse is not None
               else time.time_ns() - 50_000_000)
        if now > mtime:
            return
        time.sleep(0.001)


def _ident(name: str) -> str:
    """An SQLite identifier, quoted."""
    return '"' + name.replace('"', '""') + '"'


class FilesRoute:
    """The SQLite files themselves, scanned byte by byte (the route an attacker with the
    disk would use). Purge is the store compaction; there is nothing to delete per row."""

    name = "sqlite-files"
    model = "store"

    def __init__(self, store: Store) -> None:
        self.store = store

    def purge(self, conn: Connection, item_id: str) -> int:
        return 0

    def compact(self, conn: Connection) -> None:
        return None

    def content_tables(self) -> Sequence[str]:
        return ()

    def probe(self, item_id: str, content: str | None) -> ProbeResult:
        files = tuple(p.name for p in self.store.files())
        if not content:
            return ProbeResult(self.name, item_id, checked=files)
        hits = tuple(ProbeHit(where=name, by="content", count=n)
                     for name, n in sorted(self.store.scan_files(content_needles(content)).items()))
        return ProbeResult(self.name, item_id, checked=files, hits=hits)
