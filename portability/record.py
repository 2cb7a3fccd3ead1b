"""The portable atom: one flat record that every format encodes and decodes.

A format writes what its standard can say in the standard's own fields (its
*core*) and everything else under our provider key ``x-memory-ledger`` (the
*wire*). The wire is computed, not hand-written: ``wire = diff(record,
decode(core))``, so an export re-imports to the same record by construction and a
foreign file (no wire) imports as what its core says. Values that only an import
can know (the source's creation time, its rehearsals, unresolved citations, a
foreign label) are kept in ``Atom.extensions`` under ``x-memory-ledger-source``.

A record has the keys in ``REQUIRED`` and ``DEFAULTS``; a key equal to its default is
absent, so that equal records have equal canonical bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Container
from datetime import datetime
from typing import Any

from ledger.domain import ATOM_FIELDS
from ledger.errors import InputError
from ledger.inputs import ATOM_KINDS, SENSITIVITIES, SIDECAR
from portability.common import (
    FOREIGN,
    RESERVED,
    WIRE,
    Plan,
    Refusal,
    fmt_instant,
    namespaced,
    norm_instant,
    parse_instant,
)
from portability.view import AtomView

DEFAULTS: dict[str, Any] = {
    "gist": None, "details": None, "tags": None, "confidence": None, "valid_from": None,
    "valid_to": None, "cited": None, "extractor": None, "human_reviewed": False,
    "salience": 0.5, "emotional_valence": 0, "decay_profile": None, "privacy_class": None,
    "consent_basis": None, "session_id": None, "min_sources": 1, "rehearsal_count": 0,
    "last_rehearsed_at": None, "status": "active", "source_sensitivity": None,
    "episode": None, "foreign": None, "provider": None, "erased": False, "source_id": None,
    "superseded_by": None,
}
#: The atom fields a record may leave out (they have a default above), in the atom's order.
_OPTIONAL_ATOM_FIELDS = tuple(k for k in ATOM_FIELDS if k in DEFAULTS)
REQUIRED = ("id", "kind", "text", "sensitivity", "derivation", "created_at")
KEYS = frozenset(REQUIRED) | frozenset(DEFAULTS)
STATUSES = ("active", "superseded", "expired", "soft-redacted", "archived")
WITHHELD = ("soft-redacted", "archived")
IMPORT_EXTRACTOR = "unknown"

_DECAY_ALIASES = {"half_life_days": "halfLifeDays", "rehearsal_boost": "rehearsalBoost",
                  "valence_protection": "valenceProtection",
                  "minimum_salience": "minimumSalience", "detail_decay_rate": "detailDecayRate"}

Record = dict[str, Any]
#: RFC 8785 (the signed bytes) holds whole numbers up to 2^53-1 (IEEE 754 doubles).
MAX_SIGNED_INT = 2**53 - 1


def clean(rec: Record) -> Record:
    """Drop keys equal to their default (empty lists and dicts count as absent)."""
    out: Record = {}
    for k, v in rec.items():
        if v is None or v == [] or v == {}:
            continue
        d = DEFAULTS.get(k)
        if d is not None and v == d and isinstance(v, bool) == isinstance(d, bool):
            continue
        out[k] = v
    return out


def wire_of(rec: Record, decoded: Record, protected: frozenset[str]) -> dict[str, Any]:
    """What ``decoded`` (the core read back) lacks of ``rec``; None marks 'absent'."""
    a, b = clean(rec), clean(decoded)
    wire = {k: a.get(k) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}
    bad = set(wire) & protected
    if bad:  # the format's core must say these itself; never smuggle them in the wire
        raise AssertionError(f"core of the format lost {sorted(bad)}")
    return wire


def apply_wire(decoded: Record, wire: Any, protected: frozenset[str], where: str) -> Record:
    """Overlay a received wire on the decoded core, refusing what it may not change."""
    if wire is None:
        return decoded
    if not isinstance(wire, dict):
        raise InputError(f"{where}: {WIRE} must be an object")
    unknown = sorted(set(wire) - KEYS - {"record"})
    if unknown:
        raise InputError(f"{where}: {WIRE} has unknown keys {unknown}")
    clash = sorted(set(wire) & protected)
    if clash:
        raise InputError(f"{where}: {WIRE} may not override {clash}: the standard's own "
                         "fields say them")
    out = dict(decoded)
    for k, v in wire.items():
        if k == "record":
            continue
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return out


# ------------------------------------------------------------------ ledger -> record
def from_view(v: AtomView) -> Record:
    """The record of a ledger atom (erased atoms keep only ids, times and labels)."""
    f = v.fields
    decay = f.get("decay_profile")
    rec: Record = {
        "id": v.local_id, "kind": f["kind"], "text": f.get("text") or "",
        "gist": f.get("gist"), "details": f.get("details"), "tags": f.get("tags"),
        "confidence": f.get("confidence"), "sensitivity": f["sensitivity"],
        "valid_from": norm_instant(f.get("valid_from")),
        "valid_to": norm_instant(f.get("valid_to")), "derivation": f["derivation"],
        "cited": list(v.cited), "extractor": f.get("extractor"),
        "human_reviewed": bool(f.get("human_reviewed")), "salience": f.get("salience"),
        "emotional_valence": f.get("emotional_valence"),
        "decay_profile": {_DECAY_ALIASES.get(k, k): x for k, x in decay.items()}
        if decay else None,
        "privacy_class": f.get("privacy_class"), "consent_basis": f.get("consent_basis"),
        "session_id": f.get("session_id"), "min_sources": f.get("min_sources"),
        "created_at": v.created_at, "rehearsal_count": v.rehearsal_count,
        "last_rehearsed_at": v.last_rehearsed_at,
        "status": v.status if v.status in STATUSES else "active",
        "source_sensitivity": v.sidecar.get("sensitivity"),
        "episode": v.sidecar.get("episode"), "foreign": v.foreign or None,
        "provider": v.provider or None, "erased": v.erased,
        "superseded_by": v.superseded_by,
    }
    if v.erased:
        for k in ("text", "gist", "details", "tags"):
            rec[k] = "" if k == "text" else None
        # what the source carried is personal too: once erased it never leaves, even
        # from an older log that kept it in the clear (issue 20 item 6)
        for k in ("provider", "foreign", "episode"):
            rec[k] = None
    return clean(rec)


def tally(atoms: Any) -> dict[str, int]:
    """What every format's export reports the same way (ADR 0018): atoms withheld as
    archived or soft-redacted (they stay in the ledger, out of exports), and corrections
    or expiries whose status rides in our extension (``x-memory-ledger``), since no
    format has a field for the successor."""
    out = {"withheld_archived": 0, "withheld_soft_redacted": 0, "statuses_in_extension": 0}
    for v in atoms:
        if v.erased:
            continue
        if v.status == "archived":
            out["withheld_archived"] += 1
        elif v.status == "soft-redacted":
            out["withheld_soft_redacted"] += 1
        elif v.status in ("superseded", "expired"):
            out["statuses_in_extension"] += 1
    return out


# ------------------------------------------------------------------ record -> ledger input
def withheld(rec: Record) -> str | None:
    """Why a record must not be created: a redaction at the source an import would undo."""
    if rec.get("status") in WITHHELD:
        return (f"{rec['status']} at the source: importing it would make it visible again; "
                "import it active and redact it here if that is intended")
    return None


class Citations:
    """The artifacts an import's atoms may cite, by the local ids the input gives them:
    those the import brings (``here``), then those already in the ledger
    (``artifact_exists``). A local id a tombstone of the input covers (``covered``)
    resolves to nothing unless the import brings it."""

    def __init__(self, subject_ref: str, artifact_exists: Callable[[str], bool],
                 covered: Container[str] = ()) -> None:
        self.subject_ref = subject_ref
        self.artifact_exists = artifact_exists
        self.covered = covered
        self.here: dict[str, str] = {}
        #: Some record had no provenance and cites the import's own source artifact.
        self.sourceless = False

    def resolve(self, local: str) -> str | None:
        """The ledger ref a cited local id stands for, or None."""
        if local in self.covered and local not in self.here:
            return None
        if local in self.here:
            return self.here[local]
        candidate, _ = namespaced(self.subject_ref, local)
        return candidate if self.artifact_exists(candidate) else None

    def cite_source(self, rec: Record, source: str) -> None:
        """A record without provenance becomes inferred, by an unknown extractor, from
        the import's own ``source`` artifact (the caller plans that artifact)."""
        rec.update(derivation="inferred", extractor=IMPORT_EXTRACTOR, cited=[source])
        self.here.setdefault(source, namespaced(self.subject_ref, source)[0])
        self.sourceless = True


