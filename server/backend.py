"""How a server process runs facade calls: one reader thread, one writer thread, and group
commit of concurrent atom adds (ADR 0030).

A :class:`service.facade.MemoryService` is not thread-safe, so each thread owns one: reads
(recall, show, list, export, verification) run on the reader's service and never wait for
a write in progress; writes run one at a time on the writer's service. Adds that arrive
while the writer is busy are queued and written together as one signed command
(``add_atoms``): one write lock, one fsync, one tree update for the group. Every caller's
item is resolved under that caller's own scope first; an item refused there fails alone.
If the grouped command fails as a whole (two items with the same ref, say), each item is
written again on its own, so one bad item never takes its neighbours with it.

A write is answered only after its command committed: an acknowledged add is in the log.
The queue is bounded: past ``max_queue`` waiting writes a new one is refused with
:class:`Overloaded` (HTTP 503 with Retry-After) instead of growing without limit.

With ``writer_process`` (what ``ledger serve`` runs, ADR 0062) the atom adds, grouped
and bulk, are committed by a child process that owns its own service: their signing,
encryption, search for similar memories and SQL run on another core than the event loop
and under another GIL. The writer thread still takes every write from one queue in
order; it hands a group of adds to the child and waits for its answer, which comes back
encoded once, as the JSON the HTTP API sends. While adds are known to be on their way
(their requests are being read, ``arriving``), the writer waits for them a little
(``LINGER``) before it sends a group: under load groups grow, alone an add never waits.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import structlog

from ledger.tracing import carry
from server import metrics
from server.problems import Overloaded
from server.telemetry import memory_span
from server.writer_process import Added, WriterProcess, adds, bulk
from service.caller import Caller
from service.facade import MemoryService
from service.models import AtomAdded, AtomIn, AtomsAdded, RecallIn, RecallOut
from service.root import close_service, open_service

T = TypeVar("T")
log = structlog.get_logger("ledger.server")

MAX_GROUP = 256
LINGER = 0.002  # seconds a group waits, at most, for adds whose requests are being read


@dataclass
class _Job:
    fn: Callable[[MemoryService], Any] | None
    add: tuple[Caller, AtomIn] | None = None
    bulk: tuple[Caller, list[AtomIn]] | None = None  # one all-or-nothing command
    # an add awaited on an event loop: settled from the writer with one wake-up of that
    # loop per group, not one per add; any other job: a thread-safe future
    waiter: asyncio.Future[Any] | None = None
    future: Future[Any] = field(init=False)

    def __post_init__(self) -> None:
        if self.waiter is None:
            self.future = Future()

    def start(self) -> bool:
        """False when whoever waits gave up before the job ran: it is then not run."""
        if self.waiter is not None:
            return not self.waiter.cancelled()
        return self.future.set_running_or_notify_cancel()


def _settle(outcomes: list[tuple[asyncio.Future[Any], Any]]) -> None:
    """On the event loop: hand each waiting add its result or its error."""
    for waiter, outcome in outcomes:
        if waiter.done():  # its request timed out meanwhile
            continue
        if isinstance(outcome, BaseException):
            waiter.set_exception(outcome)
        else:
            waiter.set_result(outcome)


class _Worker(threading.Thread):
    """A thread that owns one MemoryService and runs jobs from its queue; the writer's
    adds may be committed by a writer process instead (ADR 0062)."""

    def __init__(self, name: str, home: Path, max_queue: int, group: bool,
                 process: bool = False) -> None:
        super().__init__(name=name, daemon=True)
        self.home = home
        self.jobs: queue.Queue[_Job | None] = queue.Queue()
        self.max_queue = max_queue
        self.group = group
        self.process = process
        self.child: WriterProcess | None = None
        self.arriving = 0  # adds whose requests are being read (set on the event loop)
        self.ready: Future[None] = Future()
        self.groups = 0
        self.grouped_items = 0
        self.counted = group and metrics.enabled()  # the writer's queue and commands

    def submit(self, job: _Job) -> None:
        if self.jobs.qsize() >= self.max_queue:
            raise Overloaded("the server is busy: too many requests are waiting",
                             hint="retry after a second")
        self.jobs.put(job)
        if self.counted:
            metrics.QUEUE.set(self.jobs.qsize())

    def stop(self) -> None:
        self.jobs.put(None)

    def run(self) -> None:
        try:
            if self.process:  # started first: it opens the ledger while this thread does
                self.child = WriterProcess.for_home(self.home)
            svc = open_service(self.home)
        except BaseException as e:  # reported to whoever waits for start-up
            self.ready.set_exception(e)
            if self.child is not None:
                self.child.close()
            return
        try:
            if self.child is not None:
                self.child.wait_ready()
        except BaseException as e:
            close_service(svc)
            self.ready.set_exception(e)
            return
        self.ready.set_result(None)
        try:
            while True:
                job = self.jobs.get()
                if self.counted:
                    metrics.QUEUE.set(self.jobs.qsize())
                if job is None:
                    break
                if job.add is not None and self.group:
                    batch, stop, other = self._gather(job)
                    if batch:
                        self._run_adds(svc, batch)
                    if other is not None:
                        self._run(svc, other)
                    if stop:
                        break
                    continue
                self._run(svc, job)
        finally:
            close_service(svc)
            if self.child is not None:
                self.child.close()

    def _gather(self, first: _Job) -> tuple[list[_Job], bool, _Job | None]:
        """The adds queued behind ``first`` (up to MAX_GROUP), waiting up to LINGER for
        those whose requests are being read; stops at any other job (returned, to run
        after the group: the queue's order is kept) or at the stop mark."""
        batch = [first]
        deadline = 0.0
        while len(batch) < MAX_GROUP:
            try:
                nxt = self.jobs.get_nowait()
            except queue.Empty:
                if self.arriving <= 0:
                    break
                now = time.monotonic()
                deadline = deadline or now + LINGER
                if now >= deadline:
                    break
                try:
                    nxt = self.jobs.get(timeout=deadline - now)
                except queue.Empty:
                    break
            if nxt is None:
                return batch, True, None
            if nxt.add is None:
                return batch, False, nxt
            batch.append(nxt)
        return batch, False, None

    def _run(self, svc: MemoryService, job: _Job) -> None:
        if not job.start():
            return
        outcome: Any
        try:
            if job.add is not None:
                outcome = adds(svc, [job.add])[0]
            elif job.bulk is not None:
                outcome = self._child().call("bulk", job.bulk) if self.child is not None \
                    else bulk(svc, *job.bulk)
            else:
                assert job.fn is not None
                outcome = job.fn(svc)
            if self.counted:
                metrics.COMMANDS.inc()
        except BaseException as e:
            outcome = e
        self._deliver([(job, outcome)])

    def _child(self) -> WriterProcess:
        """The writer process; one that stopped (its adds were answered as failed, their
        outcome unknown) is started again for the next write."""
        assert self.child is not None
        if self.child.broken or not self.child.proc.is_alive():
            log.warning("writer_process.restarted", exit_code=self.child.proc.exitcode)
            self.child.close()
            self.child = WriterProcess(self.home)
            self.child.wait_ready()
        return self.child

    def _run_adds(self, svc: MemoryService, batch: list[_Job]) -> None:
        live = [j for j in batch if j.start()]
        if not live:
            return
        items = [j.add for j in live if j.add is not None]
        results: list[Any]
        if self.child is not None:
            try:
                results = list(self._child().call("adds", items))
            except Exception as e:  # the process, or starting a new one, failed
                results = [e] * len(items)
        else:
            results = adds(svc, items)
        self.groups += 1
        self.grouped_items += len(live)
        if self.counted:
            metrics.COMMANDS.inc()
            metrics.GROUP.observe(len(live))
        self._deliver(list(zip(live, results, strict=True)))

    @staticmethod
    def _deliver(outcomes: list[tuple[_Job, Any]]) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], Any]]] = {}
        for job, outcome in outcomes:
            if job.waiter is not None:
                by_loop.setdefault(job.waiter.get_loop(), []).append((job.waiter, outcome))
            elif isinstance(outcome, BaseException):
                job.future.set_exception(outcome)
            else:
                job.future.set_result(outcome)
        for loop, settled in by_loop.items():
            try:
                loop.call_soon_threadsafe(_settle, settled)
            except RuntimeError:  # that loop is closed: nobody waits any more
                pass


