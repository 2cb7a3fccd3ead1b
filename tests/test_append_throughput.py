"""The bulk write path of ADR 0008: signing on two threads while the data keys are
stored, the SQLite recorder's single ``executemany`` and the pooled keystore (the signing
process: test_signing_process.py; the tree's tiles: test_tree_tiles.py). Each keeps the
bytes, ids and all-or-nothing semantics of the path it replaces."""

from __future__ import annotations

import os
import sqlite3
import threading
from datetime import UTC, datetime
from pathlib import Path
from uuid import uuid4

import pytest
import sqlalchemy as sa
from eventsourcing.persistence import IntegrityError, StoredEvent
from eventsourcing.sqlite import SQLiteFactory

from keys import signing
from keys.datakeys import DataKeyStore, make_engine
from keys.errors import KeystoreError
from keys.signing import Signer
from ledger import envelope, sqlite_recorder
from ledger.application import LedgerApp

from .conftest import RawStore, files_under, run_cli

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SIGNER = Signer.from_seed("t", bytes(range(32)))


@pytest.mark.parametrize("n", [0, 1, signing.PARALLEL_MIN - 1, signing.PARALLEL_MIN, 1000])
def test_sign_many_gives_the_sequential_bytes_in_order(n: int) -> None:
    messages = [os.urandom(50 + i % 300) for i in range(n)]
    calls: list[str] = []
    got = SIGNER.sign_many(messages, during=lambda: calls.append(threading.current_thread().name))
    assert got == [SIGNER.sign(m) for m in messages]
    assert calls == [threading.current_thread().name]  # once, on the caller's thread


def test_sign_many_raises_errors_from_either_thread_and_recovers() -> None:
    messages = [os.urandom(100) for _ in range(500)]

    def fail() -> None:
        raise ValueError("during failed")

    with pytest.raises(ValueError, match="during failed"):
        SIGNER.sign_many(messages, during=fail)
    bad = [*messages[:400], "not bytes", *messages[401:]]  # reached by one of the threads
    with pytest.raises(TypeError):
        SIGNER.sign_many(bad)  # type: ignore[arg-type]
    assert SIGNER.sign_many(messages) == [SIGNER.sign(m) for m in messages]


def test_seal_many_is_seal_signed() -> None:
    envs = [{"v": 1, "seq": i, "payload": {"x": i / 3}} for i in range(200)]
    assert envelope.seal_many(envs, SIGNER) == [envelope.seal_signed(e, SIGNER) for e in envs]


def _recorder(path: Path) -> sqlite_recorder.BulkSQLiteApplicationRecorder:
    factory = SQLiteFactory({"SQLITE_DBNAME": str(path),
                             "APPLICATION_RECORDER_TOPIC": sqlite_recorder.TOPIC})
    recorder = factory.application_recorder()
    assert isinstance(recorder, sqlite_recorder.BulkSQLiteApplicationRecorder)
    return recorder


def _events(n: int) -> list[StoredEvent]:
    return [StoredEvent(uuid4(), 1, "t", os.urandom(20)) for _ in range(n)]


def test_bulk_recorder_returns_the_notification_ids_and_keeps_the_constraint(
        tmp_path: Path) -> None:
    recorder = _recorder(tmp_path / "events.sqlite")
    batches = [_events(1), _events(300), _events(2), _events(1)]
    for batch in batches:
        ids = recorder.insert_events(batch)
        stored = recorder.select_notifications(start=ids[0], limit=len(batch))
        assert [n.id for n in stored] == list(ids)
        assert [(n.originator_id, n.state) for n in stored] == [
            (s.originator_id, s.state) for s in batch]
    top = recorder.max_notification_id()
    duplicate = [*_events(10), batches[1][5], *_events(10)]
    with pytest.raises(IntegrityError):
        recorder.insert_events(duplicate)
    assert recorder.max_notification_id() == top

    ids = recorder.insert_events(_events(5))
    assert list(ids) == list(range(top + 1, top + 6))


