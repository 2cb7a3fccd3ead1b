"""KEK epochs and their rotation (ADR 0044): data keys stored only wrapped, a rotation that
re-wraps every live key and destroys the old KEK, resumable after a kill at any step, and
a ledger made before wrapping that keeps working and is wrapped by its first rotation."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from keys.kek import FileKekStore
from keys.wrapped import wrap_aad
from ledger.application import LedgerApp
from ledger.domain import KekEpochs
from ledger.epochs import STEPS, epochs_id
from ledger.home import Config
from service.caller import local_operator
from service.models import AtomIn, SubjectIn
from service.root import opened_service

from .conftest import run_cli
from .softhsm import PIN, SoftHsm, softhsm

__all__ = ["softhsm"]  # a fixture imported for pytest, not unused

CHILD = ("import sys, keys.datakeys as d; d.REWRAP_BATCH = 4; from cli.main import main; "
         "sys.exit(main(sys.argv[1:]))")


@pytest.fixture
def filled(home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A home with a subject and a dozen atoms (a dozen and one data keys), added as
    `ledger subject add` and `ledger atom add` add them, through the facade opened once."""
    monkeypatch.setenv("LEDGER_HOME", str(home))
    with opened_service(home, lazy=True) as svc:
        caller = local_operator()
        svc.register_subject(caller, SubjectIn(ref="s1", display_name="Ada Lovelace"))
        for i in range(12):
            svc.add_atom(caller, AtomIn(subject="s1", ref=f"a{i}",
                                        text=f"fact number {i} about tea"))
    yield home


def rows(home: Path) -> dict[str, tuple[bytes, int]]:
    """key id -> (stored bytes, epoch), read through the ledger's own engine."""
    app = LedgerApp(Config.load(home))
    try:
        ks = app.datakeys
        with ks.engine.connect() as conn:
            return {r[0]: (bytes(r[1]), int(r[2])) for r in conn.execute(
                sa.select(ks.keys.c.key_id, ks.keys.c.key_material, ks.keys.c.epoch))}
    finally:
        app.close()


def kek_epochs_on_disk(home: Path) -> list[int]:
    return FileKekStore(home / "kek", "file:kek").epochs()


def texts(home: Path) -> dict[str, str | None]:
    app = LedgerApp(Config.load(home))
    try:
        read = app.reader
        return {f"a{i}": read.get_atom(str(read.resolve("atom", f"a{i}"))).text
                for i in range(12)}
    finally:
        app.close()


def epoch_events(home: Path) -> dict[str, dict[str, Any]]:
    app = LedgerApp(Config.load(home))
    try:
        agg: Any = app.reader.aggregate(epochs_id(app))
        return dict(agg.epochs)
    finally:
        app.close()


def test_data_keys_are_stored_wrapped_never_as_they_are(filled: Path) -> None:
    app = LedgerApp(Config.load(filled))
    try:
        plain = app.datakeys.get_many(list(rows(filled)))
    finally:
        app.close()
    stored = rows(filled)
    assert stored and all(epoch == 1 for _b, epoch in stored.values())
    for key_id, (material, _e) in stored.items():
        assert len(material) == 61 and plain[key_id] not in material
    for path in filled.rglob("*"):  # no file of the home holds a data key as it is
        if path.is_file():
            data = path.read_bytes()
            assert not any(k in data for k in plain.values()), path.name


