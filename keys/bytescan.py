"""Find any of many byte strings in a buffer: the engine behind every raw scan.

Two engines, same answers (tests run both): Hyperscan (Intel's multi-literal matcher,
SIMD, several GB/s per core on x86-64, used where the ``hyperscan`` package is installed)
and the ``ahocorasick_rs`` automaton everywhere else (a few hundred MB/s per core on
needles that start with common letters). Needles go to Hyperscan as ``\\xHH`` escapes, so
any byte, NUL included, is matched literally. Used by the keystore (destroyed key bytes
left in its files) and by governance's raw scan of erased content.
"""

from __future__ import annotations

from typing import Any

from ahocorasick_rs import BytesAhoCorasick

hyperscan: Any
try:
    import hyperscan
except ImportError:  # pragma: no cover - exercised on machines without the wheel
    hyperscan = None

__all__ = ["ENGINES", "ByteMatcher"]

ENGINES = ("hyperscan", "aho-corasick") if hyperscan is not None else ("aho-corasick",)


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
            db.compile(expressions=[b"".join(b"\\x%02x" % c for c in n) for n in self.needles],
                       ids=list(range(len(self.needles))), elements=len(self.needles),
                       flags=[0] * len(self.needles))
            self._db = db
        else:
            self._ac = BytesAhoCorasick(list(self.needles))

    def starts(self, buf: bytes) -> list[int]:
        if self.engine == "hyperscan":
            found: list[int] = []
            lengths = self._lengths

            def on_match(pattern: int, _from: int, end: int, _flags: int, _ctx: Any) -> None:
                found.append(end - lengths[pattern])

            self._db.scan(buf, match_event_handler=on_match)
            return found
        return [s for _i, s, _e in self._ac.find_matches_as_indexes(buf)]

    def found(self, buf: bytes) -> bool:
        if self.engine == "hyperscan":
            hits: list[int] = []

            def on_match(pattern: int, *_: Any) -> bool:
                hits.append(pattern)
                return True  # one is enough: stop the scan

            try:
                self._db.scan(buf, match_event_handler=on_match)
            except hyperscan.ScanTerminated:
                pass
            return bool(hits)
        return bool(self._ac.find_matches_as_indexes(buf))
