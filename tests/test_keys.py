"""Key roster semantics and the data keystore contract (SQLite and PostgreSQL)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from keys.datakeys import DataKeyStore, make_engine
from keys.errors import DataKeyUnavailable, KeyNotAuthorized
from keys.roster import KeyRoster
from keys.signing import Signer
from ledger.application import LedgerApp

from .conftest import PG_URL, drop_schema, files_under

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_roster_checks_role_and_time_window() -> None:
    root, writer = Signer.generate("root"), Signer.generate("writer")
    roster = KeyRoster.start(uuid.uuid4(), root.public_key, T0)
    roster.authorize(writer.public_key, "writer", "writer", T0 + timedelta(days=1), T0)
    roster.revoke(writer.kid, None, T0 + timedelta(days=10), "lost", T0 + timedelta(days=10))
    state = roster.state
    assert state.check(writer.kid, "writer", T0 + timedelta(days=5)) == writer.public_key
    with pytest.raises(KeyNotAuthorized, match="only from"):
        state.check(writer.kid, "writer", T0)
    with pytest.raises(KeyNotAuthorized, match="revoked as writer"):
        state.check(writer.kid, "writer", T0 + timedelta(days=10))
    with pytest.raises(KeyNotAuthorized, match="never authorized as operator"):
        state.check(writer.kid, "operator", T0 + timedelta(days=5))
    with pytest.raises(KeyNotAuthorized, match="not in the roster"):
        state.check(Signer.generate("x").kid, "writer", T0)
    assert state.check(root.kid, "root", T0) == root.public_key


def test_roster_refuses_unknown_role_and_double_grant() -> None:
    root, writer = Signer.generate("root"), Signer.generate("writer")
    roster = KeyRoster.start(uuid.uuid4(), root.public_key, T0)
    with pytest.raises(KeyNotAuthorized, match="unknown role"):
        roster.authorize(writer.public_key, "w", "emperor", T0, T0)
    roster.authorize(writer.public_key, "w", "writer", T0, T0)
    with pytest.raises(KeyNotAuthorized, match="already holds"):
        roster.authorize(writer.public_key, "w", "writer", T0, T0)


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DataKeyStore]:
    if request.param == "sqlite":
        s = DataKeyStore(make_engine(f"sqlite:///{tmp_path / 'keystore.sqlite'}"))
        yield s
        s.close()
        return
    schema = f"k_{uuid.uuid4().hex[:12]}"
    url = PG_URL.replace("postgresql://", "postgresql+psycopg://")
    s = DataKeyStore(make_engine(url, schema), schema)
    yield s
    s.close()
    drop_schema(schema)


def test_keystore_contract(store: DataKeyStore) -> None:
    keys = store.create_many(["a", "b", "c"], T0)
    assert len({*keys.values()}) == 3 and all(len(k) == 32 for k in keys.values())
    store._cache.clear()
    assert store.get("a") == keys["a"]
    assert store.get_many(["a", "b", "zzz"]) == {"a": keys["a"], "b": keys["b"]}
    assert store.destroy(["a", "zzz"], T0) == ["a"]
    assert store.destroy(["a"], T0) == []  # repeat is a no-op
    with pytest.raises(DataKeyUnavailable, match="destroyed at"):
        store.get("a")
    with pytest.raises(DataKeyUnavailable, match="does not exist"):
        store.get("zzz")
    store._cache.clear()
    assert store.get("b") == keys["b"]
    store.discard(["c"])
    with pytest.raises(DataKeyUnavailable, match="does not exist"):
        store.get("c")
    assert store.count() == 1


def test_destroyed_key_bytes_are_in_no_keystore_file(tmp_path: Path) -> None:
    store = DataKeyStore(make_engine(f"sqlite:///{tmp_path / 'keystore.sqlite'}"))
    keys = store.create_many([f"k{i}" for i in range(200)], T0)
    victim = keys["k17"]
    assert any(victim in p.read_bytes() for p in files_under(tmp_path))
    store.destroy(["k17"], T0)
    assert not any(victim in p.read_bytes() for p in files_under(tmp_path))
    assert any(keys["k18"] in p.read_bytes() for p in files_under(tmp_path))
    store.close()


def test_blocked_shred_fails_loudly_and_a_retry_completes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader holding the WAL blocks truncation: the erasure must fail, not pretend."""
    import sqlite3

    from keys import datakeys
    from keys.errors import KeystoreError

    monkeypatch.setattr(datakeys, "BUSY_TIMEOUT_S", 1)  # the wait that fails, shorter

    path = tmp_path / "keystore.sqlite"
    store = DataKeyStore(make_engine(f"sqlite:///{path}"))
    keys = store.create_many(["victim", "other"], T0)
    reader = sqlite3.connect(path)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM data_keys").fetchall()  # holds a read snapshot
    with pytest.raises(KeystoreError, match="blocked"):
        store.destroy(["victim"], T0)
    reader.rollback()
    reader.close()
    assert store.destroy(["victim"], T0) == []  # row already gone; compaction still runs
    assert not any(keys["victim"] in p.read_bytes() for p in files_under(tmp_path))
    store.close()


