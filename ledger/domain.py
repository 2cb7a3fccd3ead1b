"""Aggregates and their events: frozen values with explicit, stable topics.

Event fields are JSON values (str, int, float, bool, None, lists and dicts of
them); times inside payloads are ISO 8601 strings. ``PERSONAL`` names the
fields the mapper encrypts with the aggregate's data key; ``SIGNER_ROLES`` names
the roster roles any of which the signer must hold. A topic never changes once released:
renaming a class keeps its ``TOPIC``.
"""

from __future__ import annotations

import copy
import dataclasses
from datetime import date, datetime
from decimal import Decimal
from typing import Any, ClassVar
from uuid import UUID

from eventsourcing.domain import Aggregate

ERASED = "[erased]"


WRITER = ("writer",)
WRITER_OR_OPERATOR = ("writer", "operator")
OPERATOR = ("operator",)
REDACTION_MODES = ("soft", "archive", "hard", "delete")
REJECTION_CODES = ("identity-not-verified", "manifestly-unfounded", "excessive",
                   "legal-exemption", "withdrawn", "duplicate", "other")
"""Why an erasure request was rejected (``request.rejected``; ADR 0047): the identity of
the person could not be verified, the request is manifestly unfounded or excessive (GDPR
Art. 12(5)), an exemption applies (Art. 17(3)), the subject withdrew it, it repeats an
open request, or another reason the operator's words give."""
STATUS_BY_MODE = {"soft": "soft-redacted", "archive": "archived", "hard": "hard-redacted",
                  "delete": "deleted"}


class LedgerEvent(Aggregate.Event):
    """Base of all memory events. ``SIGNER_ROLES``: roster roles any of which may sign."""

    SIGNER_ROLES: ClassVar[tuple[str, ...]] = WRITER
    PERSONAL: ClassVar[tuple[str, ...]] = ()


_ATOMIC: frozenset[type] = frozenset({str, int, float, bool, type(None), bytes, UUID,
                                     datetime, date, Decimal})


def _copied(value: Any, memo: dict[int, Any]) -> Any:
    kind = type(value)
    if kind in _ATOMIC:
        return value
    if kind is list:
        return [_copied(v, memo) for v in value]
    if kind is dict:
        return {k: _copied(v, memo) for k, v in value.items()}
    return copy.deepcopy(value, memo)


class _Copyable:
    """``copy.deepcopy`` that copies lists and dicts of plain values directly.

    The repository deep-copies a cached aggregate for every command (eventsourcing's
    ``deepcopy_from_cache``), and an erasure reads a thousand at a time; the generic
    deepcopy walked each plain value through its dispatch (about 90 calls per atom).
    Immutable values are shared, lists and dicts are new, anything else goes to
    ``copy.deepcopy``: the same independence for a command's mutations.
    """

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        new = object.__new__(type(self))
        memo[id(self)] = new
        new.__dict__.update({k: _copied(v, memo) for k, v in self.__dict__.items()})
        return new


class _Erasable:
    """Common state of aggregates whose content a data key protects."""

    content_erased: bool = False
    data_key_destroyed_at: str | None = None

    def _note_erased(self, event: object) -> None:
        if getattr(event, "content_erased", False):
            self.content_erased = True


class DataKeyDestroyedMixin:
    """A data key destroyed. ``kek_epoch``: the KEK epoch new keys were wrapped under
    when it was destroyed (ADR 0044), so every older copy of the key (a backup, a WAL
    segment, a dump) is wrapped under that epoch or an earlier one, and is beyond use
    once a rotation started after this event has destroyed them; 0: keys were not
    wrapped yet; None: recorded before epochs existed."""

    SIGNER_ROLES: ClassVar[tuple[str, ...]] = WRITER_OR_OPERATOR
    key_id: str
    reason: str
    kek_epoch: int | None

    def apply(self, aggregate: Any) -> None:
        aggregate.content_erased = True
        aggregate.data_key_destroyed_at = self.timestamp.isoformat()  # type: ignore[attr-defined]
        # Forget the plaintext in memory too (a cached aggregate must not outlive its key).
        for name in getattr(aggregate, "PERSONAL_STATE", ()):
            setattr(aggregate, name, None)
        # which event recorded it (an erasure resumed after a crash lists it again)
        aggregate.data_key_destroyed_event = \
            f"{self.originator_id}/{self.originator_version}"  # type: ignore[attr-defined]



