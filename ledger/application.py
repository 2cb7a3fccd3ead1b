"""The ledger application: commands on Subject, Artifact, Atom and the key roster.

Every command runs in a write context: it takes the ledger's write lock, reads
the head (last sequence number and time), checks the clock and the actor's
authorization, and lets the mapper sign events with consecutive sequence
numbers. A command either writes all of its events or none of them.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import logging
import os
import shutil
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from uuid import UUID

import structlog
from eventsourcing.application import AggregateNotFoundError, Application
from eventsourcing.domain import Aggregate
from eventsourcing.persistence import Mapper, Notification, StoredEvent, Transcoder
from pydantic import TypeAdapter, ValidationError

from keys.datakeys import DataKeyStore, make_engine, store_sqlite
from keys.errors import DataKeyUnavailable, KeyError_, KeyNotAuthorized, KeyringError
from keys.kek import DEFAULT_SPEC as DEFAULT_KEK_SPEC
from keys.kek import (
    FIRST_EPOCH,
    KEK_ENV,
    KekRing,
    check_kek_spec,
    named_kek_spec,
    without_pin,
)
from keys.keyring import Keyring, read_public_key_file
from keys.roster import ROLES, ROOT, KeyRoster
from keys.signing import Signer
from ledger import (
    bulk_reads,
    clock,
    envelope,
    faults,
    gc_pause,
    locks,
    logs,
    policy_rules,
    sqlite_recorder,
)
from ledger.census import SubjectCensus
from ledger.domain import (
    ATOM_FIELDS,
    OPERATOR,
    WRITER_OR_OPERATOR,
    Artifact,
    Atom,
    ErasureRequest,
    LedgerEvent,
    Policy,
    Record,
    RedactionBatch,
    Subject,
)
from ledger.errors import (
    ClockError,
    ConflictError,
    EnvironmentProblem,
    InputError,
    LedgerError,
    NotFound,
    VerificationFailed,
)
from ledger.home import Config, StorageURL, shared_keystore_file, validate_db_url
from ledger.inputs import (
    ArtifactInput,
    AtomCorrection,
    AtomInput,
    SubjectInput,
    is_uuid,
    parse,
)
from ledger.mapper import SigningMapper
from ledger.saving import EventSaver
from ledger.transparency import SignedCheckpoint, TransparencyLog

if TYPE_CHECKING:
    from ledger.checkpoint import Checkpoint
    from ledger.progress import Steps
    from ledger.verify import Failure

log = structlog.get_logger("ledger")

LEDGER_NAMESPACE = uuid.UUID("6c1b6d1e-5f0e-4a57-9f43-2f0d8a7c3b10")
DEFAULT_KEYS = {"writer": "writer", "operator": "operator", "log": "log"}


@dataclass(frozen=True)
class AtomsWritten:
    """What one atom command wrote: the atoms' ids (per proposal, for an update-or-add),
    the atoms its maxAtoms step archived, and the artifacts captured with them."""

    ids: list[UUID]
    archived: list[str] = field(default_factory=list)
    sources: list[UUID] = field(default_factory=list)


@dataclass(frozen=True)
class Witnessed:
    """A checkpoint as stored (with the cosignatures it got) and each witness's answer."""

    checkpoint: SignedCheckpoint
    results: list[Any] = field(default_factory=list)


