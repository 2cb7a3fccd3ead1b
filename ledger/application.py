"""The ledger application: commands on Subject, Artifact, Atom and the key roster.

Every command runs in a write context: it takes the ledger's write lock, reads
the head (last sequence number and time), checks the clock and the actor's
authorization, and lets the mapper sign events with consecutive sequence
numbers. A command either writes all of its events or none of them.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import shutil
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from uuid import UUID

import structlog
from eventsourcing.application import AggregateNotFoundError, Application
from eventsourcing.persistence import Mapper, Transcoder
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
from ledger.reader import LedgerReader
from ledger.saving import EventSaver
from ledger.transparency import SignedCheckpoint, TransparencyLog

if TYPE_CHECKING:
    from ledger.progress import Steps

log = structlog.get_logger("ledger")

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
        try:
            root_public_key: bytes | None = read_public_key_file(
                self.keyring.public_key_path("root"))
        except KeyringError:
            root_public_key = None  # an auditor's copy may lack it; verify takes --root-key
        assert isinstance(self.mapper, SigningMapper)
        self.reader = LedgerReader(config, self.recorder, self.repository, self.mapper,
                                   self.datakeys, self.tlog, self.census, root_public_key)
        """The ledger's reads (``ledger/reader.py``): what the layers above are handed."""
        self.roster_id = self.reader.roster_id
        self.root_public_key = root_public_key
        self.mapper.configure(self.ledger_id, self.datakeys, self.reader.public_key)
        self.saver = EventSaver(self.recorder, self.mapper, self.datakeys, self.tlog,
                                self.reader.exists)

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

    def _write_lock(self) -> contextlib.AbstractContextManager[None]:
        """The ledger's write lock (``ledger/locks.py``)."""
        return locks.held(self.config, "write")

    def root_signer(self) -> Signer:
        """The home's ``root`` key, checked (by key id) to be this ledger's root before
        anything is signed with it: another ledger's root key would append roster events
        the verifier rejects, for ever (issue 20, item 5)."""
        root = self.signer("root")
        roster_root = self.reader.roster().state.root_kid
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
            seq, last = self.reader.head()
            at = clock.now()
            if last is not None and at < last:
                raise ClockError(
                    f"the command's time {clock.format_instant(at)} is earlier than the newest "
                    f"event ({clock.format_instant(last)})",
                    hint=f"unset {clock.ENV} or set it to a later time; history is append-only")
            wanted = (roles,) if isinstance(roles, str) else roles
            if wanted == (ROOT,) and self.reader.exists(self.roster_id) and \
                    signer.kid != self.reader.roster().state.root_kid:
                raise InputError(f"{signer.name} ({signer.kid}) is not the roster's root key; "
                                 "nothing was written", hint="see `ledger keys list`")
            if wanted != (ROOT,):
                try:
                    self.reader.roster().state.holds(signer.kid, wanted, at)
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
                       if is_uuid(k) and not self.reader.exists(UUID(k))]
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
            self.reader.roster().state.check(signer.kid, "log", at)
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
            yield self._sign_head(signer), self.reader.head_position()

    def log_vkey(self) -> str:
        """The C2SP verifier key of this ledger's checkpoints: origin as name, log key."""
        from ledger.checkpoint import vkey_string

        return vkey_string(self.config.origin, self.signer("log").public_key)

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
                roster = self.reader.roster()
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
        log.info("key.authorized", kid=kid, role=role)
        return kid

    def revoke_key(self, kid: str, role: str | None = None, revoked_from: datetime | None = None,
                   reason: str | None = None) -> None:
        root = self.root_signer()
        with self.writing(root, ROOT) as at:
            roster = self.reader.roster()
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
            roster = self.reader.roster()
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
        sid = self.reader.subject_id(inp.ref)
        signer = self.signer(actor)
        with self.writing(signer) as at:
            if self.reader.exists(sid):
                raise ConflictError(f"subject {inp.ref} is already registered ({sid})")
            subject = Subject._create(Subject.Created, id=sid, timestamp=at,
                                      ref=inp.ref, display_name=inp.display_name,
                                      locale=inp.locale)
            self.commit(subject)
        log.info("subject.registered", subject_id=str(sid))
        return sid

    # ------------------------------------------------------------------ artifacts
    def capture_artifact(self, data: dict[str, Any], actor: str | None = None) -> UUID:
        inp = parse(ArtifactInput, data)
        signer = self.signer(actor)
        with self.writing(signer) as at:
            subject_id = self.reader.resolve_subject(inp.subject)
            aid = self.reader.ref_id("artifact", inp.ref)
            if inp.ref is not None and self.reader.exists(aid):
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
            policy = policy_rules.check_new_atoms(self.reader, atom_in, imported=True)
            seen: dict[tuple[str, str], UUID] = {}
            new: list[Any] = []
            for s_inp in sub_in:
                recorded()
                sid = self.reader.subject_id(s_inp.ref)
                seen[("subject", s_inp.ref)] = sid
                ids["subjects"][s_inp.ref] = str(sid)
                if sid in {a.id for a in new} or self.reader.exists(sid):
                    skipped["subjects"] += 1
                    continue
                new.append(Subject._create(Subject.Created, id=sid, timestamp=at, ref=s_inp.ref,
                                           display_name=s_inp.display_name,
                                           locale=s_inp.locale))
                created["subjects"] += 1
            for a_inp in art_in:
                recorded()
                aid = self.reader.ref_id("artifact", a_inp.ref)
                if a_inp.ref is not None:
                    seen[("artifact", a_inp.ref)] = aid
                    ids["artifacts"][a_inp.ref] = str(aid)
                    if self.reader.exists(aid):
                        skipped["artifacts"] += 1
                        continue
                subject_id = seen.get(("subject", a_inp.subject)) or \
                    self.reader.resolve_subject(a_inp.subject)
                new.append(self._new_artifact(a_inp, aid, subject_id, at))
                created["artifacts"] += 1
            for m_inp in atom_in:
                recorded()
                if m_inp.ref is not None:
                    mid = self.reader.ref_id("atom", m_inp.ref)
                    ids["atoms"][m_inp.ref] = str(mid)
                    if self.reader.exists(mid):
                        skipped["atoms"] += 1
                        continue
                atom = self._new_atom(m_inp, at, seen=seen, check_ref=False)
                new.append(atom)
                created["atoms"] += 1
            if len({a.id for a in new}) != len(new):
                raise InputError("the import names one item twice (duplicate refs)")
            if records is not None and sub_in:
                new.extend(records(seen[("subject", sub_in[0].ref)], at))
            loaded = policy_rules.over_limit(self.reader, policy, new, at)
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
            subject_id = cache[("subject", inp.subject)] = self.reader.resolve_subject(inp.subject)
        artifact_ids = []
        for ref in inp.artifact_ids:
            if ("artifact", ref) not in cache:
                cache[("artifact", ref)] = self.reader.resolve("artifact", ref)
            artifact_ids.append(str(cache[("artifact", ref)]))
        atom_id = self.reader.ref_id("atom", inp.ref)
        if check_ref and inp.ref is not None and self.reader.exists(atom_id):
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
        source_ids = [self.reader.ref_id("artifact", a.ref) for a in source_inputs]
        if source_ids:
            items = [{**d, "artifact_ids": [*(d.get("artifact_ids") or ()),
                                            *map(str, source_ids)]} for d in items]
        inputs = _parse_atoms(items)
        signer = self.signer(actor)
        with self.writing(signer) as at:
            seen: dict[tuple[str, str], UUID] = {}
            artifacts = []
            for a, aid in zip(source_inputs, source_ids, strict=True):
                if a.ref is not None and self.reader.exists(aid):
                    raise ConflictError(f"artifact {a.ref} already exists ({aid})")
                artifacts.append(self._new_artifact(a, aid, self.reader.resolve_subject(a.subject),
                                                    at))
                seen[("artifact", str(aid))] = aid  # cited before it is committed
            policy = policy_rules.check_new_atoms(self.reader, inputs)
            created = [self._atom_created(inp, at, seen=seen) for inp in inputs]
            if len({e.originator_id.int for e in created}) != len(created):  # int: C hash
                raise InputError("two atoms in this command have the same ref")
            # Bulk path (ADR 0008): with no policy in force nothing acts on the new
            # aggregates, so their Created events are committed as they are; with one,
            # the aggregates are built for the policy's max-atoms step.
            atoms: list[Any] = (created if policy is None
                                else [_aggregate_of(e) for e in created])
            loaded = policy_rules.over_limit(self.reader, policy, atoms, at)
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
        source_ids = [self.reader.ref_id("artifact", a.ref) for a in source_inputs]
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
                if a.ref is not None and self.reader.exists(aid):
                    raise ConflictError(f"artifact {a.ref} already exists ({aid})")
                artifacts.append(self._new_artifact(a, aid, self.reader.resolve_subject(a.subject),
                                                    at))
                seen[("artifact", str(aid))] = aid
            policy = policy_rules.check_new_atoms(self.reader, [inputs[n] for n in creating])
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
                tid = self.reader.resolve("atom", target)
                old = existing.get(tid) or self.reader.get_atom(tid)
                existing[tid] = old
                sid = seen.get(("subject", inp.subject)) or self.reader.resolve_subject(inp.subject)
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
            loaded = [a for a in policy_rules.over_limit(self.reader, policy, new, at)
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

    def correct_atom(self, atom_id: str, data: dict[str, Any],
                     actor: str | None = None) -> UUID:
        """Supersede an atom: the old one gets ``valid_to``; a new atom replaces it."""
        corr = parse(AtomCorrection, data)
        signer = self.signer(actor)
        with self.writing(signer) as at:
            old = self.reader.get_atom(atom_id)
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
            atoms = self.reader.get_many([i for i, *_ in items])
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
            atom = self.reader.get_atom(atom_id)
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
                atom = self.reader.get_atom(aid)
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
            atom = self.reader.get_atom(atom_id)
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
                atom = self.reader.get_atom(UUID(aid))
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
                atom = self.reader.get_atom(UUID(aid))
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
            atom = self.reader.get_atom(atom_id)
            if atom.status not in ("active", "soft-redacted") or atom.redaction_mode == mode:
                raise ConflictError(f"atom {atom.id} is {atom.status}; cannot {mode}-redact it")
            atom.trigger_event(Atom.Redacted, timestamp=at, mode=mode, reason=reason,
                               batch_id=batch_id, reached=None)
            ids = self.commit(atom)
        log.info("atom.redacted", atom_id=str(atom.id), mode=mode)
        return ids[0]

    def unredact(self, atom_id: str | UUID, reason: str, actor: str | None = None) -> str:
        with self.writing(self.signer(actor), WRITER_OR_OPERATOR) as at:
            atom = self.reader.get_atom(atom_id)
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
            aggs: list[Any] = self.reader.get_many(item_ids)
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
                atoms = self.reader.get_many(atom_ids)
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
            for rec in self.reader.get_many(records):
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
            atom = self.reader.get_atom(atom_id)
            remaining = [a for a in atom.artifact_ids if a != str(artifact_id)]
            atom.trigger_event(Atom.SourceRemoved, timestamp=at, artifact_id=str(artifact_id),
                               remaining=remaining)
            return self.commit(atom)[0]

    def flag(self, atom_id: UUID, flag: str, reason: str, related: list[str] | None = None,
             actor: str | None = None) -> str | None:
        with self.writing(self.signer(actor), WRITER_OR_OPERATOR) as at:
            atom = self.reader.get_atom(atom_id)
            if flag in atom.flags:
                return None
            atom.trigger_event(Atom.Flagged, timestamp=at, flag=flag, reason=reason,
                               related=related)
            return self.commit(atom)[0]

    def resolve_flag(self, atom_id: UUID, flag: str, resolution: str,
                     actor: str | None = None) -> str:
        with self.writing(self.signer(actor), WRITER_OR_OPERATOR) as at:
            atom = self.reader.get_atom(atom_id)
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
            sid = self.reader.resolve_subject(subject)
            req = ErasureRequest._create(
                ErasureRequest.Created, id=uuid.uuid4(), timestamp=at, subject_id=str(sid),
                subject_ref=self.reader.get_subject(str(sid)).ref, reason=reason,
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
            pid = self.reader.policy_id()
            if self.reader.exists(pid):
                policy: Any = self.repository.get(pid)
            else:
                policy = Policy._create(Policy.Created, id=pid, timestamp=at)
            policy.trigger_event(Policy.PolicySet, timestamp=at, document=doc)
            ids = self.commit(policy)
        log.info("policy.set", version=policy.version)
        return ids[-1]

    # ------------------------------------------------------------------ the keystore and the tree
    def finish_key_destruction(self, vacuum: bool = False) -> None:
        """Complete the keystore's deferred secure deletion (ADR 0003)."""
        self.datakeys.finish_deferred(vacuum=vacuum)

    def seal_note(self, key_id: str, data: bytes) -> None:
        """Keep ``data`` in the keystore under the data key ``key_id`` (ADR 0019)."""
        self.datakeys.seal_note(key_id, data)

    def latest_checkpoint(self) -> SignedCheckpoint:
        """The latest recorded checkpoint; a new one is signed when none is recorded yet."""
        cp = self.tlog.recorded()
        return cp if cp is not None else self.checkpoint([])


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