class ErasureReappliedMixin(DataKeyDestroyedMixin):
    """An erasure re-applied after a restore (ADR 0045): the item's data key was destroyed
    in the ledger the backup came from, after the backup was taken, so the restored log
    lacks that erasure's record; ``ledger restore`` destroyed the key again (the erasure
    journal names it) and records it here, signed by the operator who restored.

    ``mode``: the tombstone's mode (hard, delete) when the journal holds one, else None
    (a subject's, batch's or request's key, or an erasure interrupted before its
    tombstones). ``original``: ids, positions and times in the source log (the key's
    ``data-key-destroyed`` event, the tombstone, the KEK epoch then in force), never
    content. A subclass of :class:`DataKeyDestroyedMixin`, so every read model purges the
    item as it does on a key destruction."""

    SIGNER_ROLES: ClassVar[tuple[str, ...]] = OPERATOR
    mode: str | None
    batch_id: str | None
    request_id: str | None
    original: dict[str, Any]

    def _erase(self, aggregate: Any) -> str:
        """The key destruction's part: content erased and forgotten; an earlier record of
        the destruction in this log (the key event was in the backup) is kept. Returns
        this event's id."""
        me = f"{self.originator_id}/{self.originator_version}"  # type: ignore[attr-defined]
        aggregate.content_erased = True
        if getattr(aggregate, "data_key_destroyed_at", None) is None:
            aggregate.data_key_destroyed_at = self.timestamp.isoformat()  # type: ignore[attr-defined]
            aggregate.data_key_destroyed_event = me
        for name in getattr(aggregate, "PERSONAL_STATE", ()):
            setattr(aggregate, name, None)
        aggregate.erasure_reapplied_event = me
        return me

    def apply(self, aggregate: Any) -> None:
        self._erase(aggregate)


# --------------------------------------------------------------------------- Subject


class Subject(Aggregate, _Erasable, _Copyable):
    """A person memories are about. ``ref`` is their opaque, user-controlled id."""

    TOPIC = "memory-ledger:subject"
    PERSONAL_STATE = ("display_name",)

    class Event(LedgerEvent):
        pass

    class Created(Event, Aggregate.Created):
        TOPIC = "memory-ledger:subject.registered.v1"
        PERSONAL: ClassVar[tuple[str, ...]] = ("display_name",)
        ref: str
        display_name: str | None
        locale: str | None

        def apply(self, aggregate: Any) -> None:
            aggregate._note_erased(self)

    class DataKeyDestroyed(DataKeyDestroyedMixin, Event):
        TOPIC = "memory-ledger:subject.data-key-destroyed.v1"
        key_id: str
        reason: str
        kek_epoch: int | None = None

    class ErasureReapplied(ErasureReappliedMixin, Event):
        TOPIC = "memory-ledger:subject.erasure-reapplied.v1"
        SIGNER_ROLES = OPERATOR
        key_id: str
        reason: str
        kek_epoch: int | None
        mode: str | None
        batch_id: str | None
        request_id: str | None
        original: dict[str, Any]

    def __init__(self, ref: str, display_name: str | None, locale: str | None) -> None:
        self.ref = ref
        self.display_name = display_name
        self.locale = locale


# --------------------------------------------------------------------------- Artifact


class Artifact(Aggregate, _Erasable, _Copyable):
    """Raw source material (a chat, a document, a note) that atoms derive from."""

    TOPIC = "memory-ledger:artifact"
    PERSONAL_STATE = ("title", "body", "media_url", "source")

    class Event(LedgerEvent):
        pass

    class Created(Event, Aggregate.Created):
        TOPIC = "memory-ledger:artifact.captured.v1"
        PERSONAL: ClassVar[tuple[str, ...]] = ("title", "body", "media_url", "source")
        subject_id: str
        ref: str | None
        kind: str
        captured_at: str
        source: str | None
        private: bool
        title: str | None
        body: str | None
        media_url: str | None

        def apply(self, aggregate: Any) -> None:
            aggregate._note_erased(self)

    class DataKeyDestroyed(DataKeyDestroyedMixin, Event):
        TOPIC = "memory-ledger:artifact.data-key-destroyed.v1"
        key_id: str
        reason: str
        kek_epoch: int | None = None

    class ErasureReapplied(ErasureReappliedMixin, Event):
        TOPIC = "memory-ledger:artifact.erasure-reapplied.v1"
        SIGNER_ROLES = OPERATOR
        key_id: str
        reason: str
        kek_epoch: int | None
        mode: str | None
        batch_id: str | None
        request_id: str | None
        original: dict[str, Any]

        def apply(self, aggregate: Any) -> None:
            me = self._erase(aggregate)
            if self.mode is not None:  # the tombstone's part, as Deleted records it
                aggregate.status = "deleted"
                aggregate.tombstone_event = me

    class Deleted(Event):
        """Tombstone of a deleted artifact; ``cascade`` lists what happened to its atoms."""

        TOPIC = "memory-ledger:artifact.deleted.v1"
        SIGNER_ROLES = WRITER_OR_OPERATOR
        reason: str
        batch_id: str | None
        cascade: dict[str, Any]
        reached: list[str] | None

        def apply(self, aggregate: Any) -> None:
            aggregate.status = "deleted"
            aggregate.tombstone_event = f"{self.originator_id}/{self.originator_version}"

    def __init__(self, subject_id: str, ref: str | None, kind: str, captured_at: str,
                 source: str | None, private: bool, title: str | None, body: str | None,
                 media_url: str | None) -> None:
        self.subject_id = subject_id
        self.ref = ref
        self.kind = kind
        self.captured_at = captured_at
        self.source = source
        self.private = private
        self.title = title
        self.body = body
        self.media_url = media_url
        self.status = "active"