class LedgerApp(Application[UUID]):
    """One ledger, opened from its home."""

    name = "ledger"

    def __init__(self, config: Config) -> None:
        logs.configure()
        if (shared := shared_keystore_file(config.keystore, config.events,
                                           config.projections)) is not None:
            raise EnvironmentProblem(
                f"the keystore is configured in {shared.name}, the file of another store",
                hint="give the keystore a file of its own in config.toml (default "
                     "keystore.sqlite)")
        self.config = config
        self.ledger_id = config.ledger_id
        try:
            if config.events.is_postgres:
                _ensure_schema(config.events)
            # Aggregates are cached per process and fast-forwarded from the log on every
            # get, so a cached copy is never stale; commands get deep copies.
            # SQLite: the library's recorder with one executemany per command (ADR 0008),
            # chosen through the library's own setting.
            recorder = ({} if config.events.is_postgres
                        else {"APPLICATION_RECORDER_TOPIC": sqlite_recorder.TOPIC})
            super().__init__(env={**config.events.eventsourcing_env(), **recorder,
                                  "AGGREGATE_CACHE_MAXSIZE": "5000"})
        except Exception as e:
            raise EnvironmentProblem(
                f"cannot open the event store: {_first_line(e)}",
                hint="check that the database in config.toml is reachable") from e
        self.keyring = Keyring(config.home / "keys")
        try:
            self.tlog = TransparencyLog(config.events, config.origin)
        except VerificationFailed:  # a stored tree that cannot be converted (ADR 0008)
            super().close()
            raise
        except Exception as e:
            super().close()
            raise EnvironmentProblem(
                f"cannot open the transparency log: {_first_line(e)}",
                hint="check that the event database in config.toml is reachable") from e
        try:
            self.datakeys = DataKeyStore(
                make_engine(config.keystore.sqlalchemy_url(), config.keystore.schema,
                            pooled=True,
                            module=None if config.keystore.is_postgres else store_sqlite()),
                config.keystore.schema, KekRing(config.home, config.kek))
        except Exception as e:
            super().close()
            raise EnvironmentProblem(
                f"cannot open the keystore: {_first_line(e)}",
                hint="check the keystore setting in config.toml") from e
        # atoms per subject for the maxAtoms rule, beside the events (ledger/census.py)
        self.census = SubjectCensus(self.tlog.engine, config.events.schema,
                                    Atom.Created.TOPIC)
        self.roster_id = uuid.uuid5(LEDGER_NAMESPACE, f"{self.ledger_id}/roster")
        try:
            self.root_public_key: bytes | None = read_public_key_file(
                self.keyring.public_key_path("root"))
        except KeyringError:
            self.root_public_key = None  # an auditor's copy may lack it; verify takes --root-key
        self._known_keys: dict[str, bytes] = (
            {config.root_kid: self.root_public_key} if self.root_public_key else {})
        self._reading_roster = False
        assert isinstance(self.mapper, SigningMapper)
        self.mapper.configure(self.ledger_id, self.datakeys, self._resolve_key)
        self.saver = EventSaver(self.recorder, self.mapper, self.datakeys, self.tlog,
                                self.exists)

    acting_credential: str | None = None
    """The id of the server credential on whose behalf operator acts are signed (a token
    id, never its secret), recorded in the request and batch events; None from the CLI."""

    @contextlib.contextmanager
    def acting_for(self, credential: str | None) -> Iterator[None]:
        """Record ``credential`` in the operator events signed inside the block."""
        previous, self.acting_credential = self.acting_credential, credential
        try:
            yield
        finally:
            self.acting_credential = previous

    # ------------------------------------------------------------------ plumbing
    def construct_mapper(self) -> Mapper[UUID]:
        return SigningMapper(transcoder=_NoTranscoder())

    def close(self) -> None:
        super().close()
        self.datakeys.close()
        self.tlog.close()

    def _resolve_key(self, kid: str) -> bytes:
        pub = self._known_keys.get(kid)
        if pub is None and not self._reading_roster:
            # loading the roster verifies its own events, which resolves their keys: a
            # roster event signed by a key the roster does not know must fail here, not
            # load the roster again (a RecursionError, issue 20 item 5)
            self._reading_roster = True
            try:
                roster = self.roster()
            finally:
                self._reading_roster = False
            self._known_keys.update({k: e.public_key for k, e in roster.state.entries.items()})
            pub = self._known_keys.get(kid)
        if pub is None:
            if kid == self.config.root_kid:
                raise EnvironmentProblem("the root public key keys/root.pub is missing",
                                         hint="restore it from the ledger's key backup")
            raise KeyNotAuthorized(f"key {kid} is not in the roster")
        return pub

    def roster(self) -> KeyRoster:
        try:
            roster: Any = self.repository.get(self.roster_id)
        except AggregateNotFoundError:
            raise EnvironmentProblem("this ledger has no key roster",
                                     hint="the home was not initialised by `ledger init`") from None
        assert isinstance(roster, KeyRoster)
        return roster

    def subject_id(self, ref: str) -> UUID:
        return uuid.uuid5(LEDGER_NAMESPACE, f"{self.ledger_id}/subject/{ref}")

    def _ref_id(self, kind: str, ref: str | None) -> UUID:
        if ref is None:
            return uuid.uuid4()
        return uuid.uuid5(LEDGER_NAMESPACE, f"{self.ledger_id}/{kind}/{ref}")

    def exists(self, aggregate_id: UUID) -> bool:
        return bool(self.recorder.select_events(aggregate_id, limit=1))

    def head(self) -> tuple[int, datetime | None]:
        """The last sequence number and event time (0, None for an empty log)."""
        max_id = self.recorder.max_notification_id()
        if not max_id:
            return 0, None
        last = self.recorder.select_notifications(start=max_id, limit=1)
        if not last:
            return 0, None
        env = envelope.open_state(last[0].state).envelope
        return int(env["seq"]), datetime.fromisoformat(env["timestamp"].replace("Z", "+00:00"))

    def _write_lock(self) -> contextlib.AbstractContextManager[None]:
        """The ledger's write lock (``ledger/locks.py``)."""
        return locks.held(self.config, "write")

    def root_signer(self) -> Signer:
        """The home's ``root`` key, checked (by key id) to be this ledger's root before
        anything is signed with it: another ledger's root key would append roster events
        the verifier rejects, for ever (issue 20, item 5)."""
        root = self.signer("root")
        roster_root = self.roster().state.root_kid
        if root.kid != self.config.root_kid or root.kid != roster_root:
            raise InputError(
                f"the key keys/root.key ({root.kid}) is not this ledger's root key "
                f"({roster_root or self.config.root_kid}); nothing was written",
                hint="restore the ledger's own root key from its backup")
        return root

    def signer(self, actor: str | None) -> Signer:
        try:
            return self.keyring.load(actor or self.config.default_actor)
        except KeyringError as e:
            raise EnvironmentProblem(str(e), hint="see `ledger keys list`") from e

    @contextlib.contextmanager
    def writing(self, signer: Signer,
                roles: str | tuple[str, ...] = "writer") -> Iterator[datetime]:
        """Hold the write lock, check clock and authorization, sign what is saved."""
        with self._write_lock():
            seq, last = self.head()
            at = clock.now()
            if last is not None and at < last:
                raise ClockError(
                    f"the command's time {clock.format_instant(at)} is earlier than the newest "
                    f"event ({clock.format_instant(last)})",
                    hint=f"unset {clock.ENV} or set it to a later time; history is append-only")
            wanted = (roles,) if isinstance(roles, str) else roles
            if wanted == (ROOT,) and self.exists(self.roster_id) and \
                    signer.kid != self.roster().state.root_kid:
                raise InputError(f"{signer.name} ({signer.kid}) is not the roster's root key; "
                                 "nothing was written", hint="see `ledger keys list`")
            if wanted != (ROOT,):
                try:
                    self.roster().state.holds(signer.kid, wanted, at)
                except KeyNotAuthorized as e:
                    raise InputError(f"{signer.name} may not sign this command: {e}",
                                     hint="see `ledger keys list`") from None
            self.mapper.begin(signer, seq + 1)  # type: ignore[attr-defined]
            try:
                yield at
            finally:
                self.mapper.end()  # type: ignore[attr-defined]

    def commit(self, *items: Any, event_ids: bool = True) -> list[str]:
        """Save pending events of aggregates, and bare events, in the order given; create
        data keys for new items that carry content first. Returns the event ids (an empty
        list with ``event_ids=False``, for a caller that does not use them).

        If saving fails, keys created here are discarded, so nothing is left behind
        (``ledger/saving.py``: eventsourcing's ``save``, rewritten, ADR 0008).
        """
        # snapshots are not enabled (ADR 0001); with them, the library's save() would snapshot
        saved = self.saver.save(items, self.save if self.snapshots is not None else None)
        if not event_ids:
            return []
        return [envelope.event_id(s.originator_id, s.originator_version) for s in saved]

    def repair(self, dry_run: bool = False) -> dict[str, Any]:
        """`ledger repair`: find (and discard) every orphan data key, under the write lock."""
        with self._write_lock():
            orphans = [k for k in self.datakeys.all_key_ids()
                       if is_uuid(k) and not self.exists(UUID(k))]
            if orphans and not dry_run:
                self.datakeys.discard(orphans)
        if orphans:
            log.warning("datakeys.orphans_found", count=len(orphans), discarded=not dry_run)
        return {"orphan_keys": orphans, "discarded": 0 if dry_run else len(orphans)}

    # ------------------------------------------------------------------ transparency log
    def checkpoint(self, witnesses: Sequence[tuple[str, str]] | None = None
                   ) -> SignedCheckpoint:
        """Bring the tree up to date, sign its head with the ledger's log key, and have it
        cosigned by the witnesses (``witnesses``, or those of config.toml)."""
        return self.checkpoint_witnessed(witnesses).checkpoint

    def checkpoint_witnessed(self, witnesses: Sequence[tuple[str, str]] | None = None
                             ) -> Witnessed:
        """:meth:`checkpoint`, with what each witness asked answered."""
        signer = self.signer("log")
        with self._write_lock():
            cp = self._sign_head(signer)
        log.info("checkpoint.signed", size=cp.size)
        return self.witness(cp, witnesses)

    def _sign_head(self, signer: Signer) -> SignedCheckpoint:
        """Under the write lock: the tree brought up to date, its head signed (or the
        checkpoint already recorded for that size, with its cosignatures)."""
        at = clock.now()
        try:
            self.roster().state.check(signer.kid, "log", at)
        except KeyNotAuthorized as e:
            raise InputError(f"the log key may not sign checkpoints: {e}",
                             hint="authorize one with `ledger keys authorize log2 --role log`"
                             ) from e
        self.tlog.catch_up(self.recorder)
        return self.tlog.checkpoint(signer, at)

    @contextlib.contextmanager
    def held_still(self) -> Iterator[tuple[SignedCheckpoint, int]]:
        """Hold the write lock for the block, with the log's head signed as a checkpoint
        (no witness asked: the lock never waits on the network) and the notification
        position of its last event. Nothing is appended meanwhile, so what the block reads
        or copies is exactly the log that checkpoint covers: the erasure journal derived
        from it, a backup of the stores (ADR 0045)."""
        signer = self.signer("log")
        with self._write_lock():
            yield self._sign_head(signer), self.head_position()

    def log_vkey(self) -> str:
        """The C2SP verifier key of this ledger's checkpoints: origin as name, log key."""
        from ledger.checkpoint import vkey_string

        return vkey_string(self.config.origin, self.signer("log").public_key)

    def log_vkeys(self) -> dict[str, str]:
        """The vkey of every key that ever held the log role, by key id."""
        from ledger.checkpoint import vkey_string

        return {e.kid: vkey_string(self.config.origin, e.public_key)
                for e in self.roster().state.entries.values()
                if any(g.role == "log" for g in e.grants)}

    def witness(self, cp: SignedCheckpoint,
                witnesses: Sequence[tuple[str, str]] | None = None) -> Witnessed:
        """Ask the witnesses (``(url, vkey)``; default: config.toml's) to cosign ``cp``.

        Outside the write lock: a slow or dead witness never holds up a write. Witnesses that
        already cosigned this size are not asked again; the others are asked every time, so
        a witness that was down is retried by the next checkpoint. Results are recorded
        (``tlog_witness_sizes``) and returned with the checkpoint as it is stored.
        """
        from ledger.witness.client import WitnessTarget, ask_all

        pairs = list(self.config.witnesses if witnesses is None else witnesses)
        if not pairs:
            return Witnessed(cp)
        try:
            targets = []
            for url, vkey in pairs:
                try:
                    targets.append(WitnessTarget.of(url, vkey))
                except LedgerError as e:  # a hand-edited config.toml: say so, go on
                    log.warning("checkpoint.witness_misconfigured", error=str(e)[:200])
            done = {vkey for _, vkey in self.tlog.cosignature_rows(cp.size)}
            todo = [t for t in targets if t.key.vkey not in done]
            results = ask_all(todo, cp.note, self.tlog.witness_sizes(), self.tlog.consistency)
            self.tlog.record_witnessing(cp.size, results, clock.now().isoformat())
        except Exception as e:  # the checkpoint is signed and stored; witnessing is extra
            log.warning("checkpoint.witnessing_failed", error=e.__class__.__name__)
            return Witnessed(cp)
        for r in results:
            log.info("checkpoint.witnessed", size=cp.size, status=r.status)
        recorded = self.tlog.recorded(cp.size)
        return Witnessed(recorded if recorded is not None else cp, list(results))

    def seq_of(self, event_id: str) -> int:
        """The sequence number (leaf index + 1) of an event id ``<uuid>/<version>``."""
        try:
            oid, version = event_id.rsplit("/", 1)
            rows = self.recorder.select_events(UUID(oid), gt=int(version) - 1, lte=int(version))
        except ValueError:
            raise InputError(f"{event_id!r} is not an event id",
                             hint="event ids look like <uuid>/<version>; see `ledger atom history`"
                             ) from None
        if not rows:
            raise NotFound(f"no event {event_id}")
        return int(self.mapper.open_verified(rows[0]).envelope["seq"])  # type: ignore[attr-defined]

    # ------------------------------------------------------------------ bootstrap
    @classmethod
    def initialize(cls, home: Path, db: str | None = None, keystore: str | None = None,
                   kek: str | None = None, controller: str | None = None,
                   contact: str | None = None, locale: str = "en") -> Config:
        """Create a new ledger home: keys, config, stores, the first KEK epoch and the signed
        key roster. ``kek``: where the key-encryption keys live (default ``LEDGER_KEK``,
        else ``file:kek``, a folder of the home that ``ledger backup`` never copies)."""
        if (home / "config.toml").exists():
            raise ConflictError(f"{home} already holds a ledger",
                                hint="use it, or choose another --home")
        if db:
            validate_db_url(db)
        if keystore:
            validate_db_url(keystore)
        kek = kek or os.environ.get(KEK_ENV) or DEFAULT_KEK_SPEC
        try:
            check_kek_spec(kek)
        except ValueError as e:
            raise InputError(str(e)) from None
        created_home = not home.exists()
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            keyring = Keyring(home / "keys")
            root = keyring.create("root")
            signers = {role: keyring.create(name) for role, name in DEFAULT_KEYS.items()}
            ledger_id = str(uuid.uuid4())
            now = clock.now()
            config = Config(
                home=home, ledger_id=ledger_id, origin=f"memory-ledger/{ledger_id}",
                created_at=clock.format_instant(now), root_kid=root.kid, default_actor="writer",
                events=StorageURL(db or "events.sqlite", home),
                keystore=StorageURL(keystore or "keystore.sqlite", home),
                projections=StorageURL(db or "projections.sqlite", home),
                kek=without_pin(named_kek_spec(kek, ledger_id)),
                controller=controller, contact=contact, locale=locale,
            )
            config.write()
            app = cls(config)
            try:
                store = app.datakeys.keks.store(named_kek_spec(kek, ledger_id))
                store.create(FIRST_EPOCH)
                app.datakeys.begin_epoch(FIRST_EPOCH, store.spec, now)
                with app.writing(root, ROOT) as at:
                    roster = KeyRoster.start(app.roster_id, root.public_key, at)
                    for role, signer in signers.items():
                        roster.authorize(signer.public_key, signer.name, role, at, at)
                    app.commit(roster)
            finally:
                app.close()
            home.chmod(0o700)
            for path in home.iterdir():  # SQLite's -wal/-shm files inherit these modes
                if path.is_file():
                    path.chmod(0o600)
        except BaseException:
            if created_home:
                shutil.rmtree(home, ignore_errors=True)
            raise
        log.info("ledger.initialized", ledger_id=ledger_id,
                 backend="postgresql" if config.events.is_postgres else "sqlite")
        return config

    # ------------------------------------------------------------------ keys
    def authorize_key(self, name: str, role: str, public_key: bytes | None = None,
                      valid_from: datetime | None = None) -> str:
        """Authorize a public key for a role; without one, create a key in this home."""
        if role not in ROLES:
            raise InputError(f"unknown role {role!r}", hint=f"roles: {', '.join(ROLES)}")
        root = self.root_signer()
        created: Signer | None = None
        if public_key is None:
            try:
                created = self.keyring.create(name)
            except KeyringError as e:
                raise InputError(str(e)) from e
            public_key = created.public_key
        try:
            with self.writing(root, ROOT) as at:
                roster = self.roster()
                try:
                    roster.authorize(public_key, name, role, valid_from or at, at)
                except KeyNotAuthorized as e:
                    raise ConflictError(str(e)) from e
                self.commit(roster)
        except BaseException:
            if created is not None:
                self.keyring.remove(name)
                self.keyring.public_key_path(name).unlink(missing_ok=True)
            raise
        kid = roster.state.entries[envelope_kid(public_key)].kid
        self._known_keys[kid] = public_key
        log.info("key.authorized", kid=kid, role=role)
        return kid

    def revoke_key(self, kid: str, role: str | None = None, revoked_from: datetime | None = None,
                   reason: str | None = None) -> None:
        root = self.root_signer()
        with self.writing(root, ROOT) as at:
            roster = self.roster()
            try:
                roster.revoke(kid, role, revoked_from or at, reason, at)
            except KeyNotAuthorized as e:
                raise InputError(str(e), hint="see `ledger keys list`") from e
            self.commit(roster)
        log.info("key.revoked", kid=kid, role=role)

    def rotate_key(self, name: str, reason: str | None = None) -> tuple[str, str]:
        """Replace the key ``name``: the new key takes its active roles, the old is revoked."""
        old = self.signer(name)
        root = self.root_signer()
        new = Signer.generate(name)
        with self.writing(root, ROOT) as at:
            roster = self.roster()
            entry = roster.state.entries.get(old.kid)
            roles = sorted({g.role for g in entry.grants if g.active_at(at)}) if entry else []
            if not roles:
                raise InputError(f"key {name} ({old.kid}) holds no active role to rotate")
            for role in roles:
                roster.authorize(new.public_key, name, role, at, at)
            roster.revoke(old.kid, None, at, reason or "rotated", at)
            self.commit(roster)
            self.keyring.remove(name)
            self.keyring.install(new)
        log.info("key.rotated", old_kid=old.kid, new_kid=new.kid)
        return old.kid, new.kid

    # ------------------------------------------------------------------ subjects
    def register_subject(self, data: dict[str, Any], actor: str | None = None) -> UUID:
        inp = parse(SubjectInput, data)
        sid = self.subject_id(inp.ref)
        signer = self.signer(actor)
        with self.writing(signer) as at:
            if self.exists(sid):
                raise ConflictError(f"subject {inp.ref} is already registered ({sid})")
            subject = Subject._create(Subject.Created, id=sid, timestamp=at,
                                      ref=inp.ref, display_name=inp.display_name,
                                      locale=inp.locale)
            self.commit(subject)
        log.info("subject.registered", subject_id=str(sid))
        return sid

    def resolve_subject(self, ref_or_id: str) -> UUID:
        for candidate in _id_candidates(ref_or_id, self.subject_id):
            if self.exists(candidate):
                return candidate
        raise NotFound(f"no subject {ref_or_id!r} in this ledger",
                       hint="register it first with `ledger subject add`")

    def resolve(self, kind: str, ref_or_id: str) -> UUID:
        for candidate in _id_candidates(ref_or_id, lambda r: self._ref_id(kind, r)):
            if self.exists(candidate):
                return candidate
        raise NotFound(f"no {kind} {ref_or_id!r} in this ledger")

    # ------------------------------------------------------------------ artifacts
    def capture_artifact(self, data: dict[str, Any], actor: str | None = None) -> UUID:
        inp = parse(ArtifactInput, data)
        signer = self.signer(actor)
        with self.writing(signer) as at:
            subject_id = self.resolve_subject(inp.subject)
            aid = self._ref_id("artifact", inp.ref)
            if inp.ref is not None and self.exists(aid):
                raise ConflictError(f"artifact {inp.ref} already exists ({aid})")
            self.commit(self._new_artifact(inp, aid, subject_id, at))
        log.info("artifact.captured", artifact_id=str(aid), subject_id=str(subject_id))
        return aid

    @staticmethod
    def _new_artifact(inp: ArtifactInput, aid: UUID, subject_id: UUID, at: datetime) -> Artifact:
        artifact = Artifact._create(
            Artifact.Created, id=aid, timestamp=at, subject_id=str(subject_id), ref=inp.ref,
            kind=inp.kind, captured_at=clock.format_instant(inp.captured_at or at),
            source=inp.source, private=inp.private, title=inp.title, body=inp.body,
            media_url=inp.media_url)
        assert isinstance(artifact, Artifact)
        return artifact

    def import_records(self, subjects: Sequence[dict[str, Any]],
                       artifacts: Sequence[dict[str, Any]], atoms: Sequence[dict[str, Any]],
                       actor: str | None = None,
                       records: Callable[[UUID, datetime], Sequence[Any]] | None = None,
                       progress: Steps | None = None) -> dict[str, Any]:
        """Record subjects, artifacts and atoms in one command: all or nothing.

        Items whose ref already exists are skipped (so a repeated import is a no-op);
        atoms may cite artifacts created in the same call. ``records(subject id, at)``
        gives more aggregates (portable records, ADR 0017) for the same command.
        Returns counts and ids, and the policy's archiving (``archived``). ``progress``
        hears the items recorded, then the events signed and written (ledger/progress.py).
        """
        sub_in = [parse(SubjectInput, d) for d in subjects]
        art_in = [parse(ArtifactInput, d) for d in artifacts]
        atom_in = [parse(AtomInput, d) for d in atoms]
        total, tick = len(sub_in) + len(art_in) + len(atom_in), 0

        def recorded(n: int = 1) -> None:
            nonlocal tick
            tick += n
            if progress is not None and (tick % 500 == 0 or tick == total):
                progress("Recording items", tick, total)
        signer = self.signer(actor)
        created = {"subjects": 0, "artifacts": 0, "atoms": 0}
        skipped = {"subjects": 0, "artifacts": 0, "atoms": 0}
        ids: dict[str, dict[str, str]] = {"subjects": {}, "artifacts": {}, "atoms": {}}
        with self.writing(signer) as at:
            policy = policy_rules.check_new_atoms(self, atom_in, imported=True)
            seen: dict[tuple[str, str], UUID] = {}
            new: list[Any] = []
            for s_inp in sub_in:
                recorded()
                sid = self.subject_id(s_inp.ref)
                seen[("subject", s_inp.ref)] = sid
                ids["subjects"][s_inp.ref] = str(sid)
                if sid in {a.id for a in new} or self.exists(sid):
                    skipped["subjects"] += 1
                    continue
                new.append(Subject._create(Subject.Created, id=sid, timestamp=at, ref=s_inp.ref,
                                           display_name=s_inp.display_name,
                                           locale=s_inp.locale))
                created["subjects"] += 1
            for a_inp in art_in:
                recorded()
                aid = self._ref_id("artifact", a_inp.ref)
                if a_inp.ref is not None:
                    seen[("artifact", a_inp.ref)] = aid
                    ids["artifacts"][a_inp.ref] = str(aid)
                    if self.exists(aid):
                        skipped["artifacts"] += 1
                        continue
                subject_id = seen.get(("subject", a_inp.subject)) or \
                    self.resolve_subject(a_inp.subject)
                new.append(self._new_artifact(a_inp, aid, subject_id, at))
                created["artifacts"] += 1
            for m_inp in atom_in:
                recorded()
                if m_inp.ref is not None:
                    mid = self._ref_id("atom", m_inp.ref)
                    ids["atoms"][m_inp.ref] = str(mid)
                    if self.exists(mid):
                        skipped["atoms"] += 1
                        continue
                atom = self._new_atom(m_inp, at, seen=seen, check_ref=False)
                new.append(atom)
                created["atoms"] += 1
            if len({a.id for a in new}) != len(new):
                raise InputError("the import names one item twice (duplicate refs)")
            if records is not None and sub_in:
                new.extend(records(seen[("subject", sub_in[0].ref)], at))
            loaded = policy_rules.over_limit(self, policy, new, at)
            archived = archived_by_policy([*new, *loaded])
            if new:
                events = len(new) + len(loaded)
                if progress is not None:
                    progress("Signing and writing events", 0, events)
                self.commit(*new, *loaded)
                if progress is not None:
                    progress("Signing and writing events", events, events)
        log.info("import.recorded", **{f"created_{k}": v for k, v in created.items()},
                 **{f"skipped_{k}": v for k, v in skipped.items()})
        return {"created": created, "skipped": skipped, "ids": ids,
                "archived": archived}

    # ------------------------------------------------------------------ atoms
    def _new_atom(self, inp: AtomInput, at: datetime, supersedes: str | None = None,
                  seen: dict[tuple[str, str], UUID] | None = None,
                  check_ref: bool = True) -> Atom:
        """Build a new atom; ``seen`` caches id resolutions within one command."""
        atom = _aggregate_of(self._atom_created(inp, at, supersedes, seen, check_ref))
        assert isinstance(atom, Atom)
        return atom

    def _atom_created(self, inp: AtomInput, at: datetime, supersedes: str | None = None,
                      seen: dict[tuple[str, str], UUID] | None = None,
                      check_ref: bool = True) -> Atom.Created:
        """The ``Atom.Created`` event of a new atom, as ``Atom._create`` builds it, without
        the aggregate (ADR 0008); ``seen`` caches id resolutions within one command."""
        cache = {} if seen is None else seen
        subject_id = cache.get(("subject", inp.subject))
        if subject_id is None:
            subject_id = cache[("subject", inp.subject)] = self.resolve_subject(inp.subject)
        artifact_ids = []
        for ref in inp.artifact_ids:
            if ("artifact", ref) not in cache:
                cache[("artifact", ref)] = self.resolve("artifact", ref)
            artifact_ids.append(str(cache[("artifact", ref)]))
        atom_id = self._ref_id("atom", inp.ref)
        if check_ref and inp.ref is not None and self.exists(atom_id):
            raise ConflictError(f"atom {inp.ref} already exists ({atom_id})")
        # the input's fields as they are, in ATOM_FIELDS' order (the event's __dict__ keeps
        # the order it always had), then those the ledger converts or resolves, in place
        state: dict[str, Any] = {
            "originator_id": atom_id, "originator_version": Atom.INITIAL_VERSION,
            "timestamp": at, "originator_topic": Atom.TOPIC}
        state.update(zip(ATOM_FIELDS, map(inp.__dict__.get, ATOM_FIELDS), strict=False))
        state["subject_id"] = str(subject_id)
        state["details"] = [d.model_dump() for d in inp.details] or None
        state["tags"] = list(inp.tags) or None
        state["valid_from"] = clock.format_instant(inp.valid_from) if inp.valid_from else None
        state["valid_to"] = clock.format_instant(inp.valid_to) if inp.valid_to else None
        state["artifact_ids"] = artifact_ids
        state["decay_profile"] = inp.decay_profile.model_dump() if inp.decay_profile else None
        state["supersedes"] = supersedes
        state["source_data"] = inp.source_data
        # The frozen dataclass's __init__ only sets these attributes one by one; build the
        # event the way eventsourcing's Mapper.to_domain_event does (test_bulk_append.py
        # pins it equal to Atom._create's event).
        created: Atom.Created = object.__new__(Atom.Created)
        object.__setattr__(created, "__dict__", state)
        return created

    def add_atom(self, data: dict[str, Any], actor: str | None = None) -> UUID:
        return self.add_atoms([data], actor)[0]

    def add_atoms(self, items: Sequence[dict[str, Any]], actor: str | None = None,
                  sources: Sequence[dict[str, Any]] = ()) -> list[UUID]:
        """Record atoms in one command: all are written, or none; their ids. See
        :meth:`write_atoms` for the rest of what the command did."""
        return self.write_atoms(items, actor, sources).ids

    def write_atoms(self, items: Sequence[dict[str, Any]], actor: str | None = None,
                    sources: Sequence[dict[str, Any]] = ()) -> AtomsWritten:
        """Record atoms in one command: all are written, or none. ``sources`` are
        artifacts captured in the same command, which every atom of it cites (the MCP
        ``remember`` tool's source)."""
        with gc_pause.paused(len(items) >= gc_pause.MIN_ITEMS):
            return self._add_atoms(items, actor, sources)

    def _add_atoms(self, items: Sequence[dict[str, Any]], actor: str | None,
                   sources: Sequence[dict[str, Any]] = ()) -> AtomsWritten:
        source_inputs = [parse(ArtifactInput, d) for d in sources]
        source_ids = [self._ref_id("artifact", a.ref) for a in source_inputs]
        if source_ids:
            items = [{**d, "artifact_ids": [*(d.get("artifact_ids") or ()),
                                            *map(str, source_ids)]} for d in items]
        inputs = _parse_atoms(items)
        signer = self.signer(actor)
        with self.writing(signer) as at:
            seen: dict[tuple[str, str], UUID] = {}
            artifacts = []
            for a, aid in zip(source_inputs, source_ids, strict=True):
                if a.ref is not None and self.exists(aid):
                    raise ConflictError(f"artifact {a.ref} already exists ({aid})")
                artifacts.append(self._new_artifact(a, aid, self.resolve_subject(a.subject),
                                                    at))
                seen[("artifact", str(aid))] = aid  # cited before it is committed
            policy = policy_rules.check_new_atoms(self, inputs)
            created = [self._atom_created(inp, at, seen=seen) for inp in inputs]
            if len({e.originator_id.int for e in created}) != len(created):  # int: C hash
                raise InputError("two atoms in this command have the same ref")
            # Bulk path (ADR 0008): with no policy in force nothing acts on the new
            # aggregates, so their Created events are committed as they are; with one,
            # the aggregates are built for the policy's max-atoms step.
            atoms: list[Any] = (created if policy is None
                                else [_aggregate_of(e) for e in created])
            loaded = policy_rules.over_limit(self, policy, atoms, at)
            archived = archived_by_policy([*atoms, *loaded])
            self.commit(*artifacts, *atoms, *loaded, event_ids=False)
        command_log = log.bind()  # bound once: the lazy module logger binds on every call
        if command_log.is_enabled_for(logging.INFO):  # else skip the per-atom id strings
            for e in created:
                command_log.info("atom.created", atom_id=str(e.originator_id),
                                 subject_id=e.subject_id)
        return AtomsWritten([e.originator_id for e in created], archived,
                            [a.id for a in artifacts])

    def remember_atoms(self, items: Sequence[dict[str, Any]],
                       actions: Sequence[tuple[str, str | None]], actor: str | None = None,
                       sources: Sequence[dict[str, Any]] = ()) -> AtomsWritten:
        """Update or add (ADR 0052): each proposed atom with its decision, all in one
        signed command, all or nothing. ``actions[i]`` is ``("add", None)``,
        ``("supersede", atom_id)``: the proposal is added and supersedes that atom (it
        gets ``valid_to``, as a correction), or ``("rehearse", atom_id)``: no new atom,
        that atom gets a rehearsal. An atom to supersede or rehearse must still be active
        and of the proposal's subject when the write lock is held, or nothing is written.
        Its ``ids`` are per proposal the new atom's id, or the rehearsed atom's.
        ``sources``: artifacts captured with the proposals that create atoms (cited by each
        of them), not captured when none does."""
        if len(items) != len(actions):
            raise InputError("one decision per proposed atom")
        creating = [n for n, (act, _) in enumerate(actions) if act != "rehearse"]
        source_inputs = [parse(ArtifactInput, d) for d in sources] if creating else []
        source_ids = [self._ref_id("artifact", a.ref) for a in source_inputs]
        if source_ids:
            items = [{**d, "artifact_ids": [*(d.get("artifact_ids") or ()),
                                            *map(str, source_ids)]}
                     if n in creating else d for n, d in enumerate(items)]
        inputs = _parse_atoms(items)
        signer = self.signer(actor)
        with self.writing(signer) as at:
            seen: dict[tuple[str, str], UUID] = {}
            artifacts = []
            for a, aid in zip(source_inputs, source_ids, strict=True):
                if a.ref is not None and self.exists(aid):
                    raise ConflictError(f"artifact {a.ref} already exists ({aid})")
                artifacts.append(self._new_artifact(a, aid, self.resolve_subject(a.subject),
                                                    at))
                seen[("artifact", str(aid))] = aid
            policy = policy_rules.check_new_atoms(self, [inputs[n] for n in creating])
            existing: dict[UUID, Atom] = {}
            out: list[UUID] = []
            new: list[Atom] = []
            for inp, (act, target) in zip(inputs, actions, strict=True):
                if act == "add":
                    atom = self._new_atom(inp, at, seen=seen)
                    new.append(atom)
                    out.append(atom.id)
                    continue
                if act not in ("rehearse", "supersede") or target is None:
                    raise InputError(f"unknown decision {act!r} for a proposed atom")
                tid = self.resolve("atom", target)
                old = existing.get(tid) or self.get_atom(tid)
                existing[tid] = old
                sid = seen.get(("subject", inp.subject)) or self.resolve_subject(inp.subject)
                if old.subject_id != str(sid):  # never across subjects
                    raise ConflictError(f"atom {old.id} is not of the proposal's subject; "
                                        "nothing was written")
                if old.status != "active" or old.content_erased:
                    raise ConflictError(
                        f"atom {old.id} is {old.status} (it changed since it was found "
                        "similar); nothing was written", hint="send the memory again")
                if act == "rehearse":
                    old.trigger_event(Atom.Rehearsed, timestamp=at, session_id=inp.session_id,
                                      reason="remembered again (on_similar: rehearse)")
                    out.append(old.id)
                    continue
                atom = self._new_atom(inp, at, supersedes=str(old.id), seen=seen)
                old.trigger_event(Atom.Superseded, timestamp=at, superseded_by=str(atom.id),
                                  valid_to=clock.format_instant(at),
                                  reason="superseded by a similar memory "
                                         "(on_similar: supersede)")
                new.append(atom)
                out.append(atom.id)
            if len({a.id for a in new}) != len(new):
                raise InputError("two atoms in this command have the same ref")
            loaded = [a for a in policy_rules.over_limit(self, policy, new, at)
                      if a.id not in existing]
            archived = archived_by_policy([*new, *loaded])
            self.commit(*artifacts, *existing.values(), *new, *loaded, event_ids=False)
        for atom in new:
            log.info("atom.created", atom_id=str(atom.id), subject_id=atom.subject_id)
        for act, target in actions:
            if act != "add":
                log.info("atom.rehearsed" if act == "rehearse" else "atom.superseded",
                         atom_id=target)
        log.info("atoms.remembered", added=sum(a == "add" for a, _ in actions),
                 superseded=sum(a == "supersede" for a, _ in actions),
                 rehearsed=sum(a == "rehearse" for a, _ in actions))
        return AtomsWritten(out, archived, [a.id for a in artifacts])

    def get_many(self, ids: Iterable[UUID]) -> list[Any]:
        """Aggregates by id (duplicates once, in order), as ``repository.get`` gives them:
        the batch commands (shred, tombstones) read a thousand items. Their data keys are
        fetched in one round trip first; their events are read in one query per 500 ids
        (``ledger/bulk_reads.py``, SQLite and PostgreSQL), and a cached aggregate is
        brought forward with the events newer than it, as the repository does one query
        at a time; handed out as copies."""
        wanted = list(dict.fromkeys(ids))
        self.datakeys.get_many([str(i) for i in wanted])
        stored_by_id = bulk_reads.select_events_of(self.recorder, wanted)
        if stored_by_id is None:
            return [self.repository.get(i) for i in wanted]
        cache = self.repository.cache
        out: list[Any] = []
        for i in wanted:
            agg = _cached(cache, i)
            newer = [s for s in stored_by_id[i]
                     if agg is None or s.originator_version > agg.version]
            if agg is None and not newer:
                out.append(self.repository.get(i))  # not found: the repository says so
                continue
            if newer:
                events: list[Any] = [self.mapper.to_domain_event(s) for s in newer]
                for event in events:
                    # what project_aggregate does, less its runtime-Protocol assert
                    # (tens of microseconds an event; these come from this mapper)
                    agg = event.mutate(agg)
                if cache is not None:
                    cache.put(i, agg)
            out.append(copy.deepcopy(agg))
        return out

    def get_atom(self, atom_id: str | UUID) -> Atom:
        aid = atom_id if isinstance(atom_id, UUID) else self.resolve("atom", atom_id)
        try:
            atom: Any = self.repository.get(aid)
        except AggregateNotFoundError:
            raise NotFound(f"no atom {atom_id}") from None
        if not isinstance(atom, Atom):
            raise NotFound(f"{atom_id} is not an atom")
        return atom

    def get_subject(self, ref_or_id: str) -> Subject:
        subject: Any = self.repository.get(self.resolve_subject(ref_or_id))
        assert isinstance(subject, Subject)
        return subject

    def get_artifact(self, ref_or_id: str) -> Artifact:
        artifact: Any = self.repository.get(self.resolve("artifact", ref_or_id))
        if not isinstance(artifact, Artifact):
            raise NotFound(f"{ref_or_id} is not an artifact")
        return artifact

    def correct_atom(self, atom_id: str, data: dict[str, Any],
                     actor: str | None = None) -> UUID:
        """Supersede an atom: the old one gets ``valid_to``; a new atom replaces it."""
        corr = parse(AtomCorrection, data)
        signer = self.signer(actor)
        with self.writing(signer) as at:
            old = self.get_atom(atom_id)
            if old.status != "active":
                hint = f"correct {old.superseded_by} instead" if old.superseded_by else None
                raise ConflictError(f"atom {old.id} is {old.status} and cannot be corrected",
                                    hint=hint)
            if old.content_erased:
                raise ConflictError(f"atom {old.id} was erased and cannot be corrected")
            base = {k: v for k, v in old.as_dict().items()
                    if k in AtomInput.model_fields and v is not None}
            base.update({"subject": old.subject_id, "ref": None})
            base.update(corr.model_dump(exclude_unset=True, exclude={"reason"}))
            if "artifact_ids" not in corr.model_fields_set:
                base["artifact_ids"] = old.artifact_ids
            base["valid_from"] = corr.valid_from or at
            new_input = parse(AtomInput, base)
            new = self._new_atom(new_input, at, supersedes=str(old.id))
            old.trigger_event(Atom.Superseded, timestamp=at, superseded_by=str(new.id),
                              valid_to=clock.format_instant(corr.valid_from or at),
                              reason=corr.reason)
            self.commit(old, new)
        log.info("atom.corrected", atom_id=str(old.id), new_atom_id=str(new.id))
        return new.id

    def restore_statuses(self, items: Sequence[tuple[UUID, str, UUID | None, str | None]],
                         actor: str | None = None) -> int:
        """Give imported atoms the status their source recorded, in one command:
        (atom, ``superseded`` or ``expired``, successor, valid_to). Atoms no longer
        active are left alone, so a re-run changes nothing. Returns how many changed."""
        todo: list[Atom] = []
        with self.writing(self.signer(actor)) as at:
            atoms = self.get_many([i for i, *_ in items])
            for atom, (_, status, successor, valid_to) in zip(atoms, items, strict=True):
                if atom.status != "active" or atom.content_erased:
                    continue
                until = valid_to or clock.format_instant(at)
                if status == "superseded" and successor is not None:
                    atom.trigger_event(Atom.Superseded, timestamp=at,
                                       superseded_by=str(successor), valid_to=until,
                                       reason="status restored on import")
                else:
                    atom.trigger_event(Atom.Expired, timestamp=at, valid_to=until,
                                       reason="status restored on import")
                todo.append(atom)
            if todo:
                self.commit(*todo)
        log.info("import.statuses_restored", count=len(todo))
        return len(todo)

    def rehearse_atom(self, atom_id: str, session_id: str | None = None,
                      reason: str | None = None, actor: str | None = None) -> int:
        signer = self.signer(actor)
        with self.writing(signer) as at:
            atom = self.get_atom(atom_id)
            if atom.status != "active" or atom.content_erased:
                raise ConflictError(f"atom {atom.id} is {atom.status}; only active atoms "
                                    "are rehearsed")
            atom.trigger_event(Atom.Rehearsed, timestamp=at, session_id=session_id,
                               reason=reason)
            self.commit(atom)
        log.info("atom.rehearsed", atom_id=str(atom.id), count=atom.rehearsal_count)
        return int(atom.rehearsal_count)

    def rehearse_atoms(self, atom_ids: Sequence[str], session_id: str | None = None,
                       reason: str | None = "recalled", actor: str | None = None) -> list[str]:
        """Rehearse recalled atoms in one command. Within a session an atom is rehearsed
        once (the Persona rehearsal cooldown): repeats in the same session are skipped."""
        signer = self.signer(actor)
        with self.writing(signer) as at:
            atoms = []
            for aid in dict.fromkeys(atom_ids):
                atom = self.get_atom(aid)
                if atom.status != "active" or atom.content_erased:
                    continue
                if session_id is not None and atom.last_rehearsal_session == session_id:
                    continue
                atom.trigger_event(Atom.Rehearsed, timestamp=at, session_id=session_id,
                                   reason=reason)
                atoms.append(atom)
            ids = self.commit(*atoms) if atoms else []
        log.info("atoms.rehearsed", count=len(ids))
        return ids

    def expire_atom(self, atom_id: str, reason: str | None = None,
                    actor: str | None = None) -> None:
        signer = self.signer(actor)
        with self.writing(signer) as at:
            atom = self.get_atom(atom_id)
            if atom.status != "active":
                raise ConflictError(f"atom {atom.id} is already {atom.status}")
            atom.trigger_event(Atom.Expired, timestamp=at, valid_to=clock.format_instant(at),
                               reason=reason)
            self.commit(atom)
        log.info("atom.expired", atom_id=str(atom.id))

    # ------------------------------------------------------------------ crypto-shredding
    def archive_atoms(self, reasons: dict[str, str], actor: str | None = None,
                      batch_id: str | None = None) -> list[str]:
        """Archive many atoms in one signed command (the policy sweep's archive step).

        Atoms that are no longer active or soft-redacted when the write lock is held (another
        sweep got there first) are skipped, so a repeated or concurrent run adds nothing.
        Returns the event ids written.
        """
        if not reasons:
            return []
        with self.writing(self.signer(actor), WRITER_OR_OPERATOR) as at:
            todo = []
            for aid, reason in reasons.items():
                atom = self.get_atom(UUID(aid))
                if atom.status not in ("active", "soft-redacted"):
                    continue
                atom.trigger_event(Atom.Redacted, timestamp=at, mode="archive", reason=reason,
                                   batch_id=batch_id, reached=None)
                todo.append(atom)
            ids: list[str] = self.commit(*todo) if todo else []
        policy_rules.log.info("policy.archived", count=len(ids))
        return ids

    def archive_decayed(self, due: dict[str, dict[str, Any]], actor: str | None = None
                        ) -> list[str]:
        """Archive atoms whose salience fell below their decay profile's minimumSalience
        (the sweep's decay rule, ADR 0050): one signed ``Atom.Archived`` per atom, one
        command. ``due`` maps atom ids to ``salience``, ``minimum_salience``,
        ``computed_at`` and ``reason``. Atoms no longer active when the write lock is held
        are skipped, so a repeated or concurrent run adds nothing. Returns the event ids."""
        if not due:
            return []
        with self.writing(self.signer(actor), OPERATOR) as at:
            todo = []
            for aid, d in due.items():
                atom = self.get_atom(UUID(aid))
                if atom.status != "active":
                    continue
                atom.trigger_event(Atom.Archived, timestamp=at,
                                   salience=float(d["salience"]),
                                   minimum_salience=float(d["minimum_salience"]),
                                   computed_at=str(d["computed_at"]), reason=str(d["reason"]))
                todo.append(atom)
            ids: list[str] = self.commit(*todo) if todo else []
        log.info("decay.archived", count=len(ids))
        return ids

    def created_atoms_of(self, subject_ids: Iterable[str]) -> dict[str, list[str]]:
        """Every atom created for each of these subjects (ids, in no particular order)."""
        return self.census.atoms_of(self.recorder, subject_ids)

    def destroy_data_key(self, aggregate_id: UUID, reason: str,
                         actor: str | None = None) -> str | None:
        """Crypto-shred one item: destroy its data key, then record a signed event.

        Returns the event id, or None when the key was already destroyed and recorded.
        """
        signer = self.signer(actor)
        with self.writing(signer, WRITER_OR_OPERATOR) as at:
            try:
                agg: Any = self.repository.get(aggregate_id)
            except AggregateNotFoundError:
                raise NotFound(f"no item {aggregate_id}") from None
            if agg.data_key_destroyed_at is not None:
                return None
            self.datakeys.destroy([str(aggregate_id)], at)
            agg.trigger_event(type(agg).DataKeyDestroyed, timestamp=at,
                              key_id=str(aggregate_id), reason=reason,
                              kek_epoch=self.datakeys.current_epoch())
            ids = self.commit(agg)
        log.info("data_key.destroyed", item_id=str(aggregate_id))
        return ids[0]

    # ------------------------------------------------------------------ governance primitives
    # Orchestration (routes, probes, evidence) lives in governance/; these are the signed
    # commands it is made of. Each is one all-or-nothing command.
    def redact(self, atom_id: str | UUID, mode: str, reason: str, actor: str | None = None,
               batch_id: str | None = None) -> str:
        """Soft (hidden, reversible) or archive (out of retrieval, kept) redaction."""
        if mode not in ("soft", "archive"):
            raise InputError(f"mode {mode!r} is not soft or archive here",
                             hint="hard and delete go through governance (keys destroyed, "
                                  "routes purged): `ledger redact ATOM --mode hard`")
        with self.writing(self.signer(actor), WRITER_OR_OPERATOR) as at:
            atom = self.get_atom(atom_id)
            if atom.status not in ("active", "soft-redacted") or atom.redaction_mode == mode:
                raise ConflictError(f"atom {atom.id} is {atom.status}; cannot {mode}-redact it")
            atom.trigger_event(Atom.Redacted, timestamp=at, mode=mode, reason=reason,
                               batch_id=batch_id, reached=None)
            ids = self.commit(atom)
        log.info("atom.redacted", atom_id=str(atom.id), mode=mode)
        return ids[0]

    def unredact(self, atom_id: str | UUID, reason: str, actor: str | None = None) -> str:
        with self.writing(self.signer(actor), WRITER_OR_OPERATOR) as at:
            atom = self.get_atom(atom_id)
            if atom.status != "soft-redacted":
                raise ConflictError(f"atom {atom.id} is {atom.status}; only soft redaction is "
                                    "reversible")
            atom.trigger_event(Atom.Unredacted, timestamp=at, reason=reason)
            ids = self.commit(atom)
        log.info("atom.unredacted", atom_id=str(atom.id))
        return ids[0]

    def shred(self, item_ids: Sequence[UUID], reason: str,
              actor: str | None = None, defer: bool = False) -> list[str]:
        """Destroy the data keys of many items, then record one signed event per item.

        Already-shredded items are skipped, so a retried erasure is safe; an item whose key
        an interrupted run destroyed without recording it gets its event now. ``defer``:
        the keystore is compacted and checked later, by ``datakeys.finish_deferred()``
        (an erasure destroys its keys in several commits, ADR 0019).
        """
        with self.writing(self.signer(actor), WRITER_OR_OPERATOR) as at:
            aggs: list[Any] = self.get_many(item_ids)
            todo = [a for a in aggs if getattr(a, "data_key_destroyed_at", None) is None]
            # the keystore files are read for the keys' bytes while the events are written
            self.datakeys.destroy([str(a.id) for a in todo], at, check_later=not defer,
                                  defer=defer)
            faults.point("keys-deleted")
            try:
                epoch = self.datakeys.current_epoch() if todo else None
                for agg in todo:
                    agg.trigger_event(type(agg).DataKeyDestroyed, timestamp=at,
                                      key_id=str(agg.id), reason=reason, kek_epoch=epoch)
                ids = self.commit(*todo) if todo else []
            finally:
                self.datakeys.settle()
        log.info("data_key.destroyed", count=len(todo))
        return ids

    def tombstone(self, atom_ids: Sequence[UUID], artifact_ids: Sequence[UUID], mode: str,
                  reason: str, reached: list[str], batch_id: str | None = None,
                  cascade: dict[str, dict[str, Any]] | None = None,
                  actor: str | None = None, records: Sequence[UUID] = ()) -> list[str]:
        """Signed tombstones after a hard erasure or deletion reached every route."""
        if mode not in ("hard", "delete"):
            raise InputError(f"tombstones are for hard or delete, not {mode!r}")
        with self.writing(self.signer(actor), WRITER_OR_OPERATOR) as at:
            aggs: list[Any] = []
            try:
                atoms = self.get_many(atom_ids)
            except AggregateNotFoundError as e:
                raise NotFound(f"no atom {e}") from None
            for atom in atoms:
                if not isinstance(atom, Atom):
                    raise NotFound(f"{atom.id} is not an atom")
                if atom.status in ("hard-redacted", "deleted"):
                    continue
                atom.trigger_event(Atom.Redacted, timestamp=at, mode=mode, reason=reason,
                                   batch_id=batch_id, reached=reached)
                aggs.append(atom)
            for rec in self.get_many(records):
                if getattr(rec, "status", "active") in ("hard-redacted", "deleted"):
                    continue
                rec.trigger_event(Record.Erased, timestamp=at, mode=mode, reason=reason,
                                  batch_id=batch_id, reached=reached)
                aggs.append(rec)
            for rid in dict.fromkeys(artifact_ids):
                art: Any = self.repository.get(rid)
                if art.status == "deleted":
                    continue
                art.trigger_event(Artifact.Deleted, timestamp=at, reason=reason,
                                  batch_id=batch_id, cascade=(cascade or {}).get(str(rid), {}),
                                  reached=reached)
                aggs.append(art)
            ids = self.commit(*aggs) if aggs else []
        log.info("tombstones.recorded", count=len(ids), mode=mode)
        return ids

    def remove_source(self, atom_id: UUID, artifact_id: UUID, actor: str | None = None) -> str:
        with self.writing(self.signer(actor), WRITER_OR_OPERATOR) as at:
            atom = self.get_atom(atom_id)
            remaining = [a for a in atom.artifact_ids if a != str(artifact_id)]
            atom.trigger_event(Atom.SourceRemoved, timestamp=at, artifact_id=str(artifact_id),
                               remaining=remaining)
            return self.commit(atom)[0]

    def flag(self, atom_id: UUID, flag: str, reason: str, related: list[str] | None = None,
             actor: str | None = None) -> str | None:
        with self.writing(self.signer(actor), WRITER_OR_OPERATOR) as at:
            atom = self.get_atom(atom_id)
            if flag in atom.flags:
                return None
            atom.trigger_event(Atom.Flagged, timestamp=at, flag=flag, reason=reason,
                               related=related)
            return self.commit(atom)[0]

    def resolve_flag(self, atom_id: UUID, flag: str, resolution: str,
                     actor: str | None = None) -> str:
        with self.writing(self.signer(actor), WRITER_OR_OPERATOR) as at:
            atom = self.get_atom(atom_id)
            if flag not in atom.flags:
                raise ConflictError(f"atom {atom.id} has no open {flag!r} flag")
            atom.trigger_event(Atom.FlagResolved, timestamp=at, flag=flag, resolution=resolution)
            return self.commit(atom)[0]

    def receive_request(self, subject: str, reason: str, operator: str,
                        ack_hours: float, complete_hours: float,
                        legal_basis: str | None = None, identifiers: Sequence[str] = (),
                        sessions: Sequence[str] = ()) -> UUID:
        """Step 1 of the right to be forgotten: log the receipt with its deadlines."""
        signer = self.signer(operator)
        with self.writing(signer, OPERATOR) as at:
            sid = self.resolve_subject(subject)
            req = ErasureRequest._create(
                ErasureRequest.Created, id=uuid.uuid4(), timestamp=at, subject_id=str(sid),
                subject_ref=self.get_subject(str(sid)).ref, reason=reason,
                legal_basis=legal_basis, operator=operator, sessions=list(sessions),
                identifiers=list(identifiers) or None, credential=self.acting_credential,
                ack_due=clock.format_instant(at + timedelta(hours=ack_hours)),
                complete_due=clock.format_instant(at + timedelta(hours=complete_hours)))
            req.trigger_event(ErasureRequest.Acknowledged, timestamp=at)
            self.commit(req)
        log.info("request.received", request_id=str(req.id), subject_id=str(sid))
        return req.id

    def open_batch(self, operator: str, request_id: UUID | None, mode: str, reason: str,
                   targets: dict[str, list[str]]) -> UUID:
        """Open and approve a redaction batch, both signed by the operator's key."""
        signer = self.signer(operator)
        with self.writing(signer, OPERATOR) as at:
            batch = RedactionBatch._create(
                RedactionBatch.Created, id=uuid.uuid4(), timestamp=at,
                request_id=str(request_id) if request_id else None, mode=mode, reason=reason,
                targets={k: sorted(v) for k, v in targets.items()})
            batch.trigger_event(RedactionBatch.Approved, timestamp=at, operator=operator,
                                credential=self.acting_credential)
            self.commit(batch)
        log.info("batch.approved", batch_id=str(batch.id))
        return batch.id

    def finish_batch(self, operator: str, batch_id: UUID, event_ids: list[str],
                     reach: dict[str, Any], request_id: UUID | None = None) -> list[str]:
        """Record the executed batch and close it (both steps at once)."""
        ids = self.execute_batch(operator, batch_id, event_ids, reach)
        return [*ids, *self.close_batch(operator, batch_id, request_id)]

    def execute_batch(self, operator: str, batch_id: UUID, event_ids: list[str],
                      reach: dict[str, Any]) -> list[str]:
        """Record what the batch did and reached (its ``Executed`` event)."""
        with self.writing(self.signer(operator), OPERATOR) as at:
            batch: Any = self.repository.get(batch_id)
            if batch.status in ("executed", "closed"):
                return []
            batch.trigger_event(RedactionBatch.Executed, timestamp=at, event_ids=event_ids,
                                reach=reach)
            ids = self.commit(batch)
        log.info("batch.executed", batch_id=str(batch_id), events=len(event_ids))
        return ids

    def close_batch(self, operator: str, batch_id: UUID,
                    request_id: UUID | None = None) -> list[str]:
        """Close an executed batch and destroy its data key (its reason, and the sealed
        notes of its erasure); complete its request and destroy the request's key (its
        reason and identifiers). One commit; a key an interrupted close destroyed gets
        its event now (ADR 0019)."""
        with self.writing(self.signer(operator), OPERATOR) as at:
            batch: Any = self.repository.get(batch_id)
            aggs: list[Any] = []
            if batch.status != "closed":
                batch.trigger_event(RedactionBatch.Closed, timestamp=at, outcome="completed")
            self._destroy_own_key(batch, RedactionBatch.DataKeyDestroyed, "batch closed", at)
            if batch.pending_events:
                aggs.append(batch)
            if request_id is not None:
                req: Any = self.repository.get(request_id)
                if req.completed_at is None:
                    req.trigger_event(ErasureRequest.Completed, timestamp=at,
                                      batch_id=str(batch_id), event_ids=batch.event_ids)
                self._destroy_own_key(req, ErasureRequest.DataKeyDestroyed,
                                      "request completed", at)
                if req.pending_events:
                    aggs.append(req)
            ids = self.commit(*aggs) if aggs else []
        log.info("batch.closed", batch_id=str(batch_id))
        return ids

    def end_partial(self, operator: str, batch_id: UUID, request_id: UUID | None,
                    event_ids: list[str], reach: dict[str, Any],
                    reasons: list[dict[str, Any]]) -> list[str]:
        """Record that a run of the batch ended without erasing all its targets (ADR
        0047): ``batch.ended-partial`` (what it did and reached, why it stopped short) and,
        for a request, ``request.ended-partial``, in one commit. Nothing is destroyed or
        closed here: the batch's and the request's own keys stay for the resume."""
        with self.writing(self.signer(operator), OPERATOR) as at:
            batch: Any = self.repository.get(batch_id)
            if batch.status in ("executed", "closed"):
                raise ConflictError(f"batch {batch_id} is {batch.status}; it cannot end partial")
            batch.trigger_event(RedactionBatch.EndedPartial, timestamp=at,
                                event_ids=event_ids, reach=reach, reasons=reasons)
            aggs: list[Any] = [batch]
            if request_id is not None:
                req: Any = self.repository.get(request_id)
                req.trigger_event(ErasureRequest.EndedPartial, timestamp=at,
                                  batch_id=str(batch_id), reasons=reasons)
                aggs.append(req)
            ids = self.commit(*aggs)
        log.info("batch.ended_partial", batch_id=str(batch_id),
                 reasons=[r.get("code") for r in reasons])
        return ids

    def reject_request(self, operator: str, request_id: UUID, code: str, reason: str
                       ) -> list[str]:
        """Refuse an erasure request that no erasure has started for (ADR 0047): a signed
        ``request.rejected`` (code, the operator's words in clear) and the request's own
        key destroyed (its sealed reason and identifiers), in one commit."""
        with self.writing(self.signer(operator), OPERATOR) as at:
            req: Any = self.repository.get(request_id)
            if not isinstance(req, ErasureRequest):
                raise NotFound(f"{request_id} is not an erasure request")
            if getattr(req, "rejected_at", None) is not None:
                raise ConflictError(f"request {request_id} was already rejected at "
                                    f"{req.rejected_at}")
            if req.completed_at is not None or req.batch_id is not None:
                raise ConflictError(
                    f"request {request_id} has an erasure (batch {req.batch_id}); only a "
                    "request no erasure has started for can be rejected",
                    hint="a started erasure is finished with `ledger requests resume`")
            req.trigger_event(ErasureRequest.Rejected, timestamp=at, code=code,
                              reason=reason, operator=operator,
                              credential=self.acting_credential)
            self._destroy_own_key(req, ErasureRequest.DataKeyDestroyed, "request rejected",
                                  at)
            ids = self.commit(req)
        log.info("request.rejected", request_id=str(request_id), code=code)
        return ids

    def _destroy_own_key(self, agg: Any, event: Any, reason: str, at: datetime) -> None:
        """Destroy the data key of a request or batch (if it ever had one) and record it."""
        kid = str(agg.id)
        if getattr(agg, "data_key_destroyed_at", None) is not None:
            return
        present = self.datakeys.present([kid])
        if not (present or self.datakeys.destroyed_at(kid)):
            return  # never had content to seal
        self.datakeys.destroy([kid], at)
        if not present:  # destroyed by an interrupted close: its bytes were never known
            self.datakeys.vacuum()
        agg.trigger_event(event, timestamp=at, key_id=kid, reason=reason,
                          kek_epoch=self.datakeys.current_epoch())

    # ------------------------------------------------------------------ policy
    def policy_id(self) -> UUID:
        return uuid.uuid5(LEDGER_NAMESPACE, f"{self.ledger_id}/policy")

    def set_policy(self, document: dict[str, Any], actor: str = "operator") -> str:
        """Validate a memoryPolicy against schemas/memory-policy.json and record it, signed."""
        from ledger.json_schemas import validator

        doc = document.get("memoryPolicy", document) if isinstance(document, dict) else None
        if not isinstance(doc, dict):
            raise InputError("a memoryPolicy document is a JSON object",
                             hint='give {"memoryPolicy": {...}} or the block itself')
        errors = list(validator("memory-policy.json").iter_errors(doc))
        if errors:
            from ledger.schema_errors import summarize

            raise InputError(f"invalid memoryPolicy:\n{summarize(errors, 'memoryPolicy')}",
                             hint="examples in docs/examples/; every field in "
                                  "schemas/memory-policy.json (Persona Schema §7)")
        with self.writing(self.signer(actor), OPERATOR) as at:
            pid = self.policy_id()
            if self.exists(pid):
                policy: Any = self.repository.get(pid)
            else:
                policy = Policy._create(Policy.Created, id=pid, timestamp=at)
            policy.trigger_event(Policy.PolicySet, timestamp=at, document=doc)
            ids = self.commit(policy)
        log.info("policy.set", version=policy.version)
        return ids[-1]

    def policy(self) -> dict[str, Any] | None:
        """The policy in force, with when it was set and by which signed event."""
        pid = self.policy_id()
        if not self.exists(pid):
            return None
        policy: Any = self.repository.get(pid)
        return {"memoryPolicy": policy.document, "set_at": policy.set_at,
                "event_id": envelope.event_id(pid, policy.version)}

    # ------------------------------------------------------------------ reading
    def history(self, atom_id: str) -> list[dict[str, Any]]:
        """Signed events of an atom and of the atoms it supersedes or is superseded by."""
        atom = self.get_atom(atom_id)
        chain: list[UUID] = [atom.id]
        cur = atom
        while cur.supersedes:
            cur = self.get_atom(UUID(cur.supersedes))
            chain.insert(0, cur.id)
        cur = atom
        while cur.superseded_by:
            cur = self.get_atom(UUID(cur.superseded_by))
            chain.append(cur.id)
        out: list[dict[str, Any]] = []
        for aid in chain:
            for stored in self.recorder.select_events(aid):
                opened = self.mapper.open_verified(stored)  # type: ignore[attr-defined]
                env = opened.envelope
                out.append({
                    "event_id": envelope.event_id(stored.originator_id,
                                                  stored.originator_version),
                    "seq": env["seq"], "atom_id": str(aid), "topic": env["topic"],
                    "timestamp": env["timestamp"], "signer": env["kid"],
                    "summary": {k: v for k, v in env["payload"].items()
                                if k in ("valid_to", "superseded_by", "reason", "session_id",
                                         "supersedes", "derivation", "kind")},
                })
        out.sort(key=lambda r: r["seq"])
        return out

    def stored_records(self, start: int = 1, batch: int = 5000) -> Iterator[Any]:
        """Every stored event in log order (notifications), read in batches."""
        pos = start
        while True:
            rows = self.recorder.select_notifications(start=pos, limit=batch)
            if not rows:
                return
            yield from rows
            pos = rows[-1].id + 1

    # ------------------------------------------------------------------ reads for the layers above
    # projections/ and governance/ read the log, the keystore and the tree through these
    # named methods, never through ``recorder``, ``repository``, ``datakeys``, ``mapper``
    # or ``tlog`` (docs/architecture.md).
    def notifications(self, start: int, limit: int, *, topics: Sequence[str] = (),
                      stop: int | None = None) -> Sequence[Notification]:
        """Stored events in log order from position ``start`` (at most ``limit``, none
        after ``stop``), only of ``topics`` when given."""
        return self.recorder.select_notifications(start=start, limit=limit, stop=stop,
                                                  topics=topics)

    def head_position(self) -> int:
        """The position of the newest stored event; 0 for an empty log."""
        return int(self.recorder.max_notification_id() or 0)

    def stored_events(self, aggregate_id: UUID, *, gt: int | None = None,
                      lte: int | None = None) -> list[StoredEvent]:
        """The stored events of one aggregate, versions in (``gt``, ``lte``]."""
        return list(self.recorder.select_events(aggregate_id, gt=gt, lte=lte))

    def aggregate(self, aggregate_id: UUID) -> Aggregate:
        """The aggregate's current state (raises eventsourcing's AggregateNotFoundError)."""
        agg: Aggregate = self.repository.get(aggregate_id)
        return agg

    def open_events(self, stored: Iterable[StoredEvent]) -> list[Aggregate.Event]:
        """Verify (signature, signer's role) and decrypt stored events into domain events;
        a destroyed data key reads as erased content. Raises on a bad signature."""
        # every topic of this ledger is an Aggregate.Event (ledger/domain.py, keys/roster.py)
        return [cast("Aggregate.Event", self.mapper.to_domain_event(s)) for s in stored]

    def prefetch_data_keys(self, key_ids: Iterable[str]) -> None:
        """Fetch these data keys in one round trip, for :meth:`open_events` to follow."""
        self.datakeys.get_many(key_ids)

    def data_keys(self, key_ids: Iterable[str]) -> dict[str, bytes]:
        """The data keys that exist among ``key_ids``, in one round trip (destroyed or
        unknown ids are absent): what a worker process needs to decrypt a batch."""
        return self.datakeys.get_many(key_ids)

    def verification_keys(self) -> dict[str, bytes]:
        """Every public key an event of this log may be signed with (the root key and each
        roster entry, by key id): what :meth:`open_events` resolves signatures against,
        for a worker process that verifies a batch."""
        self._known_keys.update({k: e.public_key
                                 for k, e in self.roster().state.entries.items()})
        return dict(self._known_keys)

    def data_key(self, key_id: str) -> bytes | None:
        """One data key, None once destroyed."""
        return self.datakeys.get_many([key_id]).get(key_id)

    def associated_data(self, originator_id: object, version: int, topic: str) -> bytes:
        """The AEAD associated data that binds a sealed field to its event."""
        assert isinstance(self.mapper, SigningMapper)
        return self.mapper.associated_data(originator_id, version, topic)

    def data_keys_present(self, key_ids: Iterable[str]) -> set[str]:
        return self.datakeys.present(key_ids)

    def data_keys_destroyed_among(self, key_ids: Iterable[str]) -> set[str]:
        return self.datakeys.destroyed_among(key_ids)

    def finish_key_destruction(self, vacuum: bool = False) -> None:
        """Complete the keystore's deferred secure deletion (ADR 0003)."""
        self.datakeys.finish_deferred(vacuum=vacuum)

    def seal_note(self, key_id: str, data: bytes) -> None:
        """Keep ``data`` in the keystore under the data key ``key_id`` (ADR 0019)."""
        self.datakeys.seal_note(key_id, data)

    def open_note(self, key_id: str) -> bytes | None:
        return self.datakeys.open_note(key_id)

    def inclusion_proof(self, index: int, size: int) -> list[bytes]:
        return self.tlog.inclusion(index, size)

    def consistency_proof(self, old_size: int, new_size: int) -> list[bytes]:
        return self.tlog.consistency(old_size, new_size)

    def latest_checkpoint(self) -> SignedCheckpoint:
        """The latest recorded checkpoint; a new one is signed when none is recorded yet."""
        cp = self.tlog.recorded()
        return cp if cp is not None else self.checkpoint([])

    def cosignature_rows(self, size: int) -> list[tuple[str, str]]:
        """(witness name, vkey) of every witness that cosigned the checkpoint of ``size``."""
        return self.tlog.cosignature_rows(size)

    def recorded_checkpoints(self) -> list[tuple[int, str, str]]:
        """(size, note, created_at) of every recorded checkpoint, smallest first."""
        return self.tlog.recorded_notes()

    def checkpoint_before(self, seq: int) -> SignedCheckpoint | None:
        """The largest recorded checkpoint that ends before ``seq``, with its cosignatures."""
        return self.tlog.recorded(before=seq)

    def check_against_tree(self, leaves: list[bytes], cp: Checkpoint) -> Failure | None:
        """Step 8 against this ledger's stored tree (:func:`ledger.verify.check_checkpoint`)."""
        from ledger.verify import check_checkpoint

        return check_checkpoint(leaves, cp, self.tlog.store.leaf_hashes, self.tlog.tree.root)


