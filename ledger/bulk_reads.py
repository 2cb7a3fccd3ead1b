"""Every event of many aggregates, read in a few queries instead of one per aggregate.

A batch erasure reads a thousand aggregates (``LedgerApp.get_many``: ``shred`` and the
tombstones); eventsourcing's ``select_events`` is one query, and on PostgreSQL one round
trip, per aggregate. These read them by 500 ids per statement, from the library's own
table, in one transaction, and give the library's ``StoredEvent`` rows, each aggregate's
in version order.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from uuid import UUID

from eventsourcing.persistence import StoredEvent

from ledger import sqlite_recorder

if TYPE_CHECKING:
    from eventsourcing.postgres import PostgresAggregateRecorder

__all__ = ["CHUNK", "select_events_of"]

CHUNK = 500
"""Aggregate ids per statement (SQLite's default limit on host parameters is 32,766;
500 keeps each statement's plan and result small)."""


def select_events_of(recorder: Any, originator_ids: Sequence[UUID]
                     ) -> dict[UUID, list[StoredEvent]] | None:
    """Each aggregate's events in version order (an empty list for an unknown id); None
    where the recorder is neither this project's SQLite recorder nor the library's
    PostgreSQL one (the caller then reads aggregate by aggregate)."""
    if isinstance(recorder, sqlite_recorder.BulkSQLiteApplicationRecorder):
        return sqlite_recorder.select_events_of(recorder, originator_ids, CHUNK)
    # eventsourcing.postgres (and psycopg) is loaded only by a PostgreSQL ledger: a SQLite
    # one does not pay for importing it (start-up, issue 15).
    postgres = sys.modules.get("eventsourcing.postgres")
    if postgres is not None and isinstance(recorder, postgres.PostgresAggregateRecorder):
        return _postgres(recorder, originator_ids)
    return None


def _postgres(recorder: PostgresAggregateRecorder, originator_ids: Sequence[UUID]
              ) -> dict[UUID, list[StoredEvent]]:
    from psycopg.sql import SQL, Identifier

    out: dict[UUID, list[StoredEvent]] = {i: [] for i in originator_ids}
    ids = list(out)
    as_text = recorder.datastore.originator_id_type != "uuid"
    statement = SQL(
        "SELECT originator_id, originator_version, topic, state FROM {schema}.{table} "
        "WHERE originator_id = ANY(%s) ORDER BY originator_id, originator_version"
    ).format(schema=Identifier(recorder.datastore.schema),
             table=Identifier(recorder.events_table_name))
    with recorder.datastore.transaction(commit=False) as curs:
        for start in range(0, len(ids), CHUNK):
            chunk = ids[start:start + CHUNK]
            curs.execute(statement, [[str(i) for i in chunk] if as_text else chunk])
            for row in curs.fetchall():
                oid = row["originator_id"]
                key = oid if isinstance(oid, UUID) else UUID(str(oid))
                out[key].append(StoredEvent(originator_id=key,
                                            originator_version=row["originator_version"],
                                            topic=row["topic"], state=bytes(row["state"])))
    return out
