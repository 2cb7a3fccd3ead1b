"""The raw file scan: every byte read, every needle counted once, boundaries included."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from governance import scan


@pytest.mark.parametrize("workers", [1, 2])
def test_needles_across_chunk_boundaries_are_found_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int) -> None:
    monkeypatch.setattr(scan, "CHUNK", 64)
    monkeypatch.setattr(scan, "PARALLEL_FROM", 0)
    needle = b"erased-marker-7f3a"
    data = bytearray(os.urandom(1000).replace(b"e", b"x"))
    for at in (0, 60, 130, 1000 - len(needle)):  # 60: crosses the first boundary
        data[at:at + len(needle)] = needle
    (tmp_path / "a.db").write_bytes(bytes(data))
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b-wal").write_bytes(b"clean" * 50 + b"other needle!")
    (tmp_path / "empty").write_bytes(b"")
    result = scan.scan_tree(tmp_path, [needle, b"other needle", b""], workers=workers)
    assert result["files"] == 3 and result["needles"] == 2
    assert result["bytes"] == 1000 + 263
    assert result["hits"] == [{"file": "a.db", "count": 4},
                              {"file": "sub/b-wal", "count": 1}]


def test_nothing_to_look_for_reads_nothing(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"data")
    assert scan.scan_tree(tmp_path, []) == {"files": 1, "bytes": 0, "needles": 0, "hits": []}