# --------------------------------------------------------------------------- Atom

@dataclasses.dataclass(init=False, repr=False, eq=False)
class AtomFields:
    """The fields of an atom, declared once (issue 14): the ``Atom.Created`` event carries
    them (and ``source_data``), the ``Atom`` aggregate holds them, and :data:`ATOM_FIELDS`
    names them, in this order, for everything that copies or lists them (the command that
    builds the event, ``Atom.as_dict``, the portable record's import). A dataclass without
    ``__init__``, ``__eq__`` or ``__repr__``: the event's frozen dataclass takes these
    fields from it, the aggregate only their types."""

    subject_id: str
    ref: str | None
    kind: str
    text: str | None
    gist: str | None
    details: list[dict[str, Any]] | None
    tags: list[str] | None
    confidence: float | None
    sensitivity: str
    valid_from: str | None
    valid_to: str | None
    derivation: str
    artifact_ids: list[str]
    extractor: str | None
    human_reviewed: bool
    salience: float
    emotional_valence: float
    decay_profile: dict[str, Any] | None
    privacy_class: str | None
    consent_basis: str | None
    session_id: str | None
    supersedes: str | None
    min_sources: int
    extensions: dict[str, Any] | None


ATOM_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(AtomFields))
ATOM_PERSONAL = ("text", "gist", "details", "tags", "source_data", "extractor", "session_id")
"""The atom's fields sealed under its data key (and forgotten when the key is destroyed)."""


