"""The memoryPolicy on write (Persona Schema §4, §7, §8; docs/adr/0014).

Three rules hold for every atom an ``add_atom(s)`` or ``import_records`` command writes
while a policy with ``enabled: true`` is in force (no policy, or ``enabled: false``:
nothing is enforced):

* **consent-basis** (§4, §8): an atom's consent basis must match its privacy class.
  ``sensitive-pii`` needs ``explicit-consent``; ``guest-pii`` and ``staff-pii`` need a
  lawful basis (not ``not-applicable``, which §4 reserves for non-pii); ``non-pii``,
  ``aggregate`` and ``commercial-confidential`` need none. An atom without a privacy class
  whose Konshus sensitivity is ``medical``, ``financial`` or ``legal`` is held to the
  ``sensitive-pii`` rule (the class our Persona export gives it). Imports included.
* **min-salience-for-creation** (§7): a new memory below ``minSalienceForCreation`` is
  refused. Imports are exempt: the decision to form a memory was made at its source.
* **max-atoms** (§7, per subject): a write that takes a subject over ``maxAtoms`` active
  atoms archives that subject's lowest-salience active atoms in the same command (signed
  ``archive`` redactions, signed by the writer, whose role may sign redactions).

The first half of this module is pure (policy document and validated inputs in,
refusals or decisions out). The second half are the steps :class:`LedgerApp` runs inside
its write context; they read the event store only (ledger/ never imports projections/).
A refusal raises :class:`InputError` before anything is written: a batch is all or nothing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol
from uuid import UUID

import structlog

from ledger.domain import Atom
from ledger.errors import InputError
from ledger.inputs import SIDECAR


class PolicyHost(Protocol):
    """What the rules read of the ledger (``LedgerReader`` is one). The rules only decide:
    the application takes the write lock and commits (no call back into a command)."""

    def policy(self) -> dict[str, Any] | None: ...

    def created_atoms_of(self, subject_ids: Iterable[str]) -> dict[str, list[str]]: ...

    def get_many(self, ids: Iterable[UUID]) -> list[Any]: ...

log = structlog.get_logger("ledger.policy")

__all__ = [
    "CONSENT_BASES_BY_CLASS",
    "RULE_CONSENT",
    "RULE_MAX_ATOMS",
    "RULE_MIN_SALIENCE",
    "Refusal",
    "Standing",
    "check_atoms",
    "check_new_atoms",
    "choose_archived",
    "consent_problem",
    "current_salience",
    "effective_class",
    "enforced",
    "in_force",
    "is_placeholder",
    "over_limit",
    "refusal_error",
]

RULE_CONSENT = "consent-basis"
RULE_MIN_SALIENCE = "min-salience-for-creation"
RULE_MAX_ATOMS = "max-atoms"

LAWFUL_BASES = ("service-delivery", "legitimate-interest", "explicit-consent",
                "legal-obligation")
CONSENT_BASES_BY_CLASS: dict[str, tuple[str, ...]] = {
    "sensitive-pii": ("explicit-consent",),
    "guest-pii": LAWFUL_BASES,
    "staff-pii": LAWFUL_BASES,
}
"""Privacy classes that need a consent basis, and the bases each accepts. Classes not
listed (non-pii, aggregate, commercial-confidential) need none and accept any label."""

SENSITIVE_SENSITIVITIES = ("medical", "financial", "legal")
"""Konshus sensitivities that make an unclassified atom sensitive-pii for the consent rule."""

_MAX_LISTED = 5
_LN2 = math.log(2.0)
_DEFAULT_DECAY = {"half_life_days": 14.0, "rehearsal_boost": 1.4, "valence_protection": 0.3}


# ----------------------------------------------------------------------------- pure rules
def enforced(policy: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The memoryPolicy block to enforce, or None (no policy, or ``enabled`` is not true).

    Accepts what ``LedgerApp.policy()`` returns (``{"memoryPolicy": ...}``) or the block.
    """
    if not policy:
        return None
    doc = policy.get("memoryPolicy", policy)
    if not isinstance(doc, Mapping) or doc.get("enabled") is not True:
        return None
    return dict(doc)


def effective_class(privacy_class: str | None, sensitivity: str | None) -> tuple[str | None,
                                                                               bool]:
    """The class the consent rule applies to, and whether it was inferred from sensitivity."""
    if privacy_class:
        return privacy_class, False
    if sensitivity in SENSITIVE_SENSITIVITIES:
        return "sensitive-pii", True
    return None, False


