"""As-of index: (subject, time) -> which items, at which versions.

``proj_asof_events`` has one row per memory event (subject, originator, version,
seq, time) indexed on (subject_id, timestamp), so "what did the ledger know at T
about S" reads only S's rows; ``proj_asof_items`` remembers each item's subject
(later events of an atom do not repeat it). No content. Roster events are ignored.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ledger.domain import Artifact, Atom, Subject
from projections._rows import dump_table, insert_rows
from projections.entries import LogEntry, kind_of
from projections.routes import Route
from projections.runner import Applied
from projections.store import Store

__all__ = ["AsOfIndex"]


class AsOfIndex:
    """Read model ``asof``."""

    name = "asof"
    version = "1"
    holds_content: ClassVar[bool] = False

    def __init__(self, store: Store) -> None:
        self.store = store
        md = store.metadata()
        self.items = sa.Table(
            "proj_asof_items", md,
            sa.Column("originator_id", sa.String(36), primary_key=True),
            sa.Column("subject_id", sa.String(36), nullable=False),
            sa.Column("kind", sa.String(16), nullable=False),
        )
        self.events = sa.Table(
            "proj_asof_events", md,
            sa.Column("position", sa.BigInteger, primary_key=True, autoincrement=False),
            sa.Column("subject_id", sa.String(36), nullable=False),
            sa.Column("timestamp", sa.String(40), nullable=False),
            sa.Column("originator_id", sa.String(36), nullable=False),
            sa.Column("version", sa.Integer, nullable=False),
            sa.Column("seq", sa.BigInteger, nullable=False),
            sa.Index("proj_asof_subject_time", "subject_id", "timestamp"),
        )

    def create(self, conn: Connection) -> None:
        self.items.create(conn, checkfirst=True)
        self.events.create(conn, checkfirst=True)

    def reset(self, conn: Connection) -> None:
        self.events.drop(conn, checkfirst=True)
        self.items.drop(conn, checkfirst=True)

    def routes(self) -> Sequence[Route]:
        return []

    def dump(self, conn: Connection) -> dict[str, list[tuple[Any, ...]]]:
        return {"proj_asof_items": dump_table(conn, self.items),
                "proj_asof_events": dump_table(conn, self.events)}

    def apply(self, conn: Connection, entries: Sequence[LogEntry]) -> Applied:
        known: dict[str, tuple[str, str]] = {}
        new_items = []
        for e in entries:
            ev = e.event
            if isinstance(ev, Subject.Created):
                known[e.originator_id] = (e.originator_id, "subject")
            elif isinstance(ev, Artifact.Created | Atom.Created):
                known[e.originator_id] = (str(ev.subject_id), kind_of(ev) or "")
            else:
                continue
            new_items.append({"originator_id": e.originator_id,
                              "subject_id": known[e.originator_id][0],
                              "kind": known[e.originator_id][1]})
        wanted = sorted({e.originator_id for e in entries if e.event is not None} - set(known))
        for start in range(0, len(wanted), 500):
            for oid, sid, kind in conn.execute(sa.select(self.items).where(
                    self.items.c.originator_id.in_(wanted[start:start + 500]))):
                known[str(oid)] = (str(sid), str(kind))
        if new_items:
            insert_rows(conn, self.items, new_items)
        rows = [{"position": e.position, "subject_id": known[e.originator_id][0],
                 "timestamp": e.timestamp, "originator_id": e.originator_id,
                 "version": e.version, "seq": e.seq}
                for e in entries if e.event is not None and e.originator_id in known]
        if rows:
            insert_rows(conn, self.events, rows)
        return Applied()

    def known_at(self, conn: Connection, subject_id: str,
                 as_of: str) -> list[tuple[str, str, int]]:
        """(originator_id, kind, version) of the subject's items as recorded by ``as_of``."""
        ev, it = self.events, self.items
        stmt = (sa.select(ev.c.originator_id, it.c.kind, sa.func.max(ev.c.version))
                .select_from(ev.join(it, it.c.originator_id == ev.c.originator_id))
                .where(ev.c.subject_id == subject_id, ev.c.timestamp <= as_of)
                .group_by(ev.c.originator_id, it.c.kind)
                .order_by(sa.func.min(ev.c.position)))
        return [(str(o), str(k), int(v)) for o, k, v in conn.execute(stmt)]

    def subjects_at(self, conn: Connection, as_of: str) -> list[str]:
        """Subjects registered by ``as_of``."""
        ev, it = self.events, self.items
        stmt = (sa.select(ev.c.subject_id).select_from(
            ev.join(it, it.c.originator_id == ev.c.originator_id))
            .where(it.c.kind == "subject", ev.c.timestamp <= as_of, ev.c.version == 1)
            .order_by(ev.c.position))
        return [str(r[0]) for r in conn.execute(stmt)]
