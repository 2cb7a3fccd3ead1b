"""The bearer tokens' table, ``auth_tokens``: a row per token issued, its argon2id hash
and its state; in the event store's database, or the fleet's (credentials/tokens.py
issues and checks the tokens)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from ledger.errors import EnvironmentProblem
from stores._made import MadeOnFirstWrite

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from ledger.home import StorageURL

__all__ = ["AuthTokenStore"]


class AuthTokenStore:
    """The rows of ``auth_tokens``. A database that does not answer is an
    :class:`~ledger.errors.EnvironmentProblem`, whatever the call."""

    def __init__(self, engine: Engine, schema: str | None, owns_engine: bool = False) -> None:
        self.engine = engine
        self._owns_engine = owns_engine
        md = sa.MetaData(schema=schema)
        self.table = sa.Table(
            "auth_tokens", md,
            sa.Column("token_id", sa.String(32), primary_key=True),
            sa.Column("name", sa.String(64), nullable=False),
            sa.Column("role", sa.String(16), nullable=False),
            sa.Column("subjects", sa.Text, nullable=True),  # JSON list; NULL: every subject
            sa.Column("tenant", sa.String(64), nullable=True),
            sa.Column("signing_key", sa.String(64), nullable=True),
            sa.Column("created_at", sa.String(40), nullable=False),
            sa.Column("expires_at", sa.String(40), nullable=True),
            sa.Column("revoked_at", sa.String(40), nullable=True),
            sa.Column("secret_hash", sa.String(200), nullable=False),  # argon2id, encoded
        )
        self._tables = MadeOnFirstWrite(engine, md, "auth_tokens", unreachable=_unreachable)

    @classmethod
    def open(cls, url: StorageURL) -> AuthTokenStore:
        """The table in the database of ``url`` (the home's event store), on an engine of
        its own."""
        from keys.datakeys import make_engine

        try:
            engine = make_engine(url.sqlalchemy_url(), url.schema, pooled=True)
        except sa.exc.OperationalError as e:
            raise _unreachable(e) from e
        return cls(engine, url.schema, owns_engine=True)

    def close(self) -> None:
        if self._owns_engine:
            self.engine.dispose()

    def exists(self) -> bool:
        """Whether the table was made (by the first token issued)."""
        return self._tables.exists()

    def make_table(self) -> None:
        """Make the table, unless it is there."""
        self._tables.make()

    def add(self, row: Mapping[str, Any]) -> bool:
        """Insert a token's row; False when its id is taken (nothing written)."""
        try:
            with self.engine.begin() as conn:
                conn.execute(self.table.insert().values(**row))
        except sa.exc.IntegrityError:
            return False
        except sa.exc.OperationalError as e:
            raise _unreachable(e) from e
        return True

    def row(self, token_id: str) -> Any:
        """The row of ``token_id`` (attributes by column name), or None."""
        if not self.exists():
            return None
        try:
            with self.engine.connect() as conn:
                return conn.execute(sa.select(self.table)
                                    .where(self.table.c.token_id == token_id)).first()
        except sa.exc.OperationalError as e:
            raise _unreachable(e) from e

    def rows(self) -> list[Any]:
        """Every row, oldest first (revoked and expired ones too)."""
        if not self.exists():
            return []
        try:
            with self.engine.connect() as conn:
                return list(conn.execute(sa.select(self.table).order_by(
                    self.table.c.created_at, self.table.c.token_id)).all())
        except sa.exc.OperationalError as e:
            raise _unreachable(e) from e

    def mark_revoked(self, token_id: str, at: str) -> bool:
        """Set the revocation time of a token not yet revoked; False when it was (another
        process revoked it in between)."""
        try:
            with self.engine.begin() as conn:
                done = conn.execute(
                    self.table.update()
                    .where(self.table.c.token_id == token_id,
                           self.table.c.revoked_at.is_(None))
                    .values(revoked_at=at)).rowcount
        except sa.exc.OperationalError as e:
            raise _unreachable(e) from e
        return bool(done == 1)


def _unreachable(e: Exception) -> EnvironmentProblem:
    return EnvironmentProblem(
        f"cannot use the event store's database for tokens: {e.__class__.__name__}",
        hint="check that the database in config.toml answers (`ledger verify` says more)")
