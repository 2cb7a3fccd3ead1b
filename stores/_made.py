"""Tables a store makes with its first write, and whether they are there yet."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Engine

T = TypeVar("T")


class MadeOnFirstWrite:
    """The tables of ``md`` on ``engine``, made by :meth:`make` (idempotent, indexes too);
    :meth:`exists` asks the database whether ``probe`` is there until it is, then
    remembers it; ``complete``: tables found are completed once with what ``md`` adds to
    them (an index of a later version). ``unreachable`` turns the driver's error of a
    database that does not answer into the store's own (None: raised as it is)."""

    def __init__(self, engine: Engine, md: sa.MetaData, probe: str, *,
                 complete: bool = False,
                 unreachable: Callable[[Exception], Exception] | None = None) -> None:
        self.engine = engine
        self.md = md
        self.probe = probe
        self.complete = complete
        self.unreachable = unreachable
        self.made = False

    def exists(self) -> bool:
        if not self.made and self._ask(lambda: sa.inspect(self.engine).has_table(
                self.probe, schema=self.md.schema)):
            if self.complete:
                self.make()
            self.made = True
        return self.made

    def make(self) -> None:
        if not self.made:
            self._ask(lambda: self.md.create_all(self.engine))
            self.made = True

    def _ask(self, call: Callable[[], T]) -> T:
        try:
            return call()
        except sa.exc.OperationalError as e:
            if self.unreachable is None:
                raise
            raise self.unreachable(e) from e