def atom_input(plan: Plan, rec: Record, where: str, citations: Citations, source: str
               ) -> tuple[dict[str, Any], list[str]] | None:
    """A record's atom input and its unresolved citations (:func:`to_inputs`), or None
    when the source withheld it (refused in the plan). A record without provenance cites
    the import's ``source`` artifact."""
    why = withheld(rec)
    if why:
        plan.refused.append(Refusal("atom", str(rec["id"]), why))
        return None
    if rec.get("derivation") is None:
        citations.cite_source(rec, source)
    return to_inputs(rec, citations.subject_ref, citations.resolve, where)


def to_inputs(rec: Record, subject_ref: str, resolve: Callable[[str], str | None],
              where: str) -> tuple[dict[str, Any], list[str]]:
    """AtomInput data for a record, and the cited local ids that resolve nowhere.

    ``resolve`` maps a cited local artifact id to a ledger ref (in this import or
    already in the ledger), or None. The caller decides what unresolved citations mean.
    """
    _check_keys(rec, where)
    local = str(rec["id"])
    ref, reversible = namespaced(subject_ref, local)
    resolved, unresolved = _resolve_cited(rec, resolve)
    sidecar = _sidecar(rec, where, unresolved)
    source = _source_data(rec, where, local, reversible)
    _check_classes(rec, where)
    data: dict[str, Any] = {
        "subject": subject_ref, "ref": ref, "kind": rec["kind"], "text": rec["text"],
        "sensitivity": rec["sensitivity"], "derivation": rec["derivation"],
        "artifact_ids": resolved, "extensions": {SIDECAR: sidecar},
    }
    if source:
        data["source_data"] = source
    for key in _OPTIONAL_ATOM_FIELDS:
        if rec.get(key) is not None:
            data[key] = rec[key]
    for key in ("valid_from", "valid_to"):
        if key in data:
            data[key] = _instant(data[key], f"{where}: {key}")
    return data, unresolved


