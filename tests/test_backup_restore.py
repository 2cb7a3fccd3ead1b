"""Backups, the erasure journal and restores that never bring erased memory back (issue 27,
ADR 0045). SQLite homes; the PostgreSQL copies are tests/test_copies_postgres.py's.

One source ledger per module (built once): two subjects, the first erased after the
backup; every test restores the same backup into homes of its own."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from keys.wrapped import wrap_aad
from ledger import envelope
from ledger.application import LedgerApp
from ledger.home import Config

from .conftest import run_cli
from .serving import issue, serving
from .softhsm import PIN, TOKEN, SoftHsm, softhsm

__all__ = ["softhsm"]  # a fixture imported for pytest, not unused

MARK = f"zqmark{uuid.uuid4().hex[:10]}"
ERASED = {"alpha": f"alpha fact {MARK}a", "gamma": f"gamma fact {MARK}g",
          "name": f"Ann {MARK}n", "chat": f"chat body {MARK}c"}
"""The first subject's content, erased after the backup."""
KEPT = {"beta": "Prefers aisle seats on long flights", "delta": "Allergic to peanuts"}
"""The second subject's, never erased."""


def ledger(home: Path, *args: str) -> Any:
    return run_cli("--home", str(home), *args)


def ok(home: Path, *args: str) -> Any:
    r = ledger(home, *args)
    assert r.code == 0, (args, r.out, r.err)
    return r


def tree_digest(folder: Path) -> dict[str, str]:
    """Every entry below ``folder``: files by SHA-256, folders by name ('nothing written')."""
    return {str(p.relative_to(folder)): (hashlib.sha256(p.read_bytes()).hexdigest()
                                         if p.is_file() else "dir")
            for p in sorted(folder.rglob("*"))}


def markers_in(folder: Path) -> list[str]:
    """Files below ``folder`` whose bytes hold any erased marker (raw scan, every file)."""
    needles = [MARK.encode(), *(v.encode() for v in ERASED.values())]
    return [str(p) for p in folder.rglob("*") if p.is_file()
            and any(n in p.read_bytes() for n in needles)]


@dataclass
class Source:
    root: Path
    home: Path
    backup: Path
    journal: Path
    pack: Path
    receipt: Path
    atoms: dict[str, str]  # name -> atom id
    request: str
    batch: str

    def fresh(self, name: str) -> Path:
        return self.root / "restores" / name


@pytest.fixture(scope="module")
def src(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Source]:
    for name in ("LEDGER_HOME", "LEDGER_NOW", "LEDGER_FAULT"):
        os.environ.pop(name, None)
    # these tests look at KEK files: the homes keep theirs in kek/ also under
    # LEDGER_TEST_KEK=softhsm (tests/conftest.py), which sets LEDGER_KEK for the session
    kek_env = os.environ.pop("LEDGER_KEK", None)
    root = tmp_path_factory.mktemp("copies")
    home = root / "home"
    LedgerApp.initialize(home)
    ok(home, "subject", "add", "u1", "--name", ERASED["name"])
    ok(home, "artifact", "add", "--subject", "u1", "--kind", "chat", "--ref", "c1",
       "--body", ERASED["chat"])
    atoms = {}
    for name in ("alpha", "gamma"):
        atoms[name] = ok(home, "atom", "add", "--subject", "u1", "--ref", name, "--text",
                         ERASED[name], "--artifact", "c1", "--derivation", "inferred",
                         "--extractor", "model-x").out.strip()
    ok(home, "subject", "add", "u2")
    for name, text in KEPT.items():
        atoms[name] = ok(home, "atom", "add", "--subject", "u2", "--ref", name,
                         "--text", text).out.strip()
    backup = root / "backup"
    ok(home, "backup", str(backup))
    erase = ("redact-user", "u1", "--reason", "GDPR Art. 17", "--operator", "operator")
    plan = json.loads(ok(home, *erase, "--dry-run", "--json").out)["plan_digest"]
    done = json.loads(ok(home, *erase, "--plan", plan, "--json").out)
    ok(home, "evidence-pack", done["batch_id"], "--out", str(root / "pack"))
    ok(home, "receipt", done["request_id"], "--out", str(root / "receipt.json"))
    ok(home, "journal", "export", str(root / "journal.json"))
    (root / "restores").mkdir()
    yield Source(root, home, backup, root / "journal.json", root / "pack",
                 root / "receipt.json", atoms, done["request_id"], done["batch_id"])
    if kek_env is not None:
        os.environ["LEDGER_KEK"] = kek_env