_ATOM_INPUTS: TypeAdapter[list[AtomInput]] = TypeAdapter(list[AtomInput])
def archived_by_policy(items: Sequence[Any]) -> list[str]:
    """Ids of the atoms among ``items`` that this command archives (maxAtoms), before
    their pending events are committed."""
    return sorted(str(a.id) for a in items if isinstance(a, Atom) and any(
        isinstance(e, Atom.Redacted) and getattr(e, "rule", None) == "maxAtoms"
        for e in a.pending_events))


def _parse_atoms(items: Sequence[dict[str, Any]]) -> list[AtomInput]:
    """``parse(AtomInput, d)`` of each item, validated in one call (ADR 0008); on any
    error, item by item again so the message names the bad fields exactly as ``parse``."""
    batch = list(items)
    try:
        return _ATOM_INPUTS.validate_python(batch)
    except ValidationError:
        return [parse(AtomInput, d) for d in batch]


def _aggregate_of(created: Any) -> Any:
    """The new aggregate of a created event, with the event pending: what the aggregate's
    ``_create`` does after building the event."""
    aggregate = created.mutate(None)
    aggregate.pending_events.append(created)
    return aggregate


def envelope_kid(public_key: bytes) -> str:
    from keys.signing import key_id

    return key_id(public_key)


def _id_candidates(ref_or_id: str, from_ref: Any) -> list[UUID]:
    out = []
    try:
        out.append(UUID(ref_or_id))
    except ValueError:
        pass
    try:
        out.append(from_ref(ref_or_id))
    except LedgerError:
        pass
    return out


def _first_line(e: BaseException) -> str:
    return f"{e.__class__.__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"


def _ensure_schema(url: StorageURL) -> None:
    engine = make_engine(url.sqlalchemy_url(), url.schema)
    engine.dispose()


class _NoTranscoder(Transcoder):
    """The signing mapper serialises envelopes itself; a transcoder is never used."""

    def encode(self, obj: Any) -> bytes:
        raise NotImplementedError

    def decode(self, data: bytes) -> Any:
        raise NotImplementedError


__all__ = ["UTC", "DataKeyUnavailable", "KeyError_", "LedgerApp", "LedgerEvent", "base64"]


def _cached(cache: Any, key: UUID) -> Any:
    """The cached aggregate (not a copy), or None."""
    if cache is None:
        return None
    try:
        return cache.get(key)
    except KeyError:
        return None