class Atom(Aggregate, _Erasable, _Copyable, AtomFields):
    """One remembered fact, preference or episode: the Konshus and Persona atom fields."""

    TOPIC = "memory-ledger:atom"
    PERSONAL_STATE = ATOM_PERSONAL

    class Event(LedgerEvent):
        pass

    class Created(AtomFields, Event, Aggregate.Created):
        TOPIC = "memory-ledger:atom.created.v1"
        PERSONAL: ClassVar[tuple[str, ...]] = ATOM_PERSONAL
        #: What an importer carried from the source (provider ``x-`` fields, foreign
        #: fields, the source's own ids and metadata): sealed, erased with the atom.
        source_data: dict[str, Any] | None

        def apply(self, aggregate: Any) -> None:
            for name in ATOM_FIELDS:
                setattr(aggregate, name, getattr(self, name, None))
            aggregate.source_data = getattr(self, "source_data", None)
            aggregate._note_erased(self)

    class Rehearsed(Event):
        PERSONAL: ClassVar[tuple[str, ...]] = ("session_id",)
        TOPIC = "memory-ledger:atom.rehearsed.v1"
        session_id: str | None
        reason: str | None

        def apply(self, aggregate: Any) -> None:
            aggregate.rehearsal_count += 1
            aggregate.last_rehearsed_at = self.timestamp.isoformat()
            aggregate.last_rehearsal_session = self.session_id

    class Superseded(Event):
        """The old side of a correction: the fact stops being valid, nothing is overwritten."""

        TOPIC = "memory-ledger:atom.superseded.v1"
        PERSONAL: ClassVar[tuple[str, ...]] = ("reason",)  # the correction's reason
        superseded_by: str
        valid_to: str
        reason: str | None

        def apply(self, aggregate: Any) -> None:
            aggregate.superseded_by = self.superseded_by
            aggregate.valid_to = self.valid_to
            aggregate.status = "superseded"

    class Expired(Event):
        TOPIC = "memory-ledger:atom.expired.v1"
        valid_to: str
        reason: str | None

        def apply(self, aggregate: Any) -> None:
            aggregate.valid_to = self.valid_to
            aggregate.status = "expired"

    class DataKeyDestroyed(DataKeyDestroyedMixin, Event):
        TOPIC = "memory-ledger:atom.data-key-destroyed.v1"
        key_id: str
        reason: str
        kek_epoch: int | None = None

    class ErasureReapplied(ErasureReappliedMixin, Event):
        TOPIC = "memory-ledger:atom.erasure-reapplied.v1"
        SIGNER_ROLES = OPERATOR
        key_id: str
        reason: str
        kek_epoch: int | None
        mode: str | None
        batch_id: str | None
        request_id: str | None
        original: dict[str, Any]

        def apply(self, aggregate: Any) -> None:
            me = self._erase(aggregate)
            if self.mode is not None:  # the tombstone's part, as Redacted records it
                aggregate.status = STATUS_BY_MODE[self.mode]
                aggregate.redaction_mode = self.mode
                aggregate.redacted_at = self.timestamp.isoformat()
                aggregate.tombstone_event = me

    class Redacted(Event):
        """soft: hidden, kept, reversible; archive: out of retrieval, kept for audit;
        hard / delete: content destroyed (its key first), this event is the tombstone."""

        TOPIC = "memory-ledger:atom.redacted.v1"
        SIGNER_ROLES = WRITER_OR_OPERATOR
        mode: str
        reason: str
        batch_id: str | None
        reached: list[str] | None
        #: The memoryPolicy rule that archived the atom (``maxAtoms``), in the clear so
        #: that audits tell policy effects from redactions; None for a person's redaction.
        rule: str | None = None

        def apply(self, aggregate: Any) -> None:
            aggregate.status = STATUS_BY_MODE[self.mode]
            aggregate.redaction_mode = self.mode
            aggregate.redacted_at = self.timestamp.isoformat()
            aggregate.tombstone_event = f"{self.originator_id}/{self.originator_version}"

    class Archived(Event):
        """Decay archival (ADR 0050): the sweep found the atom's salience below its decay
        profile's ``minimumSalience``. Out of recall, content kept for audit; the values
        that made it due are in the clear, signed by the operator who swept."""

        TOPIC = "memory-ledger:atom.archived.v1"
        SIGNER_ROLES = OPERATOR
        salience: float
        minimum_salience: float
        computed_at: str
        reason: str

        def apply(self, aggregate: Any) -> None:
            aggregate.status = "archived"
            aggregate.redaction_mode = None
            aggregate.redacted_at = self.timestamp.isoformat()

    class Unredacted(Event):
        TOPIC = "memory-ledger:atom.unredacted.v1"
        SIGNER_ROLES = WRITER_OR_OPERATOR
        reason: str

        def apply(self, aggregate: Any) -> None:
            aggregate.status = "active"
            aggregate.redaction_mode = None
            aggregate.redacted_at = None

    class SourceRemoved(Event):
        """An artifact the atom cites was deleted; the atom lives on with the others."""

        TOPIC = "memory-ledger:atom.source-removed.v1"
        SIGNER_ROLES = WRITER_OR_OPERATOR
        artifact_id: str
        remaining: list[str]

        def apply(self, aggregate: Any) -> None:
            aggregate.artifact_ids = list(self.remaining)

    class Flagged(Event):
        """Flagged for review (unsourced, refers to erased memory, ...)."""

        TOPIC = "memory-ledger:atom.flagged.v1"
        SIGNER_ROLES = WRITER_OR_OPERATOR
        flag: str
        reason: str
        related: list[str] | None

        def apply(self, aggregate: Any) -> None:
            aggregate.flags = sorted({*aggregate.flags, self.flag})
            aggregate.flag_events = {**getattr(aggregate, "flag_events", {}),
                                     self.flag: f"{self.originator_id}/{self.originator_version}"}

    class FlagResolved(Event):
        TOPIC = "memory-ledger:atom.flag-resolved.v1"
        SIGNER_ROLES = WRITER_OR_OPERATOR
        flag: str
        resolution: str

        def apply(self, aggregate: Any) -> None:
            aggregate.flags = [f for f in aggregate.flags if f != self.flag]

    def __init__(self) -> None:
        for name in ATOM_FIELDS:
            setattr(self, name, None)
        self.source_data: dict[str, Any] | None = None
        self.rehearsal_count = 0
        self.last_rehearsed_at: str | None = None
        self.last_rehearsal_session: str | None = None
        self.superseded_by: str | None = None
        self.status = "active"
        self.redaction_mode: str | None = None
        self.redacted_at: str | None = None
        self.flags: list[str] = []

    def as_dict(self) -> dict[str, Any]:
        """Current state, for ``ledger atom show``: the keys of :data:`ATOM_VIEW`, in its
        order. Erased content reads as None."""
        computed = {"atom_id": str(self.id), "created_at": self.created_on.isoformat(),
                    "flags": list(self.flags)}
        return {k: computed[k] if k in computed else getattr(self, k) for k in ATOM_VIEW}


