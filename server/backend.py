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

from ledger.errors import LedgerError
from ledger.tracing import carry
from server import metrics
from server.telemetry import memory_span
from service.caller import Caller
from service.facade import MemoryService
from service.models import AtomAdded, AtomIn, RecallIn, RecallOut
from service.root import close_service, open_service

T = TypeVar("T")
log = structlog.get_logger("ledger.server")

MAX_GROUP = 256


class Overloaded(LedgerError):
    """Too many writes are waiting; try again shortly (HTTP 503)."""


@dataclass
class _Job:
    fn: Callable[[MemoryService], Any] | None
    add: tuple[Caller, AtomIn] | None = None
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
    """A thread that owns one MemoryService and runs jobs from its queue."""

    def __init__(self, name: str, home: Path, max_queue: int, group: bool) -> None:
        super().__init__(name=name, daemon=True)
        self.home = home
        self.jobs: queue.Queue[_Job | None] = queue.Queue()
        self.max_queue = max_queue
        self.group = group
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
            svc = open_service(self.home)
        except BaseException as e:  # reported to whoever waits for start-up
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
                    batch = [job]
                    stop = False
                    while len(batch) < MAX_GROUP:
                        try:
                            nxt = self.jobs.get_nowait()
                        except queue.Empty:
                            break
                        if nxt is None:
                            stop = True
                            break
                        if nxt.add is None:
                            self._run_adds(svc, batch)
                            batch = []
                            self._run(svc, nxt)
                            continue
                        batch.append(nxt)
                    if batch:
                        self._run_adds(svc, batch)
                    if stop:
                        break
                    continue
                self._run(svc, job)
        finally:
            close_service(svc)

    def _run(self, svc: MemoryService, job: _Job) -> None:
        if not job.start():
            return
        outcome: Any
        try:
            if job.add is not None:
                outcome = svc.add_atom(*job.add)
            else:
                assert job.fn is not None
                outcome = job.fn(svc)
            if self.counted:
                metrics.COMMANDS.inc()
        except BaseException as e:
            outcome = e
        self._deliver([(job, outcome)])

    def _run_adds(self, svc: MemoryService, batch: list[_Job]) -> None:
        live = [j for j in batch if j.start()]
        if not live:
            return
        items = [j.add for j in live if j.add is not None]
        results = svc.add_atoms_grouped(items)
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
    ``await backend.write(fn)``, ``await backend.add_atom(caller, item)``."""

    def __init__(self, home: Path, max_queue: int = 1024) -> None:
        self.home = home
        self.writer = _Worker("ledger-writer", home, max_queue, group=True)
        self.reader = _Worker("ledger-reader", home, max_queue, group=False)

    def start(self) -> None:
        self.writer.start()
        self.writer.ready.result()
        self.reader.start()
        self.reader.ready.result()

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
        waiter: asyncio.Future[AtomAdded] = asyncio.get_running_loop().create_future()
        with memory_span("update_memory", caller) as span:
            self.writer.submit(_Job(None, add=(caller, item), waiter=waiter))
            added = await waiter
            span.set_attribute("gen_ai.memory.id", added.atom_id)
        return added

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
