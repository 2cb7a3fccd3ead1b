"""Destroyed data keys leave no copy in the keystore files, even where SQLite's page
rebalancing kept an old copy of a cell in a page's free space (then: those pages are
scrubbed; VACUUM if that was not enough)."""

from __future__ import annotations

import random
import struct
from datetime import UTC, datetime
from pathlib import Path

import pytest

from keys.datakeys import DataKeyStore, make_engine, store_sqlite
from keys.errors import KeystoreError
from rawfiles.bytescan import ENGINES, ByteMatcher

AT = datetime(2026, 1, 1, tzinfo=UTC)


def _store(tmp_path: Path) -> DataKeyStore:
    return DataKeyStore(make_engine(f"sqlite:///{tmp_path / 'keystore.sqlite'}",
                                    module=store_sqlite()))


def _hit(store: DataKeyStore) -> dict[Path, list[int]]:
    """What the check reports for a key found at the start of the keystore's page 2."""
    return {store.files()[0]: [4096]}


def _all_bytes(store: DataKeyStore) -> bytes:
    return b"".join(p.read_bytes() for p in store.files())


def test_many_destroyed_keys_leave_no_bytes_in_any_keystore_file(tmp_path: Path) -> None:
    store = _store(tmp_path)
    ids = [f"item-{i:05d}" for i in range(4000)]
    for start in range(0, len(ids), 500):  # many commands: many page splits
        store.create_many(ids[start:start + 500], AT)
    doomed = sorted(random.Random(7).sample(ids, 1500))
    material = store.get_many(doomed)
    assert len(material) == 1500
    assert store.destroy(doomed, AT) == doomed
    data = _all_bytes(store)
    assert [k for k, v in material.items() if v in data] == []
    kept = [i for i in ids if i not in set(doomed)]
    assert len(store.get_many(kept)) == len(kept)  # the others are intact
    store.engine.dispose()


def _plant(store: DataKeyStore, key: bytes) -> tuple[int, int]:
    """Write ``key`` into the unallocated gap of a ``data_keys`` leaf page, as SQLite's
    rebalance leaves an old copy of a moved cell there. Returns (page, file offset)."""
    store.compact()  # everything in the file, the WAL empty
    path = store.files()[0]
    with store.engine.connect() as c:
        leaves = [int(r[0]) for r in c.exec_driver_sql(
            "SELECT pageno FROM dbstat WHERE name = 'data_keys' AND pagetype = 'leaf' "
            "AND unused > 100 ORDER BY pageno")]
    store.engine.dispose()
    data = bytearray(path.read_bytes())
    pgno = leaves[0]
    base = (pgno - 1) * 4096
    ncell, content = struct.unpack(">HH", data[base + 3:base + 7])
    at = base + 8 + 2 * ncell + 4
    assert at + len(key) < base + content, "gap too small for the planted bytes"
    data[at:at + len(key)] = key
    path.write_bytes(bytes(data))
    return pgno, at