#: The keys of :meth:`Atom.as_dict`, in its order (``ledger atom show`` prints them so).
ATOM_VIEW: tuple[str, ...] = (
    "atom_id", "version", *ATOM_FIELDS, "status", "created_at", "rehearsal_count",
    "last_rehearsed_at", "superseded_by", "content_erased", "data_key_destroyed_at",
    "redaction_mode", "redacted_at", "flags")


# --------------------------------------------------------------------------- Record


class Record(Aggregate, _Erasable, _Copyable):
    """A portable record of a subject that is not an atom or an artifact: a ``.mem``
    entity, edge, fact, chunk, resource, procedure, context, an unsourced tombstone kept
    for re-export, or a vendor kind (ADR 0017). The whole record (its id included) is
    personal and sealed under the record's own data key; only the subject and the kind
    are in the clear. Bi-temporal kinds are superseded, never overwritten: a
    ``Superseded`` event carries the record as the newer bundle states it, and the
    earlier content stays in the log until the key is destroyed."""

    TOPIC = "memory-ledger:record"
    PERSONAL_STATE = ("content",)

    class Event(LedgerEvent):
        pass

    class Created(Event, Aggregate.Created):
        TOPIC = "memory-ledger:record.imported.v1"
        PERSONAL: ClassVar[tuple[str, ...]] = ("content",)
        subject_id: str
        kind: str
        content: dict[str, Any] | None

        def apply(self, aggregate: Any) -> None:
            aggregate.subject_id = self.subject_id
            aggregate.kind = self.kind
            aggregate.content = self.content
            aggregate._note_erased(self)

    class Superseded(Event):
        """A newer statement of the same record (``tValidTo``/``supersededBy`` set)."""

        TOPIC = "memory-ledger:record.superseded.v1"
        PERSONAL: ClassVar[tuple[str, ...]] = ("content",)
        content: dict[str, Any] | None

        def apply(self, aggregate: Any) -> None:
            aggregate.content = self.content
            aggregate.revisions += 1
            aggregate._note_erased(self)

    class DataKeyDestroyed(DataKeyDestroyedMixin, Event):
        TOPIC = "memory-ledger:record.data-key-destroyed.v1"
        key_id: str
        reason: str
        kek_epoch: int | None = None

    class ErasureReapplied(ErasureReappliedMixin, Event):
        TOPIC = "memory-ledger:record.erasure-reapplied.v1"
        SIGNER_ROLES = OPERATOR
        key_id: str
        reason: str
        kek_epoch: int | None
        mode: str | None
        batch_id: str | None
        request_id: str | None
        original: dict[str, Any]

        def apply(self, aggregate: Any) -> None:
            me = self._erase(aggregate)
            if self.mode is not None:  # the tombstone's part, as Erased records it
                aggregate.status = STATUS_BY_MODE[self.mode]
                aggregate.tombstone_event = me

    class Erased(Event):
        """Tombstone of a record whose content a hard erasure or deletion destroyed."""

        TOPIC = "memory-ledger:record.erased.v1"
        SIGNER_ROLES = WRITER_OR_OPERATOR
        mode: str
        reason: str
        batch_id: str | None
        reached: list[str] | None

        def apply(self, aggregate: Any) -> None:
            aggregate.status = STATUS_BY_MODE[self.mode]
            aggregate.tombstone_event = f"{self.originator_id}/{self.originator_version}"

    def __init__(self) -> None:
        self.subject_id = ""
        self.kind = ""
        self.content: dict[str, Any] | None = None
        self.status = "active"
        self.revisions = 0


# --------------------------------------------------------------------------- Governance


