"""The webhook feed: what subscribers may be told, as a read model of the log (ADR 0055).

Read model ``webhooks`` turns the events a subscriber may hear of into rows of
``proj_webhook_events``: one per event, with its webhook type, the time it was signed, the
subject it is about (the per-subject order of deliveries), the subject's stored ref (its
``tenant:`` prefix scopes subscriptions; never delivered) and a JSON of ids and digests
only. It follows the notification log like every read model (own tracking position,
resumable, rebuildable: the rows are a pure function of the log), holds no content and
registers no route. The delivery state (which subscription received what) is not a
function of the log and lives beside the subscriptions (``service/webhooks.py``).

Types: ``memory.added`` (atom created), ``memory.corrected`` (atom superseded by a
correction), ``memory.redacted`` (atom redacted, with its mode), ``memory.erased`` (an
atom's data key destroyed, or re-destroyed after a restore), ``erasure.request.filed``,
``erasure.completed`` (with ``completion_digest``, see :func:`completion_digest`). The
open requests' deadlines are kept in ``proj_webhook_requests`` so that the sender can say
``erasure.overdue`` once a deadline passes (a deadline passing is not an event);
``checkpoint.cosigned`` is read from the transparency log's cosignatures by the sender.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ledger import canonical, clock
from ledger.domain import Atom, ErasureRequest, Subject
from projections._rows import dump_table, insert_rows
from projections.entries import LogEntry
from projections.routes import Route
from projections.runner import Applied
from projections.store import Store

__all__ = ["EVENT_TYPES", "WebhookFeed", "completion_digest"]

EVENT_TYPES = ("memory.added", "memory.corrected", "memory.redacted", "memory.erased",
               "erasure.request.filed", "erasure.completed", "erasure.overdue",
               "checkpoint.cosigned")
"""Every webhook type the ledger sends. Two are not events of the log: ``erasure.overdue``
comes from the deadlines kept here, ``checkpoint.cosigned`` from the transparency log's
cosignatures (``service/webhooks.py``)."""


def completion_digest(request_id: str, batch_id: str, event_ids: Sequence[str]) -> str:
    """``sha256:`` + hex SHA-256 of the RFC 8785 canonical JSON of ``{"batch_id",
    "event_ids", "request_id"}`` as the signed ``request.completed`` event states them: what
    the completion says was done. A recipient recomputes it from that event (in the
    Evidence Pack's signed events, or ``ledger requests status``)."""
    doc = {"request_id": request_id, "batch_id": batch_id, "event_ids": list(event_ids)}
    return "sha256:" + hashlib.sha256(canonical.dumps(doc)).hexdigest()


def _instant(value: str) -> str:
    """A deadline in the signed envelopes' one form, so that deadlines compare as text."""
    return clock.format_instant(clock.parse_instant(value, "deadline"))


class WebhookFeed:
    """Read model ``webhooks``."""

    name = "webhooks"
    version = "1"
    holds_content: ClassVar[bool] = False

    def __init__(self, store: Store) -> None:
        self.store = store
        md = store.metadata()
        self.events = sa.Table(
            "proj_webhook_events", md,
            sa.Column("position", sa.BigInteger, primary_key=True, autoincrement=False),
            sa.Column("event_id", sa.String(80), nullable=False),
            sa.Column("type", sa.String(40), nullable=False),
            sa.Column("timestamp", sa.String(40), nullable=False),
            sa.Column("subject_id", sa.String(36), nullable=True),
            sa.Column("subject_ref", sa.String(200), nullable=True),
            sa.Column("data", sa.Text, nullable=False),
        )
        # who an atom or a request is about: later events name only the atom or request
        self.items = sa.Table(
            "proj_webhook_items", md,
            sa.Column("item_id", sa.String(36), primary_key=True),
            sa.Column("subject_id", sa.String(36), nullable=False),
        )
        self.subjects = sa.Table(
            "proj_webhook_subjects", md,
            sa.Column("subject_id", sa.String(36), primary_key=True),
            sa.Column("ref", sa.String(200), nullable=False),
        )
        self.requests = sa.Table(
            "proj_webhook_requests", md,
            sa.Column("request_id", sa.String(36), primary_key=True),
            sa.Column("position", sa.BigInteger, nullable=False),
            sa.Column("subject_id", sa.String(36), nullable=False),
            sa.Column("complete_due", sa.String(40), nullable=False),
            sa.Column("closed", sa.Boolean, nullable=False),
        )

    def _tables(self) -> list[sa.Table]:
        return [self.events, self.items, self.subjects, self.requests]

    def create(self, conn: Connection) -> None:
        for t in self._tables():
            t.create(conn, checkfirst=True)

    def reset(self, conn: Connection) -> None:
        for t in self._tables():
            t.drop(conn, checkfirst=True)

    def routes(self) -> Sequence[Route]:
        return []

    def dump(self, conn: Connection) -> dict[str, list[tuple[Any, ...]]]:
        return {t.name: dump_table(conn, t) for t in self._tables()}

    def apply(self, conn: Connection, entries: Sequence[LogEntry]) -> Applied:
        subjects: dict[str, str] = {}  # this batch's new subjects (id -> ref)
        items: dict[str, str] = {}  # this batch's new atoms and requests (id -> subject)
        rows: list[dict[str, Any]] = []
        requests: list[dict[str, Any]] = []
        closed: list[str] = []

        def subject_of(item_id: str) -> str | None:
            if item_id in items:
                return items[item_id]
            value = conn.execute(sa.select(self.items.c.subject_id)
                                 .where(self.items.c.item_id == item_id)).scalar()
            return None if value is None else str(value)

        def row(e: LogEntry, kind: str, subject_id: str | None, **data: Any) -> None:
            rows.append({"position": e.position, "event_id": e.event_id, "type": kind,
                         "timestamp": e.timestamp, "subject_id": subject_id,
                         "data": json.dumps(data, sort_keys=True)})

        for e in entries:
            ev = e.event
            oid = e.originator_id
            if isinstance(ev, Subject.Created):
                subjects[oid] = str(ev.ref)
            elif isinstance(ev, Atom.Created):
                items[oid] = str(ev.subject_id)
                row(e, "memory.added", str(ev.subject_id), atom_id=oid)
            elif isinstance(ev, Atom.Superseded):
                row(e, "memory.corrected", subject_of(oid), atom_id=oid,
                    superseded_by=str(ev.superseded_by))
            elif isinstance(ev, Atom.Redacted):
                row(e, "memory.redacted", subject_of(oid), atom_id=oid, mode=str(ev.mode),
                    batch_id=ev.batch_id)
            elif isinstance(ev, (Atom.DataKeyDestroyed, Atom.ErasureReapplied)):
                row(e, "memory.erased", subject_of(oid), atom_id=oid)
            elif isinstance(ev, ErasureRequest.Created):
                items[oid] = str(ev.subject_id)
                requests.append({"request_id": oid, "position": e.position,
                                 "subject_id": str(ev.subject_id),
                                 "complete_due": _instant(str(ev.complete_due)),
                                 "closed": False})
                row(e, "erasure.request.filed", str(ev.subject_id), request_id=oid,
                    ack_due=str(ev.ack_due), complete_due=str(ev.complete_due))
            elif isinstance(ev, ErasureRequest.Completed):
                closed.append(oid)
                event_ids = [str(i) for i in ev.event_ids]
                row(e, "erasure.completed", subject_of(oid), request_id=oid,
                    batch_id=str(ev.batch_id), erased_events=len(event_ids),
                    completion_event_id=e.event_id,
                    completion_digest=completion_digest(oid, str(ev.batch_id), event_ids))
            elif isinstance(ev, ErasureRequest.Rejected):
                closed.append(oid)
        insert_rows(conn, self.subjects, [{"subject_id": k, "ref": v}
                                          for k, v in subjects.items()])
        insert_rows(conn, self.items, [{"item_id": k, "subject_id": v}
                                       for k, v in items.items()])
        insert_rows(conn, self.requests, requests)
        if closed:
            conn.execute(self.requests.update()
                         .where(self.requests.c.request_id.in_(closed)).values(closed=True))
        if rows:
            refs = self._refs(conn, {str(r["subject_id"]) for r in rows if r["subject_id"]},
                              subjects)
            for r in rows:
                r["subject_ref"] = refs.get(str(r["subject_id"]))
            insert_rows(conn, self.events, rows)
        return Applied()

    def _refs(self, conn: Connection, ids: set[str], new: dict[str, str]) -> dict[str, str]:
        refs = {k: v for k, v in new.items() if k in ids}
        wanted = sorted(ids - set(refs))
        for i in range(0, len(wanted), 500):
            chunk = wanted[i:i + 500]
            refs.update({str(r.subject_id): str(r.ref) for r in conn.execute(
                sa.select(self.subjects).where(self.subjects.c.subject_id.in_(chunk)))})
        return refs

    # ------------------------------------------------------------------ reads
    def head(self, conn: Connection) -> int:
        """The highest position of a row (0 when there is none)."""
        return int(conn.execute(sa.select(sa.func.max(self.events.c.position))).scalar() or 0)

    def rows_after(self, position: int, limit: int) -> list[dict[str, Any]]:
        """:meth:`after`, on a connection of its own."""
        with self.store.engine.connect() as conn:
            return self.after(conn, position, limit)

    def overdue_after(self, now: str, since: int) -> list[dict[str, Any]]:
        """:meth:`overdue`, on a connection of its own."""
        with self.store.engine.connect() as conn:
            return self.overdue(conn, now, since)

    def after(self, conn: Connection, position: int, limit: int) -> list[dict[str, Any]]:
        """Rows after ``position`` in log order, at most ``limit``."""
        rows = conn.execute(sa.select(self.events).where(self.events.c.position > position)
                            .order_by(self.events.c.position).limit(limit))
        return [dict(r._mapping) for r in rows]

    def overdue(self, conn: Connection, now: str, since: int) -> list[dict[str, Any]]:
        """Open requests filed after position ``since`` whose completion is due before
        ``now`` (ISO 8601 UTC, compared as text), with their subject's stored ref."""
        r, s = self.requests, self.subjects
        rows = conn.execute(
            sa.select(r, s.c.ref).select_from(r.outerjoin(s, s.c.subject_id == r.c.subject_id))
            .where(r.c.closed == sa.false(), r.c.complete_due <= now, r.c.position > since)
            .order_by(r.c.position))
        return [dict(x._mapping) for x in rows]
