"""The raw file scan: every byte read, every needle counted once, boundaries included,
the same answers from both engines."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from governance import scan
from rawfiles.bytescan import ByteMatcher, file_identity


def test_both_engines_are_installed_here() -> None:
    """CI runs on x86-64, where the Hyperscan wheel exists: both engines are tested."""
    assert scan.ENGINES == ("hyperscan", "aho-corasick")


@pytest.mark.parametrize("engine", scan.ENGINES)
@pytest.mark.parametrize("workers", [1, 2])
def test_needles_across_chunk_boundaries_are_found_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int, engine: str) -> None:
    monkeypatch.setattr(scan, "SPAN", 128)  # tasks of 128 bytes, read 32 at a time
    monkeypatch.setattr(scan, "BLOCK", 32)
    monkeypatch.setattr(scan, "PARALLEL_FROM", 0)
    needle = b"erased-marker-7f3a"
    data = bytearray(os.urandom(1000).replace(b"e", b"x"))
    # 60: crosses a block boundary (64), 120: a span's (128), the last: ends the file
    for at in (0, 60, 120, 300, 1000 - len(needle)):
        data[at:at + len(needle)] = needle
    (tmp_path / "a.db").write_bytes(bytes(data))
    (tmp_path / "sub").mkdir()
    odd = b'\x00"quoted\\n" \xc3\xa9'  # NUL, quote, backslash, non-ASCII: matched literally
    (tmp_path / "sub" / "b-wal").write_bytes(b"clean" * 50 + b"other needle!" + odd)
    (tmp_path / "empty").write_bytes(b"")
    result = scan.scan_tree(tmp_path, [needle, b"other needle", odd, b""], workers=workers,
                            engine=engine)
    assert result["files"] == 3 and result["needles"] == 3 and result["engine"] == engine
    assert result["bytes"] == 1000 + 250 + 13 + len(odd)
    assert result["hits"] == [{"file": "a.db", "count": 5},
                              {"file": "sub/b-wal", "count": 2}]
    # where each match starts in its file (the residue repair maps these to pages)
    assert sorted(result["offsets"]["a.db"]) == [0, 60, 120, 300, 1000 - len(needle)]
    assert sorted(result["offsets"]["sub/b-wal"]) == [250, 263]


@pytest.mark.parametrize("engine", scan.ENGINES)
def test_regex_metacharacters_are_literal(tmp_path: Path, engine: str) -> None:
    (tmp_path / "f").write_bytes(b"aaa.b*c(d)[e]+ and axb-c")
    found = scan.scan_tree(tmp_path, [b"a.b*c(d)[e]+"], engine=engine)
    assert found["hits"] == [{"file": "f", "count": 1}]
    assert scan.scan_tree(tmp_path, [b"x.b*"], engine=engine)["hits"] == []


def test_nothing_to_look_for_reads_nothing(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"data")
    result = scan.scan_tree(tmp_path, [])
    assert result["bytes"] == 0 and result["hits"] == [] and result["files"] == 1


def test_unknown_engine_is_refused(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"data")
    with pytest.raises(ValueError, match="unknown scan engine"):
        scan.scan_tree(tmp_path, [b"data"], engine="grep")


@pytest.mark.parametrize("engine", scan.ENGINES)
def test_file_reads_find_needles_across_blocks(tmp_path: Path, engine: str) -> None:
    """The block reader behind both the raw scan and the keystore's own check."""
    needle = b"\x00key-bytes\xff"
    data = bytearray(b"." * 100)
    data[28:28 + len(needle)] = needle  # crosses the 32-byte block boundary
    path = tmp_path / "f"
    path.write_bytes(bytes(data) + needle)  # and one that ends the file
    matcher = ByteMatcher([needle], engine)
    assert matcher.file_starts(path, block=32) == [28, 100]
    assert matcher.file_starts(path, 29, 101, block=32) == [100]
    assert matcher.file_found(path, block=32)
    path.write_bytes(bytes(data[:30]) + b"." * 70)  # a cut needle is not a match
    assert not matcher.file_found(path, block=32)
    assert matcher.file_starts(path, block=32) == []
    (tmp_path / "empty").write_bytes(b"")
    assert matcher.file_starts(tmp_path / "empty") == []
    assert not matcher.file_found(tmp_path / "empty")