class ErasureRequest(Aggregate, _Erasable, _Copyable):
    """A right-to-be-forgotten request: receipt, deadlines, completion (operator-signed).

    The identifiers the subject gave (email, phone...) are personal: sealed under the
    request's own data key, which is destroyed when the request completes.
    """

    TOPIC = "memory-ledger:request"
    PERSONAL_STATE = ("identifiers", "reason")
    # set by Created.apply
    subject_id: str
    subject_ref: str
    reason: str
    legal_basis: str | None
    operator: str
    sessions: list[str]
    identifiers: list[str] | None
    ack_due: str
    complete_due: str
    credential: str | None
    received_at: str

    class Event(LedgerEvent):
        SIGNER_ROLES = OPERATOR

    class Created(Event, Aggregate.Created):
        TOPIC = "memory-ledger:request.received.v1"
        PERSONAL: ClassVar[tuple[str, ...]] = ("identifiers", "reason")
        subject_id: str
        subject_ref: str
        reason: str
        legal_basis: str | None
        operator: str
        sessions: list[str]
        identifiers: list[str] | None
        ack_due: str
        complete_due: str
        credential: str | None = None  # the server credential that filed it (its id)

        def apply(self, aggregate: Any) -> None:
            for name in ("subject_id", "subject_ref", "reason", "legal_basis", "operator",
                         "sessions", "identifiers", "ack_due", "complete_due", "credential"):
                setattr(aggregate, name, getattr(self, name, None))
            aggregate.received_at = self.timestamp.isoformat()
            aggregate._note_erased(self)

    class Acknowledged(Event):
        TOPIC = "memory-ledger:request.acknowledged.v1"

        def apply(self, aggregate: Any) -> None:
            aggregate.acknowledged_at = self.timestamp.isoformat()

    class Completed(Event):
        TOPIC = "memory-ledger:request.completed.v1"
        batch_id: str
        event_ids: list[str]

        def apply(self, aggregate: Any) -> None:
            aggregate.completed_at = self.timestamp.isoformat()
            aggregate.batch_id = self.batch_id
            aggregate.event_ids = list(self.event_ids)

    class EndedPartial(Event):
        """A run of the request's erasure ended without erasing all it was asked to (ADR
        0047): ``reasons`` say what is left and why, in ids, route names and hold ids
        only (see ``governance/partial.py``). The request stays open (not completed, its
        deadline still running); ``ledger requests resume`` continues the same batch, and
        its completion keeps this record. Signed in the same commit as the batch's
        ``batch.ended-partial``."""

        TOPIC = "memory-ledger:request.ended-partial.v1"
        batch_id: str
        reasons: list[dict[str, Any]]

        def apply(self, aggregate: Any) -> None:
            at = self.timestamp.isoformat()
            aggregate.partial_at = at
            aggregate.batch_id = self.batch_id
            aggregate.partial_reasons = [dict(r) for r in self.reasons]
            aggregate.partials = [*getattr(aggregate, "partials", ()), {
                "event_id": f"{self.originator_id}/{self.originator_version}", "at": at,
                "reasons": [dict(r) for r in self.reasons]}]

    class Rejected(Event):
        """The request is refused and closed, never executed (ADR 0047): ``code`` from
        :data:`REJECTION_CODES`, ``reason`` in the operator's words, in clear (it is shown
        in the request register: never personal data), ``operator`` the key that decided.
        The request's own data key (its reason and identifiers) is destroyed in the same
        commit."""

        TOPIC = "memory-ledger:request.rejected.v1"
        code: str
        reason: str
        operator: str
        credential: str | None = None

        def apply(self, aggregate: Any) -> None:
            aggregate.rejected_at = self.timestamp.isoformat()
            aggregate.rejection = {"code": self.code, "reason": self.reason,
                                   "operator": self.operator}

    class DataKeyDestroyed(DataKeyDestroyedMixin, Event):
        TOPIC = "memory-ledger:request.data-key-destroyed.v1"
        SIGNER_ROLES = OPERATOR
        key_id: str
        reason: str
        kek_epoch: int | None = None

    class ErasureReapplied(ErasureReappliedMixin, Event):
        TOPIC = "memory-ledger:request.erasure-reapplied.v1"
        SIGNER_ROLES = OPERATOR
        key_id: str
        reason: str
        kek_epoch: int | None
        mode: str | None
        batch_id: str | None
        request_id: str | None
        original: dict[str, Any]

    # set by EndedPartial and Rejected (class defaults: requests older than them)
    partial_at: str | None = None
    partial_reasons: list[dict[str, Any]] | None = None
    partials: list[dict[str, Any]] | tuple[()] = ()
    rejected_at: str | None = None
    rejection: dict[str, str] | None = None

    def __init__(self) -> None:
        self.acknowledged_at: str | None = None
        self.completed_at: str | None = None
        self.batch_id: str | None = None
        self.event_ids: list[str] = []


