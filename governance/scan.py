"""Raw scan: is any of the erased content's bytes still in a file the ledger owns?

No SQL, no parsing: every byte of every file under the home is read once and searched
for all needles at once with an Aho-Corasick automaton (``ahocorasick_rs``). Files are
cut into chunks that overlap by the longest needle minus one, so a match that crosses a
chunk boundary is found, and counted once (by the chunk it starts in). Large homes are
scanned by one worker process per core: the scan is the one part of an erasure whose
cost follows the bytes the ledger owns rather than the erased items (ADR 0012), so it
gets the whole machine.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from ahocorasick_rs import BytesAhoCorasick

__all__ = ["CHUNK", "scan_tree"]

CHUNK = 32 << 20
"""Bytes per task; a worker holds one chunk (plus the overlap) in memory at a time."""
PARALLEL_FROM = 2 * CHUNK
"""Below this many bytes in all, one process scans (a pool would cost more than it saves)."""

_matcher: tuple[tuple[bytes, ...], BytesAhoCorasick] | None = None


def _count(path: str, start: int, overlap: int, needles: tuple[bytes, ...]) -> int:
    """Matches that start in ``[start, start + CHUNK)`` of ``path``."""
    global _matcher
    if _matcher is None or _matcher[0] != needles:
        _matcher = (needles, BytesAhoCorasick(list(needles)))
    with open(path, "rb") as f:
        f.seek(start)
        buf = f.read(CHUNK + overlap)
    return sum(1 for _i, s, _e in _matcher[1].find_matches_as_indexes(buf) if s < CHUNK)


def _count_task(task: tuple[str, int, int, tuple[bytes, ...]]) -> int:
    return _count(*task)


def scan_tree(folder: Path, needles: Sequence[bytes],
              workers: int | None = None) -> dict[str, Any]:
    """Occurrences of any needle in every file below ``folder``.

    Returns ``files`` (how many), ``bytes`` (read), ``needles`` (distinct) and ``hits``
    (``[{"file": relative path, "count": n}]``, only files with a match).
    """
    files = [p for p in sorted(folder.rglob("*")) if p.is_file()]
    wanted = tuple(sorted({n for n in needles if n}))
    sizes = {p: p.stat().st_size for p in files}
    total = sum(sizes.values())
    if not wanted:
        return {"files": len(files), "bytes": 0, "needles": 0, "hits": []}
    overlap = max(len(n) for n in wanted) - 1
    tasks = [(str(p), start, overlap, wanted)
             for p in files for start in range(0, sizes[p], CHUNK)]
    procs = workers if workers is not None else (os.cpu_count() or 1)
    if procs > 1 and total >= PARALLEL_FROM:
        # fork: the workers only read files; they never touch the parent's connections
        with ProcessPoolExecutor(procs, mp_context=multiprocessing.get_context("fork")) as ex:
            counts = list(ex.map(_count_task, tasks))
    else:
        counts = [_count_task(t) for t in tasks]
    per_file: dict[str, int] = {}
    for (path, _s, _o, _n), n in zip(tasks, counts, strict=True):
        if n:
            rel = str(Path(path).relative_to(folder))
            per_file[rel] = per_file.get(rel, 0) + n
    return {"files": len(files), "bytes": total, "needles": len(wanted),
            "hits": [{"file": f, "count": n} for f, n in sorted(per_file.items())]}