@pytest.mark.parametrize("writer", [False, True])
def test_rotation_rewraps_every_key_and_destroys_the_old_kek(
        filled: Path, writer: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """In one process, and with the writer process (keys/rewrap_writer.py) that a large
    keystore gets."""
    from keys import datakeys

    if writer:
        monkeypatch.setattr(datakeys, "WRITER_MIN_KEYS", 1)
        monkeypatch.setattr(datakeys, "REWRAP_BATCH", 3)
    before_texts = texts(filled)
    before = rows(filled)
    result = run_cli("keys", "rotate-kek", "--json")
    assert result.code == 0, result.err
    assert "OK: KEK epoch 2 in force" in result.err
    after = rows(filled)
    assert set(after) == set(before)
    assert all(epoch == 2 for _b, epoch in after.values())
    assert all(after[k][0] != before[k][0] for k in before)  # wrapped anew
    assert kek_epochs_on_disk(filled) == [2]
    assert texts(filled) == before_texts
    recorded = epoch_events(filled)
    assert recorded["2"]["previous"] == 1 and "destroyed_at" in recorded["1"]
    assert run_cli("verify", "--root-key", str(filled / "keys" / "root.pub")).code == 0


def test_a_copy_taken_before_the_rotation_cannot_be_unwrapped_after_it(filled: Path) -> None:
    """The old keystore rows (a backup, a WAL segment) open under the old KEK while it
    lives, and under no KEK that exists once the rotation destroyed it."""
    old_rows = rows(filled)
    key_id, (wrapped, epoch) = next(iter(old_rows.items()))
    store = FileKekStore(filled / "kek", "file:kek")
    assert store.unwrap(epoch, [(key_id, wrapped)])  # the window is real
    assert run_cli("keys", "rotate-kek").code == 0
    survivors = FileKekStore(filled / "kek", "file:kek")
    for e in survivors.epochs():
        with pytest.raises(Exception):  # noqa: B017 (wrong KEK: InvalidTag as KeystoreError)
            survivors.unwrap(e, [(key_id, wrapped)])
    from keys.errors import KekUnavailable

    with pytest.raises(KekUnavailable):
        survivors.unwrap(epoch, [(key_id, wrapped)])


def test_a_wrapped_key_moved_to_another_key_id_does_not_open(filled: Path) -> None:
    stored = rows(filled)
    (k1, (w1, e1)), (k2, _x) = list(stored.items())[:2]
    store = FileKekStore(filled / "kek", "file:kek")
    assert wrap_aad(k1, e1) != wrap_aad(k2, e1)
    from keys.errors import KeystoreError

    with pytest.raises(KeystoreError, match="does not open"):
        store.unwrap(e1, [(k2, w1)])


def _crash(home: Path, point: str, writer: bool = False) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LEDGER_FAULT": point, "LEDGER_HOME": str(home),
           "LEDGER_LOG_LEVEL": "warning"}
    env.pop("LEDGER_NOW", None)
    child = CHILD.replace("d.REWRAP_BATCH = 4;", "d.REWRAP_BATCH = 4; d.WRITER_MIN_KEYS = 1;") \
        if writer else CHILD
    return subprocess.run([sys.executable, "-c", child, "keys", "rotate-kek"], env=env,
                          capture_output=True, text=True, timeout=300, check=False)


def _no_key_under_a_destroyed_kek(home: Path) -> None:
    on_disk = set(kek_epochs_on_disk(home))
    epochs = {e for _b, e in rows(home).values()}
    assert epochs <= on_disk, f"keys under epochs {epochs - on_disk} whose KEK is gone"


POINTS = [p.replace(":N", ":5") for p in STEPS]


@pytest.mark.parametrize(("point", "writer"), [
    *((p, False) for p in POINTS),
    ("rewrapped:5", True), ("rewrapped:9", True)])  # the writer process has a batch in flight
def test_rotation_killed_at_each_step_completes_when_run_again(
        filled: Path, point: str, writer: bool) -> None:
    before = texts(filled)
    killed = _crash(filled, point, writer)
    assert killed.returncode == -9, (point, killed.returncode, killed.stderr[-600:])
    _no_key_under_a_destroyed_kek(filled)
    assert texts(filled) == before  # nothing lost while half rotated
    again = run_cli("keys", "rotate-kek", "--json")
    assert again.code == 0, again.err
    _no_key_under_a_destroyed_kek(filled)
    assert {e for _b, e in rows(filled).values()} == {2}
    assert kek_epochs_on_disk(filled) == [2]
    assert texts(filled) == before
    recorded = epoch_events(filled)
    assert set(recorded) == {"1", "2"} and "destroyed_at" in recorded["1"]
    app = LedgerApp(Config.load(filled))
    try:
        topics = [n.topic for n in app.reader.notifications(1, 1000)]
    finally:
        app.close()
    assert topics.count(KekEpochs.EpochStarted.TOPIC) == 1
    assert topics.count(KekEpochs.EpochDestroyed.TOPIC) == 1
    assert run_cli("verify").code == 0


def test_a_ledger_made_before_wrapping_keeps_working_and_its_first_rotation_wraps_it(
        filled: Path) -> None:
    """Upcast, not rewrite: a keystore without the epoch column and with keys as they are
    (what every ledger before ADR 0044 has) opens and reads; `rotate-kek` then wraps
    every key under epoch 1 (previous 0) and configures the home's KEK folder."""
    app = LedgerApp(Config.load(filled))
    try:
        plain = app.datakeys.get_many(list(rows(filled)))
    finally:
        app.close()
    before = texts(filled)
    db = sqlite3.connect(filled / "keystore.sqlite")
    with db:
        db.executemany("UPDATE data_keys SET key_material = ? WHERE key_id = ?",
                       [(v, k) for k, v in plain.items()])
        db.execute("ALTER TABLE data_keys DROP COLUMN epoch")
        db.execute("DROP TABLE kek_epochs")
    db.close()
    shutil.rmtree(filled / "kek")
    config = (filled / "config.toml").read_text("utf-8")
    (filled / "config.toml").write_text(config[:config.index("[keys]")], "utf-8")
    assert texts(filled) == before
    assert run_cli("atom", "add", "--subject", "s1", "--text", "one more").code == 0
    assert {e for _b, e in rows(filled).values()} == {0}
    result = run_cli("keys", "rotate-kek")
    assert result.code == 0, result.err
    assert {e for _b, e in rows(filled).values()} == {1}
    assert kek_epochs_on_disk(filled) == [1]
    assert 'kek = "file:kek"' in (filled / "config.toml").read_text("utf-8")
    assert epoch_events(filled)["1"]["previous"] == 0
    assert texts(filled) == before


