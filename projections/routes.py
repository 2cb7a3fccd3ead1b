"""Routes: every place in the read models that holds or can return memory content.

Each read model that holds content registers one :class:`Route` per store it writes
(DESIGN.md, Projections). Erasure is done only when every registered route has
purged the item physically and its probe finds nothing:

* ``purge(conn, item_id)`` deletes the item's content rows and derived data (FTS
  terms, vectors) inside the caller's transaction and returns the row count;
* ``compact(conn)`` runs the route's own in-transaction compaction (FTS5
  ``optimize``); the store-wide compaction (SQLite ``VACUUM`` and WAL truncation,
  PostgreSQL ``VACUUM FULL`` of ``content_tables``) runs once after commit;
* ``probe(item_id, content)`` looks for any trace, by id and by the given content,
  and returns a :class:`ProbeResult`; it never returns a bare bool.

Probe results name tables, files and other item ids, never content.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection

from ledger.errors import EnvironmentProblem

__all__ = ["ProbeHit", "ProbeResult", "Reach", "Route", "RouteRegistry", "StoreUnavailable",
           "unreachable"]


class StoreUnavailable(EnvironmentProblem):
    """A read model's store, or one route's, cannot be reached (a server down, a network
    partition, a file that cannot be opened). A route or read model whose store lives
    elsewhere raises it; an erasure that meets it (or a database driver's connection
    error) after its retries records the route as not checked and ends partial
    (governance/erasure.py, ADR 0047) instead of failing. The message names the store,
    never content."""


def unreachable(e: BaseException) -> bool:
    """Whether ``e`` says a read model's store (or one route's) could not be reached, so
    a retry may succeed, rather than a defect: :class:`StoreUnavailable`, a connection
    error or timeout, a database driver's disconnection, or an operational error that is
    not a missing table or a syntax error."""
    if isinstance(e, StoreUnavailable | ConnectionError | TimeoutError |
                  sa_exc.DisconnectionError):
        return True
    if isinstance(e, sa_exc.OperationalError | sa_exc.InterfaceError):
        text = str(getattr(e, "orig", e)).lower()
        return "no such" not in text and "syntax error" not in text
    return False


class Transactional(Protocol):
    """A store that gives one transaction (projections/store.py's ``Store``)."""

    def transaction(self) -> contextlib.AbstractContextManager[Connection]: ...


class Reach(StrEnum):
    """A probe's verdict for one route."""

    NOT_REACHABLE = "not-reachable"
    REACHABLE = "reachable"


@dataclass(frozen=True)
class ProbeHit:
    """One trace: where it is, how it was found, how many rows or bytes matched."""

    where: str
    """A table (``proj_atom_content``) or a file name (``projections.sqlite-wal``)."""
    by: str
    """``id`` (rows keyed by the item id) or ``content`` (the given content matched)."""
    count: int
    other_ids: tuple[str, ...] = ()
    """Other items whose rows matched the content (ids only)."""

    def as_json(self) -> dict[str, Any]:
        return {"where": self.where, "by": self.by, "count": self.count,
                "other_ids": list(self.other_ids)}


@dataclass(frozen=True)
class ProbeResult:
    """What one route's probe found for one item."""

    route: str
    item_id: str
    checked: tuple[str, ...]
    """What was examined (tables, files, methods), so an empty result means something."""
    hits: tuple[ProbeHit, ...] = field(default_factory=tuple)

    @property
    def reach(self) -> Reach:
        return Reach.REACHABLE if self.hits else Reach.NOT_REACHABLE

    def as_json(self) -> dict[str, Any]:
        return {"route": self.route, "item_id": self.item_id, "reach": self.reach.value,
                "checked": list(self.checked), "hits": [h.as_json() for h in self.hits]}


@runtime_checkable
class Route(Protocol):
    name: str
    model: str
    """Name of the read model that owns this route."""

    def purge(self, conn: Connection, item_id: str) -> int: ...

    def compact(self, conn: Connection) -> None: ...

    def content_tables(self) -> Sequence[str]: ...

    def probe(self, item_id: str, content: str | None) -> ProbeResult: ...


class RouteRegistry:
    """The registered routes, in registration order; names are unique."""

    def __init__(self) -> None:
        self._routes: dict[str, Route] = {}

    def register(self, route: Route) -> None:
        if not isinstance(route, Route):
            raise TypeError(f"{route!r} does not implement the Route protocol")
        if route.name in self._routes:
            raise ValueError(f"route {route.name!r} is already registered")
        self._routes[route.name] = route

    def routes(self) -> list[Route]:
        return list(self._routes.values())

    def names(self) -> list[str]:
        return list(self._routes)

    def models(self) -> set[str]:
        """Names of the read models that registered at least one route."""
        return {r.model for r in self._routes.values()}

    def for_models(self, models: Sequence[str]) -> list[Route]:
        return [r for r in self._routes.values() if r.model in models]

    def purge(self, conn: Connection, item_id: str,
              models: Sequence[str] | None = None) -> dict[str, int]:
        """Purge ``item_id`` from every route (of ``models``); rows deleted per route."""
        routes = self.routes() if models is None else self.for_models(models)
        return {r.name: r.purge(conn, item_id) for r in routes}

    def probe(self, item_id: str, content: str | None = None) -> list[ProbeResult]:
        return [r.probe(item_id, content) for r in self._routes.values()]

    def purge_many(self, conn: Connection, item_ids: Sequence[str],
                   routes: Sequence[Route] | None = None) -> dict[str, int]:
        """Purge many items from every route (or ``routes``), in batches where the route
        offers ``purge_many``; rows deleted per route."""
        out: dict[str, int] = {}
        for r in self.routes() if routes is None else routes:
            many = getattr(r, "purge_many", None)
            out[r.name] = int(many(conn, list(item_ids))) if many is not None else \
                sum(r.purge(conn, i) for i in item_ids)
        return out

    def purge_committed(self, store: Transactional, item_ids: Sequence[str],
                        routes: Sequence[Route] | None = None) -> dict[str, int]:
        """:meth:`purge_many` in one transaction of ``store``, committed: the purge an
        erasure runs (every route, or one at a time on retry)."""
        with store.transaction() as conn:
            return self.purge_many(conn, item_ids, routes)

    def probe_many(self, items: Mapping[str, Sequence[str]],
                   routes: Sequence[Route] | None = None) -> list[ProbeResult]:
        """Probe many items (id -> its texts) on every route (or ``routes``).

        Routes that offer ``probe_many`` answer with index lookups, so the cost follows
        the items, not the store; others are asked item by item, text by text.
        """
        out: list[ProbeResult] = []
        for r in self.routes() if routes is None else routes:
            many = getattr(r, "probe_many", None)
            if many is not None:
                out.extend(many(items))
                continue
            for item, texts in items.items():
                results = [r.probe(item, None), *(r.probe(item, t) for t in texts)]
                out.append(ProbeResult(r.name, item, results[0].checked,
                                       tuple(h for res in results for h in res.hits)))
        return out
