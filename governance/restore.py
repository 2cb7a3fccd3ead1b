"""``ledger restore``: a backup made into a new home, with every erasure the backup
missed re-applied before the ledger opens for use (ADR 0045).

**Nothing is written until everything is checked** (exit 2 for bad input, 3 for the
environment): the manifest's signature, by a key that held the operator role in the
backup's own roster (folded from the backup's root-signed roster events, the root key
being the one the backup's config names), and the digest and size of every file, with
no file the manifest does not list; each erasure journal given (this ledger's, signed by
one of its log keys, its checkpoint too, and agreeing with the backup's log on every
event both hold); whether the restore would be a rollback of erasures (no journal, or a
journal older than the backup: refused unless ``accept_rollback``); that the KEK of
every epoch the backup's keys are wrapped under can be reached (a rotation since the
backup destroyed it: the backup is beyond use, as designed); that the signing keys are
there and are this ledger's; that the new home does not exist (or is an empty folder).

**Then, in a staging folder beside the new home** (``.NAME.restoring``; renamed to the
new home at the very end, so a crash leaves no home; running the command again removes
the staging folder and starts over), the steps and their crash points
(``LEDGER_FAULT``, ledger/faults.py), in order:

1. copy the backup's files, checking each digest again (``restore-copied``);
2. destroy every data key the journal names in the restored keystore, with the
   keystore's secure deletion (secure_delete, WAL truncated, residue scan, VACUUM)
   (``restore-keys-destroyed``);
3. make a new KEK epoch in the new home's own store (``restore-kek-created``), begin it
   (``restore-epoch-begun``), re-wrap every remaining data key under it, reading the
   backup's epochs from the store the source keeps them in, never writing or destroying
   it (``restore-rewrapped:N``), and forget the source's epochs: their rows go, and the
   keystore is rebuilt so no page keeps a key wrapped under them
   (``restore-epochs-forgotten``);
4. open the ledger in the staging folder and record, signed by the operator, one
   ``*.erasure-reapplied`` event per item the restored log shows unerased, and the
   epoch (``kek.epoch-restored``) (``restore-reapplied``);
5. rebuild the read models from the log (``restore-read-models``);
6. ``ledger verify``: every event, and the log extends the backup's checkpoint
   (``restore-verified``);
7. derive the new home's erasure journal (``restore-journal``);
8. rename the staging folder to the new home.

A restored log shorter than the journal's checkpoint (which witnesses may have
cosigned) is a rollback of the log: the report says so with both sizes and the events
lost, every time.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import sqlite3
import tomllib
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from uuid import UUID

import structlog

from governance.backup import (
    CONFIG,
    EVENTS,
    JOURNAL,
    KEK,
    KEYS,
    KEYSTORE,
    MANIFEST,
    MANIFEST_TYPE,
    PAYLOAD_TYPE,
    sha256_of,
)
from governance.dsse import DocumentInvalid, SignedDocument, check_signature, read_document
from governance.journal import Journal, check_journal, read_journal
from keys.kek import KekRing, KekStore
from ledger import clock, envelope, faults
from ledger.errors import EnvironmentProblem, InputError, VerificationFailed
from ledger.progress import Steps, report

if TYPE_CHECKING:
    from keys.roster import RosterState
    from keys.signing import Signer
    from ledger.application import LedgerApp

log = structlog.get_logger("governance")

STEPS = ("restore-copied", "restore-keys-destroyed", "restore-kek-created",
         "restore-epoch-begun", "restore-rewrapped:N", "restore-epochs-forgotten",
         "restore-reapplied", "restore-read-models", "restore-verified", "restore-journal")
"""The crash points of a restore (``LEDGER_FAULT``), in order; each kills the process
with the staging folder half made, which the next run removes."""

DESTROY_CHUNK = 500


class BackupInvalid(DocumentInvalid):
    """A backup whose manifest, files or journal do not verify (exit 2, nothing written)."""


@dataclass(frozen=True)
class RestoreRequest:
    """What ``ledger restore`` was asked."""

    backup: Path
    home: Path
    journals: tuple[Path, ...] = ()
    accept_rollback: bool = False
    kek_from: str | None = None
    keys_from: Path | None = None
    kek: str | None = None
    operator: str = "operator"


@dataclass
class Backup:
    """A backup folder whose manifest and files verified, with what the checks read."""

    folder: Path
    manifest: dict[str, Any]
    roster: RosterState
    root_public_key: bytes

    @property
    def size(self) -> int:
        return int(self.manifest["log"]["size"])

    @property
    def ledger_id(self) -> str:
        return str(self.manifest["ledger"]["id"])

    @property
    def origin(self) -> str:
        return str(self.manifest["ledger"]["origin"])

    @property
    def source_home(self) -> Path:
        return Path(str(self.manifest["source"]["home"]))

    @property
    def with_keys(self) -> bool:
        return bool(self.manifest["kek"].get("with_keys"))

    def events_uri(self) -> str:
        return _read_only(self.folder / EVENTS)


@dataclass
class Plan:
    """Everything checked before the first byte is written."""

    backup: Backup
    journal: Journal | None
    journal_file: Path | None
    sources: dict[int, KekStore]
    source_words: str
    target_spec: str
    signers: list[Signer]
    rollback: dict[str, Any] | None
    could_come_back: str | None
    destroy: list[str]
    warnings: list[str] = field(default_factory=list)


# ----------------------------------------------------------------------------- checking
def open_backup(folder: Path) -> Backup:
    """Verify a backup folder: manifest form and signature (an operator key of the
    backup's own roster), every file's digest and size, nothing unlisted.
    :class:`BackupInvalid` (exit 2) otherwise; nothing is written, not even SQLite's
    side files (the stores are read with ``immutable=1``)."""
    what = f"backup {folder}"
    signed = _read_manifest(folder, what)
    manifest = signed.document
    listed, (ledger_id, origin, root_kid), included = _manifest_fields(manifest, what)
    _check_files(folder, listed, what)
    if not included:
        raise InputError(
            f"{what} is of a ledger whose event store or keystore is in PostgreSQL; `ledger "
            "restore` restores SQLite homes only; nothing was written",
            hint="restore the event store with pg_restore (docs/deploy.md); this backup "
                 "keeps the keystore, configuration, public keys and journal")
    root = _root_of(folder, (ledger_id, origin, root_kid), what)
    roster = _roster_of(folder / EVENTS, root, ledger_id, what)
    created = _time(manifest.get("created_at"), what)
    try:
        public = roster.holds(signed.kid, ("operator",), created)
    except Exception as e:  # KeyNotAuthorized
        raise BackupInvalid(f"{what}: the manifest is not signed by an operator key of "
                            f"the backup's roster: {e}") from None
    try:
        check_signature(signed, public, f"{what}: {MANIFEST}")
    except DocumentInvalid as e:
        raise BackupInvalid(str(e)) from None
    return Backup(folder, manifest, roster, root)


def _read_manifest(folder: Path, what: str) -> SignedDocument:
    """The manifest file, of its form (its signature is checked last)."""
    path = folder / MANIFEST
    try:
        data = path.read_bytes()
    except OSError as e:
        raise BackupInvalid(f"{what} has no readable {MANIFEST}: {e.strerror}",
                            hint="give the folder `ledger backup` wrote") from None
    try:
        return read_document(data, PAYLOAD_TYPE, MANIFEST_TYPE, f"{what}: {MANIFEST}")
    except DocumentInvalid as e:
        raise BackupInvalid(str(e)) from None


def _manifest_fields(manifest: dict[str, Any], what: str
                     ) -> tuple[dict[str, tuple[str, int]], tuple[str, str, str], bool]:
    """The files the manifest lists (path -> digest, size), the ledger it names (id,
    origin, root key id) and whether both stores are in the backup."""
    try:
        listed = {str(f["path"]): (str(f["sha256"]), int(f["bytes"]))
                  for f in manifest["files"]}
        ledger_id = str(manifest["ledger"]["id"])
        origin = str(manifest["ledger"]["origin"])
        root_kid = str(manifest["ledger"]["root_kid"])
        int(manifest["log"]["size"])
        str(manifest["source"]["home"])
        included = bool(manifest["event_store"]["included"]) and \
            bool(manifest["keystore"]["included"])
    except (KeyError, TypeError, ValueError):
        raise BackupInvalid(f"{what}: the manifest is not well formed") from None
    return listed, (ledger_id, origin, root_kid), included


def _check_files(folder: Path, listed: dict[str, tuple[str, int]], what: str) -> None:
    """Every listed path inside the backup; the files present are those listed, each
    with its digest and size."""
    for name in listed:
        parts = Path(name).parts
        if Path(name).is_absolute() or ".." in parts or name == MANIFEST:
            raise BackupInvalid(f"{what}: the manifest lists a path outside the backup: "
                                f"{name!r}")
    present = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    present.discard(MANIFEST)
    if present - set(listed):
        raise BackupInvalid(f"{what} holds files its manifest does not list: "
                            f"{', '.join(sorted(present - set(listed))[:5])}")
    if set(listed) - present:
        raise BackupInvalid(f"{what} lacks files its manifest lists: "
                            f"{', '.join(sorted(set(listed) - present)[:5])}")
    for name, (digest, size) in sorted(listed.items()):
        p = folder / name
        if p.stat().st_size != size or sha256_of(p) != digest:
            raise BackupInvalid(f"{what}: {name} is not the file the manifest signs (its "
                                "digest or size differs): the backup was altered or damaged")


def _root_of(folder: Path, named: tuple[str, str, str], what: str) -> bytes:
    """The backup's root public key, once config.toml and keys/root.pub name the ledger
    and root key the manifest names (``named``: id, origin, root key id)."""
    from keys.keyring import parse_public_key_document
    from keys.signing import key_id

    try:
        doc = tomllib.loads((folder / CONFIG).read_text(encoding="utf-8"))
        same = (doc["ledger"]["id"], doc["ledger"]["origin"], doc["ledger"]["root_kid"]) == \
            named
        root = parse_public_key_document((folder / KEYS / "root.pub").read_bytes(),
                                         "keys/root.pub")
    except (OSError, KeyError, TypeError, ValueError, tomllib.TOMLDecodeError) as e:
        raise BackupInvalid(f"{what}: config.toml or keys/root.pub cannot be read: {e}") \
            from None
    if not same or key_id(root) != named[2]:
        raise BackupInvalid(f"{what}: config.toml, keys/root.pub and the manifest do not "
                            "name the same ledger and root key")
    return root


def _roster_of(events: Path, root: bytes, ledger_id: str, what: str) -> RosterState:
    """The backup's roster: its root-signed roster events, each verified, folded."""
    from keys.roster import ROSTER_TOPICS, RosterState
    from keys.signing import key_id

    roster = RosterState()
    topics = sorted(ROSTER_TOPICS)
    try:
        conn = sqlite3.connect(_read_only(events), uri=True)
        try:
            rows = conn.execute(
                "SELECT topic, state FROM stored_events WHERE topic IN (?, ?, ?) "
                "ORDER BY rowid", topics).fetchall()
        finally:
            conn.close()
        for topic, state in rows:
            opened = envelope.open_state(bytes(state))
            if opened.kid != key_id(root) or opened.envelope["ledger"] != ledger_id:
                raise ValueError("a roster event not signed by the root key of this ledger")
            envelope.verify(opened, root)
            roster.apply(str(topic), opened.envelope["payload"])
    except (sqlite3.Error, ValueError, KeyError) as e:
        raise BackupInvalid(f"{what}: the roster in its event store does not verify: {e}") \
            from None
    if roster.root_kid != key_id(root):
        raise BackupInvalid(f"{what}: its event store holds no roster of this root key")
    return roster


def plan_restore(req: RestoreRequest) -> Plan:
    """Every check, reading only (module docstring); the plan the steps follow."""
    home = req.home.absolute()
    if home.exists() and (not home.is_dir() or any(home.iterdir())):
        raise InputError(f"{home} already exists and is not empty; nothing was written",
                         hint="restore into a new folder")
    backup = open_backup(req.backup.absolute())
    if backup.folder == home or backup.folder in home.parents:
        raise InputError("the new home cannot be inside the backup folder")
    journal, journal_file = _newest_journal(req.journals, backup)
    rollback, come_back = _rollback(backup, journal, journal_file, req.accept_rollback)
    if journal is not None:
        _check_history(backup, journal, journal_file)
    destroy = sorted({*(k["key_id"] for k in journal.keys),
                      *(t["item_id"] for t in journal.tombstones)}) if journal else []
    sources, words = _sources(backup, req.kek_from, set(destroy))
    try:
        target = _target_spec(backup, home, req.kek)
        signers = _signers(backup, req.keys_from, req.operator)
    except BaseException:
        _close_all(sources)
        raise
    warnings = []
    witnesses = tomllib.loads((backup.folder / CONFIG).read_text(encoding="utf-8")).get(
        "witnesses", [])
    if witnesses and rollback is not None:
        warnings.append(f"config.toml asks {len(witnesses)} witness(es) to cosign this "
                        "ledger's checkpoints; they cosigned the source's longer log and will "
                        "refuse a checkpoint of the restored one (a rollback is a fork to "
                        "them): tell their operators, or `ledger witness forget` them")
    return Plan(backup, journal, journal_file, sources, words, target, signers, rollback,
                come_back, destroy, warnings)


def _newest_journal(paths: tuple[Path, ...], backup: Backup
                    ) -> tuple[Journal | None, Path | None]:
    """Each journal verified against the backup's roster; the newest (largest
    checkpoint) is applied."""
    best: tuple[Journal, Path] | None = None
    for path in paths:
        try:
            data = path.read_bytes()
        except OSError as e:
            raise InputError(f"cannot read the journal {path}: {e.strerror}") from None
        try:
            signed = read_journal(data, f"journal {path}")
            journal = check_journal(signed, data, f"journal {path}",
                                    ledger_id=backup.ledger_id, origin=backup.origin,
                                    roster=backup.roster)
        except DocumentInvalid as e:
            raise BackupInvalid(str(e), hint=e.hint) from None
        if best is None or (journal.size, journal.generated_at) > \
                (best[0].size, best[0].generated_at):
            best = (journal, path)
    return (best[0], best[1]) if best else (None, None)


def _rollback(backup: Backup, journal: Journal | None, path: Path | None, accept: bool
              ) -> tuple[dict[str, Any] | None, str | None]:
    """Refuse (unless ``accept``) a restore that cannot re-apply the erasures after the
    backup; say what could come back, and report a log rollback."""
    m = backup.size
    head_time = backup.manifest["log"].get("head_time")
    ends = f"the backup's log ends at seq {m} ({head_time})"
    words = None
    if journal is None:
        words = (f"no erasure journal was given: {ends}; every erasure recorded after that "
                 "time in the ledger this backup was taken of is not re-applied, and what it "
                 "erased comes back readable in the restored home")
    elif journal.size < m:
        jtime = journal.document["checkpoint"].get("head_time") or journal.generated_at
        words = (f"the journal {path} covers the log up to seq {journal.size} ({jtime}), "
                 f"less than the backup; {ends}: every erasure recorded after that time is "
                 "not re-applied, and what it erased comes back readable in the restored home "
                 f"(the journal's {len(journal.keys)} key destructions are all in the backup "
                 "already)")
    if words is not None and not accept:
        hint = "give the newest journal with --journal FILE (`ledger journal export`)"
        own = backup.source_home / JOURNAL
        if own.is_file():
            hint += f"; the source home keeps one: --journal {own}"
        raise InputError(f"refused: {words}; nothing was written",
                         hint=hint + "; or accept that with --accept-rollback")
    rollback = None
    if journal is not None and journal.size > m:
        note = str(journal.document["checkpoint"]["note"])
        rollback = {"restored_size": m, "journal_size": journal.size,
                    "events_lost": journal.size - m,
                    "cosignatures": max(0, note.count("\n\u2014 ") - 1)}
    return rollback, words


def _check_history(backup: Backup, journal: Journal, path: Path | None) -> None:
    """Every journal entry at a position the backup's log holds names the event there:
    the journal and the backup describe one history (else the journal is of a fork)."""
    wanted = [*journal.keys, *journal.tombstones,
              *(b[k] for b in journal.batches for k in ("opened", "closed") if b.get(k))]
    inside = [e for e in wanted if int(e["seq"]) <= backup.size]
    if not inside:
        return
    conn = sqlite3.connect(backup.events_uri(), uri=True)
    try:
        for entry in inside:
            oid, _, version = str(entry["event_id"]).rpartition("/")
            row = conn.execute("SELECT state FROM stored_events WHERE originator_id = ? AND "
                               "originator_version = ?", (UUID(oid).hex, int(version))
                               ).fetchone()
            seq = envelope.open_state(bytes(row[0])).envelope["seq"] if row else None
            if seq != int(entry["seq"]):
                raise BackupInvalid(
                    f"the journal {path} names event {entry['event_id']} at seq "
                    f"{entry['seq']}, which the backup's log does not hold there: they are "
                    "not of one history (a journal of another copy of this ledger?)")
    except (ValueError, sqlite3.Error) as e:
        raise BackupInvalid(f"the journal {path} cannot be matched with the backup: {e}") \
            from None
    finally:
        conn.close()


def _sources(backup: Backup, kek_from: str | None, destroyed: set[str]
             ) -> tuple[dict[int, KekStore], str]:
    """The KEK store of each epoch the backup's keys are wrapped under, opened read-only
    in effect (only ``unwrap`` is ever called on them), and one key of each epoch
    unwrapped, leaving aside keys the journal destroys (their epoch need not be reachable)."""
    from keys.kek import UNWRAPPED_EPOCH, FileKekStore, open_kek_store

    conn = sqlite3.connect(_read_only(backup.folder / KEYSTORE), uri=True)
    try:
        epochs = {int(e): str(s) for e, s in conn.execute("SELECT epoch, store FROM kek_epochs")}
        samples: dict[int, tuple[str, bytes]] = {}
        for key_id, material, epoch in conn.execute(
                "SELECT key_id, key_material, epoch FROM data_keys"):
            if int(epoch) not in samples and str(key_id) not in destroyed:
                samples[int(epoch)] = (str(key_id), bytes(material))
    except sqlite3.Error as e:
        raise BackupInvalid(f"the backup's keystore cannot be read: {e}") from None
    finally:
        conn.close()
    stores: dict[int, KekStore] = {}
    opened: dict[str, KekStore] = {}

    def store(spec: str, home: Path) -> KekStore:
        key = f"{home}|{spec}"
        if key not in opened:
            try:
                opened[key] = open_kek_store(spec, home)
            except ValueError as e:
                raise InputError(f"--kek-from: {e}") from None
        return opened[key]

    if kek_from is not None:
        words = f"--kek-from {kek_from}"
    elif backup.with_keys:
        words = "the backup's own kek/ (taken --with-keys)"
    else:
        words = f"the source home's KEK store ({backup.source_home})"
    for epoch in sorted(e for e in {*epochs, *samples} if e != UNWRAPPED_EPOCH):
        if kek_from is not None:
            stores[epoch] = store(kek_from, Path.cwd())
        elif backup.with_keys:
            stores[epoch] = FileKekStore(backup.folder / KEK, "file:kek")
        else:
            stores[epoch] = store(epochs.get(epoch, "file:kek"), backup.source_home)
    try:
        _sample(stores, samples, words)
    except BaseException:
        _close_all(stores)
        raise
    return stores, words


def _sample(stores: dict[int, KekStore], samples: dict[int, tuple[str, bytes]],
            words: str) -> None:
    """One key of each epoch unwrapped: the KEK is reachable and is this backup's."""
    from keys.errors import KekUnavailable, KeystoreError
    from keys.kek import UNWRAPPED_EPOCH

    for epoch, (key_id, material) in sorted(samples.items()):
        if epoch == UNWRAPPED_EPOCH:
            continue
        try:
            stores[epoch].unwrap(epoch, [(key_id, material)])
        except KekUnavailable as e:
            raise EnvironmentProblem(
                f"the backup's data keys are wrapped under KEK epoch {epoch}, which "
                f"{words} cannot give: {e}; nothing was written",
                hint="a KEK rotation since the backup destroyed that epoch's KEK (the "
                     "backup is then beyond use, by design: ADR 0044), or the KEK is "
                     "elsewhere: give --kek-from file:FOLDER or the token's pkcs11: URI"
            ) from None
        except KeystoreError as e:
            raise EnvironmentProblem(f"the KEK {words} gives for epoch {epoch} does not open "
                                     f"the backup's keys: {e}; nothing was written",
                                     hint="give the source's KEK store with --kek-from") \
                from None


def _target_spec(backup: Backup, home: Path, kek: str | None) -> str:
    """The new home's KEK store: ``kek``, else ``LEDGER_KEK``, else ``file:kek`` in the
    new home; never the source's (a file folder it uses, or a token object it names)."""
    from keys.kek import DEFAULT_SPEC, KEK_ENV, check_kek_spec, named_kek_spec

    spec = kek or os.environ.get(KEK_ENV) or DEFAULT_SPEC
    try:
        check_kek_spec(spec)
    except ValueError as e:
        raise InputError(str(e)) from None
    source = str(backup.manifest["source"].get("kek_store") or "")
    if spec.startswith("pkcs11:"):
        theirs = _pkcs11_object(named_kek_spec(source, backup.ledger_id)) \
            if source.startswith("pkcs11:") else None
        mine = _pkcs11_object(spec)
        if mine is None:  # a label of its own, which the source can never use
            return named_kek_spec(spec, f"{backup.ledger_id}-restored-{uuid.uuid4().hex[:12]}")
        if mine == theirs or mine == f"memory-ledger-{backup.ledger_id}":
            raise InputError(f"--kek names the source's KEK object {mine!r}: the restored home "
                             "must never write the source's KEK; nothing was written",
                             hint="leave object= out: the restore names one of its own")
        return spec
    folder = Path(spec[len("file:"):])
    mine_path = (folder if folder.is_absolute() else home / folder).resolve()
    theirs_paths = {(backup.folder / KEK).resolve()}
    if source.startswith("file:"):
        src = Path(source[len("file:"):])
        theirs_paths.add((src if src.is_absolute() else backup.source_home / src).resolve())
    if mine_path in theirs_paths:
        raise InputError(f"--kek {spec} is the source's KEK folder {mine_path}: the restored "
                         "home must never write the source's KEK; nothing was written",
                         hint="leave --kek out (file:kek in the new home)")
    return spec


def _pkcs11_object(spec: str) -> str | None:
    path = spec[len("pkcs11:"):].partition("?")[0]
    for attr in path.split(";"):
        name, _, value = attr.partition("=")
        if name == "object":
            return value
    return None


def _signers(backup: Backup, keys_from: Path | None, operator: str) -> list[Signer]:
    """The private keys the new home signs with, from ``keys_from`` (default: the
    backup's keys/ if taken --with-keys, else the source home's keys/): each must match
    the backup's public key of its name; the root key must be the ledger's root, the
    operator and log keys must hold their roles now (exit 3 when missing)."""
    from keys.errors import KeyringError
    from keys.keyring import parse_public_key_document, read_private_key_file

    folder = keys_from or (backup.folder / KEYS if backup.with_keys
                           else backup.source_home / KEYS)
    signers: dict[str, Signer] = {}
    for path in sorted(folder.glob("*.key")) if folder.is_dir() else []:
        try:
            signer = read_private_key_file(path, path.stem)
        except KeyringError as e:
            raise EnvironmentProblem(str(e)) from None
        pub = backup.folder / KEYS / f"{path.stem}.pub"
        if pub.is_file() and parse_public_key_document(pub.read_bytes(), str(pub)) != \
                signer.public_key:
            raise EnvironmentProblem(f"{path} is not the key the backup's keys/{pub.name} "
                                     "names; nothing was written",
                                     hint="give this ledger's keys with --keys-from DIR")
        signers[path.stem] = signer
    now = clock.now()
    for name, role in (("root", None), (operator, "operator"), ("log", "log")):
        found = signers.get(name)
        if found is None:
            raise EnvironmentProblem(
                f"the signing key {name!r} is not in {folder}; nothing was written",
                hint="give the folder holding this ledger's private keys with --keys-from DIR")
        try:
            if role is None:
                if found.kid != backup.roster.root_kid:
                    raise ValueError(f"{name}.key is not this ledger's root key")
            else:
                backup.roster.holds(found.kid, (role,), now)
        except Exception as e:  # KeyNotAuthorized, ValueError
            raise EnvironmentProblem(f"the key {name!r} from {folder} cannot sign for this "
                                     f"ledger: {e}; nothing was written") from None
    return list(signers.values())


# ----------------------------------------------------------------------------- doing
def restore(req: RestoreRequest, progress: Steps | None = None) -> dict[str, Any]:
    """Check (:func:`plan_restore`), then restore in a staging folder and rename it
    (module docstring). Returns the report."""
    plan = plan_restore(req)
    home = req.home.absolute()
    staging = home.parent / f".{home.name}.restoring"
    try:
        home.parent.mkdir(parents=True, exist_ok=True)
        with _claimed(staging):
            try:
                out = _stage(plan, staging, req.operator, progress)
                if home.exists():
                    home.rmdir()  # an empty folder (checked): the rename puts the home there
                os.rename(staging, home)
                _fsync_path(home.parent)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
    finally:
        _close_all(plan.sources)
    log.info("restore.done", size=plan.backup.size, reapplied=len(out["reapplied"]),
             rollback=plan.rollback is not None)
    return {**out, "home": str(home)}


@contextmanager
def _claimed(staging: Path) -> Iterator[None]:
    """The staging folder, new and held (``flock``) for the run: one left by a crashed run
    is removed; one held by a running restore is refused."""
    if staging.exists():
        fd = os.open(staging, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise EnvironmentProblem(f"another restore is writing {staging}",
                                     hint="wait for it to finish") from None
        finally:
            os.close(fd)
        log.warning("restore.staging_removed", folder=staging.name)
        shutil.rmtree(staging)
    staging.mkdir(mode=0o700)
    fd = os.open(staging, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        yield
    finally:
        os.close(fd)


def _stage(plan: Plan, staging: Path, operator: str, progress: Steps | None
           ) -> dict[str, Any]:
    from ledger.application import LedgerApp
    from ledger.home import Config

    _copy(plan, staging, progress)
    faults.point("restore-copied")
    kek = _keystore(plan, staging, progress)
    app = LedgerApp(Config.load(staging))
    try:
        out = _record(plan, app, operator, kek)
        faults.point("restore-reapplied")
        out["read_models"] = _read_models(app, progress)
        faults.point("restore-read-models")
        out["verify"] = _verify(plan, app, progress)
        faults.point("restore-verified")
        from governance.journal import refresh_journal

        out["journal_written"] = refresh_journal(app).summary()
        faults.point("restore-journal")
    finally:
        app.close()
    return out


def _copy(plan: Plan, staging: Path, progress: Steps | None) -> None:
    """The backup's stores, configuration and public keys (digests checked again while
    copying), the private keys from where the plan found them; the configuration names
    the new home's files and KEK store."""
    from keys.files import make_dirs, write_private
    from keys.kek import without_pin
    from keys.keyring import private_key_document

    folder = plan.backup.folder
    files = [f for f in plan.backup.manifest["files"]
             if f["path"] in (EVENTS, KEYSTORE)
             or (f["path"].startswith(f"{KEYS}/") and f["path"].endswith(".pub"))]
    total = sum(int(f["bytes"]) for f in files)
    done = 0
    report(progress, "Copying the backup", 0, total)
    make_dirs(staging / KEYS, mode=0o700)
    for f in files:
        src, dst = folder / f["path"], staging / f["path"]
        shutil.copyfile(src, dst)
        os.chmod(dst, 0o600 if f["path"] in (EVENTS, KEYSTORE) else 0o644)
        if sha256_of(dst) != f["sha256"]:
            raise BackupInvalid(f"{f['path']} changed while it was copied; nothing was "
                                "restored")
        done += int(f["bytes"])
        report(progress, "Copying the backup", done, total)
    text = (folder / CONFIG).read_text(encoding="utf-8")
    for section, key, value in (("storage", "events", EVENTS),
                                ("storage", "keystore", KEYSTORE),
                                ("storage", "projections", "projections.sqlite"),
                                ("keys", "kek", without_pin(plan.target_spec))):
        text = set_toml(text, section, key, value)
    write_private(staging / CONFIG, text)
    for signer in plan.signers:
        import json

        write_private(staging / KEYS / f"{signer.name}.key",
                      json.dumps(private_key_document(signer)))


def set_toml(text: str, section: str, key: str, value: str) -> str:
    """``text`` with ``key = "value"`` in ``[section]``: the line replaced, or added at the
    section's end (the section added at the file's end when missing); every other line
    as it was (config.toml may hold settings this tool does not write, ``[projections]``)."""
    import json

    line = f"{key} = {json.dumps(value)}"
    lines = text.splitlines()
    current: str | None = None
    header_at: int | None = None
    last: int | None = None
    for i, raw in enumerate(lines):
        header = re.fullmatch(r"\s*\[\[?\s*([^\[\]]+?)\s*\]\]?\s*(#.*)?", raw)
        if header:
            current = header.group(1)
            if current == section and not raw.lstrip().startswith("[["):
                header_at = i
            continue
        if current == section:
            if re.match(rf"\s*{re.escape(key)}\s*=", raw):
                lines[i] = line
                return _checked_toml(lines, section, key, value)
            if raw.strip() and not raw.lstrip().startswith("#"):
                last = i
    if header_at is None:
        lines += ["", f"[{section}]", line]
    else:
        lines.insert((last if last is not None else header_at) + 1, line)
    return _checked_toml(lines, section, key, value)


def _checked_toml(lines: list[str], section: str, key: str, value: str) -> str:
    out = "\n".join(lines) + "\n"
    try:
        ok = tomllib.loads(out)[section][key] == value
    except (tomllib.TOMLDecodeError, KeyError, TypeError):
        ok = False
    if not ok:
        raise BackupInvalid(f"the backup's config.toml cannot take {section}.{key}: it is "
                            "not the form `ledger init` writes")
    return out


class _RestoreRing(KekRing):
    """The restored keystore's KEK ring: the backup's epochs are opened in the stores the
    plan found them in (only ``unwrap`` is called on those); the new epoch's KEK is made
    and used in the new home's own store."""

    def __init__(self, home: Path, spec: str, sources: dict[int, KekStore]) -> None:
        super().__init__(home, spec)
        self.sources = sources

    def store_of(self, epoch: int, stores: dict[int, str]) -> KekStore:
        found = self.sources.get(epoch)
        return found if found is not None else super().store_of(epoch, stores)

    def close(self) -> None:  # the sources are the plan's, closed by the restore
        for spec, store in list(self._open.items()):
            if store not in self.sources.values():
                store.close()
            del self._open[spec]


def _keystore(plan: Plan, staging: Path, progress: Steps | None) -> dict[str, Any]:
    """Steps 2 and 3 on the staged keystore, before any ledger opens it."""
    from keys.datakeys import DataKeyStore, make_engine, store_sqlite
    from ledger.home import StorageURL

    at = clock.now()
    url = StorageURL(KEYSTORE, staging)
    ring = _RestoreRing(staging, plan.target_spec, plan.sources)
    ks = DataKeyStore(make_engine(url.sqlalchemy_url(), module=store_sqlite()), None, ring)
    try:
        destroyed: list[str] = []
        report(progress, "Destroying erased data keys", 0, len(plan.destroy))
        for start in range(0, len(plan.destroy), DESTROY_CHUNK):
            destroyed += ks.destroy(plan.destroy[start:start + DESTROY_CHUNK], at, defer=True)
            report(progress, "Destroying erased data keys",
                   min(len(plan.destroy), start + DESTROY_CHUNK), len(plan.destroy))
        ks.finish_deferred(vacuum=True)  # secure delete, WAL cut, residue scan, rebuilt
        faults.point("restore-keys-destroyed")
        rows = ks.epoch_rows()
        previous = next((r.epoch for r in rows if r.state == "active"), 0)
        forgotten = sorted({r.epoch for r in rows} | set(plan.sources))
        epoch = max([*forgotten, previous]) + 1
        target = ring.store()
        target.create(epoch)
        faults.point("restore-kek-created")
        ks.begin_epoch(epoch, target.spec, at)
        faults.point("restore-epoch-begun")
        todo = ks.count()
        done = 0
        report(progress, "Re-wrapping data keys", 0, todo)

        def step(n: int) -> None:
            nonlocal done
            done += n
            faults.point("restore-rewrapped", done)
            report(progress, "Re-wrapping data keys", done, todo)

        rewrapped = ks.rewrap(epoch, progress=step)
        left = ks.keys_under([0, *(e for e in forgotten if e != epoch)])
        if left:
            raise EnvironmentProblem(f"{left} data keys are still wrapped under the source's "
                                     "epochs after re-wrapping; nothing was restored")
        with ks.engine.begin() as conn:
            conn.execute(ks.epoch_table.delete().where(ks.epoch_table.c.epoch != epoch))
        ks.vacuum()  # no page keeps a key wrapped under a source's epoch
        faults.point("restore-epochs-forgotten")
        return {"epoch": epoch, "previous": previous, "store": target.spec,
                "kind": target.kind, "rewrapped": rewrapped, "forgotten": forgotten,
                "keys_destroyed": len(destroyed),
                "keys_not_in_backup": len(plan.destroy) - len(destroyed)}
    finally:
        ks.close()


def _record(plan: Plan, app: LedgerApp, operator: str, kek: dict[str, Any]
            ) -> dict[str, Any]:
    """Step 4: the re-applied erasures and the restored epoch, signed."""
    from ledger.reapply import Reapplication, reapply_erasures, record_restored_epoch

    m = plan.backup.size
    journal = plan.journal
    items: list[Reapplication] = []
    absent = 0
    open_batches: list[str] = []
    if journal is not None:
        requests = {b["batch_id"]: b.get("request_id") for b in journal.batches}
        keys = {k["key_id"]: k for k in journal.keys}
        tombs = {t["item_id"]: t for t in journal.tombstones}
        for item in sorted({*keys, *tombs}):
            key, tomb = keys.get(item), tombs.get(item)
            key_in = key is None or int(key["seq"]) <= m
            tomb_in = tomb is None or int(tomb["seq"]) <= m
            if key_in and tomb_in:
                continue
            if not app.reader.exists(UUID(item)):
                absent += 1  # made after the backup too: nothing of it was restored
                continue
            batch = (tomb or key or {}).get("batch_id")
            original: dict[str, Any] = {}
            if key is not None:
                original.update(key_event=key["event_id"], key_seq=key["seq"],
                                key_at=key["at"], kek_epoch=key.get("kek_epoch"))
            if tomb is not None:
                original.update(tombstone_event=tomb["event_id"], tombstone_seq=tomb["seq"],
                                tombstone_at=tomb["at"])
            mode = str(tomb["mode"]) if tomb is not None and not tomb_in else None
            items.append(Reapplication(item, mode, batch, requests.get(batch), original))
        open_batches = [b["batch_id"] for b in journal.batches
                        if int(b["opened"]["seq"]) <= m
                        and (b.get("closed") is None or int(b["closed"]["seq"]) > m)]
    event_ids = reapply_erasures(app, items, operator)
    backup_doc = {"manifest_sha256": sha256_of(plan.backup.folder / MANIFEST),
                  "created_at": plan.backup.manifest["created_at"],
                  "log_size": m, "log_root": plan.backup.manifest["log"]["root"],
                  "journal_size": journal.size if journal else None,
                  "reapplied": len(event_ids),
                  "events_lost": plan.rollback["events_lost"] if plan.rollback else 0}
    event_ids += record_restored_epoch(app, operator, epoch=kek["epoch"],
                                       previous=kek["previous"], store=kek["kind"],
                                       forgotten=kek["forgotten"], backup=backup_doc)
    return {
        "ledger_id": plan.backup.ledger_id,
        "backup": {"folder": str(plan.backup.folder), **backup_doc,
                   "head_time": plan.backup.manifest["log"].get("head_time")},
        "journal": None if journal is None else {
            "file": str(plan.journal_file), **journal.summary()},
        "rollback": plan.rollback, "could_come_back": plan.could_come_back,
        "kek": {**kek, "source": plan.source_words},
        "reapplied": [{"item_id": i.item_id, "mode": i.mode, "batch_id": i.batch_id,
                       **i.original} for i in items],
        "not_in_backup": absent, "open_batches": open_batches, "event_ids": event_ids,
        "warnings": plan.warnings,
    }


def _read_models(app: LedgerApp, progress: Steps | None) -> dict[str, Any]:
    from projections.service import Projections

    proj = Projections(app)
    try:
        done = proj.catch_up_steps(progress, "Rebuilding read models")
    finally:
        proj.close()
    return {"head": done.head, "notifications": done.notifications}


def _verify(plan: Plan, app: LedgerApp, progress: Steps | None) -> dict[str, Any]:
    """``ledger verify`` on the staged home, and the log extends the backup's checkpoint:
    a restore that does not verify is not renamed into place."""
    from ledger.verification import verify_ledger

    verdict = verify_ledger(app.reader, plan.backup.root_public_key,
                            checkpoints=[("the backup's checkpoint",
                                          str(plan.backup.manifest["log"]["checkpoint"]))],
                            progress=progress)
    if not verdict.ok:
        failure = verdict.report.failure
        raise VerificationFailed(f"the restored ledger does not verify: "
                                 f"{failure.describe() if failure else 'unknown'}; nothing "
                                 "was restored")
    return {"ok": True, "events": verdict.report.events, "head_seq": verdict.report.head_seq}


# ----------------------------------------------------------------------------- helpers
def _close_all(sources: dict[int, KekStore]) -> None:
    for source in {id(s): s for s in sources.values()}.values():
        source.close()


def _read_only(path: Path) -> str:
    """An SQLite URI that reads ``path`` without writing anything (no lock, no side file):
    a backup is read as it is."""
    return f"{path.absolute().as_uri()}?mode=ro&immutable=1"


def _time(value: Any, what: str) -> datetime:
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        raise BackupInvalid(f"{what}: the manifest's time is not ISO 8601") from None


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
