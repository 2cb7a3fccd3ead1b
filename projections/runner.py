"""The projection runner: read models follow the notification log, each at its own position.

Guarantees (tested in ``tests/test_projections_contract.py`` on SQLite and PostgreSQL):

* **Same transaction.** A batch's view changes and the model's new tracking position
  commit together; a crash leaves the view at the last committed position.
* **Never twice.** The transaction first locks the model's tracking row (a write to
  it: a row lock on PostgreSQL, the write lock on SQLite), re-reads the position and
  skips every entry at or below it, so concurrent runners and retries cannot apply a
  position twice.
* **Resume.** Catch-up starts after the stored position; a failed batch is retried.
* **Rebuild.** Drops the model's tables, resets its position to 0 and replays the log
  in large batches. Rebuild and incremental application give identical views.
* **Decode once.** Each batch of notifications is verified and decrypted once
  (``projections.entries.decode``) and handed to every model that needs it. (Decoding
  the next batch in a thread while applying this one was measured slower: the GIL.)
* **Decode ahead, in other processes** (ADR 0058). A catch-up of at least
  ``parallel_min`` events (a rebuild) has the next batch verified and decrypted by
  ``workers`` worker processes (``projections.parallel``) while this process applies
  the one before: the same checks, by the same code, on the other cores. A batch is
  applied only once every event in it has verified.
* **Versioned models.** A model whose ``version`` differs from the stored one is
  rebuilt on the next catch-up (e.g. after the embedder changes), unless it has a
  ``migrate(conn, old_version)`` method that converts the stored tables in place and
  returns True (the keyword index turning FTS5 ``secure-delete`` on).
* **Erasure.** A batch that purged content marks its model ``compact_pending`` in the
  same transaction; after the batches commit, the routes' and the store's compaction
  run and clear the mark. A crash in between leaves the mark, and the next catch-up
  compacts.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

import sqlalchemy as sa
import structlog
from sqlalchemy.engine import Connection

from ledger.clock import format_instant, now
from ledger.errors import InputError
from projections.entries import LogEntry, decode
from projections.parallel import CHUNK, ParallelDecoder, default_workers
from projections.routes import Route, RouteRegistry
from projections.store import CompactionReport, Store

if TYPE_CHECKING:
    from ledger.reader import LedgerReader

log = structlog.get_logger("projections")

__all__ = ["Applied", "ModelRun", "ModelStatus", "Progress", "ReadModel", "RunReport", "Runner"]

Progress = Callable[[int, int], None]
"""Called as ``progress(position_done, head)`` after each batch."""


@dataclass
class Applied:
    """What one ``apply`` call did: items whose stored content it physically deleted."""

    purged: list[str] = field(default_factory=list)


@runtime_checkable
class ReadModel(Protocol):
    """A read model: own tables, own position, pure function of the log it has seen."""

    name: str
    version: str
    holds_content: ClassVar[bool]

    def create(self, conn: Connection) -> None:
        """Create the model's tables if they do not exist."""

    def reset(self, conn: Connection) -> None:
        """Drop the model's tables."""

    def apply(self, conn: Connection, entries: Sequence[LogEntry]) -> Applied:
        """Apply entries (in log order, none applied before) inside ``conn``'s transaction."""

    def dump(self, conn: Connection) -> dict[str, list[tuple[Any, ...]]]:
        """The whole view as sorted rows, independent of physical ids (for equality)."""

    def routes(self) -> Sequence[Route]:
        """Routes through which this model holds or returns content (empty if none)."""


@dataclass(frozen=True)
class ModelStatus:
    name: str
    version: str
    position: int
    head: int
    events: int
    compact_pending: bool
    updated_at: str | None
    state: str
    """``current``, ``behind`` (lag > 0), or ``stale`` (model version changed: rebuild)."""

    @property
    def lag(self) -> int:
        return max(0, self.head - self.position)

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "position": self.position,
                "head": self.head, "lag": self.lag, "events": self.events,
                "compact_pending": self.compact_pending, "updated_at": self.updated_at,
                "state": self.state}


@dataclass
class ModelRun:
    events: int = 0
    batches: int = 0
    apply_seconds: float = 0.0
    purged: int = 0

    def as_json(self) -> dict[str, Any]:
        return {"events": self.events, "batches": self.batches,
                "apply_seconds": round(self.apply_seconds, 6), "purged": self.purged}