def test_key_files_one_format_written_0600_and_replaced_whole(tmp_path: Path) -> None:
    """ADR 0038: keys/keyring.py reads and writes every key file; private files are 0600
    whatever the umask, created exclusively, and replaced by rename on rotation."""
    import os
    import stat

    from keys.errors import KeyringError
    from keys.keyring import Keyring, read_public_key_file, read_seed_file, write_seed_file

    old_umask = os.umask(0)
    try:
        ring = Keyring(tmp_path / "keys")
        first = ring.create("writer")
        with pytest.raises(KeyringError, match="already exists"):
            ring.create("writer")
        second = Signer.generate("writer")
        ring.install(second)
        write_seed_file(tmp_path / "witness.key", bytes(range(32)))
        with pytest.raises(FileExistsError):
            write_seed_file(tmp_path / "witness.key", bytes(32))
    finally:
        os.umask(old_umask)
    assert ring.load("writer").kid == second.kid != first.kid
    assert read_public_key_file(ring.public_key_path("writer")) == second.public_key
    assert read_seed_file(tmp_path / "witness.key") == bytes(range(32))
    for path in (ring.folder / "writer.key", tmp_path / "witness.key"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not (ring.folder / "writer.key.tmp").exists()


def test_a_loaded_key_is_read_again_when_its_file_changes(tmp_path: Path) -> None:
    """ADR 0080: the keyring keeps a key it read while its file holds the same bytes; a
    rotation (a new file renamed over it), a rewrite in place and a removal are seen by
    the next load, and a file made readable by others is refused as before."""
    import json
    import os

    from keys.errors import KeyringError
    from keys.keyring import Keyring, private_key_document

    ring = Keyring(tmp_path / "keys")
    first = ring.create("writer")
    assert ring.load("writer") is ring.load("writer")  # kept: read once
    rotated = Signer.generate("writer")
    ring.install(rotated)
    assert ring.load("writer").kid == rotated.kid
    path = ring.folder / "writer.key"
    with path.open("r+", encoding="utf-8") as f:  # the same inode, another key
        f.seek(0)
        f.write(json.dumps(private_key_document(first)))
        f.truncate()
    assert ring.load("writer").kid == first.kid
    os.chmod(path, 0o644)
    with pytest.raises(KeyringError, match="readable by others"):
        ring.load("writer")
    path.unlink()
    with pytest.raises(KeyringError, match="no private key"):
        ring.load("writer")


def test_public_key_document_is_read_strictly_wherever_it_comes_from() -> None:
    """One reader for `.pub` documents, a file's or a pack's `keys/root.pub`: the key id
    must match the key, the key must be strict base64."""
    import base64
    import json

    from keys.errors import PublicKeyFileError
    from keys.keyring import parse_public_key_document, public_key_document

    signer = Signer.generate("root")
    doc = public_key_document("root", signer.public_key)
    assert parse_public_key_document(json.dumps(doc).encode(), "root.pub") == \
        signer.public_key
    other = Signer.generate("other")
    for bad in ({**doc, "kid": other.kid},
                {**doc, "public_key": doc["public_key"][:-2] + "!!"},
                {k: v for k, v in doc.items() if k != "public_key"}):
        with pytest.raises(PublicKeyFileError, match=r"root\.pub"):
            parse_public_key_document(json.dumps(bad).encode(), "root.pub")
    with pytest.raises(PublicKeyFileError):
        parse_public_key_document(b"\xff not json", "root.pub")
    assert base64.b64decode(doc["public_key"]) == signer.public_key


def test_each_command_checks_its_key_against_the_roster_as_of_its_newest_event(
        app: LedgerApp) -> None:
    """A command's key check reads the roster state its reader keeps (no copy of the
    roster aggregate per command), taken again as soon as the roster has a new event: a
    key authorized signs the next command, a key revoked is refused by the next one, and
    nothing of the refused command is written."""
    from ledger.errors import InputError

    first = app.reader.roster_state()
    assert app.reader.roster_state() is first  # nothing new in the roster: kept
    kid = app.authorize_key("scribe", "writer")
    assert kid in app.reader.roster_state().entries
    app.register_subject({"ref": "u1"}, actor="scribe")
    app.revoke_key(kid, "writer")
    head = app.reader.head()
    with pytest.raises(InputError, match="may not sign this command"):
        app.register_subject({"ref": "u2"}, actor="scribe")
    assert app.reader.head() == head
    assert not app.reader.exists(app.reader.subject_id("u2"))
