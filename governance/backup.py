"""``ledger backup``: a consistent online backup of a home, with a signed manifest
(ADR 0045). The folder it writes (docs/adr/0045 has the layout):

    manifest.json                 DSSE envelope (payload type PAYLOAD_TYPE), signed by an
                                  operator key: what the backup holds and of what log
    config.toml                   the home's configuration, as it is
    events.sqlite                 the event store (SQLite's backup API; absent for
                                  PostgreSQL, which pg_dump backs up: the manifest says so)
    keystore.sqlite               the data keys, each wrapped under a KEK epoch; the epochs
    keys/*.pub                    the public keys
    journal/erasure-journal.json  the erasure journal as of the backup
    keys/*.key, kek/epoch-*.kek   only with --with-keys

Never the projections database (it holds plaintext, and a restore rebuilds it from the
log), never a KEK, never a private signing key, unless ``--with-keys`` asks for both: a
backup without them can only be decrypted while the source's KEK epoch lives, so a KEK
rotation puts it beyond use, erasures included; one with them stays decryptable for ever
and must be guarded and destroyed like a key.

Consistency: the copies are taken under the ledger's write lock
(:meth:`LedgerApp.held_still`), with the log's head signed as a checkpoint, so the
event store, the keystore and the journal are of one moment and the manifest states that
checkpoint. Each SQLite database is copied with SQLite's backup API (one step: a read
transaction, so concurrent readers and the server go on) and left in rollback-journal
mode, one self-contained file. The folder is written as ``OUT.partial`` and renamed to
``OUT`` at the end: nothing half-written is ever taken for a backup.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import structlog

from governance.dsse import sign_document
from ledger import clock
from ledger.errors import EnvironmentProblem, InputError
from ledger.progress import Steps, report

if TYPE_CHECKING:
    from ledger.application import LedgerApp
    from ledger.home import StorageURL

log = structlog.get_logger("governance")

PAYLOAD_TYPE = "application/vnd.memory-ledger.backup-manifest.v1+json"
MANIFEST_TYPE = "https://memory-ledger.dev/backup-manifest/v1"
MANIFEST = "manifest.json"
CONFIG = "config.toml"
EVENTS = "events.sqlite"
KEYSTORE = "keystore.sqlite"
KEYS = "keys"
KEK = "kek"
JOURNAL = "journal/erasure-journal.json"

WITH_KEYS_WARNING = (
    "this backup holds the private signing keys and the key-encryption keys: it stays "
    "decryptable after every KEK rotation, so no erasure ever reaches it. Guard it like a "
    "key, and destroy it when its retention ends")


@dataclass
class BackupTaken:
    """What ``ledger backup`` wrote: the folder, its signed manifest, and what was left
    for another tool (``pg_dump``)."""

    folder: Path
    manifest: dict[str, Any]
    with_keys: bool
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        m = self.manifest
        return {"backup": str(self.folder), "ledger_id": m["ledger"]["id"],
                "created_at": m["created_at"], "log": {k: m["log"][k] for k in (
                    "size", "root", "head_time")},
                "kek": m["kek"], "files": m["files"], "with_keys": self.with_keys,
                "event_store": m["event_store"], "keystore": m["keystore"],
                "journal": m["journal"], "notes": self.notes, "warnings": self.warnings}


def take_backup(app: LedgerApp, out: Path, *, operator: str, with_keys: bool = False,
                progress: Steps | None = None) -> BackupTaken:
    """Write a backup of ``app``'s home to the new folder ``out``, its manifest signed by
    the key ``operator`` (which must hold the operator role). Refuses (writing nothing)
    an ``out`` that exists and is not an empty folder."""
    from keys.files import make_dirs

    out = out.absolute()
    config = app.config
    _check_target(out, config.home.resolve())
    signer = _operator_signer(app, operator)
    kek_store = _kek_store_to_copy(config) if with_keys else None
    partial = out.with_name(out.name + ".partial")
    if partial.exists():  # an interrupted backup's folder: never a backup, start over
        log.warning("backup.partial_removed", folder=partial.name)
        shutil.rmtree(partial)
    make_dirs(partial, mode=0o700)
    try:
        notes: list[str] = []
        cp, position, journal, (seq, last), events, keystore = \
            _copy_stores(app, partial, progress)
        epochs = _epochs_of(partial / KEYSTORE) if keystore["included"] else \
            _live_epochs(app)
        for part in (events, keystore):
            if not part["included"]:
                notes.append(f"the {part['what']} is in PostgreSQL: back it up with "
                             f"pg_dump ({part['how']})")
        _copy_home_files(config.home, partial, journal.data, with_keys, kek_store, epochs)
        files = _digests(partial)
        from importlib.metadata import version

        manifest = {
            "type": MANIFEST_TYPE,
            "ledger": {"id": app.ledger_id, "origin": config.origin,
                       "root_kid": config.root_kid, "log_vkey": app.log_vkey()},
            "tool": {"name": "memory-ledger", "version": version("memory-ledger")},
            "created_at": clock.format_instant(clock.now()),
            "source": {"home": str(config.home.resolve()), "kek_store": config.kek},
            "log": {"size": cp.size, "root": _b64(cp.root), "checkpoint": cp.note,
                    "position": position, "head_seq": seq,
                    "head_time": clock.format_instant(last) if last else None},
            "kek": {"store": config.kek,
                    "epoch": next((e["epoch"] for e in epochs if e["state"] == "active"), 0),
                    "epochs": epochs, "with_keys": with_keys},
            "event_store": events, "keystore": keystore,
            "journal": {"file": JOURNAL, "size": journal.size,
                        "keys": len(journal.keys), "tombstones": len(journal.tombstones)},
            "files": files,
            "signer": {"name": operator, "kid": signer.kid, "role": "operator"},
        }
        _write(partial / MANIFEST, sign_document(manifest, PAYLOAD_TYPE, signer))
        _fsync_dir(partial)
        os.replace(partial, out)  # over an empty folder too (POSIX rename)
        _fsync_dir(out.parent)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    log.info("backup.written", size=cp.size, files=len(files), with_keys=with_keys)
    return BackupTaken(out, manifest, with_keys, notes,
                       [WITH_KEYS_WARNING] if with_keys else [])


def _copy_stores(app: LedgerApp, partial: Path, progress: Steps | None
                 ) -> tuple[Any, int, Any, tuple[int, Any], dict[str, Any], dict[str, Any]]:
    """Checkpoint, then, with the ledger held still at that checkpoint, the journal and
    copies of the event store and the keystore. Returns the checkpoint, its position, the
    journal, the head (seq, time) and what was copied of each store."""
    from governance.journal import write_journal

    config = app.config
    app.checkpoint()  # witnessed first (outside the lock); the same size is reused
    stages = 2
    report(progress, "Copying the stores", 0, stages)
    with app.held_still() as (cp, position):
        journal = write_journal(app, cp, position)
        head = app.reader.head()
        events = _copy_store(config.events, partial / EVENTS, sqlite3, "event store")
        report(progress, "Copying the stores", 1, stages)
        keystore = _copy_store(config.keystore, partial / KEYSTORE, _store_module(),
                               "keystore")
        report(progress, "Copying the stores", 2, stages)
    return cp, position, journal, head, events, keystore


def _check_target(out: Path, home: Path) -> None:
    """``out`` is new (or an empty folder) and outside the home it backs up."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InputError(f"{out} already exists and is not an empty folder; nothing was "
                         "written", hint="give a new folder for each backup")
    if out.resolve() == home or home in out.resolve().parents:
        raise InputError(f"{out} is inside the home it would back up; nothing was written",
                         hint="keep backups on another disk, away from the home")


