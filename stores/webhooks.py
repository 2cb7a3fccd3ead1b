"""Webhook subscriptions and deliveries (ADR 0055): the ``webhook_subscriptions`` and
``webhook_deliveries`` tables of the event store's database, which every server process of
a ledger shares (service/webhooks.py keeps the fan-out, delivery, lease and back-off rules).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from ledger.errors import EnvironmentProblem
from stores._made import MadeOnFirstWrite

if TYPE_CHECKING:
    from ledger.home import Config, StorageURL

__all__ = ["SubscriptionProbe", "WebhookStore"]

LAST_ERROR_CHARS = 200
"""The width of ``last_error``: a longer error is cut."""


class WebhookStore:
    """The subscriptions and their deliveries, on an engine of its own (pooled). The tables
    are made by the first subscription (:meth:`make_tables`); rows come back with their
    columns as attributes. Not thread-safe, as the service that opens it."""

    def __init__(self, url: StorageURL) -> None:
        from keys.datakeys import make_engine

        try:
            self.engine = make_engine(url.sqlalchemy_url(), url.schema, pooled=True)
        except sa.exc.OperationalError as e:
            raise _unreachable(e) from e
        md = sa.MetaData(schema=url.schema)
        self.subs = sa.Table(
            "webhook_subscriptions", md,
            sa.Column("sub_id", sa.String(32), primary_key=True),
            sa.Column("url", sa.Text, nullable=False),
            sa.Column("types", sa.Text, nullable=True),  # JSON list; NULL: every type
            sa.Column("tenant", sa.String(64), nullable=True),
            sa.Column("allow_private", sa.Boolean, nullable=False),
            sa.Column("created_at", sa.String(40), nullable=False),
            sa.Column("start", sa.BigInteger, nullable=False),  # feed position at add
            sa.Column("cursor", sa.BigInteger, nullable=False),  # fanned out up to here
        )
        self.deliveries = sa.Table(
            "webhook_deliveries", md,
            sa.Column("webhook_id", sa.String(120), primary_key=True),
            sa.Column("sub_id", sa.String(32), nullable=False, index=True),
            sa.Column("seq", sa.BigInteger, nullable=False),  # log order
            sa.Column("order_key", sa.String(64), nullable=False),  # the subject, or the type
            sa.Column("type", sa.String(40), nullable=False),
            sa.Column("body", sa.Text, nullable=False),
            sa.Column("status", sa.String(16), nullable=False, index=True),
            sa.Column("attempts", sa.Integer, nullable=False),
            sa.Column("next_at", sa.Float, nullable=False),  # epoch seconds
            sa.Column("lease_until", sa.Float, nullable=True),
            sa.Column("last_status", sa.Integer, nullable=True),
            sa.Column("last_error", sa.String(LAST_ERROR_CHARS), nullable=True),
            sa.Column("created_at", sa.String(40), nullable=False),
            sa.Column("delivered_at", sa.String(40), nullable=True),
            sa.Index("webhook_deliveries_queue", "status", "sub_id", "order_key", "seq"),
        )
        self._tables = MadeOnFirstWrite(self.engine, md, "webhook_subscriptions",
                                        complete=True, unreachable=_unreachable)

    def close(self) -> None:
        self.engine.dispose()

    # ------------------------------------------------------------------ the tables
    def make_tables(self) -> None:
        """Make the tables and their indexes, unless this store did already."""
        self._tables.make()

    def exists(self) -> bool:
        """Whether a subscription was ever added (the tables are there, and completed)."""
        return self._tables.exists()

    # ------------------------------------------------------------------ subscriptions
    def add_subscription(self, row: Mapping[str, Any]) -> None:
        with self.engine.begin() as conn:
            conn.execute(self.subs.insert().values(**row))

    def subscriptions(self) -> list[Any]:
        """Every subscription's row, in no order."""
        with self.engine.connect() as conn:
            return list(conn.execute(sa.select(self.subs)))

    def listing(self) -> tuple[list[Any], dict[str, dict[str, int]]]:
        """Every subscription's row, oldest first, and its deliveries counted by status
        (``{sub_id: {status: count}}``), read on one connection."""
        d = self.deliveries
        with self.engine.connect() as conn:
            counts: dict[str, dict[str, int]] = {}
            for r in conn.execute(sa.select(d.c.sub_id, d.c.status, sa.func.count())
                                  .group_by(d.c.sub_id, d.c.status)):
                counts.setdefault(r[0], {})[r[1]] = int(r[2])
            rows = conn.execute(sa.select(self.subs).order_by(self.subs.c.created_at,
                                                              self.subs.c.sub_id)).all()
        return list(rows), counts

    def remove_subscription(self, sub_id: str) -> None:
        """Delete a subscription and its deliveries (pending and dead), in one transaction."""
        with self.engine.begin() as conn:
            conn.execute(self.deliveries.delete().where(self.deliveries.c.sub_id == sub_id))
            conn.execute(self.subs.delete().where(self.subs.c.sub_id == sub_id))

    def fan_out(self, sub_id: str, cursor: int, to: int,
                deliveries: Sequence[Mapping[str, Any]]) -> bool:
        """Move a subscription's cursor from ``cursor`` to ``to`` and queue ``deliveries``,
        in one transaction; False (nothing written) when the cursor is no longer at
        ``cursor`` (another process fanned this range out, or the subscription is gone)."""
        with self.engine.begin() as conn:
            moved = conn.execute(self.subs.update().where(
                self.subs.c.sub_id == sub_id, self.subs.c.cursor == cursor)
                .values(cursor=to)).rowcount
            if moved != 1:
                return False
            if deliveries:
                conn.execute(self.deliveries.insert(), list(deliveries))
        return True

    # ------------------------------------------------------------------ deliveries
    def queue_once(self, delivery: Mapping[str, Any]) -> bool:
        """Queue a delivery; False when its webhook id is queued already (nothing
        written)."""
        try:
            with self.engine.begin() as conn:
                conn.execute(self.deliveries.insert(), [delivery])
        except sa.exc.IntegrityError:
            return False
        return True

    def last_seq(self, sub_id: str, kind: str) -> int | None:
        """The highest position of a delivery of type ``kind`` queued for ``sub_id``."""
        d = self.deliveries
        with self.engine.connect() as conn:
            done = conn.execute(sa.select(sa.func.max(d.c.seq)).where(
                d.c.sub_id == sub_id, d.c.type == kind)).scalar()
        return None if done is None else int(done)

    def heads_due(self, now: float, limit: int) -> list[Any]:
        """The first pending delivery of each subject of each subscription (lowest
        position), when its ``next_at`` has come and its lease (if any) has run out at
        ``now``; at most ``limit``, by position. Two heads of one subject at the same
        position both come back."""
        d = self.deliveries
        heads = (sa.select(d.c.sub_id, d.c.order_key, sa.func.min(d.c.seq).label("seq"))
                 .where(d.c.status == "pending").group_by(d.c.sub_id, d.c.order_key)
                 .subquery())
        q = (sa.select(d).join(heads, sa.and_(d.c.sub_id == heads.c.sub_id,
                                              d.c.order_key == heads.c.order_key,
                                              d.c.seq == heads.c.seq))
             .where(d.c.status == "pending", d.c.next_at <= now,
                    sa.or_(d.c.lease_until.is_(None), d.c.lease_until < now))
             .order_by(d.c.seq, d.c.sub_id, d.c.webhook_id).limit(limit))
        with self.engine.connect() as conn:
            return list(conn.execute(q).all())

    def pending_count(self) -> int:
        d = self.deliveries
        with self.engine.connect() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(d)
                                    .where(d.c.status == "pending")).scalar() or 0)

    def dead(self, sub_id: str | None = None) -> list[Any]:
        """The dead deliveries (of ``sub_id``, or of all), by subscription and position."""
        d = self.deliveries
        q = sa.select(d).where(d.c.status == "dead")
        if sub_id is not None:
            q = q.where(d.c.sub_id == sub_id)
        with self.engine.connect() as conn:
            return list(conn.execute(q.order_by(d.c.sub_id, d.c.seq, d.c.webhook_id)).all())

    def statuses(self, webhook_ids: Sequence[str]) -> dict[str, str]:
        """The status of each of these deliveries that exists."""
        d = self.deliveries
        with self.engine.connect() as conn:
            return {r[0]: r[1] for r in conn.execute(
                sa.select(d.c.webhook_id, d.c.status)
                .where(d.c.webhook_id.in_(list(webhook_ids))))}

    def requeue_dead(self, webhook_ids: Sequence[str], sub_id: str | None, at: float) -> int:
        """Make dead deliveries pending again from ``at``, with no attempt counted: these
        (empty: any), of ``sub_id`` (None: any); how many."""
        d = self.deliveries
        cond: sa.ColumnElement[bool] = d.c.status == "dead"
        if webhook_ids:
            cond = sa.and_(cond, d.c.webhook_id.in_(list(webhook_ids)))
        if sub_id is not None:
            cond = sa.and_(cond, d.c.sub_id == sub_id)
        with self.engine.begin() as conn:
            n = conn.execute(d.update().where(cond).values(
                status="pending", attempts=0, next_at=at, lease_until=None)).rowcount
        return int(n)

    def lease(self, webhook_id: str, now: float, until: float) -> bool:
        """Lease a pending delivery whose lease (if any) has run out at ``now`` until
        ``until``; False when another process holds it or it is no longer pending."""
        d = self.deliveries
        with self.engine.begin() as conn:
            n = conn.execute(d.update().where(
                d.c.webhook_id == webhook_id, d.c.status == "pending",
                sa.or_(d.c.lease_until.is_(None), d.c.lease_until < now))
                .values(lease_until=until)).rowcount
        return bool(n == 1)

    def mark_delivered(self, webhook_id: str, status: int | None, at: str) -> None:
        """A delivery answered 2xx (``status``) at ``at``: one more attempt, no lease."""
        d = self.deliveries
        with self.engine.begin() as conn:
            conn.execute(d.update().where(d.c.webhook_id == webhook_id).values(
                status="delivered", attempts=d.c.attempts + 1, last_status=status,
                last_error=None, lease_until=None, delivered_at=at))

    def mark_failed(self, webhook_id: str, *, dead: bool, attempts: int, next_at: float,
                    status: int | None, error: str) -> None:
        """A failed attempt: dead, or pending again from ``next_at``; no lease."""
        d = self.deliveries
        with self.engine.begin() as conn:
            conn.execute(d.update().where(d.c.webhook_id == webhook_id).values(
                status="dead" if dead else "pending", attempts=attempts, next_at=next_at,
                lease_until=None, last_status=status, last_error=error[:LAST_ERROR_CHARS]))


class SubscriptionProbe:
    """Whether the ledger has a webhook subscription: one query, on one connection kept
    open (a server's sender opens the ledger only once there is one; on SQLite, closing
    the last connection of a database checkpoints its WAL, which a probe every few seconds
    must not do)."""

    def __init__(self, config: Config) -> None:
        from keys.datakeys import make_engine

        url = config.events
        self.schema = url.schema
        self.engine = make_engine(url.sqlalchemy_url(), url.schema, pooled=True)
        self.table = sa.table("webhook_subscriptions", sa.column("sub_id"), schema=url.schema)

    def any(self) -> bool:
        with self.engine.connect() as conn:
            if not sa.inspect(conn).has_table("webhook_subscriptions", schema=self.schema):
                return False
            return conn.execute(sa.select(self.table.c.sub_id).limit(1)).first() is not None

    def close(self) -> None:
        self.engine.dispose()


def _unreachable(e: Exception) -> EnvironmentProblem:
    return EnvironmentProblem(
        f"cannot use the event store's database for webhooks: {e.__class__.__name__}",
        hint="check that the database in config.toml answers (`ledger verify` says more)")