class Backend:
    """The facade for a server process: ``await backend.read(fn)``,
    ``await backend.write(fn)``, ``await backend.add_atom(caller, item)``.
    ``writer_process``: atom adds are committed by a writer process (ADR 0062)."""

    def __init__(self, home: Path, max_queue: int = 1024, writer_process: bool = False
                 ) -> None:
        self.home = home
        self.writer = _Worker("ledger-writer", home, max_queue, group=True,
                              process=writer_process)
        self.reader = _Worker("ledger-reader", home, max_queue, group=False)

    def start(self) -> None:
        """Open the writer's and the reader's services side by side (the writer process
        opens its own meanwhile); if either fails, the other is stopped and the error
        raised."""
        self.writer.start()
        self.reader.start()
        try:
            self.writer.ready.result()
            self.reader.ready.result()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Finish every queued job, then close the ledger (graceful shutdown)."""
        for w in (self.writer, self.reader):
            if w.is_alive():
                w.stop()
        for w in (self.writer, self.reader):
            if w.is_alive():
                w.join()

    async def read(self, fn: Callable[[MemoryService], T]) -> T:
        job = _Job(carry(fn))  # the spans it opens are children of this request's
        self.reader.submit(job)
        result: T = await asyncio.wrap_future(job.future)
        return result

    async def write(self, fn: Callable[[MemoryService], T]) -> T:
        job = _Job(carry(fn))
        self.writer.submit(job)
        result: T = await asyncio.wrap_future(job.future)
        return result

    async def add_atom(self, caller: Caller, item: AtomIn) -> AtomAdded:
        return AtomAdded.model_validate_json((await self.add_atom_encoded(caller, item)).json)

    async def add_atom_encoded(self, caller: Caller, item: AtomIn, arriving: bool = False
                               ) -> Added:
        """One atom add, committed with the adds queued with it (group commit); its
        answer as the JSON body the HTTP API sends. ``arriving``: the add was counted in
        the writer's ``arriving`` while its request was read; it is not once queued."""
        waiter: asyncio.Future[Added] = asyncio.get_running_loop().create_future()
        with memory_span("update_memory", caller) as span:
            try:
                self.writer.submit(_Job(None, add=(caller, item), waiter=waiter))
            finally:
                if arriving:
                    self.writer.arriving -= 1
            added = await waiter
            span.set_attribute("gen_ai.memory.id", added.atom_id)
        return added

    async def add_atoms(self, caller: Caller, items: list[AtomIn]) -> AtomsAdded:
        return AtomsAdded.model_validate_json(await self.add_atoms_encoded(caller, items))

    async def add_atoms_encoded(self, caller: Caller, items: list[AtomIn]) -> bytes:
        """Atoms in one signed command, all or none (the bulk endpoint), on the writer
        process when there is one; the answer (AtomsAdded) as JSON."""
        job = _Job(None, bulk=(caller, items))
        self.writer.submit(job)
        result: bytes = await asyncio.wrap_future(job.future)
        return result

    async def recall(self, caller: Caller, body: RecallIn) -> RecallOut:
        """Recall on the reader thread, then the rehearsal events (a signed write) on the
        writer: a recall never waits behind writes for its answer's content. What every
        surface that recalls calls (the HTTP API, the MCP tool)."""
        started = time.perf_counter()
        with memory_span("search_memory", caller) as span:
            found: RecallOut = await self.read(
                lambda s: s.recall(caller, body.model_copy(update={"rehearse": False})))
            if body.rehearse and caller.may_write_memory and found.items:
                ids = [i.atom_id for i in found.items]
                await self.write(lambda s: s.rehearse(caller, ids, body.session_id))
                found = found.model_copy(update={"items": [
                    i.model_copy(update={"rehearsed": True}) for i in found.items]})
            span.set_attribute("gen_ai.memory.search.result.count", len(found.items))
        if self.writer.counted:
            metrics.RECALL.observe(time.perf_counter() - started)
        return found

    def call_sync(self, fn: Callable[[MemoryService], T], write: bool = False) -> T:
        """For a caller on its own thread (the stdio MCP server)."""
        worker = self.writer if write else self.reader
        job = _Job(fn)
        worker.submit(job)
        result: T = job.future.result()
        return result
