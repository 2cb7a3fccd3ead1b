"""The Data Rights Protocol's requests (ADR 0056): the ``drp_requests`` table of the event
store's database, made on the first request (service/drp.py keeps the protocol)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from stores._made import MadeOnFirstWrite

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from ledger.home import StorageURL

__all__ = ["DrpRequestStore"]


class DrpRequestStore:
    """The DRP requests of one ledger, in its event store's database: ids, states and the
    Evidence Pack handed over; no claim of the identity, no memory content."""

    def __init__(self, engine: Engine, schema: str | None, owns_engine: bool = False) -> None:
        self.engine = engine
        self._owns_engine = owns_engine
        md = sa.MetaData(schema=schema)
        self.table = sa.Table(
            "drp_requests", md,
            sa.Column("request_id", sa.String(36), primary_key=True),
            sa.Column("agent_id", sa.String(64), nullable=False),
            sa.Column("token_id", sa.String(32), nullable=False),
            sa.Column("tenant", sa.String(64), nullable=True),
            sa.Column("agent_request_id", sa.String(200), nullable=True),
            sa.Column("exercise", sa.String(32), nullable=False),
            sa.Column("state", sa.String(16), nullable=False),  # filed denied access revoked
            sa.Column("erasure_request_id", sa.String(36), nullable=True),
            sa.Column("subject_id", sa.String(36), nullable=True),
            sa.Column("reason", sa.String(32), nullable=True),
            sa.Column("details", sa.String(500), nullable=True),
            sa.Column("received_at", sa.String(40), nullable=False),
            # SHA-256 of the agent's signature of the request: a replay is refused
            sa.Column("signature_digest", sa.String(64), nullable=False, unique=True),
            sa.Column("pack_digest", sa.String(64), nullable=True),
            sa.Column("pack_zip", sa.LargeBinary, nullable=True),
        )
        self._tables = MadeOnFirstWrite(engine, md, "drp_requests")

    @classmethod
    def open(cls, url: StorageURL) -> DrpRequestStore:
        """The store in the database of ``url`` (the home's event store), on an engine of
        its own."""
        from keys.datakeys import make_engine

        return cls(make_engine(url.sqlalchemy_url(), url.schema, pooled=True), url.schema,
                   owns_engine=True)

    def close(self) -> None:
        if self._owns_engine:
            self.engine.dispose()

    def add(self, row: Mapping[str, Any]) -> None:
        """Record a request received (the table is made with the first)."""
        self._tables.make()
        with self.engine.begin() as conn:
            conn.execute(self.table.insert().values(**row))

    def mark_revoked(self, request_id: str) -> None:
        self._update(request_id, state="revoked")

    def keep_pack(self, request_id: str, digest: str, content: bytes) -> None:
        """Keep the Evidence Pack (its zip, and the digest its status names) for the agent."""
        self._update(request_id, pack_digest=digest, pack_zip=content)

    def _update(self, request_id: str, **values: Any) -> None:
        with self.engine.begin() as conn:
            conn.execute(self.table.update().where(self.table.c.request_id == request_id)
                         .values(**values))

    def by_signature(self, digest: str) -> str | None:
        """The id of the request whose signature has this digest, if one was received."""
        if not self._tables.exists():
            return None
        with self.engine.connect() as conn:
            found = conn.execute(sa.select(self.table.c.request_id).where(
                self.table.c.signature_digest == digest)).scalar()
        return None if found is None else str(found)

    def get(self, request_id: str) -> dict[str, Any] | None:
        if not self._tables.exists():
            return None
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(self.table).where(
                self.table.c.request_id == request_id)).first()
        return None if row is None else dict(row._mapping)
