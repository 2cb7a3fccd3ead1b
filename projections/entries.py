"""Verified log entries for read models, and what each kind of event means to them.

A read model never sees raw notifications: :func:`decode` verifies each one's
signature and decrypts it with the ledger's own mapper (step 5 of the envelope
spec runs inside ``to_domain_event``), then reads seq, time and signer from the
same, already verified bytes. If any event fails verification the whole batch
is refused (:class:`ledger.mapper.EventIntegrityError` propagates).

The event classifications below are the one place that says which events make
content unreachable (:func:`content_gone`) or take an atom out of retrieval or put it
back (:func:`retrieval`); the read models follow them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from keys.roster import ROSTER_TOPICS
from ledger import envelope
from ledger.domain import (
    Artifact,
    Atom,
    DataKeyDestroyedMixin,
    ErasureRequest,
    RedactionBatch,
    Subject,
    event_classes,
)

__all__ = [
    "CONTENT_GONE",
    "HARD_MODES",
    "RETRIEVAL_OFF",
    "RETRIEVAL_ON",
    "SEALED_TOPICS",
    "LogEntry",
    "Opener",
    "content_gone",
    "decode",
    "kind_of",
    "retrieval",
]

CONTENT_GONE: tuple[type[Any], ...] = (DataKeyDestroyedMixin, Artifact.Deleted)
"""Events after which an item's content must be physically purged from every route
(and, by :data:`HARD_MODES`, an atom's hard or delete redaction tombstone). An erasure
re-applied after a restore (``*.erasure-reapplied``, ADR 0045) is a
:class:`DataKeyDestroyedMixin`: the same."""

HARD_MODES = ("hard", "delete")

RETRIEVAL_OFF: tuple[type[Any], ...] = (Atom.Superseded, Atom.Expired, Atom.Redacted,
                                        Atom.ErasureReapplied)
"""Events after which an atom is no longer a retrieval candidate (content may stay:
superseded, expired, soft-redacted, archived; an erasure re-applied after a restore is a
key destruction too, so its content goes: :data:`CONTENT_GONE`)."""

RETRIEVAL_ON: tuple[type[Any], ...] = (Atom.Unredacted,)
"""Events that make an atom retrievable again (undoing a soft redaction)."""

SEALED_TOPICS: frozenset[str] = frozenset(
    c.TOPIC for c in event_classes() if getattr(c, "PERSONAL", ()))
"""Topics whose events may carry encrypted personal fields (their data key is prefetched)."""

_KINDS: dict[type[Any], str] = {Subject.Event: "subject", Artifact.Event: "artifact",
                                Atom.Event: "atom", ErasureRequest.Event: "request",
                                RedactionBatch.Event: "batch"}


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One verified event at a notification position, as the read models receive it."""

    position: int
    originator_id: str
    version: int
    topic: str
    seq: int
    timestamp: str
    """Event time as signed (UTC, microseconds, 'Z'); sorts as text."""
    kid: str
    """Key id of the signer."""
    event: Any
    """The frozen domain event; personal fields are None if the data key is gone."""

    @property
    def event_id(self) -> str:
        return envelope.event_id(self.originator_id, self.version)


def kind_of(event: Any) -> str | None:
    """``subject``, ``artifact``, ``atom``, ``request`` or ``batch``; None otherwise."""
    for base, kind in _KINDS.items():
        if isinstance(event, base):
            return kind
    return None


def content_gone(event: Any) -> bool:
    """Must every route purge this item's content now?"""
    return isinstance(event, CONTENT_GONE) or (
        isinstance(event, Atom.Redacted) and event.mode in HARD_MODES)


def retrieval(event: Any) -> bool | None:
    """False if the event takes an atom out of retrieval, True if it puts it back."""
    if isinstance(event, RETRIEVAL_OFF):
        return False
    if isinstance(event, RETRIEVAL_ON):
        return True
    return None


class Opener(Protocol):
    """What :func:`decode` needs of a ledger (``LedgerReader`` is one; so is a worker process's
    opener of a parallel rebuild, ``projections.parallel``)."""

    def prefetch_data_keys(self, key_ids: Iterable[str]) -> None: ...

    def open_events(self, stored: Iterable[Any]) -> Sequence[Any]: ...


def decode(app: Opener, notifications: Sequence[Any]) -> list[LogEntry]:
    """Verify and decrypt notifications (in order) into log entries.

    Data keys of sealed events are fetched in one round trip first; a key that is
    destroyed by then is absent, so the event's content reads as erased.
    """
    sealed = [str(n.originator_id) for n in notifications if n.topic in SEALED_TOPICS]
    if sealed:
        app.prefetch_data_keys(sealed)
    out: list[LogEntry] = []
    for n, event in zip(notifications, app.open_events(notifications), strict=True):
        # open_events verified the signature (and checked the frame), then decrypted:
        # these are the bytes just verified, so a plain parse of the frame suffices
        env = orjson.loads(n.state)["envelope"]
        out.append(LogEntry(
            position=int(n.id), originator_id=str(env["originator_id"]),
            version=int(env["version"]), topic=str(env["topic"]), seq=int(env["seq"]),
            timestamp=str(env["timestamp"]), kid=str(env["kid"]),
            event=None if n.topic in ROSTER_TOPICS else event))
    return out
