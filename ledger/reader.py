"""The ledger's reads: the log, the aggregates, the keystore's data keys and the tree.

:class:`LedgerReader` answers every question the layers above ask of a ledger without
writing to it (ADR 0071): the projections, verification, governance's evidence and the
facade's lookups are handed a reader, not the application. The application
(``ledger/application.py``) keeps the commands and reads through its own reader, so a
command and a lookup resolve an id, a key and an aggregate the same way.

A reader holds the stores the application opened; it opens and closes nothing itself.
Nothing here takes the write lock, creates a data key or signs.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError, Repository
from eventsourcing.domain import Aggregate
from eventsourcing.persistence import ApplicationRecorder, Notification, StoredEvent

from keys.datakeys import DataKeyStore, EpochRow
from keys.errors import KeyNotAuthorized
from keys.keyring import Keyring
from keys.roster import KeyRoster, RosterState
from ledger import bulk_reads, envelope
from ledger.census import SubjectCensus
from ledger.domain import Artifact, Atom, Subject
from ledger.errors import EnvironmentProblem, InputError, LedgerError, NotFound
from ledger.home import Config
from ledger.mapper import SigningMapper
from ledger.transparency import SignedCheckpoint, TransparencyLog

if TYPE_CHECKING:
    from ledger.checkpoint import Checkpoint
    from ledger.verify import Failure

LEDGER_NAMESPACE = uuid.UUID("6c1b6d1e-5f0e-4a57-9f43-2f0d8a7c3b10")


class LedgerReader:
    """The reads of one opened ledger (``LedgerApp.reader``)."""

    def __init__(self, config: Config, recorder: ApplicationRecorder,
                 repository: Repository[UUID], mapper: SigningMapper,
                 datakeys: DataKeyStore, tlog: TransparencyLog, census: SubjectCensus,
                 keyring: Keyring, root_public_key: bytes | None) -> None:
        self.config = config
        self.ledger_id = config.ledger_id
        self.tlog = tlog
        self._recorder = recorder
        self._repository = repository
        self._mapper = mapper
        self._datakeys = datakeys
        self._census = census
        self._keyring = keyring
        self.roster_id = uuid.uuid5(LEDGER_NAMESPACE, f"{self.ledger_id}/roster")
        self.root_public_key = root_public_key
        self._known_keys: dict[str, bytes] = (
            {config.root_kid: root_public_key} if root_public_key else {})
        self._reading_roster = False
        self._roster_seen: tuple[int, RosterState] | None = None

    # ------------------------------------------------------------------ ids
    def subject_id(self, ref: str) -> UUID:
        """The id of the subject with this ref (derived, whether or not it exists)."""
        return uuid.uuid5(LEDGER_NAMESPACE, f"{self.ledger_id}/subject/{ref}")

    def ref_id(self, kind: str, ref: str | None) -> UUID:
        """The id of the ``kind`` item with this ref; a fresh random id without one."""
        if ref is None:
            return uuid.uuid4()
        return uuid.uuid5(LEDGER_NAMESPACE, f"{self.ledger_id}/{kind}/{ref}")

    def policy_id(self) -> UUID:
        return uuid.uuid5(LEDGER_NAMESPACE, f"{self.ledger_id}/policy")

    def exists(self, aggregate_id: UUID) -> bool:
        return bool(self._recorder.select_events(aggregate_id, limit=1))

    def resolve_subject(self, ref_or_id: str) -> UUID:
        for candidate in _id_candidates(ref_or_id, self.subject_id):
            if self.exists(candidate):
                return candidate
        raise NotFound(f"no subject {ref_or_id!r} in this ledger",
                       hint="register it first with `ledger subject add`")

    def resolve(self, kind: str, ref_or_id: str) -> UUID:
        for candidate in _id_candidates(ref_or_id, lambda r: self.ref_id(kind, r)):
            if self.exists(candidate):
                return candidate
        raise NotFound(f"no {kind} {ref_or_id!r} in this ledger")

    # ------------------------------------------------------------------ keys
    def roster(self) -> KeyRoster:
        try:
            roster: Any = self._repository.get(self.roster_id)
        except AggregateNotFoundError:
            raise EnvironmentProblem("this ledger has no key roster",
                                     hint="the home was not initialised by `ledger init`") from None
        assert isinstance(roster, KeyRoster)
        return roster

    def roster_state(self) -> RosterState:
        """The roster's state as of its newest event, for reading only (the key checks of
        every signed command): one query for the roster's last version, and the state this
        reader took at that version, if it took one. Reading the roster aggregate copies
        it whole (eventsourcing's cache gives each caller its own copy to change), which
        cost a sixth of a one-atom add. Taken again from :meth:`roster` (its new events
        verified there) when the roster has a new event. Never change what this returns:
        it is shared; a command that changes the roster reads :meth:`roster`."""
        last = self._recorder.select_events(self.roster_id, desc=True, limit=1)
        version = last[0].originator_version if last else None
        seen = self._roster_seen
        if seen is not None and seen[0] == version:
            return seen[1]
        roster = self.roster()
        if roster.version == version:  # not a newer one written since the query
            self._roster_seen = (roster.version, roster.state)
        return roster.state

    def public_key(self, kid: str) -> bytes:
        """The public key an event signed by ``kid`` is checked against (the mapper's key
        resolver): the root key, or a key of the roster."""
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

    def verification_keys(self) -> dict[str, bytes]:
        """Every public key an event of this log may be signed with (the root key and each
        roster entry, by key id): what :meth:`open_events` resolves signatures against,
        for a worker process that verifies a batch."""
        self._known_keys.update({k: e.public_key
                                 for k, e in self.roster().state.entries.items()})
        return dict(self._known_keys)

    def key_names(self) -> list[str]:
        """The names of the signing keys this home holds (``keys/``), sorted."""
        return sorted(self._keyring.names())

    def log_vkeys(self) -> dict[str, str]:
        """The vkey of every key that ever held the log role, by key id."""
        from ledger.checkpoint import vkey_string

        return {e.kid: vkey_string(self.config.origin, e.public_key)
                for e in self.roster().state.entries.values()
                if any(g.role == "log" for g in e.grants)}

    # ------------------------------------------------------------------ the log
    def head(self) -> tuple[int, datetime | None]:
        """The last sequence number and event time (0, None for an empty log)."""
        max_id = self._recorder.max_notification_id()
        if not max_id:
            return 0, None
        last = self._recorder.select_notifications(start=max_id, limit=1)
        if not last:
            return 0, None
        env = envelope.open_state(last[0].state).envelope
        return int(env["seq"]), datetime.fromisoformat(env["timestamp"].replace("Z", "+00:00"))

    def head_position(self) -> int:
        """The position of the newest stored event; 0 for an empty log."""
        return int(self._recorder.max_notification_id() or 0)

    def notifications(self, start: int, limit: int, *, topics: Sequence[str] = (),
                      stop: int | None = None) -> Sequence[Notification]:
        """Stored events in log order from position ``start`` (at most ``limit``, none
        after ``stop``), only of ``topics`` when given."""
        return self._recorder.select_notifications(start=start, limit=limit, stop=stop,
                                                   topics=topics)

    def stored_records(self, start: int = 1, batch: int = 5000) -> Iterator[Any]:
        """Every stored event in log order (notifications), read in batches."""
        pos = start
        while True:
            rows = self._recorder.select_notifications(start=pos, limit=batch)
            if not rows:
                return
            yield from rows
            pos = rows[-1].id + 1

    def stored_events(self, aggregate_id: UUID, *, gt: int | None = None,
                      lte: int | None = None) -> list[StoredEvent]:
        """The stored events of one aggregate, versions in (``gt``, ``lte``]."""
        return list(self._recorder.select_events(aggregate_id, gt=gt, lte=lte))

    def open_events(self, stored: Iterable[StoredEvent]) -> list[Aggregate.Event]:
        """Verify (signature, signer's role) and decrypt stored events into domain events;
        a destroyed data key reads as erased content. Raises on a bad signature."""
        # every topic of this ledger is an Aggregate.Event (ledger/domain.py, keys/roster.py)
        return [cast("Aggregate.Event", self._mapper.to_domain_event(s)) for s in stored]

    def associated_data(self, originator_id: object, version: int, topic: str) -> bytes:
        """The AEAD associated data that binds a sealed field to its event."""
        return self._mapper.associated_data(originator_id, version, topic)

    def seq_of(self, event_id: str) -> int:
        """The sequence number (leaf index + 1) of an event id ``<uuid>/<version>``."""
        try:
            oid, version = event_id.rsplit("/", 1)
            rows = self._recorder.select_events(UUID(oid), gt=int(version) - 1,
                                                lte=int(version))
        except ValueError:
            raise InputError(f"{event_id!r} is not an event id",
                             hint="event ids look like <uuid>/<version>; see `ledger atom history`"
                             ) from None
        if not rows:
            raise NotFound(f"no event {event_id}")
        return int(self._mapper.open_verified(rows[0]).envelope["seq"])

    def created_atoms_of(self, subject_ids: Iterable[str]) -> dict[str, list[str]]:
        """Every atom created for each of these subjects (ids, in no particular order)."""
        return self._census.atoms_of(self._recorder, subject_ids)

    # ------------------------------------------------------------------ aggregates
    def aggregate(self, aggregate_id: UUID) -> Aggregate:
        """The aggregate's current state (raises eventsourcing's AggregateNotFoundError)."""
        agg: Aggregate = self._repository.get(aggregate_id)
        return agg

    def get_many(self, ids: Iterable[UUID]) -> list[Any]:
        """Aggregates by id (duplicates once, in order), as ``repository.get`` gives them:
        the batch commands (shred, tombstones) read a thousand items. Their data keys are
        fetched in one round trip first; their events are read in one query per 500 ids
        (``ledger/bulk_reads.py``, SQLite and PostgreSQL), and a cached aggregate is
        brought forward with the events newer than it, as the repository does one query
        at a time; handed out as copies."""
        wanted = list(dict.fromkeys(ids))
        self._datakeys.get_many([str(i) for i in wanted])
        stored_by_id = bulk_reads.select_events_of(self._recorder, wanted)
        if stored_by_id is None:
            return [self._repository.get(i) for i in wanted]
        cache = self._repository.cache
        out: list[Any] = []
        for i in wanted:
            agg = _cached(cache, i)
            newer = [s for s in stored_by_id[i]
                     if agg is None or s.originator_version > agg.version]
            if agg is None and not newer:
                out.append(self._repository.get(i))  # not found: the repository says so
                continue
            if newer:
                events: list[Any] = [self._mapper.to_domain_event(s) for s in newer]
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
            atom: Any = self._repository.get(aid)
        except AggregateNotFoundError:
            raise NotFound(f"no atom {atom_id}") from None
        if not isinstance(atom, Atom):
            raise NotFound(f"{atom_id} is not an atom")
        return atom

    def get_subject(self, ref_or_id: str) -> Subject:
        subject: Any = self._repository.get(self.resolve_subject(ref_or_id))
        assert isinstance(subject, Subject)
        return subject

    def get_artifact(self, ref_or_id: str) -> Artifact:
        artifact: Any = self._repository.get(self.resolve("artifact", ref_or_id))
        if not isinstance(artifact, Artifact):
            raise NotFound(f"{ref_or_id} is not an artifact")
        return artifact

    def policy(self) -> dict[str, Any] | None:
        """The policy in force, with when it was set and by which signed event."""
        pid = self.policy_id()
        if not self.exists(pid):
            return None
        policy: Any = self._repository.get(pid)
        return {"memoryPolicy": policy.document, "set_at": policy.set_at,
                "event_id": envelope.event_id(pid, policy.version)}

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
        out = [_history_row(stored, aid, self._mapper.open_verified(stored).envelope)
               for aid in chain for stored in self._recorder.select_events(aid)]
        out.sort(key=lambda r: r["seq"])
        return out

    # ------------------------------------------------------------------ data keys
    def prefetch_data_keys(self, key_ids: Iterable[str]) -> None:
        """Fetch these data keys in one round trip, for :meth:`open_events` to follow."""
        self._datakeys.get_many(key_ids)

    def data_keys(self, key_ids: Iterable[str]) -> dict[str, bytes]:
        """The data keys that exist among ``key_ids``, in one round trip (destroyed or
        unknown ids are absent): what a worker process needs to decrypt a batch."""
        return self._datakeys.get_many(key_ids)

    def data_key(self, key_id: str) -> bytes | None:
        """One data key, None once destroyed."""
        return self._datakeys.get_many([key_id]).get(key_id)

    def data_keys_present(self, key_ids: Iterable[str]) -> set[str]:
        return self._datakeys.present(key_ids)

    def data_keys_destroyed_among(self, key_ids: Iterable[str]) -> set[str]:
        return self._datakeys.destroyed_among(key_ids)

    def check_kek(self) -> None:
        """Raise what wrapping a new data key would raise now (the active KEK out of
        reach, say), writing nothing: a command can refuse before it touches any store."""
        self._datakeys.check_wrapping()

    def kek_epochs(self) -> list[EpochRow]:
        """Every KEK epoch the keystore knows, ascending."""
        return self._datakeys.epoch_rows()

    def open_note(self, key_id: str) -> bytes | None:
        """A note kept under the data key ``key_id`` (ADR 0019); None once destroyed."""
        return self._datakeys.open_note(key_id)

    # ------------------------------------------------------------------ the tree
    def inclusion_proof(self, index: int, size: int) -> list[bytes]:
        return self.tlog.inclusion(index, size)

    def consistency_proof(self, old_size: int, new_size: int) -> list[bytes]:
        return self.tlog.consistency(old_size, new_size)

    def recorded_checkpoint(self) -> SignedCheckpoint | None:
        """The latest recorded checkpoint, None before the first."""
        return self.tlog.recorded()

    def latest_cosignature(self) -> tuple[int, int] | None:
        """``(size, unix time)`` of the largest checkpoint a witness cosigned, with the
        latest time one did; None when no witness ever did."""
        return self.tlog.latest_cosignature()

    def cosignatures_since(self, size: int) -> list[Any]:
        """``(size, witness, timestamp, root)`` of each cosignature of a checkpoint of
        ``size`` or more, by size then witness (the webhooks' ``checkpoint.cosigned``)."""
        return self.tlog.cosignatures_since(size)

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


def _history_row(stored: StoredEvent, aid: UUID, env: dict[str, Any]) -> dict[str, Any]:
    return {
        "event_id": envelope.event_id(stored.originator_id, stored.originator_version),
        "seq": env["seq"], "atom_id": str(aid), "topic": env["topic"],
        "timestamp": env["timestamp"], "signer": env["kid"],
        "summary": {k: v for k, v in env["payload"].items()
                    if k in ("valid_to", "superseded_by", "reason", "session_id",
                             "supersedes", "derivation", "kind")},
    }


def _id_candidates(ref_or_id: str, from_ref: Callable[[str], UUID]) -> list[UUID]:
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


def _cached(cache: Any, key: UUID) -> Any:
    """The cached aggregate (not a copy), or None."""
    if cache is None:
        return None
    try:
        return cache.get(key)
    except KeyError:
        return None
