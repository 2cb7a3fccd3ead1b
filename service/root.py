"""The composition root: a ledger home in, a wired :class:`MemoryService` out (ADR 0027).

Every surface opens the layers here and nowhere else: the write side
(:class:`ledger.application.LedgerApp`), the read models
(:class:`projections.service.Projections`) and the facade over both.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from service.facade import MemoryService

if TYPE_CHECKING:
    from ledger.home import Config
    from ledger.progress import Steps
    from projections.service import Projections
    from service.models import Restored


def create_home(home: Path, db: str | None = None, keystore: str | None = None,
                kek: str | None = None, controller: str | None = None,
                contact: str | None = None, locale: str = "en") -> Config:
    """A new ledger home (``ledger init``): keys, config, event store, keystore, the first
    KEK epoch and the signed key roster. It exists before any service can open it."""
    from ledger.application import LedgerApp

    return LedgerApp.initialize(home, db=db, keystore=keystore, kek=kek,
                                controller=controller, contact=contact, locale=locale)


def restore_home(backup: Path, home: Path, *, journals: Sequence[Path] = (),
                 accept_rollback: bool = False, kek_from: str | None = None,
                 keys_from: Path | None = None, kek: str | None = None,
                 operator: str = "operator", progress: Steps | None = None) -> Restored:
    """A new ledger home restored from a backup (``ledger restore``, ADR 0045): checked
    whole before anything is written, made in a staging folder beside ``home`` and
    renamed at the end, every erasure the journal names re-applied before the ledger opens
    for use (governance/restore.py). Like :func:`create_home`, it exists before any
    service can open it."""
    from governance.restore import RestoreRequest, restore
    from service.models import Restored

    report = restore(RestoreRequest(backup, home, tuple(journals), accept_rollback, kek_from,
                                    keys_from, kek, operator), progress)
    return Restored(home=str(report["home"]), ledger_id=str(report["ledger_id"]),
                    report=report)


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


def open_local(home: Path | None = None) -> MemoryService:
    """Like :func:`open_service`, but the read models are opened only when a use case
    first needs them (the ``ledger`` command: most commands read the log alone)."""
    from ledger.application import LedgerApp
    from ledger.home import Config, find_home

    app = LedgerApp(Config.load(find_home(home)))

    def projections() -> Projections:
        from projections.service import Projections

        return Projections(app)

    return MemoryService(app, projections)


def close_service(svc: MemoryService) -> None:
    try:
        svc.drp_close()  # the DRP's own connection, opened at its first call
        if svc.proj_opened:
            svc.proj.close()
    finally:
        svc.app.close()


@contextmanager
def opened_service(home: Path | None = None, *, lazy: bool = False
                   ) -> Iterator[MemoryService]:
    """An open service, closed after the block (``lazy``: :func:`open_local`)."""
    svc = open_local(home) if lazy else open_service(home)
    try:
        yield svc
    finally:
        close_service(svc)


@contextmanager
def read_models_kept_open(svc: MemoryService) -> Iterator[None]:
    """For a long-lived process that writes and searches the read models after every
    write (a server's writer process): their SQLite file kept open while the block runs,
    so its other connections' closes do not checkpoint the WAL each time (ADR 0078)."""
    with svc.proj.store.kept_open():
        yield
