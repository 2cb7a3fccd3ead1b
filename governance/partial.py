"""Partial outcomes of an erasure and the legal holds that can cause them (ADR 0047).

An erasure that cannot erase everything it was approved to erase ends ``partial``
(``batch.ended-partial`` and ``request.ended-partial``, signed) with machine-readable
reasons, instead of failing or waiting. The reasons hold ids, route names, hold ids,
counts and exception class names, never content and never an exception's message (a
driver's message can quote SQL parameters):

* ``store-unreachable``: ``route``, ``model``, ``stage`` (``catch-up``, ``purge``,
  ``compact``, ``probe``), ``attempts``, ``error`` (the exception's class): a read-model
  route whose store could not be reached after :data:`ATTEMPTS` tries. The keys already
  destroyed stay destroyed; the routes that were purged and probed are in the record's
  ``reach`` as ``not-reachable``; this one is ``not-checked``, and no item gets a
  tombstone (none has been reached everywhere).
* ``legal-hold``: ``hold`` (its id in the policy), ``reason`` (the policy's words: a
  matter, never a person), the held ``atoms``, ``artifacts``, ``subjects`` and
  ``records``: kept, keys and all, while the hold is in the enforced policy. The other
  items are erased, probed, scanned and tombstoned.

Review flags (memories of *others* that refer to the erased person) and copies still
pending a KEK rotation are not partial outcomes: neither is something the request asked
to erase and the erasure failed to (ADR 0047 says why); the request register lists them
as follow-ups of a completed request (governance/register.py).

Legal holds are a rule of the memoryPolicy (``rightToBeForgottenSla.legalHolds``, by hold
id: ``reason``, ``subjects`` by ref, ``privacyClasses``; schemas/memory-policy.json): an
item is held when a hold names its subject's ref (when the hold names subjects) and its
privacy class (when the hold names classes: atoms only); a subject's own record is held
while any of its items is. Only an enforced policy holds, and the policy in force when
the erasure runs decides (a hold added after the plan still holds; a lifted one no
longer does).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any
from uuid import UUID

from ledger import policy_rules

if TYPE_CHECKING:
    from ledger.application import LedgerApp

STORE_UNREACHABLE = "store-unreachable"
LEGAL_HOLD = "legal-hold"
BLOCKING = (STORE_UNREACHABLE, LEGAL_HOLD)
"""The reason codes of a partial outcome (signed in ``*.ended-partial``)."""

FLAGGED_FOR_REVIEW = "flagged-for-review"
COPIES_PENDING = "copies-pending"
REJECTED = "rejected"
"""Reason codes the register derives (never signed as a partial outcome): a completed
request's open review flags and copies pending a KEK rotation; a rejected request's code."""

NOT_CHECKED = "not-checked"
"""A route's ``reach`` in a partial record when its store could not be reached: it was
neither purged nor probed (beside ``not-reachable`` and ``reachable``)."""

ATTEMPTS = 3
"""Tries of each step against a route's store before it counts as unreachable."""
BACKOFF_S = (0.5, 2.0)
"""Seconds to wait before the second and the third try."""

KINDS = ("atoms", "artifacts", "subjects", "records")
ATOMS_MODEL = "atoms"
"""The read model an erasure reads its targets' words from (before any key is destroyed):
the one store it cannot start without."""