@dataclass
class RunReport:
    head: int = 0
    notifications: int = 0
    read_seconds: float = 0.0
    decode_seconds: float = 0.0
    seconds: float = 0.0
    index_seconds: float = 0.0
    """Building the secondary indexes a rebuild deferred (included in ``seconds``)."""
    models: dict[str, ModelRun] = field(default_factory=dict)
    compaction: CompactionReport | None = None

    def as_json(self) -> dict[str, Any]:
        return {"head": self.head, "notifications": self.notifications,
                "read_seconds": round(self.read_seconds, 6),
                "decode_seconds": round(self.decode_seconds, 6),
                "seconds": round(self.seconds, 6),
                "index_seconds": round(self.index_seconds, 6),
                "models": {k: v.as_json() for k, v in self.models.items()},
                "compaction": self.compaction.as_json() if self.compaction else None}


PARALLEL_MIN = 20_000
"""From this many events to catch up, batches are decoded ahead in worker processes."""

Batch = tuple[Sequence[Any], list[LogEntry]]
"""A batch of notifications and its verified entries."""


def _in_sequence(decoded: Iterator[Batch]) -> Iterator[Batch]:
    """Batches of a replay from the start of the log, each checked before it is applied:
    step 3 of docs/spec/event-envelope.md, ``seq`` is the previous event's + 1 and the
    first is 1 (ADR 0058: a verified event removed, moved or replayed is caught by a
    rebuild, not only by ``ledger verify``)."""
    from ledger.mapper import EventIntegrityError

    expected = 1
    for notes, entries in decoded:
        for e in entries:
            if e.seq != expected:
                raise EventIntegrityError(
                    f"event {e.event_id} at position {e.position} failed verification: step 3: "
                    f"seq {e.seq} where {expected} follows: an event was removed, inserted "
                    "or moved", hint="run `ledger verify` for a full report")
            expected += 1
        yield notes, entries


def _tables(model: ReadModel) -> list[sa.Table]:
    """The tables a model declares (its attributes; a table it makes in raw SQL, such as
    SQLite's FTS5 index, is made with them by its ``create``)."""
    return [v for v in vars(model).values() if isinstance(v, sa.Table)]


def _indexes(model: ReadModel) -> list[sa.Index]:
    """The secondary indexes of a model's tables (primary keys and unique constraints
    are part of the tables themselves and stay)."""
    return [ix for t in _tables(model) for ix in sorted(t.indexes, key=lambda i: str(i.name))]