class RedactionBatch(Aggregate, _Erasable, _Copyable):
    """What one erasure covers, approved by an operator before anything is destroyed.

    The reason is free text (it may name the person): sealed under the batch's own data
    key, which also seals what the erasure's probes and raw scan look for while the batch
    runs (governance/erasure.py), and is destroyed when the batch closes (ADR 0019).
    """

    TOPIC = "memory-ledger:batch"
    PERSONAL_STATE = ("reason",)
    # set by Created.apply (status and approved_with also by the later events)
    request_id: str | None
    mode: str
    reason: str
    targets: dict[str, list[str]]
    status: str
    approved_with: str | None

    class Event(LedgerEvent):
        SIGNER_ROLES = OPERATOR

    class Created(Event, Aggregate.Created):
        TOPIC = "memory-ledger:batch.opened.v1"
        PERSONAL: ClassVar[tuple[str, ...]] = ("reason",)
        request_id: str | None
        mode: str
        reason: str
        targets: dict[str, list[str]]

        def apply(self, aggregate: Any) -> None:
            aggregate.request_id = self.request_id
            aggregate.mode = self.mode
            aggregate.reason = self.reason
            aggregate.targets = {k: list(v) for k, v in self.targets.items()}
            aggregate.status = "opened"
            aggregate._note_erased(self)

    class DataKeyDestroyed(DataKeyDestroyedMixin, Event):
        TOPIC = "memory-ledger:batch.data-key-destroyed.v1"
        SIGNER_ROLES = OPERATOR
        key_id: str
        reason: str
        kek_epoch: int | None = None

    class ErasureReapplied(ErasureReappliedMixin, Event):
        TOPIC = "memory-ledger:batch.erasure-reapplied.v1"
        SIGNER_ROLES = OPERATOR
        key_id: str
        reason: str
        kek_epoch: int | None
        mode: str | None
        batch_id: str | None
        request_id: str | None
        original: dict[str, Any]

    class Approved(Event):
        """Signed by the approving operator's key: the authorization of the erasure."""

        TOPIC = "memory-ledger:batch.approved.v1"
        operator: str
        credential: str | None = None  # the server credential that approved it (its id)

        def apply(self, aggregate: Any) -> None:
            aggregate.status = "approved"
            aggregate.approved_by = self.operator
            aggregate.approved_with = self.credential

    class Executed(Event):
        TOPIC = "memory-ledger:batch.executed.v1"
        event_ids: list[str]
        reach: dict[str, Any]

        def apply(self, aggregate: Any) -> None:
            aggregate.status = "executed"
            aggregate.event_ids = list(self.event_ids)
            aggregate.reach = self.reach

    class EndedPartial(Event):
        """A run of the erasure ended without erasing all the approved targets (ADR 0047):
        a read-model route's store unreachable after retries, items under a legal hold.
        ``event_ids``: what it did (key destructions, the tombstones of the items it
        finished, review flags), ``reach``: the routes it purged and probed, those it could
        not (``not-checked``) and the raw scan, ``reasons``: why it stopped short, ids only.
        The batch stays open (its key and sealed needles kept for the resume, which reruns
        the purge, probes and scan); keys destroyed stay destroyed."""

        TOPIC = "memory-ledger:batch.ended-partial.v1"
        event_ids: list[str]
        reach: dict[str, Any]
        reasons: list[dict[str, Any]]

        def apply(self, aggregate: Any) -> None:
            aggregate.status = "partial"
            aggregate.event_ids = list(self.event_ids)
            aggregate.reach = self.reach
            aggregate.partials = [*getattr(aggregate, "partials", ()), {
                "event_id": f"{self.originator_id}/{self.originator_version}",
                "at": self.timestamp.isoformat(), "reasons": [dict(r) for r in self.reasons]}]

    class Closed(Event):
        TOPIC = "memory-ledger:batch.closed.v1"
        outcome: str

        def apply(self, aggregate: Any) -> None:
            aggregate.status = "closed"
            aggregate.outcome = self.outcome

    partials: list[dict[str, Any]] | tuple[()] = ()  # set by EndedPartial

    def __init__(self) -> None:
        self.approved_by: str | None = None
        self.event_ids: list[str] = []
        self.reach: dict[str, Any] = {}
        self.outcome: str | None = None


