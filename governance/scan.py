"""Raw scan: is any of the erased content's bytes still in a file the ledger owns?

No SQL, no parsing: every byte of every file under the home is read once and searched
for all needles at once. Files are cut into spans, one task each; a task reads its span
in blocks (rawfiles/bytescan.py) that overlap by the longest needle minus one, so a match
that crosses a block or span boundary is found, and counted once (by the block it starts
in). Large homes are scanned by one worker process per core: the scan is the one part of
an erasure whose cost follows the bytes the ledger owns rather than the erased items
(ADR 0012), so it gets the whole machine.

The matcher (Hyperscan where installed, else Aho-Corasick) is rawfiles/bytescan.py.
"""

from __future__ import annotations

import bisect
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

from rawfiles.bytescan import BLOCK, ENGINES, ByteMatcher, file_identity

__all__ = ["ENGINES", "MAX_OFFSETS", "SPAN", "TreeScan", "scan_tree"]

SPAN = 32 << 20
"""Bytes of a file per task (read in :data:`rawfiles.bytescan.BLOCK` pieces): large enough
that a worker's per-task cost is nothing next to its reading, small enough that two
workers finish together on a home of a few files of very different sizes."""
PARALLEL_FROM = 2 * SPAN
"""Below this many bytes in all, one process scans (a pool would cost more than it saves)."""

SETTLE_NS = 50_000_000
"""How old a file's modification time must be before an early scan reads it (see
:meth:`TreeScan.start`): longer than the kernel's timestamp tick (1-10 ms)."""

_matcher: ByteMatcher | None = None  # set before the workers fork; each inherits a copy


MAX_OFFSETS = 1000
"""Offsets kept per file (the residue repair needs only the pages they fall in)."""


def _span_task(task: tuple[str, int, int]) -> list[int]:
    """File offsets of the matches that start in ``[start, end)`` of the file."""
    path, start, end = task
    assert _matcher is not None
    return _matcher.file_starts(path, start, end, block=BLOCK)


def scan_tree(folder: Path, needles: Sequence[bytes], workers: int | None = None,
              engine: str | None = None) -> dict[str, Any]:
    """Occurrences of any needle in every file below ``folder`` (a :class:`TreeScan`
    started and finished at once)."""
    return TreeScan(folder, needles, workers, engine).result()