def test_bulk_recorder_reads_ids_back_when_rowids_run_out(tmp_path: Path) -> None:
    recorder = _recorder(tmp_path / "events.sqlite")
    with sqlite3.connect(tmp_path / "events.sqlite") as conn:
        conn.execute("INSERT INTO stored_events (rowid, originator_id, originator_version, "
                     "topic, state) VALUES (?, 'x', 1, 't', x'00')", (2**63 - 1,))
    batch = _events(20)
    ids = recorder.insert_events(batch)
    with sqlite3.connect(tmp_path / "events.sqlite") as conn:
        assert list(ids) == [conn.execute(
            "SELECT rowid FROM stored_events WHERE originator_id=?",
            (s.originator_id.hex,)).fetchone()[0] for s in batch]


def _atoms(n: int, ref: str | None = None) -> list[dict[str, object]]:
    return [{"subject": "u1", "text": f"fact {i}", "ref": ref if i == n // 2 else None}
            for i in range(n)]


def test_an_orphan_key_is_discarded_and_the_command_succeeds(app: LedgerApp) -> None:
    """A key stored for an item that has no event (a command killed between the
    keystore's commit and the event store's) no longer blocks that item for good
    (issue 20, item 4; this test used to pin the refusal): the command discards it,
    stores its own and commits."""
    app.register_subject({"ref": "u1"})
    taken = str(app.reader.ref_id("atom", "r1"))
    orphan = app.datakeys.create_many([taken], T0)[taken]
    count = app.datakeys.count()
    app.add_atoms(_atoms(100, ref="r1"))
    assert app.datakeys.count() == count + 99  # the orphan replaced, not kept
    app.datakeys._cache.clear()
    assert app.datakeys.get(taken) != orphan
    assert app.reader.get_atom(taken).text is not None
    assert run_cli("--home", str(app.config.home), "verify").code == 0


def test_failed_event_insert_discards_the_stored_keys(app: LedgerApp,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    app.register_subject({"ref": "u1"})
    rows, count = RawStore(app.config.home).rows(), app.datakeys.count()

    def fail(*args: object, **kwargs: object) -> None:
        raise RuntimeError("disk full")

    monkeypatch.setattr(app.recorder, "insert_events", fail)
    with pytest.raises(RuntimeError, match="disk full"):
        app.add_atoms(_atoms(100))
    assert RawStore(app.config.home).rows() == rows
    assert app.datakeys.count() == count
    monkeypatch.undo()
    app.add_atoms(_atoms(100))
    assert app.datakeys.count() == count + 100
    assert app.checkpoint().size == len(RawStore(app.config.home).rows())
    assert run_cli("--home", str(app.config.home), "verify").code == 0


def test_pooled_keystore_shreds_and_a_blocked_checkpoint_still_fails(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from keys import datakeys

    monkeypatch.setattr(datakeys, "BUSY_TIMEOUT_S", 1)  # the wait that fails, shorter
    path = tmp_path / "keystore.sqlite"
    store = DataKeyStore(make_engine(f"sqlite:///{path}", pooled=True))
    keys = store.create_many([f"k{i}" for i in range(300)], T0)
    store.create_many([f"j{i}" for i in range(300)], T0)  # the pooled connection stays open
    assert any(keys["k17"] in p.read_bytes() for p in files_under(tmp_path))
    store.destroy(["k17"], T0)
    assert not any(keys["k17"] in p.read_bytes() for p in files_under(tmp_path))
    assert any(keys["k18"] in p.read_bytes() for p in files_under(tmp_path))
    reader = sqlite3.connect(path)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM data_keys").fetchall()
    with pytest.raises(KeystoreError, match="blocked"):
        store.destroy(["k18"], T0)
    reader.rollback()
    reader.close()
    assert store.destroy(["k18"], T0) == []
    assert not any(keys["k18"] in p.read_bytes() for p in files_under(tmp_path))
    with store.engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM data_keys")).scalar() == 598
    store.close()
