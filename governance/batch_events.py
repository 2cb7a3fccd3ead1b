"""The stored events of an erasure batch, read from a ledger: the ones the batch names, and
the batch's own and its request's (docs/spec/evidence-pack.md).

The Evidence Pack (:mod:`governance.pack`), the receipt (:mod:`governance.receipt`) and
the copies statement (:mod:`governance.copies`) each start from these rows; they sit here,
below the three, so that none of them reads a batch through another.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from uuid import UUID

from ledger.errors import NotFound
from ledger.progress import Steps, report

if TYPE_CHECKING:
    from ledger.application import LedgerApp

__all__ = ["batch_event_rows", "erasure_rows"]


def batch_event_rows(app: LedgerApp, event_ids: list[str], progress: Steps | None = None
                     ) -> list[Any]:
    """The stored events a batch names (``"<originator>/<version>"``), in its order; a
    missing one is :class:`NotFound` (used by the pack and the receipt)."""
    rows = []
    for i, eid in enumerate(event_ids, start=1):
        if i % 500 == 0 or i == len(event_ids):
            report(progress, "Reading the batch's events", i, len(event_ids))
        oid, version = eid.rsplit("/", 1)
        found = app.reader.stored_events(UUID(oid), gt=int(version) - 1, lte=int(version))
        if not found:
            raise NotFound(f"event {eid} named by the batch is not in the log")
        rows.append(found[0])
    return rows


def erasure_rows(app: LedgerApp, batch: Any, request: Any, progress: Steps | None = None
                 ) -> list[Any]:
    """The batch's events, its request's, and every event the batch lists (the events of
    an Evidence Pack besides the roster's), each once, in that order."""
    ids = [f"{batch.id}/{v}" for v in range(1, batch.version + 1)]
    if request is not None:
        ids += [f"{request.id}/{v}" for v in range(1, request.version + 1)]
    ids += list(batch.event_ids)
    return list({(str(r.originator_id), r.originator_version): r
                 for r in batch_event_rows(app, ids, progress)}.values())
