"""The signed commands of a restore (ADR 0045): erasures re-applied after a backup is
restored, and the restored home's own KEK epoch.

A backup holds the log as it was when the backup was taken; the erasures recorded after
that are missing from it. ``ledger restore`` destroys their data keys again (the erasure
journal names them) before the ledger opens for use, then records here, for each item the
restored log still shows unerased, one signed ``*.erasure-reapplied`` event that
references the original batch, request, key-destruction event and tombstone. Nothing of
an item's content is read or written: the events carry ids, positions and times.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from uuid import UUID

from ledger.domain import OPERATOR, WRITER_OR_OPERATOR, ErasureReappliedMixin, KekEpochs

if TYPE_CHECKING:
    from ledger.application import LedgerApp

REASON = "erasure re-applied after restore"
CHUNK = 1000
"""Items per signed command (a large re-application is several commits; a restore that
stops in between starts over in a new staging folder, so no partial state survives)."""


@dataclass(frozen=True)
class Reapplication:
    """One item whose erasure the restored log lacks (in whole or in part)."""

    item_id: str
    mode: str | None
    """The tombstone's mode (hard, delete) when the journal holds one for the item."""
    batch_id: str | None
    request_id: str | None
    original: dict[str, Any] = field(default_factory=dict)
    """The source log's records: ``key_event``, ``key_seq``, ``key_at``, ``kek_epoch``,
    ``tombstone_event``, ``tombstone_seq``, ``tombstone_at`` (those it has)."""


def reapply_erasures(app: LedgerApp, items: Sequence[Reapplication], actor: str
                     ) -> list[str]:
    """Record one signed ``*.erasure-reapplied`` event per item (operator role), in
    commands of :data:`CHUNK` items. The item's data key must be destroyed already (the
    restore does it first); an item already erased in this log as far as the journal
    goes (its key destruction recorded, and its tombstone when there is one) is skipped.
    Returns the event ids written."""
    ids: list[str] = []
    for start in range(0, len(items), CHUNK):
        chunk = items[start:start + CHUNK]
        with app.writing(app.signer(actor), OPERATOR) as at:
            aggs: list[Any] = app.reader.get_many([UUID(i.item_id) for i in chunk])
            todo = []
            for agg, item in zip(aggs, chunk, strict=True):
                event = getattr(type(agg), "ErasureReapplied", None)
                if event is None or not issubclass(event, ErasureReappliedMixin):
                    continue  # not an erasable item (cannot happen for a journal's ids)
                done_key = getattr(agg, "data_key_destroyed_at", None) is not None
                done_tomb = item.mode is None or \
                    getattr(agg, "status", None) in ("hard-redacted", "deleted")
                if done_key and done_tomb:
                    continue
                agg.trigger_event(event, timestamp=at, key_id=item.item_id, reason=REASON,
                                  kek_epoch=item.original.get("kek_epoch"), mode=item.mode,
                                  batch_id=item.batch_id, request_id=item.request_id,
                                  original=dict(item.original))
                todo.append(agg)
            if todo:
                ids += app.commit(*todo)
    return ids


def record_restored_epoch(app: LedgerApp, actor: str, *, epoch: int, previous: int,
                          store: str, forgotten: Sequence[int], backup: dict[str, Any]
                          ) -> list[str]:
    """Record the restored home's own KEK epoch (``kek.epoch-restored``), signed."""
    from ledger.epochs import epochs_aggregate

    with app.writing(app.signer(actor), WRITER_OR_OPERATOR) as at:
        agg = epochs_aggregate(app, at)
        agg.trigger_event(KekEpochs.EpochRestored, timestamp=at, epoch=epoch,
                          previous=previous, store=store, forgotten=sorted(forgotten),
                          backup=backup)
        return app.commit(agg)