def test_a_planted_copy_of_a_destroyed_key_is_scrubbed_from_its_page_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The copy sits in a page's gap, where no row is: deleting the row leaves it, the
    check finds it, and the repair zeroes that page's unused bytes; every other page of
    the file is unchanged, every other key intact, and no VACUUM runs."""
    store = _store(tmp_path)
    ids = [f"item-{i:04d}" for i in range(400)]
    store.create_many(ids, AT)
    material = store.get_many(ids)
    pgno, at = _plant(store, material["item-0007"])
    path = store.files()[0]
    assert path.read_bytes()[at:at + 32] == material["item-0007"]
    vacuums: list[bool] = []
    monkeypatch.setattr(store, "vacuum", lambda: vacuums.append(True))
    before = path.read_bytes()

    assert store.destroy(["item-0007"], AT) == ["item-0007"]

    after = path.read_bytes()
    assert material["item-0007"] not in b"".join(p.read_bytes() for p in store.files())
    assert vacuums == []
    changed = {i // 4096 + 1 for i in range(min(len(before), len(after)))
               if before[i] != after[i]}
    row_pages = changed - {pgno}
    # besides the scrubbed page: the pages the delete itself wrote (the row's leaf, the
    # key's index leaf, the destroyed_keys insert, the header), not the file
    assert pgno in changed and len(row_pages) <= 6, changed
    kept = [i for i in ids if i != "item-0007"]
    assert store.get_many(kept) == {k: material[k] for k in kept}
    store.engine.dispose()


def test_residue_the_scrub_cannot_reach_is_vacuumed_then_checked_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = _store(tmp_path)
    store.create_many(["a", "b"], AT)
    answers = iter([_hit(store), _hit(store), {}])
    vacuums: list[bool] = []
    real_vacuum = store.vacuum
    monkeypatch.setattr(store, "_residue", lambda material: next(answers))
    monkeypatch.setattr(store, "vacuum", lambda: (vacuums.append(True), real_vacuum()))
    assert store.destroy(["a"], AT) == ["a"]
    assert vacuums == [True]
    store.engine.dispose()


def test_residue_that_survives_vacuum_is_an_error(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    store = _store(tmp_path)
    store.create_many(["a"], AT)
    monkeypatch.setattr(store, "_residue", lambda material: _hit(store))
    with pytest.raises(KeystoreError, match="still in the keystore files after VACUUM"):
        store.destroy(["a"], AT)
    store.engine.dispose()


def test_a_check_left_for_later_repairs_or_refuses_when_settled(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``destroy(check_later=True)`` reads the files on a thread; ``settle`` waits for it
    and repairs (scrub and VACUUM, each followed by a check in this thread) or refuses
    as ``destroy`` does."""
    store = _store(tmp_path)
    store.create_many(["a", "b", "c"], AT)
    material = store.get_many(["a"])["a"]
    seen: list[list[bytes]] = []
    hit = _hit(store)
    answers = iter([hit, {}, hit, hit, hit])
    vacuums: list[bool] = []
    real_vacuum = store.vacuum
    monkeypatch.setattr(store, "_residue",
                        lambda keys: (seen.append(keys), next(answers))[1])
    monkeypatch.setattr(store, "vacuum", lambda: (vacuums.append(True), real_vacuum()))
    assert store.destroy(["a"], AT, check_later=True) == ["a"]
    store.settle()  # found, scrubbed, found no more
    assert seen == [[material], [material]] and vacuums == []
    store.destroy(["b"], AT, check_later=True)
    with pytest.raises(KeystoreError, match="still in the keystore files after VACUUM"):
        store.settle()  # found, scrubbed, still there, VACUUM, still there
    assert vacuums == [True]
    store.settle()  # nothing left to wait for
    assert len(seen) == 5
    store.engine.dispose()


def test_an_erasure_settles_its_keystore_check_before_returning(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """shred leaves the keystore check to a thread while it writes its events, and waits
    for it: a residue that survives VACUUM fails the command."""
    from ledger.application import LedgerApp
    from ledger.home import Config

    home = tmp_path / "home"
    LedgerApp.initialize(home)
    app = LedgerApp(Config.load(home))
    try:
        app.register_subject({"ref": "u1"})
        atom = app.add_atom({"subject": "u1", "text": "a fact to forget"})
        monkeypatch.setattr(app.datakeys, "_residue",
                            lambda material: {app.datakeys.files()[0]: [4096]})
        with pytest.raises(KeystoreError):
            app.shred([atom], "test")
        assert app.datakeys._checks == []
    finally:
        app.close()


@pytest.mark.parametrize("engine", ENGINES)
def test_byte_matcher_finds_any_key_with_either_engine(engine: str) -> None:
    keys = [bytes([0, 255, 92, 34]) + bytes(range(28)), b"\x00" * 32]
    hay = b"noise" * 100 + keys[0] + b"more"
    matcher = ByteMatcher(keys, engine)
    assert matcher.found(hay) and matcher.found(b"x" + keys[1]), engine
    assert not matcher.found(b"noise" * 100), engine
    assert matcher.starts(hay) == [500], engine

