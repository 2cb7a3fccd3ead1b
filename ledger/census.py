"""Which atoms were created for each subject: the census the maxAtoms rule counts from.

The rule (ledger/policy_rules.py) needs, for the subjects a command writes to, every atom
ever created for them. The log answers that only by reading every atom-created event,
which every new process did on its first write: 17-18 s per ``ledger atom add`` in a
ledger of 10^6 events. The census keeps the answer beside the events, in the event
store's database (``census_atoms``: subject id and atom id, both plaintext in the log
already; ``census_position``: the notification id it has read up to), and reads only
the events after that position, so the full read happens once per ledger, not per
process. It is derived data: dropping both tables rebuilds it from the log on the next
use. Rows are only ever added (an atom's subject never changes); two processes adding
the same rows is harmless (duplicates are ignored).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa
import structlog
from sqlalchemy.engine import Connection, Engine

from ledger import envelope

__all__ = ["BATCH", "SubjectCensus"]

log = structlog.get_logger("ledger")

BATCH = 5000
"""Atom-created events read per query while the census catches up."""


class SubjectCensus:
    """Atom ids per subject, kept in the event store's database and caught up on use."""

    def __init__(self, engine: Engine, schema: str | None, topic: str) -> None:
        self.engine = engine
        self.topic = topic
        md = sa.MetaData(schema=schema)
        self.atoms = sa.Table(
            "census_atoms", md,
            sa.Column("subject_id", sa.String(64), primary_key=True),
            sa.Column("atom_id", sa.String(64), primary_key=True),
            sqlite_with_rowid=False,  # one b-tree, the key (half the writes of a build)
        )
        self.position = sa.Table(
            "census_position", md,
            sa.Column("name", sa.String(32), primary_key=True),
            sa.Column("position", sa.BigInteger, nullable=False),
        )
        self._md = md
        self._ready = False

    def atoms_of(self, recorder: Any, subject_ids: Iterable[str]) -> dict[str, list[str]]:
        """Every atom created for each of these subjects up to the log's head (ids, in no
        particular order)."""
        wanted = sorted(set(subject_ids))
        if not self._ready:
            self._md.create_all(self.engine)
            self._ready = True
        with self.engine.begin() as conn:
            self._catch_up(conn, recorder)
            out: dict[str, list[str]] = {s: [] for s in wanted}
            for start in range(0, len(wanted), 500):
                part = wanted[start:start + 500]
                for row in conn.execute(
                        sa.select(self.atoms.c.subject_id, self.atoms.c.atom_id)
                        .where(self.atoms.c.subject_id.in_(part))):
                    out[row.subject_id].append(row.atom_id)
        return out

    def _catch_up(self, conn: Connection, recorder: Any) -> None:
        t = self.position
        done = int(conn.execute(sa.select(t.c.position).where(t.c.name == "atoms"))
                   .scalar() or 0)
        head = int(recorder.max_notification_id() or 0)
        start = done
        while done < head:
            rows = recorder.select_notifications(start=done + 1, limit=BATCH, stop=head,
                                                 topics=[self.topic])
            values = sorted(({"subject_id": str(envelope.payload_of(n.state)["subject_id"]),
                              "atom_id": str(n.originator_id)} for n in rows),
                             key=lambda v: (v["subject_id"], v["atom_id"]))
            if values:
                conn.execute(self._insert(self.atoms).on_conflict_do_nothing(), values)
            done = int(rows[-1].id) if len(rows) == BATCH else head
        if done != start:
            stmt = self._insert(t).values(name="atoms", position=done)
            conn.execute(stmt.on_conflict_do_update(
                index_elements=[t.c.name],
                set_={"position": sa.func.max(stmt.excluded.position, t.c.position)
                      if self.engine.dialect.name == "sqlite"
                      else sa.func.greatest(stmt.excluded.position, t.c.position)}))
            if done - start > BATCH:
                log.info("census.caught_up", events_read=done - start, position=done)

    def _insert(self, table: sa.Table) -> Any:
        """The dialect's INSERT, which knows ON CONFLICT."""
        if self.engine.dialect.name == "postgresql":  # imported by the ledger that uses it
            from sqlalchemy.dialects import postgresql

            return postgresql.insert(table)
        from sqlalchemy.dialects import sqlite

        return sqlite.insert(table)
