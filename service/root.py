"""The composition root: a ledger home in, a wired :class:`MemoryService` out (ADR 0027).

Every surface opens the layers here and nowhere else: the write side
(:class:`ledger.application.LedgerApp`), the read models
(:class:`projections.service.Projections`) and the facade over both.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from service.facade import MemoryService


def open_service(home: Path | None = None) -> MemoryService:
    """Open the ledger at ``home`` (default: LEDGER_HOME, or .ledger/ found upward).
    The caller closes it with :func:`close_service`."""
    from ledger.application import LedgerApp
    from ledger.home import Config, find_home
    from projections.service import Projections

    app = LedgerApp(Config.load(find_home(home)))
    try:
        proj = Projections(app)
    except BaseException:
        app.close()
        raise
    return MemoryService(app, proj)


def close_service(svc: MemoryService) -> None:
    try:
        svc.proj.close()
    finally:
        svc.app.close()


@contextmanager
def opened_service(home: Path | None = None) -> Iterator[MemoryService]:
    svc = open_service(home)
    try:
        yield svc
    finally:
        close_service(svc)
