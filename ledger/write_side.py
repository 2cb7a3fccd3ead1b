"""The write side's core: one ledger's stores opened, the write context every command
runs in, and the transparency log's checkpoints.

Every command runs in :meth:`WriteSide.writing`: it takes the ledger's write lock, reads
the head (last sequence number and time), checks the clock and the actor's authorization,
and lets the mapper sign events with consecutive sequence numbers; :meth:`WriteSide.commit`
saves all of a command's events or none of them. The commands themselves are grouped by
what they act on (``ledger/memory_commands.py``, ``ledger/erasure_commands.py``, the
key roster's in ``ledger/application.py``); reads go through :attr:`WriteSide.reader`
(``ledger/reader.py``, ADR 0071).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

import structlog
from eventsourcing.application import Application
from eventsourcing.persistence import Mapper, Transcoder

from keys.datakeys import DataKeyStore, make_engine, store_sqlite
from keys.errors import KeyNotAuthorized, KeyringError
from keys.kek import KekRing
from keys.keyring import Keyring, read_public_key_file
from keys.roster import ROOT
from keys.signing import Signer
from ledger import clock, envelope, locks, logs, sqlite_recorder
from ledger.census import SubjectCensus
from ledger.domain import Atom
from ledger.errors import (
    ClockError,
    EnvironmentProblem,
    InputError,
    LedgerError,
    VerificationFailed,
)
from ledger.home import Config, shared_keystore_file
from ledger.inputs import is_uuid
from ledger.mapper import SigningMapper
from ledger.reader import LedgerReader
from ledger.saving import EventSaver
from ledger.transparency import SignedCheckpoint, TransparencyLog

log = structlog.get_logger("ledger")

DEFAULT_KEYS = {"writer": "writer", "operator": "operator", "log": "log"}


@dataclass(frozen=True)
class Witnessed:
    """A checkpoint as stored (with the cosignatures it got) and each witness's answer."""

    checkpoint: SignedCheckpoint
    results: list[Any] = field(default_factory=list)


class WriteSide(Application[UUID]):
    """One ledger's stores, opened from its home, and the write context of its commands."""

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
        self._lock_session = locks.LockSession()
        try:
            # Aggregates are cached per process and fast-forwarded from the log on every
            # get, so a cached copy is never stale; commands get deep copies.
            # SQLite: the library's recorder with one executemany per command (ADR 0008),
            # chosen through the library's own setting.
            recorder = ({} if config.events.is_postgres
                        else {"APPLICATION_RECORDER_TOPIC": sqlite_recorder.TOPIC})
            env = {**config.events.eventsourcing_env(), **recorder,
                   "AGGREGATE_CACHE_MAXSIZE": "5000"}
            if config.events.is_postgres:
                from psycopg import sql as psycopg_sql

                # the library replaces its insert function at every open (CREATE OR
                # REPLACE FUNCTION), which two sessions at once refuse ("tuple
                # concurrently updated"): the opens of one ledger take turns
                with locks.held(config, "open") as conn:  # also makes the schema
                    conn.execute(psycopg_sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(
                        psycopg_sql.Identifier(config.events.schema or "ledger")))
                    super().__init__(env=env)
            else:
                super().__init__(env=env)
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
                                   self.datakeys, self.tlog, self.census, self.keyring,
                                   root_public_key)
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
        self._lock_session.close()

    def _write_lock(self) -> contextlib.AbstractContextManager[None]:
        """The ledger's write lock (``ledger/locks.py``), its connection on PostgreSQL
        kept for the next command."""
        return locks.held(self.config, "write", session=self._lock_session)

    def root_signer(self) -> Signer:
        """The home's ``root`` key, checked (by key id) to be this ledger's root before
        anything is signed with it: another ledger's root key would append roster events
        the verifier rejects, for ever (issue 20, item 5)."""
        root = self.signer("root")
        roster_root = self.reader.roster_state().root_kid
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
                    signer.kid != self.reader.roster_state().root_kid:
                raise InputError(f"{signer.name} ({signer.kid}) is not the roster's root key; "
                                 "nothing was written", hint="see `ledger keys list`")
            if wanted != (ROOT,):
                try:
                    self.reader.roster_state().holds(signer.kid, wanted, at)
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
            self.reader.roster_state().check(signer.kid, "log", at)
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

    # ------------------------------------------------------------------ the keystore and the tree
    def finish_key_destruction(self, vacuum: bool = False) -> None:
        """Complete the keystore's deferred secure deletion (ADR 0003)."""
        self.datakeys.finish_deferred(vacuum=vacuum)

    def seal_note(self, key_id: str, data: bytes) -> None:
        """Keep ``data`` in the keystore under the data key ``key_id`` (ADR 0019)."""
        self.datakeys.seal_note(key_id, data)

    def seal_secret(self, key_id: str, secret: bytes) -> None:
        """Keep a secret of the service (a webhook's signing secret) under a data key of
        its own, made now: both, or neither. :meth:`destroy_secret` crypto-shreds it;
        ``reader.open_note(key_id)`` reads it."""
        now = clock.now()
        self.datakeys.create_many([key_id], now)
        try:
            self.datakeys.seal_note(key_id, secret)
        except BaseException:
            self.datakeys.destroy([key_id], now)
            raise

    def destroy_secret(self, key_id: str) -> None:
        """Destroy the data key a secret was sealed under: the secret is gone."""
        self.datakeys.destroy([key_id], clock.now())

    def destroy_keks(self) -> list[int]:
        """Destroy every KEK epoch's key (offboarding a tenant: every data key it
        wrapped is unreadable from then on, wherever a copy of the keystore lies); the
        epochs destroyed, ascending (epoch 0, keys never wrapped, has none)."""
        stores = self.datakeys.epoch_stores()
        destroyed = []
        for epoch in sorted(stores):
            if epoch != 0:
                self.datakeys.keks.store_of(epoch, stores).destroy(epoch)
                destroyed.append(epoch)
        return destroyed

    def latest_checkpoint(self) -> SignedCheckpoint:
        """The latest recorded checkpoint; a new one is signed when none is recorded yet."""
        cp = self.tlog.recorded()
        return cp if cp is not None else self.checkpoint([])


def _first_line(e: BaseException) -> str:
    return f"{e.__class__.__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"


class _NoTranscoder(Transcoder):
    """The signing mapper serialises envelopes itself; a transcoder is never used."""

    def encode(self, obj: Any) -> bytes:
        raise NotImplementedError

    def decode(self, data: bytes) -> Any:
        raise NotImplementedError
