"""Raw scan: is any of the erased content's bytes still in a file the ledger owns?

No SQL, no parsing: every byte of every file under the home is read once and searched
for all needles at once. Files are cut into chunks that overlap by the longest needle
minus one, so a match that crosses a chunk boundary is found, and counted once (by the
chunk it starts in). Large homes are scanned by one worker process per core: the scan is
the one part of an erasure whose cost follows the bytes the ledger owns rather than the
erased items (ADR 0012), so it gets the whole machine.

The matcher (Hyperscan where installed, else Aho-Corasick) is keys/bytescan.py.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from keys.bytescan import ENGINES, ByteMatcher

__all__ = ["CHUNK", "ENGINES", "MAX_OFFSETS", "scan_tree"]

CHUNK = 8 << 20
"""Bytes per task; a worker holds one chunk (plus the overlap) in memory at a time. Small
enough to stay in cache: 8 MiB chunks scanned a 400 MB home at 2.2-2.5 GB/s on two
workers, 32 MiB chunks at 1.4-1.6 GB/s (this machine, Hyperscan)."""
PARALLEL_FROM = 2 * CHUNK
"""Below this many bytes in all, one process scans (a pool would cost more than it saves)."""

_matcher: ByteMatcher | None = None  # set before the workers fork; each inherits a copy


MAX_OFFSETS = 1000
"""Offsets kept per file (the residue repair needs only the pages they fall in)."""


def _count_task(task: tuple[str, int, int]) -> list[int]:
    """File offsets of the matches that start in ``[start, start + CHUNK)`` of the file."""
    path, start, overlap = task
    assert _matcher is not None
    with open(path, "rb") as f:
        f.seek(start)
        buf = f.read(CHUNK + overlap)
    return [start + s for s in _matcher.starts(buf) if s < CHUNK]


def scan_tree(folder: Path, needles: Sequence[bytes], workers: int | None = None,
              engine: str | None = None) -> dict[str, Any]:
    """Occurrences of any needle in every file below ``folder``.

    Returns ``files`` (how many), ``bytes`` (read), ``needles`` (distinct), ``engine``,
    ``hits`` (``[{"file": relative path, "count": n}]``, only files with a match) and
    ``offsets`` (relative path -> byte offsets of the matches, the first
    :data:`MAX_OFFSETS` per file: where the residue repair looks; not for the record).
    """
    global _matcher
    files = [p for p in sorted(folder.rglob("*")) if p.is_file()]
    wanted = tuple(sorted({n for n in needles if n}))
    engine = engine or ENGINES[0]
    if not wanted:
        return {"files": len(files), "bytes": 0, "needles": 0, "engine": engine, "hits": [],
                "offsets": {}}
    sizes = {p: p.stat().st_size for p in files}
    total = sum(sizes.values())
    overlap = max(len(n) for n in wanted) - 1
    tasks = [(str(p), start, overlap) for p in files for start in range(0, sizes[p], CHUNK)]
    procs = workers if workers is not None else (os.cpu_count() or 1)
    _matcher = ByteMatcher(wanted, engine)
    try:
        if procs > 1 and total >= PARALLEL_FROM:
            # fork: the workers inherit the compiled matcher and only read files; they
            # never touch the parent's database connections
            with ProcessPoolExecutor(procs,
                                     mp_context=multiprocessing.get_context("fork")) as ex:
                found = list(ex.map(_count_task, tasks, chunksize=4))
        else:
            found = [_count_task(t) for t in tasks]
    finally:
        _matcher = None
    per_file: dict[str, int] = {}
    offsets: dict[str, list[int]] = {}
    for (path, _s, _o), starts in zip(tasks, found, strict=True):
        if starts:
            rel = str(Path(path).relative_to(folder))
            per_file[rel] = per_file.get(rel, 0) + len(starts)
            kept = offsets.setdefault(rel, [])
            kept.extend(starts[:MAX_OFFSETS - len(kept)])
    return {"files": len(files), "bytes": total, "needles": len(wanted), "engine": engine,
            "hits": [{"file": f, "count": n} for f, n in sorted(per_file.items())],
            "offsets": offsets}