class Policy(Aggregate, _Copyable):
    """The memoryPolicy in force (Persona Schema §7): one per ledger, each change signed by an
    operator, so every later decision can be traced to the policy of its time."""

    TOPIC = "memory-ledger:policy"

    class Event(LedgerEvent):
        SIGNER_ROLES = OPERATOR

    class Created(Event, Aggregate.Created):
        TOPIC = "memory-ledger:policy.started.v1"

    class PolicySet(Event):
        TOPIC = "memory-ledger:policy.set.v1"
        document: dict[str, Any]

        def apply(self, aggregate: Any) -> None:
            aggregate.document = self.document
            aggregate.set_at = self.timestamp.isoformat()

    def __init__(self) -> None:
        self.document: dict[str, Any] | None = None
        self.set_at: str | None = None


class KekEpochs(Aggregate, _Copyable):
    """The key-encryption-key epochs of the keystore (ADR 0044): one per ledger. Each
    event is signed; none holds key material. Started when the first rotation runs (a
    ledger's first epoch is made by ``ledger init`` and needs no event: the tombstones'
    ``kek_epoch`` names it)."""

    TOPIC = "memory-ledger:kek"

    class Event(LedgerEvent):
        SIGNER_ROLES = WRITER_OR_OPERATOR

    class Created(Event, Aggregate.Created):
        TOPIC = "memory-ledger:kek.epochs-started.v1"

    class EpochStarted(Event):
        """New data keys are wrapped under ``epoch`` from now on, and every live key is
        being re-wrapped under it; ``previous``: the epoch it replaces (0: keys were not
        wrapped before); ``store``: the kind of KEK store (file, pkcs11)."""

        TOPIC = "memory-ledger:kek.epoch-started.v1"
        epoch: int
        previous: int
        store: str

        def apply(self, aggregate: Any) -> None:
            aggregate.epochs[str(self.epoch)] = {
                "started_at": self.timestamp.isoformat(), "previous": self.previous,
                "started_event": f"{self.originator_id}/{self.originator_version}"}
            aggregate.current = self.epoch

    class EpochDestroyed(Event):
        """The KEK of ``epoch`` is destroyed: every key it wrapped had been re-wrapped
        under ``successor`` (``rewrapped`` of them by the rotation), so every copy of a
        key wrapped under it, wherever it is kept, is beyond use."""

        TOPIC = "memory-ledger:kek.epoch-destroyed.v1"
        epoch: int
        successor: int
        rewrapped: int

        def apply(self, aggregate: Any) -> None:
            entry = aggregate.epochs.setdefault(str(self.epoch), {})
            entry["destroyed_at"] = self.timestamp.isoformat()
            entry["destroyed_event"] = f"{self.originator_id}/{self.originator_version}"

    class EpochRestored(Event):
        """A home restored from a backup (``ledger restore``, ADR 0045) starts an epoch of
        its own: every data key was re-wrapped under ``epoch``, whose KEK was made in the
        restored home's store (``store``: its kind). The source's epochs (``forgotten``)
        are not this home's: their KEKs stay where the source keeps them, never written or
        destroyed from here, and no key of this home is wrapped under them any more.
        ``backup``: what was restored (the manifest's digest, time, log size and root) and
        the erasure journal applied (its checkpoint size; None without one); ids, sizes
        and times only."""

        TOPIC = "memory-ledger:kek.epoch-restored.v1"
        epoch: int
        previous: int
        store: str
        forgotten: list[int]
        backup: dict[str, Any]

        def apply(self, aggregate: Any) -> None:
            at = self.timestamp.isoformat()
            aggregate.epochs[str(self.epoch)] = {
                "started_at": at, "previous": self.previous, "restored": True,
                "started_event": f"{self.originator_id}/{self.originator_version}"}
            for epoch in self.forgotten:
                aggregate.epochs.setdefault(str(epoch), {})["forgotten_at"] = at
            aggregate.current = self.epoch

    def __init__(self) -> None:
        self.epochs: dict[str, dict[str, Any]] = {}
        self.current = 0


MEMORY_AGGREGATES: tuple[type[Aggregate], ...] = (Subject, Artifact, Atom, ErasureRequest,
                                                  RedactionBatch, Policy, Record, KekEpochs)


def event_classes() -> list[type[Any]]:
    """Every concrete event class of the memory aggregates (for topic checks)."""
    out: list[type[Any]] = []
    for agg in MEMORY_AGGREGATES:
        for value in vars(agg).values():
            if isinstance(value, type) and issubclass(value, LedgerEvent) and \
                    getattr(value, "TOPIC", None) and value.__name__ != "Event":
                out.append(value)
    return out


def as_uuid(value: str | UUID) -> UUID:
    return value if isinstance(value, UUID) else UUID(str(value))
