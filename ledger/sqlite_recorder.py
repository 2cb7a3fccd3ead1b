"""eventsourcing's SQLite application recorder, inserting a command's events in one
``executemany`` (ADR 0008), and reading many aggregates' events in one query.

The library's ``SQLiteApplicationRecorder._insert_events`` runs one ``execute`` per event
to read each row's ``lastrowid`` (its notification id). This subclass, selected through
the library's own ``APPLICATION_RECORDER_TOPIC`` setting, keeps everything else: the
library's table, its transaction (``datastore.transaction``), its insert statement and
parameters, and its primary key on ``(originator_id, originator_version)`` (optimistic
concurrency: a duplicate fails the whole ``executemany`` and the transaction rolls back,
as it does row by row). It returns the same notification ids, derived as follows.

SQLite gives a new row of a rowid table (no ``AUTOINCREMENT``, no explicit rowid) the
largest rowid in the table plus one, unless that largest rowid is 2**63 - 1, and then a
random unused one. The ``executemany`` runs inside the transaction that took the write
lock with its first insert, so no other connection inserts until commit. If, after it,
the largest rowid ``top`` is below 2**63 - 1, no row was given a random rowid (the
largest rowid never decreases during inserts), so the ``n`` rows have rowids
``top - n + 1 … top`` in the order given. Otherwise (never in practice) it reads each
row's rowid back by its primary key, which is what ``lastrowid`` gives row by row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

from eventsourcing.persistence import StoredEvent
from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteCursor

_MAX_ROWID = 2**63 - 1


class BulkSQLiteApplicationRecorder(SQLiteApplicationRecorder):
    """``SQLiteApplicationRecorder`` whose inserts use one ``executemany`` per command."""

    def _insert_events(self, c: SQLiteCursor, stored_events: Sequence[StoredEvent],
                       **kwargs: Any) -> Sequence[int] | None:
        n = len(stored_events)
        if n < 2:
            return super()._insert_events(c, stored_events, **kwargs)
        params = [(s.originator_id.hex if isinstance(s.originator_id, UUID)
                   else s.originator_id, s.originator_version, s.topic, s.state)
                  for s in stored_events]
        c.executemany(self.insert_events_statement, params)
        top = self._max_notification_id(c)
        if top is None or top >= _MAX_ROWID:
            return self._rowids_of(c, params)
        return list(range(top - n + 1, top + 1))

    def _rowids_of(self, c: SQLiteCursor, params: list[tuple[Any, ...]]) -> list[int]:
        statement = (f"SELECT rowid FROM {self.events_table_name} "  # noqa: S608 (library's table)
                     "WHERE originator_id=? AND originator_version=?")
        ids = []
        for oid, version, _topic, _state in params:
            c.execute(statement, (oid, version))
            ids.append(int(c.fetchone()[0]))
        return ids


TOPIC = f"{BulkSQLiteApplicationRecorder.__module__}:{BulkSQLiteApplicationRecorder.__qualname__}"


def select_events_of(recorder: BulkSQLiteApplicationRecorder,
                     originator_ids: Sequence[UUID], chunk: int
                     ) -> dict[UUID, list[StoredEvent]]:
    """Every event of each aggregate, in version order, read in one transaction with one
    query per ``chunk`` ids (``select_events`` is one query per aggregate; a batch erasure
    reads a thousand; ledger/bulk_reads.py chooses this for this module's recorder)."""
    out: dict[UUID, list[StoredEvent]] = {i: [] for i in originator_ids}
    ids = list(out)
    table = recorder.events_table_name
    with recorder.datastore.transaction(commit=False) as c:
        for start in range(0, len(ids), chunk):
            part = ids[start:start + chunk]
            c.execute(f"SELECT originator_id, originator_version, topic, state FROM {table} "  # noqa: S608 (library's table)
                      f"WHERE originator_id IN ({','.join('?' * len(part))}) "
                      "ORDER BY originator_id, originator_version", [i.hex for i in part])
            for row in c.fetchall():
                oid = UUID(hex=row["originator_id"])
                out[oid].append(StoredEvent(originator_id=oid,
                                            originator_version=row["originator_version"],
                                            topic=row["topic"], state=row["state"]))
    return out