class TreeScan:
    """A raw scan that can start on some files early and finish on all of them.

    :meth:`start` (once or more) scans the given files in the background (with one worker
    fewer than cores, so the caller keeps a core for what it does meanwhile); :meth:`result` lists
    every file below the folder again, scans those not scanned yet, rescans any scanned
    file whose size, modification time or inode changed since its scan started, and
    waits. So a result describes the files as they were when :meth:`result` was called,
    whichever of them were read early: an erasure starts the scan of the files its purge
    does not write (event store, keystore) while the purge runs, and of the purged files
    while the probes run (ADR 0012).

    ``result()`` returns ``files`` (how many), ``bytes`` (their size), ``needles``
    (distinct), ``engine``, ``hits`` (``[{"file": relative path, "count": n}]``, only
    files with a match), ``offsets`` (relative path -> byte offsets of the matches, the
    first :data:`MAX_OFFSETS` per file: where the residue repair looks; not for the
    record), ``early_bytes`` (the size of the files given to :meth:`start`, whose reading
    began before ``result()`` was called) and ``rescanned_bytes`` (read again because the
    file changed).
    """

    def __init__(self, folder: Path, needles: Sequence[bytes], workers: int | None = None,
                 engine: str | None = None) -> None:
        self.folder = folder
        self.wanted = tuple(sorted({n for n in needles if n}))
        self.byte_engine = engine or ENGINES[0]
        self.procs = workers if workers is not None else (os.cpu_count() or 1)
        self.matcher = ByteMatcher(self.wanted, self.byte_engine) if self.wanted else None
        self._seen: dict[Path, tuple[int, int, int]] = {}
        self._futures: dict[Path, list[tuple[tuple[str, int, int], Future[list[int]]]]] = {}
        self._pending: list[tuple[tuple[str, int, int], Future[list[int]]]] = []
        self._limit = max(1, self.procs - 1)
        self._running = 0
        self._lock = threading.RLock()  # a done callback can run inside _pump
        self._pool: ProcessPoolExecutor | None = None
        self._early = 0
        self._started: set[Path] = set()
        self._timers: list[threading.Timer] = []
        self._patches: dict[Path, tuple[frozenset[int], int]] = {}

    def start(self, paths: Sequence[Path]) -> None:
        """Begin scanning these files (below the folder) in the background."""
        if self.matcher is None or self.procs < 2:
            return  # one process: nothing to overlap; result() reads everything
        if sum(p.stat().st_size for p in self.folder.rglob("*") if p.is_file()) \
                < PARALLEL_FROM:
            return  # a small home: result() reads it all in this process
        files = [p for p in paths if p.is_file() and p not in self._started]
        self._started.update(files)
        self._ensure_pool()  # forked here, on the caller's thread
        self._when_settled(files)

    def _when_settled(self, files: Sequence[Path], tries: int = 3) -> None:
        """Queue the files whose modification time is older than SETTLE_NS; look at the
        others again later, on a timer thread (the caller goes on meanwhile).

        A write is seen as a new modification time only once the clock that stamps it
        has moved past the last one (a coarse clock: a tick of a few milliseconds), so a
        file written just now is not read early until it has settled: the identity taken
        when its reading starts must change with any later write. A file still being
        written after ``tries`` looks is left to :meth:`result`."""
        idents = {p: file_identity(p) for p in files}
        now = time.time_ns()  # after the stats: a settled file was settled when stat'ed
        fresh = [p for p in files if now - idents[p][1] < SETTLE_NS]
        self._enqueue([p for p in files if p not in fresh], idents)
        if fresh and tries:
            wait = max(idents[p][1] for p in fresh) + SETTLE_NS - now
            timer = threading.Timer(wait / 1e9, self._when_settled, [fresh, tries - 1])
            timer.daemon = True
            self._timers.append(timer)
            timer.start()

    def patch(self, path: Path, before: tuple[int, int, int], after: tuple[int, int, int],
              pages: Iterable[int], page_size: int) -> bool:
        """Say that ``path``, read early while its identity (size, mtime_ns, inode) was
        ``before``, now has identity ``after`` and differs from what was read only in
        these pages (numbered from 1, ``page_size`` bytes each): an SQLite file whose
        checkpoint copied exactly those pages in (the caller's proof: ADR 0012).

        :meth:`result` then keeps the early matches outside those pages and reads only the
        pages (with the longest needle minus one bytes on either side, so a match across
        a page edge is seen); if the identity at :meth:`result` is not ``after``, the
        file is read again in full, as any changed file is. Returns False, and nothing
        is recorded, when the file was not read early from ``before``."""
        with self._lock:
            if self._seen.get(path) != before or path not in self._futures:
                return False
            self._seen[path] = after
            self._patches[path] = (frozenset(pages), page_size)
        return True

    def result(self) -> dict[str, Any]:
        for timer in self._timers:
            timer.join()  # every early file is queued, its identity taken
        self._early = sum(ident[0] for ident in self._seen.values())
        files = [p for p in sorted(self.folder.rglob("*")) if p.is_file()]
        if self.matcher is None:
            return {"files": len(files), "bytes": 0, "needles": 0, "engine": self.byte_engine,
                    "hits": [], "offsets": {}, "early_bytes": 0, "rescanned_bytes": 0,
                    "patched_bytes": 0}
        now = {p: file_identity(p) for p in files}
        changed = [p for p in files if p in self._seen and now[p] != self._seen[p]]
        rescanned = sum(now[p][0] for p in changed)
        for p in changed:
            self._futures.pop(p, None)
            self._seen.pop(p)
            self._patches.pop(p, None)
        fresh = [p for p in files if p not in self._seen]
        total = sum(ident[0] for ident in now.values())
        try:
            if self._pool is None and (self.procs < 2 or total < PARALLEL_FROM):
                for p in fresh:
                    self._seen[p] = now[p]
                    self._futures[p] = [(t, _done(self.matcher.file_starts(
                        t[0], t[1], t[2], block=BLOCK))) for t in _spans(p, now[p][0])]
            else:
                with self._lock:
                    self._limit = self.procs
                self._ensure_pool()
                self._enqueue(fresh)
            found = {p: [(t, f.result()) for t, f in self._futures[p]] for p in files
                     if p in self._futures}
        finally:
            self.close()
        patched = 0
        for p, (pages, page_size) in self._patches.items():
            if p in found:
                found[p], read = self._apply_patch(p, found[p], pages, page_size, now[p][0])
                patched += read
        per_file: dict[str, int] = {}
        offsets: dict[str, list[int]] = {}
        for p, parts in found.items():
            for _task, starts in parts:
                if starts:
                    rel = str(p.relative_to(self.folder))
                    per_file[rel] = per_file.get(rel, 0) + len(starts)
                    kept = offsets.setdefault(rel, [])
                    kept.extend(starts[:MAX_OFFSETS - len(kept)])
        return {"files": len(files), "bytes": total, "needles": len(self.wanted),
                "engine": self.byte_engine,
                "hits": [{"file": f, "count": n} for f, n in sorted(per_file.items())],
                "offsets": offsets, "early_bytes": self._early, "rescanned_bytes": rescanned,
                "patched_bytes": patched}

    def _apply_patch(self, path: Path, parts: list[tuple[tuple[str, int, int], list[int]]],
                     pages: frozenset[int], page_size: int, size: int
                     ) -> tuple[list[tuple[tuple[str, int, int], list[int]]], int]:
        """The early matches of ``path`` outside the changed pages, plus the matches read
        now in those pages; and how many bytes were read now."""
        assert self.matcher is not None
        reach = max(self.matcher.longest - 1, 0)
        ranges: list[tuple[int, int]] = []
        for first, last in _runs(sorted(pages)):
            start, end = max(0, (first - 1) * page_size - reach), min(size, last * page_size)
            if start >= end:
                continue
            if ranges and start <= ranges[-1][1]:
                ranges[-1] = (ranges[-1][0], max(ranges[-1][1], end))
            else:
                ranges.append((start, end))
        starts = [r[0] for r in ranges]

        def stale(offset: int) -> bool:
            i = bisect.bisect_right(starts, offset) - 1
            return offset >= size or (i >= 0 and offset < ranges[i][1])

        kept = [(task, [o for o in found if not stale(o)]) for task, found in parts]
        task = (str(path), 0, size)
        kept.append((task, self.matcher.ranges_starts(path, ranges)))
        return kept, sum(e - s for s, e in ranges)

    def close(self) -> None:
        """Stop the workers (pending tasks are dropped); result() calls it."""
        for timer in self._timers:
            timer.cancel()
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    # -------------------------------------------------------------- background tasks
    def _ensure_pool(self) -> None:
        global _matcher
        with self._lock:
            if self._pool is not None:
                return
            # fork: the workers inherit the compiled matcher and only read files; they
            # never touch the parent's database connections
            _matcher = self.matcher
            try:
                self._pool = ProcessPoolExecutor(
                    self.procs, mp_context=multiprocessing.get_context("fork"),
                    initializer=_die_with_parent, initargs=(os.getpid(),))
                # start every worker now, while the matcher is set for them to inherit
                for f in [self._pool.submit(os.getpid) for _ in range(self.procs)]:
                    f.result()
            finally:
                _matcher = None

    def _enqueue(self, paths: Sequence[Path],
                 idents: dict[Path, tuple[int, int, int]] | None = None) -> None:
        with self._lock:
            for p in paths:
                # taken before the first byte is read
                self._seen[p] = ident = idents[p] if idents else file_identity(p)
                tasks: list[tuple[tuple[str, int, int], Future[list[int]]]] = [
                    (t, Future()) for t in _spans(p, ident[0])]
                self._futures[p] = tasks
                self._pending.extend(tasks)
        self._pump()

    def _pump(self) -> None:
        """Keep at most ``_limit`` tasks in flight (one core is left to the caller until
        result() is called)."""
        with self._lock:
            while self._pending and self._running < self._limit and self._pool is not None:
                task, mine = self._pending.pop(0)
                fut = self._pool.submit(_span_task, task)
                self._running += 1
                fut.add_done_callback(partial(self._finished, mine=mine))

    def _finished(self, fut: Future[list[int]], *, mine: Future[list[int]]) -> None:
        with self._lock:
            self._running -= 1
        if fut.cancelled():
            mine.cancel()
        elif (error := fut.exception()) is not None:
            mine.set_exception(error)
        else:
            mine.set_result(fut.result())
        self._pump()


def _die_with_parent(parent: int) -> None:
    """In a scan worker: be killed when the erasing process dies. A `kill -9` of an
    erasure otherwise left its workers waiting on their task pipe for ever (each holds
    the other's copy of its write end), holding the home's files and the caller's
    stdout open (issue 20: a resumed erasure's parent never saw the child end)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG (Linux)
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass
    if os.getppid() != parent:  # it died before the prctl
        os._exit(0)


def _runs(pages: Sequence[int]) -> Iterator[tuple[int, int]]:
    """Runs of consecutive numbers in a sorted sequence, as (first, last)."""
    first = last = None
    for p in pages:
        if last is not None and p == last + 1:
            last = p
            continue
        if first is not None and last is not None:
            yield first, last
        first = last = p
    if first is not None and last is not None:
        yield first, last


def _spans(path: Path, size: int) -> list[tuple[str, int, int]]:
    return [(str(path), start, min(start + SPAN, size)) for start in range(0, size, SPAN)]


def _done(value: list[int]) -> Future[list[int]]:
    fut: Future[list[int]] = Future()
    fut.set_result(value)
    return fut