def restore(src: Source, new: Path, *extra: str) -> Any:
    return run_cli("restore", str(src.backup), "--home", str(new), *extra)


def atom_text(home: Path, ref: str) -> Any:
    return json.loads(ok(home, "atom", "show", ref, "--json").out)["text"]


# --------------------------------------------------------------------------- must show 1
def test_restore_with_the_journal_brings_no_erased_memory_back(src: Source) -> None:
    new = src.fresh("with-journal")
    r = restore(src, new, "--journal", str(src.journal), "--json")
    assert r.code == 0, r.err
    report = json.loads(r.out)
    assert {i["item_id"] for i in report["reapplied"]} >= {src.atoms["alpha"],
                                                           src.atoms["gamma"]}
    assert report["rollback"]["restored_size"] < report["rollback"]["journal_size"]
    assert "ROLLBACK" in r.err and str(report["rollback"]["events_lost"]) in r.err
    # no command reads the erased atoms; the kept ones read as they were
    for name in ("alpha", "gamma"):
        shown = json.loads(ok(new, "atom", "show", name, "--json").out)
        assert shown["content_erased"] and shown["status"] == "hard-redacted"
    for name, text in KEPT.items():
        assert atom_text(new, name) == text
    outputs = [ok(new, "recall", ERASED["alpha"], "--subject", "u1", "--no-rehearse").out,
               ok(new, "memory", "list", "--subject", "u1", "--json").out,
               ok(new, "subject", "show", "u1", "--json").out,
               ok(new, "artifact", "show", "c1", "--json").out,
               ok(new, "state", "--subject", "u1", "--json").out]
    exports = new.parent / "exports"
    exports.mkdir()
    ok(new, "export", "--format", "mem", "--subject", "u1", "--out", str(exports / "u1.mem"))
    ok(new, "export", "--format", "konshus", "--subject", "u1", "--out",
       str(exports / "u1.json"))
    assert not any(MARK in o for o in outputs)
    assert markers_in(exports) == []
    # nor over HTTP
    _, token = issue(new, "op", "operator")
    with serving(new) as server, server.client(token) as c:
        for name in ("alpha", "gamma"):
            got = c.get(f"/v1/atoms/{name}")
            assert MARK not in got.text and (got.status_code == 404 or
                                             got.json()["content_erased"])
        for got in (c.get("/v1/memories", params={"subject": "u1"}),
                    c.post("/v1/recall", json={"subject": "u1", "query": ERASED["alpha"]}),
                    c.get("/v1/subjects/u1/export", params={"format": "konshus"}),
                    c.get("/v1/subjects/u1")):
            assert MARK not in got.text, got.text
        assert c.get("/v1/atoms/beta").json()["text"] == KEPT["beta"]
    # no byte of any file of the restored home holds erased content; it verifies
    assert markers_in(new) == []
    ok(new, "verify", "--root-key", str(new / "keys" / "root.pub"))
    epochs = json.loads(ok(new, "keys", "epochs", "--json").out)
    assert [e["state"] for e in epochs] == ["active"] and (new / "kek").is_dir()
    # the original pack and receipt still verify
    ok(new, "verify-pack", str(src.pack), "--root-key", str(new / "keys" / "root.pub"))
    assert run_cli("audit-tools", "verify-receipt", str(src.receipt)).code == 0
    # the new home's own journal names the re-applied erasures
    journal = json.loads(base64.b64decode(json.loads((new / "journal" /
                                                      "erasure-journal.json").read_bytes())
                                          ["payload"]))
    assert {k["key_id"] for k in journal["keys"] if k.get("reapplies")} >= \
        {src.atoms["alpha"], src.atoms["gamma"]}