class Runner:
    """Runs read models against one ledger (its reader) and one projections store."""

    def __init__(self, reader: LedgerReader, store: Store, models: Sequence[ReadModel],
                 registry: RouteRegistry, batch_size: int = 1000,
                 rebuild_batch_size: int = 20_000, workers: int | None = None,
                 parallel_min: int = PARALLEL_MIN) -> None:
        if len({m.name for m in models}) != len(models):
            raise ValueError("read model names must be unique")
        self.reader = reader
        self.store = store
        self.models = {m.name: m for m in models}
        self.registry = registry
        self.batch_size = batch_size
        self.rebuild_batch_size = rebuild_batch_size
        self.workers = default_workers() if workers is None else workers
        """Worker processes that verify and decrypt ahead (0: this process decodes)."""
        self.parallel_min = parallel_min
        """A catch-up of fewer events decodes in this process (a pool costs a start-up)."""
        self.decode_chunk: int | None = None
        """Events per worker task (None: ``projections.parallel.CHUNK``)."""
        md = store.metadata()
        self.tracking = sa.Table(
            "proj_tracking", md,
            sa.Column("name", sa.String(64), primary_key=True),
            sa.Column("position", sa.BigInteger, nullable=False),
            sa.Column("version", sa.String(200), nullable=False),
            sa.Column("events", sa.BigInteger, nullable=False),
            sa.Column("compact_pending", sa.Boolean, nullable=False),
            sa.Column("updated_at", sa.String(40)),
        )
        self._ready = False

    # ------------------------------------------------------------------ setup
    def setup(self) -> None:
        """Create the tracking table and every model's tables; reset stale models."""
        if self._ready:
            return
        with self.store.engine.begin() as conn:
            self.store.lock(conn)  # one process at a time creates or resets tables
            self.tracking.create(conn, checkfirst=True)
            present: tuple[set[str], set[str]] | None = None
            for model in self.models.values():
                row = self._lock(conn, model.name)
                if row is None:
                    model.create(conn)
                    conn.execute(self.tracking.insert().values(
                        name=model.name, position=0, version=model.version, events=0,
                        compact_pending=False, updated_at=None))
                elif row.version != model.version:
                    migrate = getattr(model, "migrate", None)
                    if migrate is not None and migrate(conn, str(row.version)):
                        # same view, another storage option: kept, position and all
                        t = self.tracking
                        conn.execute(t.update().where(t.c.name == model.name)
                                     .values(version=model.version))
                        log.info("projections.model_migrated", model=model.name,
                                 old_version=str(row.version), version=model.version)
                        continue
                    log.info("projections.model_reset", model=model.name,
                             reason="version changed", old_position=int(row.position))
                    self._reset(conn, model)
                else:  # the common case, every open: what is missing, in one look
                    present = present or self._present(conn)
                    tables, indexes = present
                    if any(t.name not in tables for t in _tables(model)):
                        model.create(conn)
                    for index in _indexes(model):  # after a rebuild cut short (below)
                        if index.name not in indexes:
                            index.create(conn, checkfirst=True)
            self._statistics_off(conn)
        self._ready = True

    def _present(self, conn: Connection) -> tuple[set[str], set[str]]:
        """The names of the store's tables and of their indexes: two catalog queries on
        PostgreSQL, where asking for each table and index apart took ~70 ms an open."""
        inspector = sa.inspect(conn)
        schema = self.store.schema
        return (set(inspector.get_table_names(schema=schema)),
                {str(ix["name"]) for found in inspector.get_multi_indexes(schema=schema).values()
                 for ix in found})

    def _statistics_off(self, conn: Connection) -> None:
        """No planner statistics on content columns (Store.statistics_off): tables made
        by this process, and those of ledgers made before this rule."""
        routes = self.registry.for_models(list(self.models))
        self.store.statistics_off(conn, [t for r in routes for t in r.content_tables()])

    def _names(self, names: Sequence[str] | None) -> list[str]:
        if names is None:
            return list(self.models)
        unknown = [n for n in names if n not in self.models]
        if unknown:
            raise InputError(f"unknown read model {', '.join(unknown)}",
                             hint=f"read models: {', '.join(self.models)}")
        return list(names)

    def _lock(self, conn: Connection, name: str) -> Any:
        """Lock the model's tracking row for this transaction and return it (or None)."""
        t = self.tracking
        conn.execute(t.update().where(t.c.name == name).values(position=t.c.position))
        return conn.execute(sa.select(t).where(t.c.name == name)).first()

    def _reset(self, conn: Connection, model: ReadModel) -> None:
        model.reset(conn)
        model.create(conn)
        self._statistics_off(conn)
        t = self.tracking
        conn.execute(t.update().where(t.c.name == model.name).values(
            position=0, version=model.version, events=0, updated_at=None))

    # ------------------------------------------------------------------ status
    def head(self) -> int:
        return self.reader.head_position()

    @contextlib.contextmanager
    def _transaction(self, conn: Connection | None) -> Iterator[Connection]:
        """A transaction on ``conn`` (a catch-up's connection), or on a new connection."""
        if conn is None:
            with self.store.engine.begin() as new:
                yield new
        else:
            with conn.begin():
                yield conn

    def positions(self, conn: Connection | None = None) -> dict[str, int]:
        """Each model's position (on ``conn``, in a transaction of its own, if given)."""
        self.setup()
        with self._transaction(conn) as c:
            rows = c.execute(sa.select(self.tracking.c.name, self.tracking.c.position)).all()
        return {str(r.name): int(r.position) for r in rows if r.name in self.models}

    def status(self) -> list[ModelStatus]:
        """Position, head and lag (head notification id - position) per model."""
        head = self.head()
        with self.store.engine.connect() as conn:
            rows = ({r.name: r for r in conn.execute(sa.select(self.tracking))}
                    if self.store.table_exists(conn, self.tracking.name) else {})
        out = []
        for name, model in self.models.items():
            r = rows.get(name)
            position = int(r.position) if r is not None else 0
            if r is None or r.version != model.version:
                state = "stale"
            else:
                state = "current" if position >= head else "behind"
            out.append(ModelStatus(
                name=name, version=model.version, position=position, head=head,
                events=int(r.events) if r is not None else 0,
                compact_pending=bool(r.compact_pending) if r is not None else False,
                updated_at=r.updated_at if r is not None else None, state=state))
        return out

    # ------------------------------------------------------------------ applying
    def apply_entries(self, model: ReadModel, entries: Sequence[LogEntry],
                      run: ModelRun | None = None, conn: Connection | None = None) -> int:
        """Apply entries to one model in one transaction (on ``conn``, if given: a
        catch-up's connection); returns how many were new.

        Entries at or below the stored position are skipped (check-and-skip under the
        tracking row lock), so calling this again with the same entries does nothing.
        """
        t0 = time.perf_counter()
        with self._transaction(conn) as conn:
            row = self._lock(conn, model.name)
            if row is None:
                raise RuntimeError(f"read model {model.name} is not set up")
            todo = [e for e in entries if e.position > int(row.position)]
            if not todo:
                return 0
            applied = model.apply(conn, todo)
            values: dict[str, Any] = {
                "position": todo[-1].position, "events": int(row.events) + len(todo),
                "updated_at": format_instant(now())}
            if applied.purged:
                values["compact_pending"] = True
            t = self.tracking
            conn.execute(t.update().where(t.c.name == model.name).values(**values))
        if run is not None:
            run.events += len(todo)
            run.batches += 1
            run.apply_seconds += time.perf_counter() - t0
            run.purged += len(applied.purged)
        if applied.purged:
            # in-process copies (recall cache, recall index) forget the items at once, so
            # their probes are clean as soon as the stored routes are (ADR 0012)
            for route in self.registry.routes():
                if getattr(route, "in_process", False):
                    for item in applied.purged:
                        route.purge(None, item)  # type: ignore[arg-type]
            log.info("projections.purged", model=model.name, items=len(applied.purged),
                     item_ids=applied.purged[:20])
        return len(todo)

    def catch_up(self, names: Sequence[str] | None = None, progress: Progress | None = None,
                 batch_size: int | None = None) -> RunReport:
        """Bring models up to the head of the log, batch by batch; then compact if needed.

        One connection serves the positions, every model's transactions and the look for
        pending compaction: on SQLite each connection's close (the last one open)
        checkpoints the WAL, which cost more than the applies themselves for the few
        events that a catch-up after a write brings. It is closed before compaction,
        whose checkpoint runs with no connection of this process open."""
        self.setup()
        selected = self._names(names)
        report = RunReport(models={n: ModelRun() for n in selected})
        t_start = time.perf_counter()
        with self.store.engine.connect() as conn:
            self._catch_up_on(conn, selected, report, progress, batch_size)
            pending = self._pending(conn, selected)
        report.compaction = self.compact(pending) if pending else None
        report.seconds = time.perf_counter() - t_start
        return report

    def _catch_up_on(self, conn: Connection, selected: list[str], report: RunReport,
                     progress: Progress | None, batch_size: int | None) -> None:
        positions = {n: p for n, p in self.positions(conn).items() if n in selected}
        head = self.head()
        report.head = head
        start = min(positions.values(), default=head) + 1
        # far behind (a new store, a model reset by a version change): rebuild's batches
        size = batch_size or (self.rebuild_batch_size
                              if head - start >= self.rebuild_batch_size else self.batch_size)
        decoder = None
        first = size
        if self.workers > 0 and head - start + 1 >= self.parallel_min:
            chunk = self.decode_chunk or CHUNK
            decoder = ParallelDecoder(self.reader, self.workers, chunk)
            first = min(size, chunk * self.workers)  # the wait before the first apply
        try:
            batches = self._batches(start, head, size, report, first)
            decoded = (self._decode_here(batches, positions, report) if decoder is None
                       else self._decode_ahead(decoder, batches, report))
            if start == 1:  # the whole log is replayed: its sequence is checked too
                decoded = _in_sequence(decoded)
            self._apply_batches(decoded, selected, positions, report, head, progress, conn)
        finally:
            if decoder is not None:
                decoder.close()

    def _batches(self, start: int, head: int, size: int, report: RunReport,
                 first: int) -> Iterator[Sequence[Any]]:
        """The notifications from ``start`` to ``head``: ``first`` of them, then twice as
        many each time up to ``size`` (decoding ahead, each batch is decoded while the
        one before, half its size, is applied)."""
        limit = first
        while start <= head:
            t0 = time.perf_counter()
            notes = self.reader.notifications(start=start, limit=limit, stop=head)
            limit = min(size, limit * 2)
            report.read_seconds += time.perf_counter() - t0
            if not notes:
                return
            report.notifications += len(notes)
            yield notes
            start = notes[-1].id + 1

    def _decode_here(self, batches: Iterator[Sequence[Any]], positions: dict[str, int],
                     report: RunReport) -> Iterator[Batch]:
        """Each batch verified and decrypted in this process, when it is needed."""
        for notes in batches:
            t0 = time.perf_counter()
            low = min(positions.values())
            entries = decode(self.reader, [n for n in notes if n.id > low])
            report.decode_seconds += time.perf_counter() - t0
            yield notes, entries

    @staticmethod
    def _decode_ahead(decoder: ParallelDecoder, batches: Iterator[Sequence[Any]],
                      report: RunReport) -> Iterator[Batch]:
        """Each batch handed to the workers one batch ahead of the one applied:
        ``decode_seconds`` is what this process spent handing over and waiting."""
        ahead: list[tuple[Sequence[Any], list[Any]]] = []
        for notes in batches:
            t0 = time.perf_counter()
            ahead.append((notes, decoder.submit(notes)))
            report.decode_seconds += time.perf_counter() - t0
            if len(ahead) > 1:
                yield Runner._collect(decoder, ahead.pop(0), report)
        while ahead:
            yield Runner._collect(decoder, ahead.pop(0), report)

    @staticmethod
    def _collect(decoder: ParallelDecoder, item: tuple[Sequence[Any], list[Any]],
                 report: RunReport) -> Batch:
        t0 = time.perf_counter()
        entries = decoder.result(item[1])
        report.decode_seconds += time.perf_counter() - t0
        return item[0], entries

    def _apply_batches(self, decoded: Iterator[Batch], selected: list[str],
                       positions: dict[str, int], report: RunReport, head: int,
                       progress: Progress | None, conn: Connection) -> None:
        for notes, entries in decoded:
            for name in selected:
                mine = [e for e in entries if e.position > positions[name]]
                if mine:
                    try:
                        self.apply_entries(self.models[name], mine, report.models[name],
                                           conn)
                    except Exception:
                        log.error("projections.apply_failed", model=name,
                                  first=mine[0].position, last=mine[-1].position)
                        raise
                positions[name] = max(positions[name], notes[-1].id)
            done = int(notes[-1].id)
            if progress is not None:
                progress(min(done, head), head)
            log.debug("projections.batch", position=done, head=head, events=len(notes))

    def rebuild(self, names: Sequence[str] | None = None,
                progress: Progress | None = None) -> RunReport:
        """Drop the models' tables and replay the whole log into them in large batches.

        Secondary indexes are dropped after the reset and built once at the end, from the
        whole table (issue 16: maintaining them row by row, in random key order, cost
        more than the inserts). A crash in between leaves them missing; :meth:`setup`
        creates missing indexes on the next open, so the view is never left without them.
        """
        self.setup()
        selected = self._names(names)
        deferred: list[sa.Index] = []
        for name in selected:
            with self.store.engine.begin() as conn:
                self._lock(conn, name)
                self._reset(conn, self.models[name])
                for index in _indexes(self.models[name]):
                    index.drop(conn)
                    deferred.append(index)
            log.info("projections.rebuild_started", model=name)
        try:
            report = self.catch_up(selected, progress, batch_size=self.rebuild_batch_size)
        finally:
            t0 = time.perf_counter()
            with self.store.engine.begin() as conn:
                for index in deferred:
                    index.create(conn, checkfirst=True)
            index_seconds = time.perf_counter() - t0
        report.index_seconds = index_seconds
        report.seconds += index_seconds
        log.info("projections.rebuilt", models=selected, position=report.head,
                 events=report.notifications)
        return report

    def _pending(self, conn: Connection, names: Sequence[str]) -> list[str]:
        """Which of ``names`` are marked ``compact_pending`` (read in a transaction of
        its own on ``conn``)."""
        t = self.tracking
        with self._transaction(conn):
            return [r.name for r in conn.execute(
                sa.select(t.c.name).where(t.c.compact_pending == sa.true()))
                if r.name in names]

    def compact(self, names: Sequence[str]) -> CompactionReport:
        routes = self.registry.for_models(names)
        with self.store.engine.begin() as conn:
            for route in routes:
                route.compact(conn)
        tables = [tbl for r in routes for tbl in r.content_tables()]
        report = self.store.compact(tables)
        if report.complete:
            t = self.tracking
            with self.store.engine.begin() as conn:
                conn.execute(t.update().where(t.c.name.in_(list(names)))
                             .values(compact_pending=False))
        log.info("projections.compacted", models=list(names), complete=report.complete)
        return report
