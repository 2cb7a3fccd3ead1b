"""How a command opens the ledger: ``cli/main.py``'s ``served(writer, operator)`` gives the
facade over the home and the local operator (ADR 0040); the modules that mount commands
get it from their ``register`` (tests hand them their own)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from service.caller import Caller
    from service.facade import MemoryService


class Served(Protocol):
    """The facade over the home and the local operator: its memory writes signed by
    ``writer`` (default: the home's writer key), its operator acts by ``operator``."""

    def __call__(self, writer: str | None = None, operator: str = "operator"
                 ) -> AbstractContextManager[tuple[MemoryService, Caller]]: ...