def test_without_a_journal_restore_is_refused_and_writes_nothing(src: Source) -> None:
    new = src.fresh("no-journal")
    before = tree_digest(new.parent)
    r = restore(src, new)
    assert r.code == 2 and "refused" in r.err and "--accept-rollback" in r.err, r.err
    assert "--journal" in r.err and str(src.home / "journal") in r.err  # where one is kept
    assert tree_digest(new.parent) == before and not new.exists()


def test_accept_rollback_says_what_came_back(src: Source) -> None:
    new = src.fresh("rollback")
    r = restore(src, new, "--accept-rollback", "--json")
    assert r.code == 0, r.err
    report = json.loads(r.out)
    assert report["journal"] is None and report["reapplied"] == []
    size = report["backup"]["log_size"]
    assert f"ends at seq {size}" in report["could_come_back"]
    assert "comes back readable" in r.err and report["backup"]["head_time"] in r.err
    assert atom_text(new, "alpha") == ERASED["alpha"]  # what came back, as it said


def test_a_journal_older_than_the_backup_is_refused_then_reported(src: Source) -> None:
    old = src.backup / "journal" / "erasure-journal.json"  # as of the backup: not newer
    # the backup's own journal has the backup's size: accepted, and it re-applies nothing
    r = restore(src, src.fresh("older"), "--journal", str(old), "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["reapplied"] == [] and json.loads(r.out)["rollback"] is None
    # a journal of fewer events than the backup: refused, then reported
    small = _journal_of_size(src, 6)
    r = restore(src, src.fresh("older3"), "--journal", str(small))
    assert r.code == 2 and "covers the log up to seq 6" in r.err, r.err
    r = restore(src, src.fresh("older3"), "--journal", str(small), "--accept-rollback")
    assert r.code == 0 and "covers the log up to seq 6" in r.err


def _journal_of_size(src: Source, size: int) -> Path:
    """A journal of the source ledger as it was at ``size`` events: derived from a copy of
    the backup cut to that size (a real, signed journal, only older)."""
    cut = src.root / f"cut-{size}"
    if not cut.exists():
        r = restore(src, cut, "--accept-rollback")
        assert r.code == 0, r.err
        conn = sqlite3.connect(cut / "events.sqlite")
        conn.execute("DELETE FROM stored_events WHERE rowid > ?", (size,))
        conn.execute("DELETE FROM tlog_checkpoints")
        conn.execute("DELETE FROM tlog_tiles")
        conn.commit()
        conn.close()
        (cut / "journal" / "erasure-journal.json").unlink()
    out = src.root / f"journal-{size}.json"
    if not out.exists():
        app = LedgerApp(Config.load(cut))
        try:
            from governance.journal import refresh_journal

            out.write_bytes(refresh_journal(app).data)
        finally:
            app.close()
    return out


# --------------------------------------------------------------------------- must show 2
def _decrypt_with_everything(backup: Path, home: Path, atom_id: str) -> str | None:
    """An attacker's try: every KEK file found in the old backup and the current home,
    every keystore row of both, and the atom's ciphertext in either event store. Returns
    the atom's sealed plaintext, or None."""
    keks = [p.read_bytes() for folder in (backup, home) for p in folder.rglob("*.kek")]
    rows: list[tuple[str, bytes, int]] = []
    for ks in (backup / "keystore.sqlite", home / "keystore.sqlite"):
        conn = sqlite3.connect(f"{ks.as_uri()}?mode=ro&immutable=1", uri=True)
        rows += [(str(k), bytes(m), int(e)) for k, m, e in conn.execute(
            "SELECT key_id, key_material, epoch FROM data_keys")]
        conn.close()
    states = []
    for ev in (backup / "events.sqlite", home / "events.sqlite"):
        conn = sqlite3.connect(f"{ev.as_uri()}?mode=ro&immutable=1", uri=True)
        states += [bytes(s) for (s,) in conn.execute(
            "SELECT state FROM stored_events WHERE originator_id = ? AND topic = ?",
            (uuid.UUID(atom_id).hex, "memory-ledger:atom.created.v1"))]
        conn.close()
    data_keys = []
    for key_id, material, epoch in rows:
        if key_id != atom_id:
            continue
        for kek in keks:
            if len(kek) != 32:
                continue
            try:
                data_keys.append(AESGCM(kek).decrypt(material[1:13], material[13:],
                                                     wrap_aad(key_id, epoch)))
            except InvalidTag:
                pass
    for state in states:
        env = envelope.open_state(state).envelope
        sealed = env["payload"]["sealed"]
        aad = b"\x00".join((b"memory-ledger/aad/v1", env["ledger"].encode(), b"")) + \
            f"{env['originator_id']}/{env['version']}".encode() + b"\x00" + \
            env["topic"].encode()
        for key in data_keys:
            try:
                return AESGCM(key).decrypt(base64.b64decode(sealed["nonce"]),
                                           base64.b64decode(sealed["ct"]), aad).decode()
            except InvalidTag:
                pass
    return None


def test_an_old_backup_decrypts_an_erased_atom_until_the_kek_rotates(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LEDGER_KEK", raising=False)  # the KEK in a file: the window test
    home = tmp_path / "home"
    LedgerApp.initialize(home)
    ok(home, "subject", "add", "u1")
    aid = ok(home, "atom", "add", "--subject", "u1", "--text", ERASED["alpha"]).out.strip()
    ok(home, "backup", str(tmp_path / "b"))
    ok(home, "delete", aid, "--reason", "asked")
    assert ok(home, "atom", "show", aid, "--json").out.count(MARK) == 0
    # the window is real: the old backup's wrapped key opens under the KEK still in the home
    assert _decrypt_with_everything(tmp_path / "b", home, aid) == \
        json.dumps({"text": ERASED["alpha"]}, separators=(",", ":"))
    ok(home, "keys", "rotate-kek")
    # and closed: epoch 1's KEK is destroyed, so nothing in either place opens it
    assert _decrypt_with_everything(tmp_path / "b", home, aid) is None
    r = run_cli("restore", str(tmp_path / "b"), "--home", str(tmp_path / "r"),
                "--accept-rollback")
    assert r.code == 3 and "epoch 1" in r.err and not (tmp_path / "r").exists(), r.err


# --------------------------------------------------------------------------- crashes
CRASHES = ["restore-copied", "restore-keys-destroyed", "restore-kek-created",
           "restore-epoch-begun", "restore-rewrapped:1", "restore-epochs-forgotten",
           "restore-reapplied", "restore-read-models", "restore-verified", "restore-journal"]


def test_the_crash_points_are_the_restores_steps() -> None:
    from governance.restore import STEPS

    assert [c.replace(":1", ":N") for c in CRASHES] == list(STEPS)


@pytest.mark.parametrize("point", CRASHES)
def test_a_restore_killed_at_any_step_completes_when_run_again(src: Source, point: str) -> None:
    new = src.fresh(f"crash-{point.replace(':', '-')}")
    args = [sys.executable, "-m", "ledger", "restore", str(src.backup), "--home", str(new),
            "--journal", str(src.journal)]
    env = {**os.environ, "LEDGER_FAULT": point}
    proc = subprocess.run(args, env=env, capture_output=True, timeout=120, check=False)
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]
    assert not new.exists()  # a crash leaves no home, only the staging folder
    assert (new.parent / f".{new.name}.restoring").is_dir()
    r = restore(src, new, "--journal", str(src.journal))
    assert r.code == 0, r.err
    assert not (new.parent / f".{new.name}.restoring").exists()
    for name, text in KEPT.items():  # no data key lost
        assert atom_text(new, name) == text
    for name in ("alpha", "gamma"):
        assert json.loads(ok(new, "atom", "show", name, "--json").out)["content_erased"]
    epochs = json.loads(ok(new, "keys", "epochs", "--json").out)  # none under a lost KEK
    assert len(epochs) == 1 and epochs[0]["state"] == "active" and epochs[0]["keys"] > 0
    assert (new / "kek" / f"epoch-{epochs[0]['epoch']:06d}.kek").is_file()
    assert markers_in(new) == []


# --------------------------------------------------------------------------- refusals
def test_a_tampered_backup_or_foreign_journal_is_refused_and_nothing_written(
        src: Source, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LEDGER_KEK", raising=False)
    import shutil

    def refused(backup: Path, *extra: str, code: int = 2, words: str = "") -> None:
        new = tmp_path / "restored"
        before = tree_digest(tmp_path)
        r = run_cli("restore", str(backup), "--home", str(new), *extra)
        assert r.code == code and words in r.err, (r.code, r.err)
        assert tree_digest(tmp_path) == before and not new.exists()

    def copy(name: str) -> Path:
        dst = src.root / f"tampered-{name}"
        shutil.copytree(src.backup, dst)
        return dst

    journal = ("--journal", str(src.journal))
    flipped = copy("file")
    data = bytearray((flipped / "events.sqlite").read_bytes())
    data[len(data) // 2] ^= 1
    (flipped / "events.sqlite").write_bytes(bytes(data))
    refused(flipped, *journal, words="events.sqlite is not the file the manifest signs")
    manifest = copy("manifest")
    data = bytearray((manifest / "manifest.json").read_bytes())
    data[100] ^= 1
    (manifest / "manifest.json").write_bytes(bytes(data))
    refused(manifest, *journal, words="manifest.json")
    extra = copy("extra")
    (extra / "kek").mkdir()
    (extra / "kek" / "epoch-000001.kek").write_bytes(os.urandom(32))
    refused(extra, *journal, words="does not list")
    # the manifest re-signed by a key the backup's roster does not know
    from governance.backup import MANIFEST_TYPE, PAYLOAD_TYPE
    from governance.dsse import read_document, sign_document
    from keys.signing import Signer

    resigned = copy("resigned")
    doc = read_document((resigned / "manifest.json").read_bytes(), PAYLOAD_TYPE,
                        MANIFEST_TYPE, "m").document
    (resigned / "manifest.json").write_bytes(sign_document(
        {**doc, "source": {**doc["source"], "home": "/elsewhere"}}, PAYLOAD_TYPE,
        Signer.generate("operator")))
    refused(resigned, *journal, words="not signed by an operator key")
    # a journal of another ledger, a journal altered by one byte
    other = tmp_path.parent / "other-home"
    LedgerApp.initialize(other)
    ok(other, "journal", "export", str(tmp_path.parent / "other.json"))
    refused(src.backup, "--journal", str(tmp_path.parent / "other.json"),
            words="another ledger")
    bad = bytearray(src.journal.read_bytes())
    bad[len(bad) // 2] ^= 1
    (tmp_path.parent / "bad.json").write_bytes(bytes(bad))
    refused(src.backup, "--journal", str(tmp_path.parent / "bad.json"), words="journal")
    # the environment: a KEK that cannot be reached, a missing signing key (exit 3)
    refused(src.backup, *journal, "--kek-from", f"file:{tmp_path.parent / 'nokek'}",
            code=3, words="KEK epoch 1")
    (tmp_path.parent / "nokeys").mkdir()
    refused(src.backup, *journal, "--keys-from", str(tmp_path.parent / "nokeys"), code=3,
            words="signing key 'root'")
    # never the source's KEK folder
    refused(src.backup, *journal, "--kek", f"file:{src.home / 'kek'}",
            words="source's KEK folder")


# --------------------------------------------------------------------------- backup itself
def test_backup_holds_no_plaintext_no_kek_no_private_key_unless_asked(src: Source,
                                                                      tmp_path: Path) -> None:
    names = {p.relative_to(src.backup).as_posix() for p in src.backup.rglob("*")
             if p.is_file()}
    assert names == {"manifest.json", "config.toml", "events.sqlite", "keystore.sqlite",
                     "journal/erasure-journal.json", "keys/log.pub", "keys/operator.pub",
                     "keys/root.pub", "keys/writer.pub"}
    assert not any(n.startswith("projections") for n in names)
    manifest = json.loads(base64.b64decode(json.loads((src.backup / "manifest.json")
                                                      .read_bytes())["payload"]))
    assert manifest["source"]["home"] == str(src.home.resolve())
    assert manifest["kek"]["epochs"][0]["state"] == "active"
    assert manifest["log"]["size"] > 0 and manifest["event_store"]["included"]
    # KEPT content is in no backup file in the clear (it is sealed in the events)
    assert not any(KEPT["beta"].encode() in (src.backup / n).read_bytes() for n in names)
    r = ledger(src.home, "backup", str(src.backup))  # refused: not empty, nothing written
    assert r.code == 2 and "not an empty folder" in r.err
    r = ledger(src.home, "backup", str(src.home / "backups" / "b"))
    assert r.code == 2 and "inside the home" in r.err and not (src.home / "backups").exists()
    r = ledger(src.home, "backup", str(tmp_path / "full"), "--with-keys", "--json")
    assert r.code == 0 and "warning:" in r.err and "destroy it" in r.err
    full = {p.relative_to(tmp_path / "full").as_posix() for p in (tmp_path / "full").rglob("*")
            if p.is_file()}
    assert {"keys/root.key", "keys/operator.key", "kek/epoch-000001.kek"} <= full
    assert not (tmp_path / "full.partial").exists()
    # taken --with-keys, it restores with nothing from the source home
    r = run_cli("restore", str(tmp_path / "full"), "--home", str(tmp_path / "r"),
                "--journal", str(src.journal), "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["kek"]["source"].startswith("the backup's own kek/")


def test_the_journal_follows_every_erasure(src: Source) -> None:
    """Refreshed by the erasure itself (service/erasure_cases.py), ids only."""
    path = src.home / "journal" / "erasure-journal.json"
    doc = json.loads(base64.b64decode(json.loads(path.read_bytes())["payload"]))
    assert {src.atoms["alpha"], src.atoms["gamma"]} <= {k["key_id"] for k in doc["keys"]}
    assert {t["item_id"] for t in doc["tombstones"]} >= {src.atoms["alpha"]}
    assert [b["batch_id"] for b in doc["batches"]] == [src.batch]
    assert doc["batches"][0]["request_id"] == src.request
    assert MARK not in path.read_text()
    r = ledger(src.home, "journal", "export", "-")  # to stdout: the signed file itself
    assert r.code == 0 and json.loads(r.out)["payloadType"].endswith("erasure-journal.v1+json")
    (src.root / "not-a-journal.txt").write_text("keep me")
    r = ledger(src.home, "journal", "export", str(src.root / "not-a-journal.txt"))
    assert r.code == 2 and (src.root / "not-a-journal.txt").read_text() == "keep me"
    assert ledger(src.home, "journal", "export", str(src.journal)).code == 0  # its own: replaced


# --------------------------------------------------------------------------- PKCS#11
def test_a_home_whose_kek_is_in_a_token_restores_into_a_token_object_of_its_own(
        tmp_path: Path, softhsm: SoftHsm, monkeypatch: pytest.MonkeyPatch) -> None:
    """The backup's epoch is read from the source's token object, never written; the new
    home's KEK is a new object the source can never use; no PIN lands in config.toml."""
    monkeypatch.setenv("LEDGER_PKCS11_PIN", PIN)
    source_uri = softhsm.uri(f"src-{tmp_path.name}", pin=None)
    home = tmp_path / "home"
    LedgerApp.initialize(home, kek=source_uri)
    ok(home, "subject", "add", "u1")
    gone = ok(home, "atom", "add", "--subject", "u1", "--text", ERASED["alpha"]).out.strip()
    kept = ok(home, "atom", "add", "--subject", "u1", "--text", KEPT["beta"]).out.strip()
    ok(home, "backup", str(tmp_path / "b"))
    ok(home, "delete", gone, "--reason", "asked")
    ok(home, "journal", "export", str(tmp_path / "j.json"))
    journal = ("--journal", str(tmp_path / "j.json"))
    r = run_cli("restore", str(tmp_path / "b"), "--home", str(tmp_path / "r0"), *journal,
                "--kek", source_uri)
    assert r.code == 2 and "source's KEK object" in r.err and not (tmp_path / "r0").exists()
    module = source_uri.split("module-path=")[1].split("&")[0]
    target = f"pkcs11:token={TOKEN}?module-path={module}&pin-value={PIN}"
    new = tmp_path / "r"
    r = run_cli("restore", str(tmp_path / "b"), "--home", str(new), *journal, "--kek", target,
                "--json")
    assert r.code == 0, r.err
    config = (new / "config.toml").read_text()
    assert "-restored-" in config and "pin-value" not in config and not (new / "kek").exists()
    assert atom_text(new, kept) == KEPT["beta"]
    assert json.loads(ok(new, "atom", "show", gone, "--json").out)["content_erased"]
    assert atom_text(home, kept) == KEPT["beta"]  # the source's KEK is untouched
    ok(new, "keys", "rotate-kek")  # and the restored home rotates in its own object
    assert atom_text(new, kept) == KEPT["beta"] and atom_text(home, kept) == KEPT["beta"]


# --------------------------------------------------------------------------- PostgreSQL
def test_a_postgresql_home_is_backed_up_and_its_event_store_left_to_pg_dump(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What lives in the home goes in; the manifest says the event store is pg_dump's (no
    password), and `ledger restore` refuses it, writing nothing (the dump and its restore
    are tests/test_copies_postgres.py's)."""
    from sqlalchemy.engine import make_url

    from .conftest import PG_URL, drop_schema

    monkeypatch.delenv("LEDGER_KEK", raising=False)
    schema = f"t_{uuid.uuid4().hex[:12]}"
    home = tmp_path / "home"
    LedgerApp.initialize(home, db=f"{PG_URL}?schema={schema}")
    try:
        ok(home, "subject", "add", "u1")
        ok(home, "atom", "add", "--subject", "u1", "--text", KEPT["beta"])
        r = ledger(home, "backup", str(tmp_path / "b"), "--json")
        assert r.code == 0 and "pg_dump" in r.err, r.err
        done = json.loads(r.out)
        assert not done["event_store"]["included"] and done["event_store"]["schema"] == schema
        assert "pg_dump" in done["event_store"]["how"] and done["keystore"]["included"]
        names = {f["path"] for f in done["files"]}
        assert "keystore.sqlite" in names and "events.sqlite" not in names
        manifest = (tmp_path / "b" / "manifest.json").read_bytes()
        password = make_url(PG_URL).password
        assert not password or password.encode() not in base64.b64decode(
            json.loads(manifest)["payload"])
        before = tree_digest(tmp_path)
        r = run_cli("restore", str(tmp_path / "b"), "--home", str(tmp_path / "r"),
                    "--accept-rollback")
        assert r.code == 2 and "PostgreSQL" in r.err and "pg_restore" in r.err
        assert tree_digest(tmp_path) == before
    finally:
        drop_schema(schema)
