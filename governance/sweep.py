"""`ledger sweep`: the memoryPolicy's retention and decay rules, executed (ADR 0014).

What is due, at the command clock ``now`` (``LEDGER_NOW`` honoured):

* **Retention** (``retentionPolicy``, Persona Schema §7): an atom of privacy class C is due
  when ``created_at + N x 24 h <= now``, N being ``perPrivacyClass[C]``, else
  ``defaultRetentionDays`` (which also covers atoms without a class). Only values the
  policy states are enforced; a policy without ``retentionPolicy`` sweeps nothing for
  retention. Due atoms of ``non-pii`` and ``aggregate`` are archived (signed archive
  redactions; they hold no personal data, so they stay for audit out of retrieval). Due
  atoms of every other class, and unclassified ones, are erased: one hard erasure
  (``governance.erasure.hard_erase``, mode ``delete``: keys destroyed, every route purged
  and probed, raw scan, signed tombstones) for the whole sweep. Archived or otherwise
  retired atoms of those classes are erased too when their retention ends.
* **Decay** (§3, ADR 0050): an active atom whose current salience is below its decay
  profile's ``minimumSalience`` is archived by a signed ``Atom.Archived`` event that
  carries that salience, the minimum and the instant. Only atoms with a decay profile
  (their own, or the policy's ``decayPolicy`` default for their kind or class) decay; the
  others keep their salience and are never due here. Recall never drops an atom for its
  salience: archival by this rule is the only way decay takes one out of recall.
* **KEK rotation** (``rightToBeForgottenSla.kekRotationDays``, ADR 0044): when the active
  key-encryption-key epoch began that many days ago or more (or keys are not wrapped yet,
  or a rotation was interrupted), the sweep rotates it after its other work, so every
  copy of a key destroyed before (backups, WAL segments, replicas, dumps) is beyond use.
* **Tombstone records** (``rightToBeForgottenSla.tombstoneRetentionDays``): the atom store
  keeps the record of an erased atom (ids, labels, times; never content) for that many
  days after its tombstone; then the sweep drops that row. The signed tombstone event
  stays in the append-only log (the log and Evidence Packs must still verify); a rebuild
  of the atom store brings the row back until the next sweep drops it again.

Cost follows what is due: each rule is one indexed range query on the atom store
(``proj_atoms_retention``, ``proj_atoms_fading``, ``proj_atoms_tombstones``), never a scan
of every atom or aggregate. A sweep holds its own lock (one sweep at a time per ledger;
a second one stops with exit 2) and each write is a normal ledger command under the
write lock; a repeated sweep finds nothing due and writes nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import structlog

from governance.erasure import Targets, check_operator, hard_erase
from governance.partial import held_items, holds_in_force
from ledger import clock, locks, policy_rules
from ledger.errors import ConflictError
from ledger.inputs import PRIVACY_CLASSES
from ledger.progress import Steps
from ledger.progress import report as tell
from projections import decay
from projections.atoms import AtomReads, decay_state
from projections.memory import parse_time
from projections.service import Projections

if TYPE_CHECKING:
    from ledger.application import LedgerApp

log = structlog.get_logger("governance.sweep")

__all__ = ["ARCHIVE_CLASSES", "Due", "SweepPlan", "plan_sweep", "retention_days", "sweep"]

ARCHIVE_CLASSES = ("non-pii", "aggregate")
"""Classes whose atoms are archived, not erased, when their retention ends."""
LIVE = ("active", "soft-redacted", "archived", "expired", "superseded")
"""Statuses of an atom whose record and content the ledger still holds."""
ARCHIVABLE = ("active", "soft-redacted")
_DAY = timedelta(days=1)


@dataclass(frozen=True)
class Due:
    """One atom a rule makes due: what happens to it, why, and since when."""

    atom_id: str
    privacy_class: str | None
    action: str  # "erase" | "archive" | "drop-tombstone-record"
    rule: str  # "retention" | "decay" | "tombstone-retention"
    due_at: str
    reason: str

    def as_json(self) -> dict[str, Any]:
        return {"atom_id": self.atom_id, "privacy_class": self.privacy_class,
                "action": self.action, "rule": self.rule, "due_at": self.due_at,
                "reason": self.reason}


@dataclass
class SweepPlan:
    now: str
    policy_event_id: str | None
    erase: list[Due] = field(default_factory=list)
    archive: list[Due] = field(default_factory=list)
    """Retention archives (``Atom.Redacted`` mode archive) and decay archives
    (``Atom.Archived``; ``decayed`` holds the values each of those records)."""
    decayed: dict[str, dict[str, Any]] = field(default_factory=dict)
    drop: list[Due] = field(default_factory=list)
    kek: dict[str, Any] | None = None
    """The KEK rotation, when the policy asks for one: epoch, due_at, due (bool)."""

    @property
    def due(self) -> list[Due]:
        return [*self.erase, *self.archive, *self.drop]

    @property
    def empty(self) -> bool:
        return not (self.erase or self.archive or self.drop or self.rotation_due)

    @property
    def rotation_due(self) -> bool:
        return bool(self.kek and self.kek["due"])


def kek_rotation(app: LedgerApp, policy: Mapping[str, Any], now: datetime
                 ) -> dict[str, Any] | None:
    """Whether the policy's ``kekRotationDays`` make a KEK rotation due at ``now``: the
    active epoch, when it began, when the next rotation is due and whether it is. Due at
    once when keys are not wrapped yet (epoch 0) or a rotation was interrupted. None
    when the policy sets no ``kekRotationDays``."""
    doc = policy.get("memoryPolicy", policy)
    days = (doc.get("rightToBeForgottenSla") or {}).get("kekRotationDays")
    if days is None:
        return None
    rows = app.reader.kek_epochs()
    active = [r for r in rows if r.state == "active"]
    if not active or any(r.state == "retiring" for r in rows):
        return {"epoch": active[0].epoch if active else 0, "started_at": None,
                "due_at": _instant(now), "due": True, "kekRotationDays": int(days)}
    began = datetime.fromisoformat(active[0].started_at)
    due_at = began + int(days) * _DAY
    return {"epoch": active[0].epoch, "started_at": _instant(began),
            "due_at": _instant(due_at), "due": due_at <= now, "kekRotationDays": int(days)}


# ----------------------------------------------------------------------------- the rules
def retention_days(doc: Mapping[str, Any], privacy_class: str | None) -> int | None:
    """Days an atom of this class is kept (None: the policy states no retention for it)."""
    rp = doc.get("retentionPolicy")
    if not isinstance(rp, Mapping):
        return None
    per = rp.get("perPrivacyClass") or {}
    if privacy_class is not None and privacy_class in per:
        return int(per[privacy_class])
    default = rp.get("defaultRetentionDays")
    return None if default is None else int(default)


def _instant(t: datetime) -> str:
    return clock.format_instant(t)


def plan_sweep(proj: Projections, policy: Mapping[str, Any], now: datetime) -> SweepPlan:
    """What is due at ``now`` under ``policy`` (as ``LedgerApp.policy()`` gives it).

    Reads the atom store only (call ``proj.catch_up()`` first); writes nothing.
    """
    doc = policy_rules.enforced(policy) or {}
    plan = SweepPlan(now=_instant(now), policy_event_id=policy.get("event_id"))
    if not doc:
        return plan
    with proj.atoms.reading() as reads:
        taken = _retention_due(reads, doc, now, plan)
        _decay_due(reads, now, plan, taken)
        _tombstone_records_due(reads, doc, now, plan)
    return plan


def _retention_due(reads: AtomReads, doc: Mapping[str, Any], now: datetime,
                   plan: SweepPlan) -> set[str]:
    """1. Retention, one indexed range per class: privacy_class = C, status IN (...),
    created_at <= now - N days. Returns the atoms it made due."""
    taken: set[str] = set()
    for cls in [*PRIVACY_CLASSES, None]:
        days = retention_days(doc, cls)
        if days is None:
            continue
        archive = cls in ARCHIVE_CLASSES
        label = cls or "unclassified"
        for r in reads.retention_due(cls, ARCHIVABLE if archive else LIVE,
                                     _instant(now - days * _DAY)):
            due_at = _instant(parse_time(r.created_at) + days * _DAY)
            reason = (f"memoryPolicy retention: {label} atoms are kept {days} days "
                      f"(policy event {plan.policy_event_id})")
            (plan.archive if archive else plan.erase).append(
                Due(str(r.atom_id), cls, "archive" if archive else "erase", "retention",
                    due_at, reason))
            taken.add(str(r.atom_id))
    return taken


def _decay_due(reads: AtomReads, now: datetime, plan: SweepPlan, taken: set[str]) -> None:
    """2. Decay: salience below the profile's minimumSalience. fades_at (indexed) is when
    salience drops below the retrieval threshold 0.15; below minimumSalience comes later
    for every profile whose minimumSalience <= 0.15, so it is a sound pre-filter; the
    exact test runs on the few rows it returns."""
    for row in reads.atoms_fading_by(plan.now):
        if row["atom_id"] in taken:
            continue
        state = decay_state(row)
        now_salience = state.salience(now)
        if state.profile.decays and decay.is_archivable(now_salience, state.profile):
            reason = (f"decay: salience {now_salience:.4f} below minimumSalience "
                      f"{state.profile.minimum_salience:g} (Persona Schema §3; profile "
                      f"from {row.get('profile_source') or 'atom'})")
            plan.archive.append(Due(
                str(row["atom_id"]), row["privacy_class"], "archive", "decay",
                str(row["fades_at"]), reason))
            plan.decayed[str(row["atom_id"])] = {
                "salience": round(now_salience, 6),
                "minimum_salience": state.profile.minimum_salience,
                "computed_at": plan.now, "reason": reason}


def _tombstone_records_due(reads: AtomReads, doc: Mapping[str, Any], now: datetime,
                           plan: SweepPlan) -> None:
    """3. Tombstone records past tombstoneRetentionDays."""
    sla = doc.get("rightToBeForgottenSla")
    keep = sla.get("tombstoneRetentionDays") if isinstance(sla, Mapping) else None
    if keep is None:
        return
    for t in reads.tombstone_records_by(_instant(now - int(keep) * _DAY)):
        plan.drop.append(Due(
            str(t.atom_id), t.privacy_class, "drop-tombstone-record",
            "tombstone-retention",
            _instant(parse_time(t.redacted_at) + int(keep) * _DAY),
            f"rightToBeForgottenSla.tombstoneRetentionDays {int(keep)}"))


# ----------------------------------------------------------------------------- the command
def sweep_lock(app: LedgerApp) -> contextlib.AbstractContextManager[None]:
    """One sweep at a time per ledger; a second one stops at once (cron-safe)."""
    return locks.held(app.config, "sweep", busy=ConflictError(
        "another `ledger sweep` is running on this ledger",
        hint="let it finish; sweeps are idempotent, run it again later"))


def sweep(app: LedgerApp, proj: Projections, *, operator: str = "operator", dry_run: bool = False,
          progress: Steps | None = None) -> dict[str, Any]:
    """Run the retention and decay rules of the policy in force; return what was done.
    ``progress`` hears each step and its count (ledger/progress.py)."""
    check_operator(app, operator)  # refuse before anything is written; a dry run too
    policy = policy_rules.in_force(app.reader)
    now = clock.now()
    if policy is None:
        return _report(SweepPlan(now=_instant(now), policy_event_id=None), dry_run,
                       "no-policy")
    with sweep_lock(app):
        plan = _due(app, proj, policy, now, progress)
        report = _report(plan, dry_run, "nothing-due" if plan.empty
                         else ("planned" if dry_run else "swept"))
        if dry_run or plan.empty:
            log.info("sweep.planned" if dry_run else "sweep.nothing_due",
                     due=len(plan.due), now=plan.now)
            return report
        _carry_out(app, proj, plan, report, operator, progress)
    log.info("sweep.done", archived=report["archived"]["count"],
             erased=report["erased"]["count"], batch_id=report["erased"]["batch_id"],
             tombstone_records=report["tombstone_records_dropped"]["count"])
    return report


def _due(app: LedgerApp, proj: Projections, policy: Mapping[str, Any], now: datetime,
         progress: Steps | None) -> SweepPlan:
    """The read models caught up, the plan at ``now``, less what a legal hold keeps, and
    the KEK rotation the policy asks for."""
    proj.catch_up_steps(progress)
    tell(progress, "Finding what is due", 0, 1)
    proj.atoms.ensure_indexes()
    plan = plan_sweep(proj, policy, now)
    held = held_items(app, {"atoms": [d.atom_id for d in plan.erase]},
                      holds_in_force(policy))
    if held:  # a legal hold keeps them: not due while it lasts (ADR 0047)
        plan.erase = [d for d in plan.erase if d.atom_id not in held]
        log.info("sweep.held", atoms=len(held), holds=sorted(set(held.values())))
    plan.kek = kek_rotation(app, policy, now)
    tell(progress, "Finding what is due", 1, 1)
    return plan


def _carry_out(app: LedgerApp, proj: Projections, plan: SweepPlan, report: dict[str, Any],
               operator: str, progress: Steps | None) -> None:
    """Archive, erase, drop the tombstone records, rotate the KEK; into ``report``."""
    if plan.archive:
        tell(progress, "Archiving atoms", 0, len(plan.archive))
        ids = app.archive_atoms({d.atom_id: d.reason for d in plan.archive
                                 if d.rule != "decay"}, actor=operator)
        decayed = app.archive_decayed(plan.decayed, actor=operator)
        tell(progress, "Archiving atoms", len(plan.archive), len(plan.archive))
        report["archived"]["event_ids"] = ids + decayed
        report["archived"]["count"] = len(ids) + len(decayed)
        report["archived"]["by_rule"] = {"retention": len(ids), "decay": len(decayed)}
    if plan.erase:
        reason = (f"memoryPolicy retention sweep at {plan.now}: {len(plan.erase)} atoms "
                  f"past their class's retention (policy event {plan.policy_event_id})")
        result = hard_erase(app, proj, Targets(atoms=[d.atom_id for d in plan.erase]),
                            mode="delete", reason=reason, operator=operator,
                            progress=progress)
        report["erased"].update(batch_id=result["batch_id"], event_ids=result["event_ids"],
                                checkpoints=result.get("checkpoints"))
    if plan.drop:
        tell(progress, "Dropping tombstone records", 0, len(plan.drop))
        proj.catch_up()
        report["tombstone_records_dropped"]["count"] = proj.atoms.drop_tombstone_records(
            [d.atom_id for d in plan.drop])
        tell(progress, "Dropping tombstone records", len(plan.drop), len(plan.drop))
    if plan.rotation_due:  # last: it covers this sweep's own erasures too
        from ledger.epochs import rotate_kek

        report["kek_rotation"]["rotated"] = rotate_kek(
            app, operator, progress=progress).as_json()


def _report(plan: SweepPlan, dry_run: bool, status: str) -> dict[str, Any]:
    return {
        "status": status, "now": plan.now, "dry_run": dry_run,
        "policy_event_id": plan.policy_event_id, "due": [d.as_json() for d in plan.due],
        "archived": {"count": len(plan.archive), "atom_ids": [d.atom_id for d in plan.archive],
                     "event_ids": [],
                     "by_rule": {rule: sum(1 for d in plan.archive if d.rule == rule)
                                 for rule in ("retention", "decay")}},
        "erased": {"count": len(plan.erase), "atom_ids": [d.atom_id for d in plan.erase],
                   "batch_id": None, "event_ids": []},
        "tombstone_records_dropped": {"count": len(plan.drop),
                                      "atom_ids": [d.atom_id for d in plan.drop]},
        "kek_rotation": {**(plan.kek or {"due": False}), "rotated": None},
    }
