"""`ledger policy check`: Persona Schema §8 validation of the memories against the policy.

Warnings, never blockers (§8: "failure surfaces as a fixable warning"); each names a rule,
the id to fix and what to do:

* ``policy-coherence``: the policy itself (acknowledgment deadline after completion);
* ``consent-basis``: a memory whose consent basis does not match its privacy class
  (the write rule of ``ledger.policy_rules``, applied to what is already stored);
* ``retention``: past its class's retention but not swept yet; ``decay``: below its
  ``minimumSalience`` but still active; ``tombstone-retention``: a tombstone record kept
  past ``tombstoneRetentionDays`` (``ledger sweep`` fixes these three);
* ``max-atoms``: a subject with more active atoms than ``maxAtoms``;
* ``orphan-reference`` (reference integrity, checked with or without a policy): a live
  memory whose ``supersedes`` or artifact ids point at an erased or deleted item (or one
  the store no longer lists), whose text, gist, details or tags name the id or ref of an
  erased memory, or that carries an unresolved ``refers-to-erased`` review flag.

Reads the atom store (after catching up); writes nothing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from governance.sweep import LIVE, plan_sweep
from ledger import clock, policy_rules
from projections.service import Projections

if TYPE_CHECKING:
    from ledger.application import LedgerApp

__all__ = ["RULES", "check_policy"]

RULES = ("policy-coherence", "consent-basis", "retention", "decay", "tombstone-retention",
         "max-atoms", "orphan-reference")
_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9:._-]*[A-Za-z0-9]")
_ID_LIKE = re.compile(r"[0-9:._-]")
"""A ref is looked for in texts only if it looks like an id (a digit or separator in it):
a ref that is a plain word ("tea") would match ordinary prose."""
_FIX_SWEEP = "run `ledger sweep` (see `ledger sweep --dry-run`)"


def _warning(rule: str, item: str, message: str, fix: str,
             related: list[str] | None = None) -> dict[str, Any]:
    return {"rule": rule, "id": item, "message": message, "fix": fix,
            "related": sorted(related or [])}


def check_policy(app: LedgerApp, proj: Projections, now: datetime | None = None
                 ) -> dict[str, Any]:
    """Every §8 warning for the ledger as it is now; ``{"policy": ..., "warnings": [...]}``."""
    at = now or clock.now()
    policy = policy_rules.in_force(app.reader)
    doc = policy_rules.enforced(policy) or {}
    proj.catch_up()
    warnings: list[dict[str, Any]] = []
    if doc:
        warnings += _coherence(doc, str(policy.get("event_id") if policy else ""))
        warnings += _consent(proj)
        plan = plan_sweep(proj, policy or {}, at)
        for d in plan.due:
            warnings.append(_warning(
                d.rule, d.atom_id,
                f"{d.action} due since {d.due_at} ({d.reason})", _FIX_SWEEP))
        if doc.get("maxAtoms") is not None:
            warnings += _max_atoms(proj, int(doc["maxAtoms"]))
    warnings += _orphans(proj)
    return {"now": clock.format_instant(at),
            "policy_event_id": policy.get("event_id") if policy else None,
            "policy_in_force": bool(doc), "warnings": warnings,
            "counts": {r: sum(w["rule"] == r for w in warnings) for r in RULES}}


def _coherence(doc: Mapping[str, Any], event_id: str) -> list[dict[str, Any]]:
    sla = doc.get("rightToBeForgottenSla")
    if isinstance(sla, Mapping):
        ack, done = sla.get("acknowledgmentHours"), sla.get("completionHours")
        if ack is not None and done is not None and ack > done:
            return [_warning("policy-coherence", event_id,
                             f"acknowledgmentHours {ack} is after completionHours {done}",
                             "set a policy whose acknowledgment comes before completion "
                             "(`ledger policy set`)")]
    return []


def _consent(proj: Projections) -> list[dict[str, Any]]:
    out = []
    with proj.atoms.reading() as reads:
        rows = reads.consent_candidates(LIVE, list(policy_rules.CONSENT_BASES_BY_CLASS),
                                        list(policy_rules.SENSITIVE_SENSITIVITIES))
    for r in rows:
        ext = json.loads(r.extensions) if r.extensions else None
        if policy_rules.is_placeholder(ext):
            continue
        problem = policy_rules.consent_problem(r.privacy_class, r.consent_basis,
                                               r.sensitivity)
        if problem is not None:
            out.append(_warning("consent-basis", str(r.atom_id), f"atom {problem[0]}",
                                f"{problem[1]}: correct it with `ledger atom correct`, "
                                "or redact it"))
    return out


def _max_atoms(proj: Projections, limit: int) -> list[dict[str, Any]]:
    with proj.atoms.reading() as reads:
        over = reads.subjects_over(limit)
    return [_warning("max-atoms", str(r.subject_id),
                     f"subject has {r.n} active atoms; the policy's maxAtoms is {limit}",
                     f"archive {r.n - limit} of its lowest-salience atoms (`ledger redact "
                     "ATOM --mode archive`); new writes archive the excess themselves")
            for r in over]


def _orphans(proj: Projections) -> list[dict[str, Any]]:
    with proj.atoms.reading() as reads:
        gone: dict[str, str] = {}
        for g in reads.erased_atom_refs():
            gone[str(g.atom_id)] = str(g.atom_id)
            if g.ref and _ID_LIKE.search(str(g.ref)):
                gone[str(g.ref)] = str(g.atom_id)
        known = reads.atom_ids()
        arts = reads.artifact_statuses()
        live = reads.references_of_live(LIVE)
    out = []
    for r in live:
        aid = str(r.atom_id)
        if r.supersedes and (r.supersedes in gone or r.supersedes not in known):
            out.append(_warning("orphan-reference", aid,
                                f"supersedes atom {r.supersedes}, which was erased",
                                "review it: re-anonymise (`ledger review resolve`) or redact "
                                "it", [r.supersedes]))
        dead = [x for x in json.loads(r.artifact_ids or "[]")
                if arts.get(x, "deleted") == "deleted"]
        if dead:
            out.append(_warning("orphan-reference", aid,
                                f"cites deleted artifacts {', '.join(dead)}",
                                "re-evaluate its sources (`ledger artifact delete` cascades "
                                "do this), or redact it", dead))
        texts = [r.text or "", r.gist or "", *json.loads(r.tags or "[]"),
                 *(str(d.get("content", "")) for d in json.loads(r.details or "[]"))]
        named = sorted({gone[t] for x in texts for t in _TOKEN.findall(x)
                        if t in gone and gone[t] != aid})
        if named:
            out.append(_warning("orphan-reference", aid,
                                f"names erased memories {', '.join(named)} in its content",
                                "re-anonymise it (`ledger review resolve ATOM --action "
                                "reanonymise --text ...`) or redact it", named))
        if "refers-to-erased" in json.loads(r.flags or "[]"):
            out.append(_warning("orphan-reference", aid,
                                "flagged refers-to-erased (it may refer to an erased memory) "
                                "and not yet reviewed",
                                "resolve it with `ledger review resolve`"))
    return out
