"""KEK epoch rotation: re-wrap every live data key under a new key-encryption key, then
destroy the old one (ADR 0044).

Once the old epoch's KEK is destroyed, every copy of a wrapped key made before the
rotation (a backup, a WAL segment, a replica's pages, a dump) is beyond use by anyone:
the erasures recorded before the rotation reach every copy.

The rotation is three steps, each recorded before the next begins, so a run killed at
any point is finished by running it again (the discipline of the erasure's state
machine, ADR 0019):

1. **start** (under the write lock): the new epoch's KEK is made in its store, the
   keystore makes it the epoch new keys are wrapped under (the old one is *retiring*),
   and a signed ``kek.epoch-started`` event records it;
2. **re-wrap** (in batches, outside the lock: writers go on): every key not under the
   new epoch is unwrapped and wrapped again; each row carries its epoch, so a resumed
   run takes the rest;
3. **destroy** (under the write lock): the keys written meanwhile under an old epoch
   are re-wrapped too, the keystore is compacted, then each retiring epoch with no key
   left under it has its KEK destroyed and a signed ``kek.epoch-destroyed`` event.

A KEK is destroyed only when the keystore holds no key wrapped under it, checked under
the write lock that every key store takes, so no data key is ever left wrapped only under
a destroyed KEK.
"""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import structlog
from eventsourcing.application import AggregateNotFoundError

from keys.kek import DEFAULT_SPEC, UNWRAPPED_EPOCH, check_kek_spec
from ledger import clock, faults
from ledger.domain import WRITER_OR_OPERATOR, KekEpochs
from ledger.errors import InputError
from ledger.progress import Steps, report

if TYPE_CHECKING:
    from ledger.application import LedgerApp

log = structlog.get_logger("ledger")

STEPS = ("kek-created", "epoch-begun", "epoch-recorded", "rewrapped:N", "compacted",
         "kek-destroyed")
"""The crash points of a rotation (``LEDGER_FAULT``, ledger/faults.py), in order."""


@dataclass
class Rotation:
    """What one ``ledger keys rotate-kek`` did."""

    epoch: int
    previous: int
    store: str
    resumed: bool
    rewrapped: int = 0
    destroyed: list[int] = field(default_factory=list)
    event_ids: list[str] = field(default_factory=list)
    started_at: str | None = None
    finished_at: str | None = None

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def epochs_id(app: LedgerApp) -> uuid.UUID:
    from ledger.reader import LEDGER_NAMESPACE

    return uuid.uuid5(LEDGER_NAMESPACE, f"{app.ledger_id}/kek-epochs")


def epochs_aggregate(app: LedgerApp, at: datetime) -> Any:
    """The ledger's :class:`KekEpochs` (a new, unsaved one, created ``at``, when no
    rotation ran yet)."""
    eid = epochs_id(app)
    try:
        return app.repository.get(eid)
    except AggregateNotFoundError:
        return KekEpochs._create(KekEpochs.Created, id=eid, timestamp=at)


def rotate_kek(app: LedgerApp, actor: str | None = "operator", to_store: str | None = None,
               progress: Steps | None = None) -> Rotation:
    """Start (or resume) a rotation and finish it; see the module's steps.

    ``to_store``: make the new epoch's KEK in another store (a ``pkcs11:`` URI, a
    ``file:`` folder) and keep it as the home's KEK store from now on: how a ledger moves
    onto a token. ``progress`` is told of the re-wrapping, batch by batch.
    """
    if to_store is not None:
        try:
            check_kek_spec(to_store)
        except ValueError as e:
            raise InputError(str(e)) from None
    rotation = _start(app, actor, to_store)
    todo = app.datakeys.keys_under(_others(app, rotation.epoch))
    stage = "Re-wrapping data keys"
    report(progress, stage, 0, todo)
    done = 0

    def step(n: int) -> None:
        nonlocal done
        done += n
        faults.point("rewrapped", done)
        report(progress, stage, done, todo)

    rotation.rewrapped += app.datakeys.rewrap(rotation.epoch, progress=step)
    _finish(app, actor, rotation)
    log.info("kek.rotated", epoch=rotation.epoch, rewrapped=rotation.rewrapped,
             destroyed=rotation.destroyed, resumed=rotation.resumed)
    return rotation


def _others(app: LedgerApp, epoch: int) -> list[int]:
    return [UNWRAPPED_EPOCH, *(r.epoch for r in app.datakeys.epoch_rows() if r.epoch != epoch)]


