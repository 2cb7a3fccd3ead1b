"""Find any of many byte strings in a buffer: the engine behind every raw scan.

Two engines, same answers (tests run both): Hyperscan (Intel's multi-literal matcher,
SIMD, several GB/s per core on x86-64, used where the ``hyperscan`` package is installed)
and the ``ahocorasick_rs`` automaton everywhere else (a few hundred MB/s per core on
needles that start with common letters). Needles go to Hyperscan as ``\\xHH`` escapes, so
any byte, NUL included, is matched literally. Used by the keystore (destroyed key bytes
left in its files) and by governance's raw scan of erased content.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ahocorasick_rs import BytesAhoCorasick

from rawfiles.heldfiles import HeldFile

hyperscan: Any
try:
    import hyperscan
except ImportError:  # pragma: no cover - exercised on machines without the wheel
    hyperscan = None

__all__ = ["BLOCK", "ENGINES", "ByteMatcher", "file_identity"]

ENGINES = ("hyperscan", "aho-corasick") if hyperscan is not None else ("aho-corasick",)

HS_PREFIX = 2048
"""Bytes of a needle Hyperscan is given: its expressions are limited to 16,000 characters
(4 per byte as ``\\xHH`` escapes), so a needle of an artifact body past 4,000 bytes made
the whole erasure fail. A longer needle is matched by its first ``HS_PREFIX`` bytes, then
compared whole where they matched (the block in view runs on by the longest needle)."""

BLOCK = 1 << 20
"""Bytes per read when a file is scanned: read into one reused buffer that stays in the
CPU's cache while the matcher runs over it. On this project's 2-core CI machine
(Hyperscan, 2,000 content needles, one core), over the event store file: 1 MiB reads into
a reused buffer 1.5-1.6 GB/s, 8 MiB ``read()`` calls (a new buffer each) 0.8 GB/s; over a
whole home the matcher bounds it either way (ADR 0012, third pass)."""


class ByteMatcher:
    """All needles compiled once; :meth:`starts` gives every match's start offset,
    :meth:`found` stops at the first match."""

    def __init__(self, needles: tuple[bytes, ...] | list[bytes],
                 engine: str | None = None) -> None:
        self.needles = tuple(needles)
        self.engine = engine or ENGINES[0]
        self._lengths = [len(n) for n in self.needles]
        if self.engine not in ENGINES:
            raise ValueError(f"unknown scan engine {self.engine!r}; here: {', '.join(ENGINES)}")
        if self.engine == "hyperscan":
            db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
            db.compile(expressions=[b"".join(b"\\x%02x" % c for c in n[:HS_PREFIX])
                                    for n in self.needles],
                       ids=list(range(len(self.needles))), elements=len(self.needles),
                       flags=[0] * len(self.needles))
            self._db = db
        else:
            self._ac = BytesAhoCorasick(list(self.needles))

    @property
    def longest(self) -> int:
        return max(self._lengths, default=0)

    def file_starts(self, path: str | Path, start: int = 0, end: int | None = None,
                    block: int = BLOCK) -> list[int]:
        """File offsets of the matches that start in ``[start, end)`` (``end``: the file's
        size). Reads ``block`` bytes at a time plus the longest needle minus one, so a
        match across a block boundary is found, and counted once (by its first block)."""
        return [pos + s for pos, view, mine in self._blocks(path, start, end, block)
                for s in self.starts(view) if s < mine]

    def ranges_starts(self, path: str | Path,
                      ranges: Sequence[tuple[int, int]]) -> list[int]:
        """File offsets of the matches that start in any of the ``[start, end)`` ranges
        (sorted, not overlapping): each range is read with the longest needle minus one
        bytes after it, one open file for all of them."""
        out: list[int] = []
        tail = max(self.longest - 1, 0)
        with HeldFile(path) as f:  # never close a file SQLite has open (rawfiles/heldfiles.py)
            for start, end in ranges:
                f.seek(start)
                view = memoryview(bytearray(end - start + tail))
                data = view[:_read_full(f, view)]
                out.extend(start + s for s in self.starts(data) if s < end - start)
        return out

    def file_found(self, path: str | Path, block: int = BLOCK) -> bool:
        """Is any needle anywhere in the file? (stops at the first match)"""
        return any(self.found(view) for _pos, view, _mine in self._blocks(path, 0, None, block))

    def _blocks(self, path: str | Path, start: int, end: int | None, block: int
                ) -> Iterator[tuple[int, memoryview, int]]:
        """``(position, bytes from there, how many of them are this block's own)`` for each
        block of ``[start, end)``, the bytes running on by the longest needle minus one;
        one buffer, reused."""
        view = memoryview(bytearray(block + max(self.longest - 1, 0)))
        with HeldFile(path) as f:  # never close a file SQLite has open (rawfiles/heldfiles.py)
            stop = end if end is not None else f.seek(0, 2)
            for pos in range(start, stop, block):
                f.seek(pos)
                n = _read_full(f, view)
                if not n:
                    return
                yield pos, view[:n], min(block, stop - pos)

    def _whole(self, buf: bytes | memoryview, pattern: int, end: int) -> int | None:
        """Where a Hyperscan match of ``pattern`` ending at ``end`` starts, if the needle
        is there whole (see :data:`HS_PREFIX`)."""
        n = self._lengths[pattern]
        if n <= HS_PREFIX:
            return end - n
        start = end - HS_PREFIX
        return start if buf[start:start + n] == self.needles[pattern] else None

    def starts(self, buf: bytes | memoryview) -> list[int]:
        if self.engine == "hyperscan":
            found: list[int] = []

            def on_match(pattern: int, _from: int, end: int, _flags: int, _ctx: Any) -> None:
                start = self._whole(buf, pattern, end)
                if start is not None:
                    found.append(start)

            self._db.scan(buf, match_event_handler=on_match)
            return found
        return [s for _i, s, _e in self._ac.find_matches_as_indexes(buf)]

    def found(self, buf: bytes | memoryview) -> bool:
        if self.engine == "hyperscan":
            hits: list[int] = []

            def on_match(pattern: int, _from: int, end: int, *_: Any) -> bool:
                if self._whole(buf, pattern, end) is None:
                    return False  # a long needle's prefix only: go on
                hits.append(pattern)
                return True  # one is enough: stop the scan

            try:
                self._db.scan(buf, match_event_handler=on_match)
            except hyperscan.ScanTerminated:
                pass
            return bool(hits)
        return bool(self._ac.find_matches_as_indexes(buf))


def file_identity(path: str | Path) -> tuple[int, int, int]:
    """Size, modification time (ns) and inode: what changes when a file is written (the
    time only once the clock that stamps writes has ticked past the last one)."""
    st = Path(path).stat()
    return st.st_size, st.st_mtime_ns, st.st_ino


def _read_full(f: Any, view: memoryview) -> int:
    """Fill ``view`` from ``f`` (short reads retried); bytes read, less only at the end."""
    got = 0
    while got < len(view):
        n = f.readinto(view[got:])
        if not n:
            break
        got += n
    return got
