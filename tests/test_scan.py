"""The raw file scan: every byte read, every needle counted once, boundaries included,
the same answers from both engines."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from governance import scan


def test_both_engines_are_installed_here() -> None:
    """CI runs on x86-64, where the Hyperscan wheel exists: both engines are tested."""
    assert scan.ENGINES == ("hyperscan", "aho-corasick")


@pytest.mark.parametrize("engine", scan.ENGINES)
@pytest.mark.parametrize("workers", [1, 2])
def test_needles_across_chunk_boundaries_are_found_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int, engine: str) -> None:
    monkeypatch.setattr(scan, "CHUNK", 64)
    monkeypatch.setattr(scan, "PARALLEL_FROM", 0)
    needle = b"erased-marker-7f3a"
    data = bytearray(os.urandom(1000).replace(b"e", b"x"))
    for at in (0, 60, 130, 1000 - len(needle)):  # 60: crosses the first boundary
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
    assert result["hits"] == [{"file": "a.db", "count": 4},
                              {"file": "sub/b-wal", "count": 2}]
    # where each match starts in its file (the residue repair maps these to pages)
    assert sorted(result["offsets"]["a.db"]) == [0, 60, 130, 1000 - len(needle)]
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