def test_a_missing_kek_is_an_environment_error_that_writes_nothing(filled: Path) -> None:
    (filled / "kek" / "epoch-000001.kek").rename(filled / "elsewhere.kek")
    from .conftest import snapshot

    state = snapshot(filled)
    result = run_cli("atom", "show", "a1")
    assert result.code == 3
    assert "key-encryption key of epoch 1" in result.err
    result = run_cli("atom", "add", "--subject", "s1", "--text", "refused")
    assert result.code == 3
    assert snapshot(filled) == state


def test_sweep_rotates_when_the_policy_says_it_is_due(filled: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    policy = tmp_path / "p.json"
    policy.write_text('{"memoryPolicy": {"enabled": true, "rightToBeForgottenSla": '
                      '{"kekRotationDays": 30}}}', "utf-8")
    assert run_cli("policy", "set", str(policy)).code == 0
    now = run_cli("sweep", "--json")
    assert now.code == 0 and '"due": false' in now.out
    monkeypatch.setenv("LEDGER_NOW", "2099-01-01T00:00:00Z")
    dry = run_cli("sweep", "--dry-run")
    assert "rotate the KEK of epoch 1" in dry.err and kek_epochs_on_disk(filled) == [1]
    done = run_cli("sweep")
    assert done.code == 0 and "KEK rotated to epoch 2" in done.err
    assert kek_epochs_on_disk(filled) == [2]
    assert "KEK rotated" not in run_cli("sweep").err  # not due again the same day


def test_a_new_ledger_takes_its_kek_store_from_init_or_the_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEDGER_KEK", "file:elsewhere")
    assert run_cli("--home", str(tmp_path / "a"), "init").code == 0
    assert 'kek = "file:elsewhere"' in (tmp_path / "a" / "config.toml").read_text("utf-8")
    assert FileKekStore(tmp_path / "a" / "elsewhere", "x").epochs() == [1]
    monkeypatch.delenv("LEDGER_KEK")
    bad = run_cli("--home", str(tmp_path / "b"), "init", "--kek", "vault:transit/ledger")
    assert bad.code == 2 and "is not a KEK store" in bad.err
    assert not (tmp_path / "b").exists()


def test_a_ledger_moves_its_keks_from_a_file_onto_a_token(
        filled: Path, softhsm: SoftHsm, monkeypatch: pytest.MonkeyPatch) -> None:
    """`rotate-kek --to pkcs11:...`: the new epoch's KEK is made in the token, every key is
    re-wrapped inside it, the file KEK is destroyed, config.toml names the token (no PIN),
    and the keys still open in a new process."""
    before = texts(filled)
    uri = softhsm.uri(f"moved-{filled.parent.name}", pin=None)
    monkeypatch.setenv("LEDGER_PKCS11_PIN", PIN)
    result = run_cli("keys", "rotate-kek", "--to", uri)
    assert result.code == 0, result.err
    assert kek_epochs_on_disk(filled) == []
    config = (filled / "config.toml").read_text("utf-8")
    assert f"kek = \"{uri}\"" in config and PIN not in config
    assert epoch_events(filled)["2"]["previous"] == 1
    assert texts(filled) == before
    assert run_cli("verify").code == 0


def test_a_token_that_refuses_is_an_environment_error_that_writes_nothing(
        filled: Path, softhsm: SoftHsm, monkeypatch: pytest.MonkeyPatch) -> None:
    uri = softhsm.uri(f"refusing-{filled.parent.name}", pin=None)
    monkeypatch.setenv("LEDGER_PKCS11_PIN", PIN)
    assert run_cli("keys", "rotate-kek", "--to", uri).code == 0
    from .conftest import snapshot

    state = snapshot(filled)
    monkeypatch.setenv("LEDGER_PKCS11_PIN", "0000")  # the wrong PIN: the token refuses
    for args in (("atom", "show", "a1"), ("atom", "add", "--subject", "s1", "--text", "no"),
                 ("keys", "rotate-kek")):
        result = run_cli(*args)
        assert result.code == 3, (args, result.err)
        assert "0000" not in result.err
    assert snapshot(filled) == state


def test_rewriting_config_keeps_the_tables_it_does_not_manage(filled: Path) -> None:
    """`rotate-kek --to` rewrites config.toml: the embedder's [projections] table (and its
    comment) stays as the operator wrote it."""
    path = filled / "config.toml"
    path.write_text(path.read_text("utf-8") + '\n# the embedder\n[projections]\n'
                    'embedder = "hash"\n', "utf-8")
    assert run_cli("keys", "rotate-kek", "--to", "file:kek2").code == 0
    assert run_cli("keys", "rotate-kek").code == 0
    text = path.read_text("utf-8")
    assert text.count('# the embedder\n[projections]\nembedder = "hash"\n') == 1
    assert 'kek = "file:kek2"' in text
    assert Config.load(filled).kek == "file:kek2"