def _operator_signer(app: LedgerApp, operator: str) -> Any:
    """The signer of the manifest: a key that holds the operator role now."""
    signer = app.signer(operator)
    try:
        app.reader.roster().state.holds(signer.kid, ("operator",), clock.now())
    except Exception as e:  # KeyNotAuthorized: a key the restore would refuse
        raise InputError(f"the key {operator!r} may not sign a backup: {e}",
                         hint="sign with an operator key: --operator NAME") from None
    return signer


def _kek_store_to_copy(config: Any) -> Any:
    """With ``--with-keys``: the ledger's KEK store (None without one), which must be
    files: a KEK kept in a PKCS#11 token cannot leave it."""
    from keys.kek import FileKekStore, open_kek_store

    if config.kek is None:
        return None
    kek_store = open_kek_store(config.kek, config.home)
    if not isinstance(kek_store, FileKekStore):
        raise InputError("--with-keys cannot copy a KEK kept in a PKCS#11 token: it "
                         "cannot leave the token; nothing was written",
                         hint="back up without --with-keys; restore with "
                              "--kek-from the token's URI")
    return kek_store


def _copy_home_files(home: Path, partial: Path, journal: bytes, with_keys: bool,
                     kek_store: Any, epochs: list[dict[str, Any]]) -> None:
    """The config, the public keys and the journal; with ``--with-keys`` the private keys
    and the KEKs of every epoch not destroyed too."""
    from keys.files import make_dirs
    from keys.kek import FileKekStore

    _copy_file(home / CONFIG, partial / CONFIG)
    make_dirs(partial / KEYS, mode=0o700)
    for pub in sorted((home / KEYS).glob("*.pub")):
        _copy_file(pub, partial / KEYS / pub.name)
    make_dirs((partial / JOURNAL).parent, mode=0o700)
    _write(partial / JOURNAL, journal)
    if not with_keys:
        return
    for key in sorted((home / KEYS).glob("*.key")):
        _copy_file(key, partial / KEYS / key.name)
    if isinstance(kek_store, FileKekStore):
        wanted = {e["epoch"] for e in epochs if e["state"] != "destroyed"}
        make_dirs(partial / KEK, mode=0o700)
        for epoch in sorted(wanted & set(kek_store.epochs())):
            src = kek_store.path(epoch)
            _copy_file(src, partial / KEK / src.name)