@pytest.mark.parametrize("engine", scan.ENGINES)
def test_a_needle_longer_than_hyperscan_takes_is_found_whole(tmp_path: Path,
                                                            engine: str) -> None:
    """An artifact body of 10 kB is one needle: Hyperscan refuses expressions past 16,000
    characters, so it gets the first bytes and the match is checked whole."""
    needle = os.urandom(10_000)
    path = tmp_path / "f"
    path.write_bytes(b"." * 50 + needle + b"." * 50 + needle[:9_999] + b".")
    matcher = ByteMatcher([needle, b"short"], engine)
    assert matcher.file_starts(path, block=4096) == [50]
    assert matcher.file_found(path, block=4096)
    path.write_bytes(needle[:9_999] + b"short")  # the long one's prefix only
    assert matcher.file_starts(path) == [9_999] and matcher.file_found(path)
    path.write_bytes(needle[:9_999])
    assert not matcher.file_found(path) and matcher.file_starts(path) == []
    assert scan.scan_tree(tmp_path, [needle], engine=engine)["hits"] == []


@pytest.mark.parametrize("engine", scan.ENGINES)
def test_files_written_after_an_early_start_are_read_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine: str) -> None:
    """An erasure starts reading the files its purge does not write while it purges, and
    the purged ones while it probes: a file written after its early read started is read
    again, a file never started is read at the end, and one that did not change (or is
    started twice) is read once."""
    monkeypatch.setattr(scan, "PARALLEL_FROM", 0)
    needle = b"erased-marker-91c2"
    (tmp_path / "events.db").write_bytes(b"." * 5000)
    (tmp_path / "keystore.db").write_bytes(b"k" * 3000)
    (tmp_path / "kept.db").write_bytes(b"x" * 100 + needle)
    early = scan.TreeScan(tmp_path, [needle], workers=2, engine=engine)
    early.start([tmp_path / "events.db", tmp_path / "keystore.db", tmp_path / "kept.db"])
    time.sleep(scan.SETTLE_NS / 1e9 + 0.1)  # just written: their reading waits that long
    # same size, new bytes: only the modification time says it changed
    (tmp_path / "events.db").write_bytes(b"." * 2000 + needle + b"." * (3000 - len(needle)))
    (tmp_path / "projections.db").write_bytes(needle + b"p" * 10)
    early.start([tmp_path / "projections.db", tmp_path / "kept.db"])  # kept.db: once
    (tmp_path / "late.db").write_bytes(b"l" * 7)  # never started: read by result()
    result = early.result()
    assert result["hits"] == [{"file": "events.db", "count": 1},
                              {"file": "kept.db", "count": 1},
                              {"file": "projections.db", "count": 1}]
    assert result["offsets"]["events.db"] == [2000]
    assert result["early_bytes"] == 5000 + 3000 + 100 + len(needle) + len(needle) + 10
    assert result["rescanned_bytes"] == 5000
    assert result["bytes"] == 5000 + 3000 + 100 + len(needle) + len(needle) + 10 + 7
    assert result["files"] == 5


def test_an_early_start_on_one_core_reads_everything_at_the_end(tmp_path: Path) -> None:
    needle = b"erased-marker-91c2"
    (tmp_path / "a").write_bytes(b"." * 100)
    one = scan.TreeScan(tmp_path, [needle], workers=1)
    one.start([tmp_path / "a"])
    (tmp_path / "a").write_bytes(b"." * 10 + needle)
    result = one.result()
    assert result["hits"] == [{"file": "a", "count": 1}] and result["early_bytes"] == 0


