"""Destroyed data keys leave no copy in the keystore files, even where SQLite's page
rebalancing kept an old copy of a cell in a page's free space (then: VACUUM)."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from pathlib import Path

import pytest

from keys.bytescan import ENGINES, ByteMatcher
from keys.datakeys import DataKeyStore, make_engine
from keys.errors import KeystoreError

AT = datetime(2026, 1, 1, tzinfo=UTC)


def _store(tmp_path: Path) -> DataKeyStore:
    return DataKeyStore(make_engine(f"sqlite:///{tmp_path / 'keystore.sqlite'}"))


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


def test_residue_after_delete_is_vacuumed_then_checked_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = _store(tmp_path)
    store.create_many(["a", "b"], AT)
    answers = iter([True, False])
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
    monkeypatch.setattr(store, "_residue", lambda material: True)
    with pytest.raises(KeystoreError, match="still in the keystore files after VACUUM"):
        store.destroy(["a"], AT)
    store.engine.dispose()


def test_a_check_left_for_later_repairs_or_refuses_when_settled(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``destroy(check_later=True)`` reads the files on a thread; ``settle`` waits for it
    and repairs (VACUUM, then a check in this thread) or refuses as ``destroy`` does."""
    store = _store(tmp_path)
    store.create_many(["a", "b", "c"], AT)
    material = store.get_many(["a"])["a"]
    seen: list[list[bytes]] = []
    answers = iter([True, False, True, True])
    vacuums: list[bool] = []
    real_vacuum = store.vacuum
    monkeypatch.setattr(store, "_residue",
                        lambda keys: (seen.append(keys), next(answers))[1])
    monkeypatch.setattr(store, "vacuum", lambda: (vacuums.append(True), real_vacuum()))
    assert store.destroy(["a"], AT, check_later=True) == ["a"]
    store.settle()  # found, VACUUM, found no more
    assert seen == [[material], [material]] and vacuums == [True]
    store.destroy(["b"], AT, check_later=True)
    with pytest.raises(KeystoreError, match="still in the keystore files after VACUUM"):
        store.settle()  # found, VACUUM, still there
    assert vacuums == [True, True]
    store.settle()  # nothing left to wait for
    assert len(seen) == 4
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
        monkeypatch.setattr(app.datakeys, "_residue", lambda material: True)
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

