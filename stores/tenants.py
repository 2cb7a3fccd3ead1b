"""A fleet's registry of tenants (ADR 0061): the ``fleet_tenants`` table of the fleet's
database, and the PostgreSQL schema a tenant's ledger is removed with (service/fleet.py
keeps the fleet's use cases)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from ledger.errors import EnvironmentProblem
from stores.tokens import AuthTokenStore

if TYPE_CHECKING:
    from ledger.home import StorageURL

__all__ = ["TenantStore"]


class TenantStore:
    """The tenants' rows (ids and dates, no content), on an engine of the fleet's own that
    its token table shares (:meth:`tokens`). The table is made when the store opens; a
    database that does not answer then is an :class:`~ledger.errors.EnvironmentProblem`."""

    def __init__(self, db: StorageURL) -> None:
        from keys.datakeys import make_engine

        self.schema = db.schema
        try:
            self.engine = make_engine(db.sqlalchemy_url(), db.schema, pooled=True)
            md = sa.MetaData(schema=db.schema)
            self.table = sa.Table(
                "fleet_tenants", md,
                sa.Column("name", sa.String(40), primary_key=True),
                sa.Column("state", sa.String(16), nullable=False),
                sa.Column("ledger_id", sa.String(40), nullable=False),
                sa.Column("created_at", sa.String(40), nullable=False),
                sa.Column("storage", sa.String(80), nullable=False),
                sa.Column("offboarded_at", sa.String(40)),
                sa.Column("evidence", sa.String(80)),
            )
            md.create_all(self.engine)
        except sa.exc.OperationalError as e:
            raise EnvironmentProblem(f"cannot open the fleet's database: "
                                     f"{e.__class__.__name__}",
                                     hint="check that the fleet's database answers (its URL "
                                          "is in fleet.toml, or the --db of `ledger "
                                          "tenants init`)") from e

    def close(self) -> None:
        self.engine.dispose()

    def tokens(self) -> AuthTokenStore:
        """The fleet's token table, in the same database and on the same connections
        (closing it leaves them open: :meth:`close` closes them)."""
        return AuthTokenStore(self.engine, self.schema)

    def row(self, name: str) -> dict[str, Any] | None:
        """The row of tenant ``name``, offboarded or not, or None."""
        try:
            with self.engine.connect() as conn:
                r = conn.execute(sa.select(self.table).where(self.table.c.name == name)
                                 ).first()
        except sa.exc.OperationalError as e:
            raise EnvironmentProblem(f"cannot read the fleet's tenants: {type(e).__name__}",
                                     hint="retry in a moment") from e
        return None if r is None else r._asdict()

    def rows(self, every: bool = False) -> list[dict[str, Any]]:
        """The tenants' rows, by name; ``every``: the offboarded ones too."""
        q = sa.select(self.table).order_by(self.table.c.name)
        if not every:
            q = q.where(self.table.c.state != "offboarded")
        with self.engine.connect() as conn:
            return [r._asdict() for r in conn.execute(q)]

    def add(self, row: Mapping[str, Any]) -> None:
        with self.engine.begin() as conn:
            conn.execute(self.table.insert().values(**row))

    def mark_offboarding(self, name: str) -> None:
        self._update(name, state="offboarding")

    def mark_offboarded(self, name: str, at: str, evidence: str | None) -> None:
        """The tenant is gone; ``evidence``: the digest of its offboarding pack's statement."""
        self._update(name, state="offboarded", offboarded_at=at, evidence=evidence)

    def _update(self, name: str, **values: Any) -> None:
        with self.engine.begin() as conn:
            conn.execute(self.table.update().where(self.table.c.name == name).values(**values))

    def drop_schema(self, schema: str) -> None:
        """Drop a tenant's PostgreSQL schema and everything in it, if it is there."""
        with self.engine.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
