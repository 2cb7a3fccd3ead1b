"""Zero the bytes no row uses in single pages of an SQLite file.

SQLite's ``secure_delete`` zeroes a deleted cell where it lies and every freed page, but
when it rebuilds a b-tree page during a rebalance (``rebuildPage``) it does not clear the
page's unallocated gap, which can keep an old copy of a cell that moved to a sibling;
when that row is deleted later, from its new place, the copy stays (ADR 0012). The
keystore (destroyed data keys) and the projections database (erased content) both meet
it. :func:`scrub_pages` removes such copies from just the pages that hold them, through
``sqlite_dbpage`` (SQLite's own page writer: the change is journaled like any other and
every connection sees it), so the repair costs those pages, not a ``VACUUM`` of the file.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from rawfiles.heldfiles import HeldFile

__all__ = ["WalFrames", "freelist_trunks", "scrub_btree_page", "scrub_pages", "wal_frames",
           "write_transaction"]

_WAL_MAGIC = (0x377F0682, 0x377F0683)


@contextlib.contextmanager
def write_transaction(engine: Engine) -> Iterator[Connection]:
    """One SQLite transaction that holds the write lock from its first statement
    (``BEGIN IMMEDIATE``): what it reads (pages, the freelist, the schema) cannot change
    before it writes. The driver's implicit transactions would begin only at the first
    INSERT/UPDATE/DELETE, and run DDL outside any transaction."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
        c.exec_driver_sql("BEGIN IMMEDIATE")
        try:
            yield c
        except BaseException:
            c.exec_driver_sql("ROLLBACK")
            raise
        c.exec_driver_sql("COMMIT")


def scrub_pages(c: Connection, offsets: Iterable[int]) -> int | None:
    """In ``c``'s write transaction (:func:`write_transaction`), zero the bytes no row uses
    in the pages these byte offsets of the main database file fall in; returns how many
    pages changed, or None when this SQLite has no ``sqlite_dbpage`` (nothing written).

    In a b-tree page: the gap between the cell pointers and the cell content, and the
    bodies of free blocks (their 4-byte headers stay); never a cell. A free page:
    everything but a trunk's list of pages. The caller checkpoints afterwards, so the
    zeroed pages reach the file and the WAL frames with the old images go.
    """
    size = int(c.exec_driver_sql("PRAGMA page_size").scalar_one())

    def read(pgno: int) -> bytes:
        row = c.exec_driver_sql("SELECT data FROM sqlite_dbpage WHERE pgno = ?",
                                (pgno,)).first()
        return bytes(row[0]) if row is not None else b""

    changed = 0
    try:
        trunks = freelist_trunks(read)  # as this transaction sees the file
        free = set(trunks) | {p for leaves in trunks.values() for p in leaves}
        for pgno in sorted({off // size + 1 for off in offsets}):
            data = read(pgno)
            if not data:
                continue
            if pgno in trunks:
                keep = 8 + 4 * len(trunks[pgno])
                new = data[:keep] + bytes(len(data) - keep)
            elif pgno in free:
                new = bytes(len(data))
            else:
                new = scrub_btree_page(data, pgno)
            if new != data:
                c.exec_driver_sql("UPDATE sqlite_dbpage SET data = ? WHERE pgno = ?",
                                  (new, pgno))
                changed += 1
    except sa.exc.OperationalError as e:
        if "sqlite_dbpage" not in str(e):
            raise
        return None  # an SQLite built without it; nothing was written
    return changed


def freelist_trunks(read_page: Callable[[int], bytes]) -> dict[int, list[int]]:
    """Freelist trunk pages -> the leaf pages each lists (header of page 1, then the
    trunk chain)."""
    trunk, count = struct.unpack(">II", read_page(1)[32:40])
    trunks: dict[int, list[int]] = {}
    while trunk and trunk not in trunks and len(trunks) <= count:
        page = read_page(trunk)
        if len(page) < 8:
            break
        nxt, n = struct.unpack(">II", page[:8])
        if 8 + 4 * n > len(page):
            break
        trunks[trunk] = list(struct.unpack(f">{n}I", page[8:8 + 4 * n]))
        trunk = nxt
    return trunks


def scrub_btree_page(data: bytes, pgno: int) -> bytes:
    """A b-tree page with its unallocated gap and free-block bodies zeroed (cells, the
    header and the cell pointers untouched); any other page is returned as it is."""
    h = 100 if pgno == 1 else 0
    kind = data[h]
    if kind not in (2, 5, 10, 13):  # not a b-tree page (overflow, pointer map...)
        return data
    out = bytearray(data)
    first_free, ncell, content = struct.unpack(">HHH", data[h + 1:h + 7])
    pointers_end = h + (8 if kind in (10, 13) else 12) + 2 * ncell
    content = min(content or 65536, len(data))
    if pointers_end < content:
        out[pointers_end:content] = bytes(content - pointers_end)
    block, seen = first_free, 0
    while block and content <= block < len(data) - 4 and seen < len(data) // 4:
        nxt, size = struct.unpack(">HH", data[block:block + 4])
        end = min(block + size, len(data))
        out[block + 4:end] = bytes(max(0, end - block - 4))
        block, seen = nxt, seen + 1
    return bytes(out)


@dataclass(frozen=True)
class WalFrames:
    """The committed frames of an SQLite write-ahead log, as its headers name them."""

    page_size: int
    frames: int
    """Frames up to and including the last commit frame (SQLite's ``mxFrame``)."""
    pages: frozenset[int]
    """Every page number those frames write: what a checkpoint copies into the file."""


def wal_frames(path: Path) -> WalFrames | None:
    """Read a WAL file's frame headers (not its pages): the frames of the current log
    generation (salts equal to the header's) up to the last commit frame. None when there
    is no WAL or no valid header.

    The frame checksums are not recomputed (in Python that costs about 1 s per 30 MB);
    instead the caller compares ``frames`` with the count SQLite itself reports for the
    log (``wal_checkpoint``'s second value, SQLite's ``mxFrame``, found with checksums),
    under a write lock that keeps the log from growing: equal counts mean these are the
    headers of exactly the frames a checkpoint copies.
    """
    try:
        with HeldFile(path) as f:  # never close a file SQLite has open
            head = f.read(32)
            if len(head) < 32:
                return None
            magic, _version, page_size, _seq, salt1, salt2, _c1, _c2 = struct.unpack(
                ">8I", head)
            if magic not in _WAL_MAGIC or page_size < 512 or page_size & (page_size - 1):
                return None
            end = f.seek(0, 2)
            pages: list[int] = []
            frames = 0
            for at in range(32, end - 24 - page_size + 1, 24 + page_size):
                f.seek(at)
                pgno, commit, fs1, fs2 = struct.unpack(">4I", f.read(16))
                if (fs1, fs2) != (salt1, salt2):
                    break
                pages.append(pgno)
                if commit:
                    frames = len(pages)
    except FileNotFoundError:
        return None
    return WalFrames(page_size=page_size, frames=frames, pages=frozenset(pages[:frames]))