def _check_keys(rec: Record, where: str) -> None:
    for k in REQUIRED:
        if rec.get(k) in (None, ""):
            raise InputError(f"{where}: no {k}")
    unknown = set(rec) - KEYS
    if unknown:
        raise InputError(f"{where}: unknown record keys {sorted(unknown)}")


def _resolve_cited(rec: Record, resolve: Callable[[str], str | None]
                   ) -> tuple[list[str], list[str]]:
    """(the ledger refs the record's citations resolve to, once each; the local ids that
    resolve nowhere)."""
    resolved: list[str] = []
    unresolved: list[str] = []
    for c in (str(c) for c in rec.get("cited") or []):
        r = resolve(c)
        if r is None:
            unresolved.append(c)
        elif r not in resolved:
            resolved.append(r)
    return resolved, unresolved


def _sidecar(rec: Record, where: str, unresolved: list[str]) -> dict[str, Any]:
    """The plaintext sidecar: only the ledger's bookkeeping (times, counts, a status, a
    label, unresolved citation ids), which verification and erasure need."""
    sidecar: dict[str, Any] = {"created_at": _instant(rec["created_at"], f"{where}: created_at")}
    if unresolved:
        sidecar["unresolved"] = unresolved
    count = _rehearsal_count(rec, where)
    if count:
        sidecar["rehearsal_count"] = count
    if rec.get("last_rehearsed_at"):
        sidecar["last_rehearsed_at"] = _instant(rec["last_rehearsed_at"],
                                                f"{where}: last rehearsed at")
    status = rec.get("status", "active")
    if status not in STATUSES:
        raise InputError(f"{where}: status {status!r} is not one of {', '.join(STATUSES)}")
    if status != "active":
        sidecar["status"] = status
    if rec.get("superseded_by") is not None:
        if not isinstance(rec["superseded_by"], str):
            raise InputError(f"{where}: superseded_by must be an id")
        sidecar["superseded_by"] = rec["superseded_by"]
    if rec.get("source_sensitivity") is not None:
        sidecar["sensitivity"] = rec["source_sensitivity"]
    return sidecar


def _rehearsal_count(rec: Record, where: str) -> int:
    count = rec.get("rehearsal_count", 0)
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise InputError(f"{where}: rehearsal count {count!r} is not a whole number >= 0")
    if count > MAX_SIGNED_INT:
        raise InputError(f"{where}: rehearsal count (accessCount, rehearsalCount) {count} is "
                         f"above {MAX_SIGNED_INT}, the largest whole number a signed event "
                         "can hold (RFC 8785)", hint="fix the count in the source file")
    return count


def _source_data(rec: Record, where: str, local: str, reversible: bool) -> dict[str, Any]:
    """What the source carried, sealed under the atom's data key (``source_data``): its
    own id when the ref cannot hold it, provider and foreign fields, its episode
    metadata."""
    source: dict[str, Any] = {}
    if not reversible or rec.get("source_id"):
        source["id"] = rec.get("source_id") or local
    if rec.get("episode") is not None:
        if not isinstance(rec["episode"], dict):
            raise InputError(f"{where}: the kept episode fields must be an object")
        source["episode"] = rec["episode"]
    provider = rec.get("provider") or {}
    if not isinstance(provider, dict) or any(
            not isinstance(k, str) or not k.startswith("x-") or k in RESERVED for k in provider):
        raise InputError(f"{where}: provider fields must be x- keys other than {RESERVED}")
    if provider:
        source["provider"] = dict(provider)
    if rec.get("foreign"):
        if not isinstance(rec["foreign"], dict):
            raise InputError(f"{where}: foreign fields must be an object")
        source[FOREIGN] = rec["foreign"]
    return source


def _check_classes(rec: Record, where: str) -> None:
    """The record's sensitivity and kind are the ledger's."""
    if rec["sensitivity"] not in SENSITIVITIES:
        raise InputError(f"{where}: sensitivity {rec['sensitivity']!r} is not one of "
                         f"{', '.join(SENSITIVITIES)}")
    if rec["kind"] not in ATOM_KINDS:
        raise InputError(f"{where}: kind {rec['kind']!r} is not one of {', '.join(ATOM_KINDS)}")


def _instant(value: Any, where: str) -> str:
    t: datetime = parse_instant(value, where)
    return fmt_instant(t)

