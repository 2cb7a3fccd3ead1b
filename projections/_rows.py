"""Batch-local row state for read models: load once, change in memory, write in bulk.

A batch may create a row and change it several times; writing each change would cost
one statement per event. :class:`RowSet` loads the rows a batch touches with one
``IN`` query, lets the model change plain dicts, and writes inserts and updates with
``executemany`` at the end of the batch.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

_CHUNK = 500


class RowSet:
    """Rows of one table keyed by its single-column primary key."""

    def __init__(self, table: sa.Table) -> None:
        self.table = table
        (self.pk,) = table.primary_key.columns
        self.rows: dict[str, dict[str, Any]] = {}
        self.new: set[str] = set()
        self.dirty: set[str] = set()

    def load(self, conn: Connection, ids: Iterable[str]) -> None:
        wanted = sorted({i for i in ids if i not in self.rows})
        for start in range(0, len(wanted), _CHUNK):
            chunk = wanted[start:start + _CHUNK]
            for row in conn.execute(sa.select(self.table).where(self.pk.in_(chunk))):
                self.rows[str(row._mapping[self.pk.name])] = dict(row._mapping)

    def get(self, key: str) -> dict[str, Any] | None:
        return self.rows.get(key)

    def add(self, key: str, row: dict[str, Any]) -> None:
        if key in self.rows:
            return  # a position applied twice would land here; check-and-skip prevents it
        self.rows[key] = row
        self.new.add(key)

    def touch(self, key: str) -> dict[str, Any] | None:
        row = self.rows.get(key)
        if row is not None and key not in self.new:
            self.dirty.add(key)
        return row

    def flush(self, conn: Connection) -> None:
        if self.new:
            insert_rows(conn, self.table, [self.rows[k] for k in sorted(self.new)])
        if self.dirty:
            params = []
            for k in sorted(self.dirty):
                row = {c: v for c, v in self.rows[k].items() if c != self.pk.name}
                row["_pk"] = k
                params.append(row)
            conn.execute(self.table.update().where(self.pk == sa.bindparam("_pk")), params)
        self.new.clear()
        self.dirty.clear()


def insert_rows(conn: Connection, table: sa.Table, rows: list[dict[str, Any]]) -> None:
    """``executemany`` of plain rows (absent keys are NULL).

    On SQLite the statement goes to the driver with positional tuples: SQLAlchemy's
    per-row parameter processing cost more than SQLite's own insert in a rebuild
    (issue 16). Values must already be what the driver stores (str, int, float, bool,
    bytes, None), which is what the read models write. PostgreSQL keeps the Core path.
    """
    if not rows:
        return
    if conn.dialect.name != "sqlite":
        conn.execute(table.insert(), rows)
        return
    prep = conn.dialect.identifier_preparer
    names = [c.name for c in table.columns]
    sql = (f"INSERT INTO {prep.format_table(table)} ("  # noqa: S608 (identifiers only)
           + ", ".join(prep.quote(n) for n in names) + ") VALUES ("
           + ", ".join("?" for _ in names) + ")")
    conn.exec_driver_sql(sql, [tuple(map(r.get, names)) for r in rows])


def delete_ids(conn: Connection, table: sa.Table, ids: Iterable[str]) -> int:
    """Delete rows by primary key; returns the number of rows deleted."""
    (pk,) = table.primary_key.columns
    wanted = sorted(set(ids))
    deleted = 0
    for start in range(0, len(wanted), _CHUNK):
        result = conn.execute(table.delete().where(pk.in_(wanted[start:start + _CHUNK])))
        deleted += int(result.rowcount or 0)
    return deleted


def dump_table(conn: Connection, table: sa.Table) -> list[tuple[Any, ...]]:
    """All rows, sorted by primary key, as plain tuples."""
    order = list(table.primary_key.columns) or list(table.columns)
    return [tuple(r) for r in conn.execute(sa.select(table).order_by(*order))]


def contains(conn: Connection, column: Any, needle: str) -> Any:
    """A portable 'column contains needle' (SQLite ``instr``, PostgreSQL ``strpos``)."""
    fn = sa.func.instr if conn.dialect.name == "sqlite" else sa.func.strpos
    return fn(column, needle) > 0