def consent_problem(privacy_class: str | None, consent_basis: str | None,
                    sensitivity: str | None = None) -> tuple[str, str] | None:
    """(problem, what to do) if the consent basis does not match the class, else None."""
    cls, inferred = effective_class(privacy_class, sensitivity)
    allowed = CONSENT_BASES_BY_CLASS.get(cls or "")
    if not allowed or consent_basis in allowed:
        return None
    label = f"{cls} (from sensitivity {sensitivity})" if inferred else str(cls)
    has = f"consent basis {consent_basis}" if consent_basis else "no consent basis"
    needs = allowed[0] if len(allowed) == 1 else "one of " + ", ".join(allowed)
    problem = f"is {label} with {has}; {cls} needs {needs}"
    if cls == "sensitive-pii":
        fix = ("record the person's explicit consent and give consent basis explicit-consent "
               "(--consent-basis explicit-consent), or leave the memory out")
    else:
        fix = (f"give the lawful basis you rely on (--consent-basis {allowed[0]}, ...), "
               "or leave the memory out")
    if inferred:
        fix += "; or, if it is not sensitive, state its privacy class (--privacy-class)"
    return problem, fix


@dataclass(frozen=True)
class Refusal:
    """One atom a rule refuses: which rule, which atom, what is wrong, what to do."""

    rule: str
    atom: str
    problem: str
    fix: str

    def as_json(self) -> dict[str, str]:
        return {"rule": self.rule, "atom": self.atom, "problem": self.problem, "fix": self.fix}


def _name(inp: Any, index: int, total: int) -> str:
    ref = f"ref {inp.ref}, " if getattr(inp, "ref", None) else ""
    return f"atom {index + 1} of {total} ({ref}subject {inp.subject})"


def is_placeholder(extensions: Mapping[str, Any] | None) -> bool:
    """An import's tombstone placeholder: created only to be crypto-shredded at once."""
    side = (extensions or {}).get(SIDECAR)
    return isinstance(side, Mapping) and bool(side.get("placeholder"))


def check_atoms(policy: Mapping[str, Any] | None, inputs: Sequence[Any], *,
                imported: bool = False) -> list[Refusal]:
    """Every refusal the policy in force makes of these validated ``AtomInput`` values."""
    doc = enforced(policy)
    if doc is None:
        return []
    floor = doc.get("minSalienceForCreation")
    out: list[Refusal] = []
    for i, inp in enumerate(inputs):
        if is_placeholder(inp.extensions):
            continue
        name = _name(inp, i, len(inputs))
        problem = consent_problem(inp.privacy_class, inp.consent_basis, inp.sensitivity)
        if problem is not None:
            out.append(Refusal(RULE_CONSENT, name, *problem))
        if floor is not None and not imported and inp.salience < float(floor):
            out.append(Refusal(
                RULE_MIN_SALIENCE, name,
                f"has salience {inp.salience:g}, below the policy's minSalienceForCreation "
                f"{float(floor):g}",
                "give it a salience of at least that if it is worth remembering, or do not "
                "record it"))
    return out


def refusal_error(refusals: Sequence[Refusal], *, imported: bool = False) -> InputError:
    """One error naming the rule, the atoms and what to do; nothing was written."""
    what = "import" if imported else ("atom" if len(refusals) == 1 else "batch")
    lines = [f"{r.atom} {r.problem} (rule {r.rule})" for r in refusals[:_MAX_LISTED]]
    if len(refusals) > _MAX_LISTED:
        lines.append(f"... and {len(refusals) - _MAX_LISTED} more")
    rules = sorted({r.rule for r in refusals})
    fixes = list(dict.fromkeys(r.fix for r in refusals))
    hint = "; ".join(fixes[:2])
    if imported:
        hint += ("; imported memories keep the consent basis they carry: fix it at the "
                 "source, or leave those memories out of the file")
    return InputError(
        f"{what} refused by the memoryPolicy ({', '.join(rules)}): " + "; ".join(lines)
        + ". Nothing was written.", hint=hint)


def current_salience(salience: float, rehearsal_count: int, emotional_valence: float,
                     decay_profile: Mapping[str, Any] | None, created_at: datetime,
                     now: datetime) -> float:
    """Persona §3 salience now, in closed form from the recorded atom (ADR 0005).

    Each rehearsal rebases the baseline to its decayed value, so the baseline after any
    number of rehearsals is ``salience * exp(-ln2 * (last - created) / halfLife)`` and
    salience now is ``salience * boost**count * 2**(-(now - created) / halfLife)`` plus
    the valence floor, clamped to [0, 1]. ``projections.decay`` computes the same value
    step by step (tests/test_policy_enforcement.py checks they agree). An atom recorded
    without a profile does not decay (ADR 0050; a memoryPolicy ``decayPolicy`` default is
    not applied here).
    """
    if not decay_profile or decay_profile.get("function") == "none":
        return min(1.0, max(0.0, salience))  # no profile, no decay (ADR 0050)
    p = {**_DEFAULT_DECAY, **{k: v for k, v in (decay_profile or {}).items()
                              if k in _DEFAULT_DECAY and v is not None}}
    days = max(0.0, (now - created_at).total_seconds() / 86_400.0)
    floor = float(p["valence_protection"]) * abs(float(emotional_valence or 0.0))
    if salience <= 0.0:
        return min(1.0, floor)
    exponent = (math.log(salience) + rehearsal_count * math.log(float(p["rehearsal_boost"]))
                - _LN2 * days / float(p["half_life_days"]))
    decayed = math.inf if exponent > 709.0 else math.exp(exponent)
    return min(1.0, max(0.0, decayed + floor))


