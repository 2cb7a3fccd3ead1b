"""Saving a command's events: eventsourcing's ``Application.save``, rewritten (ADR 0008).

:meth:`EventSaver.save` is what ``LedgerApp.commit`` runs: it creates the data keys of new
items that carry content, has the mapper sign and seal the events, stores the keys while
the envelopes are signed (the keystore commits them before any event they encrypt is
inserted), inserts the rows with the recorder and extends the Merkle tree. It leaves out
the library's two runtime-Protocol checks per object (about 9 µs each, more than signing
an event) and its ``Recording`` objects: the ledger takes no snapshots, fast-forwards its
aggregate cache instead of filling it on save and overrides no notify hook, so mapping
the pending events and inserting them is everything ``save`` does here. If saving fails,
the keys created for it are discarded, so nothing is left behind.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any
from uuid import UUID

import structlog
from eventsourcing.domain import Aggregate
from eventsourcing.persistence import StoredEvent

from keys.datakeys import DataKeyStore
from keys.errors import KeystoreError
from ledger import clock, faults
from ledger.mapper import SigningMapper
from ledger.transparency import TransparencyLog

log = structlog.get_logger("ledger")

__all__ = ["EventSaver", "new_key_ids"]

_PERSONAL_FIELDS: dict[type, tuple[str, ...]] = {}  # event class -> its PERSONAL fields


def new_key_ids(items: Sequence[Any]) -> list[str]:
    """Ids of the new items among the pending events of ``items`` (aggregates or bare
    events) that carry content to seal: each gets a data key before it is saved."""
    pending: list[Any] = []
    for item in items:
        pending.extend(item.pending_events if isinstance(item, Aggregate) else (item,))
    new_keys: list[str] = []
    personal_of = _PERSONAL_FIELDS
    for ev in pending:
        cls = type(ev)
        personal = personal_of.get(cls)
        if personal is None:
            personal = personal_of[cls] = tuple(getattr(cls, "PERSONAL", ()))
        if ev.originator_version == 1 and personal and any(
                getattr(ev, f, None) is not None for f in personal):
            new_keys.append(str(ev.originator_id))
    return new_keys


class EventSaver:
    """Saves commands' events into one ledger's stores (called under the write lock)."""

    def __init__(self, recorder: Any, mapper: SigningMapper, datakeys: DataKeyStore,
                 tlog: TransparencyLog, exists: Callable[[UUID], bool]) -> None:
        self.recorder = recorder
        self.mapper = mapper
        self.datakeys = datakeys
        self.tlog = tlog
        self.exists = exists

    def save(self, items: Sequence[Any],
             library_save: Callable[..., Sequence[Any]] | None = None) -> Sequence[StoredEvent]:
        """Save the pending events of ``items`` in the order given; returns the stored
        events. ``library_save``: eventsourcing's own ``save``, for an application that
        takes snapshots (not enabled, ADR 0001)."""
        new_keys = new_key_ids(items)
        at = clock.now()
        mapper: Any = self.mapper
        mapper.take_sealed()
        if library_save is not None:
            self.datakeys.create_many(new_keys, at)
            try:
                saved: Sequence[Any] = [r.notification for r in library_save(*items)]
            except BaseException:
                self.datakeys.discard(new_keys)
                raise
            ids: Sequence[int | None] = [n.id for n in saved]
        else:
            # The keys are made first and stored while the envelopes are signed (ADR 0008):
            # the keystore commits them before any event they encrypt is inserted.
            keys = self.datakeys.generate(new_keys)
            stored = False

            def store_keys() -> None:
                nonlocal stored
                try:
                    self.datakeys.store(keys, at)
                except KeystoreError:
                    # a key an interrupted command stored for an event it never committed
                    # (an orphan) is discarded, and this command stores its own
                    if not self.discard_orphans(keys):
                        raise
                    self.datakeys.store(keys, at)
                stored = True
                faults.point("keys-stored")  # the window of issue 20, item 4

            try:
                events: list[Any] = []
                for item in items:
                    events.extend(item.collect_events() if isinstance(item, Aggregate)
                                  else (item,))
                saved = mapper.to_stored_events(events, keys, store_keys)
                ids = self.recorder.insert_events(saved) or [None] * len(saved)
            except BaseException:
                if stored:  # never keys that failed to store: their ids may be another's
                    self.datakeys.discard(keys)
                raise
        self.extend_tree(saved, ids, mapper.take_sealed())
        return saved

    def discard_orphans(self, key_ids: Iterable[str]) -> list[str]:
        """Keys in the keystore for items that have no event: stored by a command that
        was killed between the keystore's commit and the event store's (they encrypt
        nothing that was committed). Called under the write lock, so no command of
        another process is between those two commits. Discards them; returns their ids,
        or [] when one of the ids belongs to an item that exists (a real conflict)."""
        present = sorted(self.datakeys.present(key_ids))
        if not present or any(self.exists(UUID(k)) for k in present):
            return []
        self.datakeys.discard(present)
        log.warning("datakeys.orphans_discarded", count=len(present))
        return present

    def extend_tree(self, saved: Sequence[Any], ids: Sequence[int | None],
                    sealed: Sequence[tuple[int, bytes]]) -> None:
        """Add the new events to the Merkle tree. The events are already committed, so a
        failure here is logged, not raised; `ledger checkpoint` and `verify` catch up."""
        try:
            if len(sealed) != len(saved):
                self.tlog.catch_up(self.recorder)
                return
            self.tlog.append_sealed(
                [(seq, nid, s, sig) for (seq, sig), nid, s in zip(sealed, ids, saved,
                                                                  strict=True)],
                self.recorder)
        except Exception as e:
            log.warning("tlog.catch_up_failed", error=e.__class__.__name__)
