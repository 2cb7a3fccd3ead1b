"""Aggregates and their events: frozen values with explicit, stable topics.

Event fields are JSON values (str, int, float, bool, None, lists and dicts of
them); times inside payloads are ISO 8601 strings. ``PERSONAL`` names the
fields the mapper encrypts with the aggregate's data key; ``SIGNER_ROLE`` names
the roster role the signer must hold. A topic never changes once released:
renaming a class keeps its ``TOPIC``.
"""

from __future__ import annotations

from typing import Any, ClassVar
from uuid import UUID

from eventsourcing.domain import Aggregate

ERASED = "[erased]"


class LedgerEvent(Aggregate.Event):
    """Base of all memory events (signed by a writer unless stated)."""

    SIGNER_ROLE: ClassVar[str] = "writer"
    PERSONAL: ClassVar[tuple[str, ...]] = ()


class _Erasable:
    """Common state of aggregates whose content a data key protects."""

    content_erased: bool = False
    data_key_destroyed_at: str | None = None

    def _note_erased(self, event: object) -> None:
        if getattr(event, "content_erased", False):
            self.content_erased = True


class DataKeyDestroyedMixin:
    key_id: str
    reason: str

    def apply(self, aggregate: Any) -> None:
        aggregate.content_erased = True
        aggregate.data_key_destroyed_at = self.timestamp.isoformat()  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- Subject


class Subject(Aggregate, _Erasable):
    """A person memories are about. ``ref`` is their opaque, user-controlled id."""

    TOPIC = "memory-ledger:subject"

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

    def __init__(self, ref: str, display_name: str | None, locale: str | None) -> None:
        self.ref = ref
        self.display_name = display_name
        self.locale = locale


# --------------------------------------------------------------------------- Artifact


class Artifact(Aggregate, _Erasable):
    """Raw source material (a chat, a document, a note) that atoms derive from."""

    TOPIC = "memory-ledger:artifact"

    class Event(LedgerEvent):
        pass

    class Created(Event, Aggregate.Created):
        TOPIC = "memory-ledger:artifact.captured.v1"
        PERSONAL: ClassVar[tuple[str, ...]] = ("title", "body", "media_url")
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


# --------------------------------------------------------------------------- Atom

ATOM_FIELDS = (
    "subject_id", "ref", "kind", "text", "gist", "details", "tags", "confidence",
    "sensitivity", "valid_from", "valid_to", "derivation", "artifact_ids", "extractor",
    "human_reviewed", "salience", "emotional_valence", "decay_profile", "privacy_class",
    "consent_basis", "session_id", "supersedes", "min_sources", "extensions",
)


class Atom(Aggregate, _Erasable):
    """One remembered fact, preference or episode: the Konshus and Persona atom fields."""

    TOPIC = "memory-ledger:atom"

    # Set from the Created event (see ATOM_FIELDS); declared here for type checkers.
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

    class Event(LedgerEvent):
        pass

    class Created(Event, Aggregate.Created):
        TOPIC = "memory-ledger:atom.created.v1"
        PERSONAL: ClassVar[tuple[str, ...]] = ("text", "gist", "details", "tags")
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

        def apply(self, aggregate: Any) -> None:
            for name in ATOM_FIELDS:
                setattr(aggregate, name, getattr(self, name, None))
            aggregate._note_erased(self)

    class Rehearsed(Event):
        TOPIC = "memory-ledger:atom.rehearsed.v1"
        session_id: str | None
        reason: str | None

        def apply(self, aggregate: Any) -> None:
            aggregate.rehearsal_count += 1
            aggregate.last_rehearsed_at = self.timestamp.isoformat()

    class Superseded(Event):
        """The old side of a correction: the fact stops being valid, nothing is overwritten."""

        TOPIC = "memory-ledger:atom.superseded.v1"
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

    def __init__(self) -> None:
        for name in ATOM_FIELDS:
            setattr(self, name, None)
        self.rehearsal_count = 0
        self.last_rehearsed_at: str | None = None
        self.superseded_by: str | None = None
        self.status = "active"

    def as_dict(self) -> dict[str, Any]:
        """Current state, for ``ledger atom show``. Erased content reads as None."""
        out: dict[str, Any] = {"atom_id": str(self.id), "version": self.version}
        out.update({name: getattr(self, name) for name in ATOM_FIELDS})
        out.update({
            "status": self.status,
            "created_at": self.created_on.isoformat(),
            "rehearsal_count": self.rehearsal_count,
            "last_rehearsed_at": self.last_rehearsed_at,
            "superseded_by": self.superseded_by,
            "content_erased": self.content_erased,
            "data_key_destroyed_at": self.data_key_destroyed_at,
        })
        return out


MEMORY_AGGREGATES: tuple[type[Aggregate], ...] = (Subject, Artifact, Atom)


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