def _start(app: LedgerApp, actor: str | None, to_store: str | None) -> Rotation:
    ks = app.datakeys
    with app.writing(app.signer(actor), WRITER_OR_OPERATOR) as at:
        rows = ks.epoch_rows()
        active = [r for r in rows if r.state == "active"]
        agg = epochs_aggregate(app, at)
        unrecorded = [r for r in rows if r.state == "destroyed" and r.epoch != UNWRAPPED_EPOCH
                      and "destroyed_at" not in agg.epochs.get(str(r.epoch), {})]
        pending = any(r.state == "retiring" for r in rows) or bool(unrecorded) or (
            bool(active) and ks.keys_under(_others(app, active[0].epoch)) > 0)
        if pending:  # an interrupted rotation: finish it, start no other
            target = active[0]
            rotation = Rotation(target.epoch, _previous(rows, target.epoch), target.store,
                                resumed=True, started_at=target.started_at)
        else:
            spec = to_store or app.config.kek or DEFAULT_SPEC
            epoch = max((r.epoch for r in rows), default=UNWRAPPED_EPOCH) + 1
            store = ks.keks.store(spec)
            store.create(epoch)
            faults.point("kek-created")
            if store.spec != app.config.kek:
                _use_store(app, store.spec)
            ks.begin_epoch(epoch, store.spec, at)
            faults.point("epoch-begun")
            rows = ks.epoch_rows()
            rotation = Rotation(epoch, _previous(rows, epoch), store.spec, resumed=False,
                                started_at=at.isoformat())
        if str(rotation.epoch) not in agg.epochs:
            agg.trigger_event(KekEpochs.EpochStarted, timestamp=at, epoch=rotation.epoch,
                              previous=rotation.previous,
                              store=ks.keks.store(rotation.store).kind)
            rotation.event_ids += app.commit(agg)
            faults.point("epoch-recorded")
    return rotation


def _previous(rows: list[Any], epoch: int) -> int:
    return max((r.epoch for r in rows if r.epoch < epoch), default=UNWRAPPED_EPOCH)


def _use_store(app: LedgerApp, spec: str) -> None:
    """Make ``spec`` the home's KEK store (config.toml, replaced whole)."""
    from dataclasses import replace

    app.config = replace(app.config, kek=spec)
    app.config.write()
    app.datakeys.keks.spec = spec


def _finish(app: LedgerApp, actor: str | None, rotation: Rotation) -> None:
    ks = app.datakeys
    with app.writing(app.signer(actor), WRITER_OR_OPERATOR) as at:
        # keys stored under an old epoch by a process that had not seen the new one
        rotation.rewrapped += ks.rewrap(rotation.epoch)
        ks.compact()  # the old wrapped bytes out of the keystore's log and free pages
        faults.point("compacted")
        agg = epochs_aggregate(app, at)
        for row in ks.epoch_rows():
            if row.epoch >= rotation.epoch:
                continue
            if row.state != "destroyed":
                ks.retire(row.epoch, at)
                rotation.destroyed.append(row.epoch)
                faults.point("kek-destroyed")
            recorded = agg.epochs.get(str(row.epoch), {}).get("destroyed_at")
            if recorded is None:  # also one destroyed by a run killed before its event
                agg.trigger_event(KekEpochs.EpochDestroyed, timestamp=at, epoch=row.epoch,
                                  successor=rotation.epoch, rewrapped=rotation.rewrapped)
        if agg.pending_events:
            rotation.event_ids += app.commit(agg)
        rotation.finished_at = at.isoformat()


@dataclass(frozen=True)
class EpochState:
    """The keystore's epochs and the log's record of them, for `ledger keys epochs`."""

    epoch: int
    store: str
    state: str
    started_at: str
    destroyed_at: str | None
    keys: int


def epoch_states(app: LedgerApp) -> list[EpochState]:
    ks = app.datakeys
    return [EpochState(r.epoch, r.store, r.state, r.started_at, r.destroyed_at,
                       ks.keys_under([r.epoch])) for r in ks.epoch_rows()]


def epoch_age_days(app: LedgerApp, now: datetime | None = None) -> float | None:
    """Days since the active epoch began (None when keys are not wrapped yet)."""
    active = [r for r in app.datakeys.epoch_rows() if r.state == "active"]
    if not active:
        return None
    began = datetime.fromisoformat(active[0].started_at)
    return ((now or clock.now()) - began).total_seconds() / 86400