def _store_module() -> ModuleType:
    from keys.datakeys import store_sqlite

    return store_sqlite()


def _copy_store(url: StorageURL, dst: Path, module: ModuleType, what: str) -> dict[str, Any]:
    """Copy one SQLite database with the backup API (one step), left in rollback-journal
    mode; a PostgreSQL store is described, not copied (no password)."""
    if url.is_postgres:
        from sqlalchemy.engine import make_url

        u = make_url(url.raw)
        where = f"postgresql://{u.host or '127.0.0.1'}:{u.port or 5432}/{u.database}"
        skip = f" --exclude-table '{url.schema}.proj_*'" if what == "event store" else ""
        return {"what": what, "included": False, "backend": "postgresql",
                "database": where, "schema": url.schema,
                "how": f"pg_dump --dbname '{where}' --schema {url.schema}{skip} (never the "
                       "read models, proj_*: they hold plaintext), taken before `ledger "
                       "backup`, so that every event it holds has its data key in this "
                       "backup's keystore (docs/deploy.md)"}
    try:
        src = module.connect(str(url.sqlite_path))
    except Exception as e:
        raise EnvironmentProblem(f"cannot open the {what} {url.sqlite_path.name}: {e}") from e
    try:
        src.execute("PRAGMA busy_timeout=10000")
        target = module.connect(str(dst))
        try:
            src.backup(target)
            target.execute("PRAGMA journal_mode=DELETE")
        finally:
            target.close()
    finally:
        src.close()
    os.chmod(dst, 0o600)
    _fsync(dst)
    return {"what": what, "included": True, "backend": "sqlite", "file": dst.name}


def _epochs_of(keystore: Path) -> list[dict[str, Any]]:
    """The KEK epochs of a keystore copy and the keys each wraps (read-only)."""
    conn = sqlite3.connect(f"{keystore.as_uri()}?mode=ro&immutable=1", uri=True)
    try:
        rows = conn.execute(
            "SELECT epoch, store, state FROM kek_epochs ORDER BY epoch").fetchall()
        counts = dict(conn.execute(
            "SELECT epoch, count(*) FROM data_keys GROUP BY epoch").fetchall())
    finally:
        conn.close()
    out = [{"epoch": int(e), "store": str(s), "state": str(st), "keys": int(counts.pop(e, 0))}
           for e, s, st in rows]
    out += [{"epoch": int(e), "store": None, "state": "unwrapped", "keys": int(n)}
            for e, n in sorted(counts.items())]  # epoch 0: a ledger made before wrapping
    return out


def _live_epochs(app: LedgerApp) -> list[dict[str, Any]]:
    from dataclasses import asdict

    from ledger.epochs import epoch_states

    return [{"epoch": e["epoch"], "store": e["store"], "state": e["state"], "keys": e["keys"]}
            for e in map(asdict, epoch_states(app))]


def _digests(folder: Path) -> list[dict[str, Any]]:
    out = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        out.append({"path": path.relative_to(folder).as_posix(), "sha256": sha256_of(path),
                    "bytes": path.stat().st_size})
    return out


def sha256_of(path: Path, step: Callable[[int], None] | None = None) -> str:
    """The hex SHA-256 of a file, read in 1 MiB blocks (``step`` hears the bytes)."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
            if step is not None:
                step(len(block))
    return h.hexdigest()


def _copy_file(src: Path, dst: Path) -> None:
    _write(dst, src.read_bytes())


def _write(path: Path, data: bytes) -> None:
    from keys.files import write_private

    write_private(path, data)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(folder: Path) -> None:
    for sub in sorted(p for p in folder.rglob("*") if p.is_dir()):
        _fsync(sub)
    _fsync(folder)


def _b64(raw: bytes) -> str:
    import base64

    return base64.b64encode(raw).decode()