def test_a_small_home_is_read_at_the_end_in_this_process(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"." * 100)
    small = scan.TreeScan(tmp_path, [b"needle"], workers=2)
    small.start([tmp_path / "a"])
    assert small._pool is None  # no worker processes for a few bytes
    assert small.result()["early_bytes"] == 0


def _write_pages(path: Path, pages: dict[int, bytes], page_size: int) -> None:
    with open(path, "r+b") as f:
        for pgno, data in pages.items():
            f.seek((pgno - 1) * page_size)
            f.write(data)


@pytest.mark.parametrize("engine", scan.ENGINES)
def test_a_patched_file_keeps_its_early_reads_outside_the_changed_pages(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine: str) -> None:
    """A file read early and then changed in named pages (an SQLite checkpoint) is not
    read again: the early matches in the changed pages, or running into one, are
    dropped; the changed pages are read with the needle's length on either side; matches
    elsewhere stay (residue the change did not touch)."""
    monkeypatch.setattr(scan, "PARALLEL_FROM", 0)
    needle = b"erased-marker-5d0e"
    size = 64
    data = bytearray(b"." * size * 10)
    for at in (1 * size + 3, 3 * size - 5, 6 * size + 10):  # page 2; runs into page 4; 7
        data[at:at + len(needle)] = needle
    data[8 * size - (len(needle) - 8):8 * size] = needle[:-8]  # page 9 will complete it
    path = tmp_path / "projections.db"
    path.write_bytes(bytes(data))
    time.sleep(scan.SETTLE_NS / 1e9 + 0.01)
    early = scan.TreeScan(tmp_path, [needle], workers=2, engine=engine)
    early.start([path])
    before = file_identity(path)
    while not all(f.done() for _t, f in early._futures[path]):
        time.sleep(0.01)
    # the change: page 2 and 4 rewritten (page 2 clean now), page 9 gets a new copy that
    # starts in page 8 (unchanged), the file grows by page 11
    new9 = bytearray(b"," * size)
    new9[:8] = needle[-8:]
    _write_pages(path, {2: b"," * size, 4: b"," * size, 9: bytes(new9),
                        11: b"," * 10 + needle + b"," * (size - 10 - len(needle))}, size)
    assert early.patch(path, before, file_identity(path), [2, 4, 9, 11], size)
    result = early.result()
    assert sorted(result["offsets"]["projections.db"]) == [
        6 * size + 10, 8 * size - (len(needle) - 8), 10 * size + 10]
    assert result["rescanned_bytes"] == 0 and result["patched_bytes"] > 0
    full = scan.scan_tree(tmp_path, [needle], engine=engine)
    assert full["offsets"] == result["offsets"] and full["hits"] == result["hits"]


def test_a_patch_is_refused_or_undone_when_the_file_changed_otherwise(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The patch is the caller's proof of what changed: refused when the file is not the
    one read early, and set aside (the file read again in full) when it changes after."""
    monkeypatch.setattr(scan, "PARALLEL_FROM", 0)
    needle = b"erased-marker-5d0e"
    path = tmp_path / "projections.db"
    path.write_bytes(b"." * 4096)
    time.sleep(scan.SETTLE_NS / 1e9 + 0.01)
    early = scan.TreeScan(tmp_path, [needle], workers=2)
    early.start([path])
    before = file_identity(path)
    assert not early.patch(path, (before[0] + 1, *before[1:]), before, [1], 4096)
    assert not early.patch(tmp_path / "other.db", before, before, [1], 4096)
    assert early.patch(path, before, before, [], 4096)
    time.sleep(0.02)
    path.write_bytes(b"." * 100 + needle + b"." * (4096 - 100 - len(needle)))
    result = early.result()
    assert result["offsets"]["projections.db"] == [100]
    assert result["rescanned_bytes"] == 4096 and result["patched_bytes"] == 0