@dataclass(frozen=True, order=True)
class Standing:
    """An active atom's place in the maxAtoms ranking: lowest salience, then oldest first."""

    salience: float
    created_at: str
    atom_id: str


def choose_archived(limit: int, standings: Sequence[Standing]) -> list[str]:
    """The atoms to archive so that at most ``limit`` stay active (lowest salience first)."""
    excess = len(standings) - limit
    if excess <= 0:
        return []
    return [s.atom_id for s in sorted(standings)[:excess]]


# ----------------------------------------------------------------------------- write steps
def in_force(reader: PolicyHost) -> dict[str, Any] | None:
    """The policy in force as ``LedgerReader.policy()`` gives it, if enforcement is on."""
    policy = reader.policy()
    return policy if enforced(policy) is not None else None


def check_new_atoms(reader: PolicyHost, inputs: Sequence[Any], *,
                    imported: bool = False) -> dict[str, Any] | None:
    """Refuse the whole command if any atom breaks a rule; return the policy in force.

    Called first inside the write context, so the policy checked is the one in force when
    the events are written.
    """
    policy = in_force(reader)
    if policy is None or not inputs:
        return policy
    refusals = check_atoms(policy, inputs, imported=imported)
    if refusals:
        log.info("policy.refused", rules=sorted({r.rule for r in refusals}),
                 count=len(refusals), imported=imported)
        raise refusal_error(refusals, imported=imported)
    return policy


def _standing(atom: Atom, now: datetime) -> Standing:
    return Standing(current_salience(float(atom.salience), int(atom.rehearsal_count),
                                     float(atom.emotional_valence or 0.0), atom.decay_profile,
                                     atom.created_on, now),
                    atom.created_on.isoformat(), str(atom.id))


def _active(atom: Atom) -> bool:
    return (atom.status == "active" and not atom.content_erased
            and not is_placeholder(atom.extensions))


def over_limit(reader: PolicyHost, policy: Mapping[str, Any] | None, new: Sequence[Any],
               at: datetime) -> list[Atom]:
    """maxAtoms after this command's new atoms: archive the excess, lowest salience first.

    Adds signed ``archive`` redactions to the chosen atoms: new atoms of this command get
    the event in place (they are committed anyway); existing atoms are loaded and returned,
    for the caller to commit together with the new ones (one command, all or nothing).
    """
    doc = enforced(policy)
    limit = None if doc is None else doc.get("maxAtoms")
    new_atoms = [a for a in new if isinstance(a, Atom)]
    if limit is None or not new_atoms:
        return []
    limit = int(limit)
    fresh: dict[str, list[Atom]] = {}
    for a in new_atoms:
        if _active(a):
            fresh.setdefault(str(a.subject_id), []).append(a)
    known = reader.created_atoms_of(fresh)
    assert policy is not None
    reason = (f"memoryPolicy maxAtoms {limit}: lowest-salience active atom of a subject over "
              f"the limit (policy event {policy.get('event_id')})")
    loaded: list[Atom] = []
    for subject_id, atoms in fresh.items():
        new_ids = {str(a.id) for a in atoms}
        old_ids = [i for i in known[subject_id] if i not in new_ids]
        if len(old_ids) + len(atoms) <= limit:
            continue  # fewer atoms were ever created for this subject than the limit
        olds = [o for o in reader.get_many([UUID(i) for i in old_ids]) if _active(o)]
        pool = {str(a.id): a for a in [*olds, *atoms]}
        chosen = choose_archived(limit, [_standing(a, at) for a in pool.values()])
        for aid in chosen:
            pool[aid].trigger_event(Atom.Redacted, timestamp=at, mode="archive",
                                    reason=reason, batch_id=None, reached=None,
                                    rule="maxAtoms")
            if aid not in new_ids:
                loaded.append(pool[aid])
        if chosen:
            log.info("policy.max_atoms.archived", subject_id=subject_id, limit=limit,
                     archived=len(chosen))
    return loaded