# ----------------------------------------------------------------------------- holds
def holds_in_force(policy: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """The legal holds of the enforced policy, by id (empty without one)."""
    doc = policy_rules.enforced(policy) or {}
    sla = doc.get("rightToBeForgottenSla")
    holds = sla.get("legalHolds") if isinstance(sla, Mapping) else None
    if not isinstance(holds, Mapping):
        return {}
    return {str(k): dict(v) for k, v in holds.items() if isinstance(v, Mapping)}


def _covers(hold: Mapping[str, Any], ref: str | None, privacy_class: str | None,
            is_atom: bool) -> bool:
    subjects = hold.get("subjects")
    classes = hold.get("privacyClasses")
    if subjects and ref not in subjects:
        return False
    if classes:
        return is_atom and privacy_class in classes
    return bool(subjects)


def held_items(app: LedgerApp, targets: Mapping[str, Sequence[str]],
               holds: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """Item id -> the id of the first hold (in id order) that keeps it, among ``targets``
    (``{"atoms": [...], "artifacts": [...], "subjects": [...], "records": [...]}``).
    Reads the items' aggregates (subject, privacy class), not a read model: holds are
    decided even when a read model is down. Empty, reading nothing, without holds."""
    if not holds:
        return {}
    ids = [UUID(i) for k in KINDS for i in targets.get(k, [])]
    if not ids:
        return {}
    items = {str(a.id): a for a in app.reader.get_many(ids)}
    owners = {str(getattr(a, "subject_id", "") or "") for a in items.values()}
    owners |= set(targets.get("subjects", []))
    owners.discard("")
    refs = {str(s.id): getattr(s, "ref", None)
            for s in app.reader.get_many([UUID(o) for o in sorted(owners)])}
    out: dict[str, str] = {}
    for kind in ("atoms", "artifacts", "records"):
        for item in targets.get(kind, []):
            agg = items.get(item)
            ref = refs.get(str(getattr(agg, "subject_id", "")))
            pc = getattr(agg, "privacy_class", None) if kind == "atoms" else None
            for hid in sorted(holds):
                if _covers(holds[hid], ref, pc, kind == "atoms"):
                    out[item] = hid
                    break
    owner_of = {i: str(getattr(items.get(i), "subject_id", "")) for i in out}
    for subject in targets.get("subjects", []):
        ref = refs.get(subject)
        named = [hid for hid in sorted(holds) if _covers(holds[hid], ref, None, False)]
        kept = [hid for i, hid in sorted(out.items()) if owner_of.get(i) == subject]
        if named or kept:
            out[subject] = (named or kept)[0]
    return out


def hold_reasons(targets: Mapping[str, Sequence[str]], held: Mapping[str, str],
                 holds: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One ``legal-hold`` reason per hold that keeps items, with the items by kind."""
    out = []
    for hid in sorted(set(held.values())):
        reason: dict[str, Any] = {"code": LEGAL_HOLD, "hold": hid,
                                  "reason": str(holds.get(hid, {}).get("reason", ""))}
        for kind in KINDS:
            reason[kind] = sorted(i for i in targets.get(kind, []) if held.get(i) == hid)
        out.append(reason)
    return out


# ----------------------------------------------------------------------------- reasons
def unreachable_reason(route: str, model: str, stage: str, attempts: int,
                       error: BaseException) -> dict[str, Any]:
    return {"code": STORE_UNREACHABLE, "route": route, "model": model, "stage": stage,
            "attempts": attempts, "error": type(error).__name__}


def codes(reasons: Iterable[Mapping[str, Any]]) -> list[str]:
    """``store-unreachable:keyword-index``, ``legal-hold:H-7``: one token per reason."""
    out = []
    for r in reasons:
        code = str(r.get("code"))
        detail = r.get("route") if code == STORE_UNREACHABLE else r.get("hold") \
            if code == LEGAL_HOLD else r.get("detail")
        out.append(f"{code}:{detail}" if detail not in (None, "") else code)
    return out


def words(reason: Mapping[str, Any]) -> str:
    """One reason for people (ids and counts only)."""
    code = reason.get("code")
    if code == STORE_UNREACHABLE:
        return (f"the store of route {reason.get('route')} could not be reached "
                f"({reason.get('stage')}, {reason.get('attempts')} attempts, "
                f"{reason.get('error')}): it was neither purged nor probed")
    if code == LEGAL_HOLD:
        n = sum(len(reason.get(k) or []) for k in KINDS)
        return (f"{n} item{'s' if n != 1 else ''} kept under legal hold "
                f"{reason.get('hold')} ({reason.get('reason')})")
    return str(code)


def partial_line(reasons: Sequence[Mapping[str, Any]]) -> str:
    """All the reasons of a partial outcome in one line."""
    return "; ".join(words(r) for r in reasons) or "no reason recorded"


__all__ = ["ATOMS_MODEL", "ATTEMPTS", "BACKOFF_S", "BLOCKING", "COPIES_PENDING",
           "FLAGGED_FOR_REVIEW", "LEGAL_HOLD", "NOT_CHECKED", "REJECTED", "STORE_UNREACHABLE",
           "codes", "held_items", "hold_reasons", "holds_in_force", "partial_line",
           "unreachable_reason", "words"]
