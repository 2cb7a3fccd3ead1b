"""Audit view: who (signer key id) did what (topic) to which id, when (time, seq).

One row per stored event, roster events included, and no content at all: no
payload field is copied, not even free-text reasons. ``memory inspect`` reads the
rehearsal history from here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from keys.roster import ROSTER_TOPICS
from projections._rows import dump_table, insert_rows
from projections.entries import LogEntry, kind_of
from projections.routes import Route
from projections.runner import Applied
from projections.store import Store

__all__ = ["AuditView"]


class AuditView:
    """Read model ``audit``."""

    name = "audit"
    version = "2"
    holds_content: ClassVar[bool] = False

    def __init__(self, store: Store) -> None:
        self.store = store
        md = store.metadata()
        self.audit = sa.Table(
            "proj_audit", md,
            sa.Column("position", sa.BigInteger, primary_key=True, autoincrement=False),
            sa.Column("seq", sa.BigInteger, nullable=False),
            sa.Column("timestamp", sa.String(40), nullable=False, index=True),
            sa.Column("kid", sa.String(100), nullable=False),
            sa.Column("topic", sa.String(200), nullable=False),
            sa.Column("originator_id", sa.String(36), nullable=False, index=True),
            sa.Column("version", sa.Integer, nullable=False),
            sa.Column("kind", sa.String(16), nullable=False),
        )

    def create(self, conn: Connection) -> None:
        self.audit.create(conn, checkfirst=True)

    def reset(self, conn: Connection) -> None:
        self.audit.drop(conn, checkfirst=True)

    def routes(self) -> Sequence[Route]:
        return []

    def dump(self, conn: Connection) -> dict[str, list[tuple[Any, ...]]]:
        return {"proj_audit": dump_table(conn, self.audit)}

    def apply(self, conn: Connection, entries: Sequence[LogEntry]) -> Applied:
        insert_rows(conn, self.audit, [{
            "position": e.position, "seq": e.seq, "timestamp": e.timestamp, "kid": e.kid,
            "topic": e.topic, "originator_id": e.originator_id, "version": e.version,
            "kind": kind_of(e.event) or ("roster" if e.topic in ROSTER_TOPICS else "other")}
            for e in entries])
        return Applied()

    def trail(self, conn: Connection, originator_id: str,
              topics: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """Events of one item in log order (optionally only some topics)."""
        a = self.audit
        cond = a.c.originator_id == originator_id
        if topics:
            cond = sa.and_(cond, a.c.topic.in_(list(topics)))
        rows = conn.execute(sa.select(a).where(cond).order_by(a.c.position))
        return [{"event_id": f"{r.originator_id}/{r.version}", "position": int(r.position),
                 "seq": int(r.seq), "timestamp": r.timestamp, "topic": r.topic,
                 "signer": r.kid} for r in rows]

    def between(self, conn: Connection, start: str | None = None,
                end: str | None = None) -> list[dict[str, Any]]:
        """Every event with ``start <= timestamp < end`` in log order."""
        a = self.audit
        cond: sa.ColumnElement[bool] = sa.true()
        if start is not None:
            cond = sa.and_(cond, a.c.timestamp >= start)
        if end is not None:
            cond = sa.and_(cond, a.c.timestamp < end)
        return [dict(r._mapping) for r in conn.execute(
            sa.select(a).where(cond).order_by(a.c.position))]
