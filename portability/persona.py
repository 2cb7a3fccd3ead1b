"""Persona Schema v1.0 governed memory atoms: check, import, export.

A file is one atom, a JSON array of atoms, or a document with a ``memory`` array
(the Persona document's own shape). Our exports are documents whose
``x-memory-ledger`` key carries the subject and the cited artifacts (Konshus
artifact shape), so that an export imports on its own.

Checks: size cap and strict JSON; each atom against ``schemas/persona-memory-atom.json``;
the consent rule (sensitive-pii needs explicit-consent) rejects the whole file,
naming every offending memId; the Konshus provenance rule as for Konshus files.
A ``hard-redacted`` atom is an unsigned deletion claim: nothing is created from it,
and it erases an existing atom only with ``--apply-untrusted-tombstones``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime
from typing import Any

from jsonschema import Draft202012Validator

from ledger import json_schemas
from ledger.domain import ERASED
from ledger.errors import InputError
from ledger.progress import Steps
from portability import konshus
from portability.common import (
    WIRE,
    Plan,
    Refusal,
    check_subject_ref,
    drop_none,
    first,
    fmt_instant,
    loads_strict,
    provider_extensions,
)
from portability.record import (
    Citations,
    Record,
    apply_wire,
    atom_input,
    clean,
    from_view,
    to_inputs,
    wire_of,
)
from portability.view import SubjectView, encoding

SCHEMA = "persona-memory-atom.json"
KINDS = ("episodic", "semantic", "procedural")
KIND_OUT = {"skill": "procedural"}
MEM_ID = re.compile(r"^mem:[A-Za-z0-9][A-Za-z0-9._-]*$")
#: Record keys the Persona core states itself; the wire may not override them.
PROTECTED = frozenset({"created_at", "consent_basis", "derivation", "cited", "extractor",
                       "human_reviewed", "provider", "erased"})
IMPORT_SOURCE = "import.persona"
_REDACTION = {"soft-redacted": "soft-redacted", "archived": "archived"}
#: A hard-redacted atom is a tombstone: no content and no provenance travel with it.
_TOMBSTONE_DROPS = frozenset({"erased", "text", "gist", "details", "tags", "derivation",
                              "cited", "extractor", "human_reviewed"})


def validator() -> Draft202012Validator:
    return json_schemas.validator(SCHEMA)


def mem_id(local: str) -> str:
    """A valid memId for an export id (kept as is when it already is one)."""
    if MEM_ID.match(local) and len(local) <= 132:
        return local
    body = re.sub(r"[^A-Za-z0-9._-]", "-", local)
    if not body[:1].isalnum():
        body = "x" + body
    return "mem:" + body[:128]


def _privacy_class(sensitivity: str) -> str:
    return {"public": "non-pii", "private": "guest-pii"}.get(sensitivity, "sensitive-pii")


def decode_atom(a: dict[str, Any]) -> Record:
    """The record a Persona atom states (no wire applied; derivation may be absent)."""
    prov = a.get("provenance") or {}
    gist = a.get("gist")
    status = a.get("redactionStatus", "active")
    return clean({
        "id": a["memId"], "kind": a["kind"], "text": gist[:500] if gist else "",
        "gist": gist, "details": a.get("details"), "tags": a.get("tags"),
        "sensitivity": "public" if a["privacyClass"] in ("non-pii", "aggregate") else "private",
        "created_at": a["createdAt"], "rehearsal_count": a.get("rehearsalCount", 0),
        "last_rehearsed_at": a.get("lastRehearsedAt"), "salience": a["salience"],
        "emotional_valence": a.get("emotionalValence", 0),
        "decay_profile": a.get("decayProfile"), "privacy_class": a["privacyClass"],
        "consent_basis": a.get("consentBasis"),
        "session_id": a.get("sessionId") or prov.get("sessionId"),
        "status": _REDACTION.get(status, "active"), "erased": status == "hard-redacted",
        "derivation": prov.get("derivation"), "cited": prov.get("artifactIds"),
        "extractor": prov.get("extractor"), "human_reviewed": prov.get("humanReviewed", False),
        "provider": provider_extensions(a, f"memory {a['memId']!r}") or None,
    })


def encode_atom(rec: Record) -> dict[str, Any]:
    erased = bool(rec.get("erased"))
    if erased:
        rec = {k: v for k, v in rec.items() if k not in _TOMBSTONE_DROPS or k == "erased"}
        rec["text"] = ""
    status = "hard-redacted" if erased else (
        rec["status"] if rec.get("status") in _REDACTION else "active")
    tags = list(dict.fromkeys(rec.get("tags") or [])) or None
    core = drop_none({
        "memId": mem_id(rec["id"]),
        "kind": rec["kind"] if rec["kind"] in KINDS else KIND_OUT.get(rec["kind"], "semantic"),
        "createdAt": rec["created_at"], "lastRehearsedAt": rec.get("last_rehearsed_at"),
        "rehearsalCount": rec.get("rehearsal_count", 0),
        "gist": None if erased else (rec.get("gist") or rec["text"]),
        "details": None if erased else rec.get("details"),
        "salience": rec.get("salience", 0.5),
        "emotionalValence": rec.get("emotional_valence", 0),
        "decayProfile": rec.get("decay_profile"),
        "privacyClass": rec.get("privacy_class") or _privacy_class(rec["sensitivity"]),
        "consentBasis": rec.get("consent_basis"), "redactionStatus": status,
        "sessionId": rec.get("session_id"), "tags": None if erased else tags,
        "provenance": None if erased else drop_none({
            "derivation": rec["derivation"], "artifactIds": rec.get("cited") or None,
            "extractor": rec.get("extractor"),
            "humanReviewed": True if rec.get("human_reviewed") else None}),
    })
    core.update(rec.get("provider") or {})
    wire = wire_of(rec, decode_atom(core), PROTECTED)
    if wire:
        core[WIRE] = wire
    return core


def _schema_check(atoms: list[Any]) -> None:
    problems: list[str] = []
    for i, a in enumerate(atoms):
        name = a.get("memId", f"#{i}") if isinstance(a, dict) else f"#{i}"
        for e in sorted(validator().iter_errors(a), key=lambda e: e.json_path):
            problems.append(f"memory {name!r}: {konshus.describe(e)}")
    if problems:
        raise InputError("Persona file rejected by the memory atom schema: " + first(problems),
                         hint="fix the fields named above at the source")


def plan_import(data: bytes, *, subject: str | None, artifact_exists: Callable[[str], bool]
                ) -> Plan:
    """Check a Persona file and plan its import; nothing is written."""
    atoms, extra, ignored = _read_document(loads_strict(data, "Persona file"))
    _schema_check(atoms)
    wire_subject = extra.get("subject") or {}
    ref = check_subject_ref(subject or wire_subject.get("subject_id"), "subject")
    plan = Plan(format="persona", subject=drop_none({
        "ref": ref, "display_name": wire_subject.get("display_name"),
        "locale": wire_subject.get("locale")}))
    if ignored:
        plan.warnings.append(f"Persona document parts not imported: {first(ignored)}")
    citations = Citations(ref, artifact_exists)
    _plan_artifacts(plan, extra.get("artifacts") or [], citations)
    records = []
    for a in atoms:
        where = f"memory {a['memId']!r}"
        records.append((where, apply_wire(decode_atom(a), a.get(WIRE), PROTECTED, where)))
    _check_consent(records)
    for where, rec in records:
        _plan_atom(plan, where, rec, citations)
    if citations.sourceless:
        plan.artifacts.append({"subject": ref, "ref": citations.here[IMPORT_SOURCE],
                               "kind": "document", "source": "persona-import",
                               "private": True})
        plan.warnings.append("memories without provenance were imported as inferred by an "
                             f"unknown extractor, citing the artifact {IMPORT_SOURCE!r}")
    return plan


def _read_document(doc: Any) -> tuple[list[Any], dict[str, Any], list[str]]:
    """(the memory atoms, our wire of the document, the document keys not imported) of
    a Persona file: one atom, a list of them, or a document with a ``memory`` list."""
    extra: dict[str, Any] = {}
    ignored: list[str] = []
    if isinstance(doc, list):
        atoms = doc
    elif isinstance(doc, dict) and "memId" in doc:
        atoms = [doc]
    elif isinstance(doc, dict) and isinstance(doc.get("memory"), list):
        atoms = doc["memory"]
        extra = doc.get(WIRE) or {}
        ignored = sorted(k for k in doc if k not in ("memory", WIRE))
    else:
        raise InputError("Persona file is neither a memory atom, a list of them, nor a "
                         "document with a 'memory' list")
    if not isinstance(extra, dict) or set(extra) - {"subject", "artifacts", "exported_at"}:
        raise InputError(f"Persona file: {WIRE} may hold only subject, artifacts and "
                         "exported_at")
    return atoms, extra, ignored


def _plan_artifacts(plan: Plan, arts: list[Any], citations: Citations) -> None:
    """The artifacts our wire carries, checked as a Konshus export's."""
    konshus.check_document({"export_version": konshus.VERSION,
                            "exported_at": "1970-01-01T00:00:00Z",
                            "subject": {"subject_id": plan.subject_ref}, "atoms": [],
                            "artifacts": arts},
                           f"Persona file's {WIRE}.artifacts")
    for i, a in enumerate(arts):
        art = konshus.artifact_input(a, plan.subject_ref, f"{WIRE}.artifacts[{i}]")
        plan.artifacts.append(art)
        citations.here[a["artifact_id"]] = art["ref"]


def _check_consent(records: list[tuple[str, Record]]) -> None:
    """The consent rule: a sensitive-pii memory needs consent basis explicit-consent."""
    bad = [w for w, r in records if r.get("privacy_class") == "sensitive-pii"
           and r.get("consent_basis") != "explicit-consent" and not r.get("erased")]
    if bad:
        raise InputError("Persona file rejected (consent rule): a sensitive-pii memory needs "
                         f"consent basis explicit-consent: {first(bad)}",
                         hint="fix the consent basis at the source, or leave those out")


def _plan_atom(plan: Plan, where: str, rec: Record, citations: Citations) -> None:
    """Plan one memory: a hard-redacted one as a placeholder to erase, else its atom."""
    if rec.get("erased"):
        t = {k: v for k, v in rec.items() if k not in _TOMBSTONE_DROPS}
        t.update(text=ERASED, derivation="stated")
        data_in, _ = to_inputs(t, plan.subject_ref, citations.resolve, where)
        plan.erase.append(("atom", data_in["ref"], where))
        plan.untrusted.append(where)
        plan.placeholders.append(("atom", data_in["ref"], data_in, where))
        plan.refused.append(Refusal("atom", str(rec["id"]), "hard-redacted: no content"))
        return
    planned = atom_input(plan, rec, where, citations, IMPORT_SOURCE)
    if planned is None:
        return
    data_in, unresolved = planned
    if rec["derivation"] in ("inferred", "observed") and not data_in["artifact_ids"]:
        raise InputError(f"Persona file rejected: {where} is {rec['derivation']} and "
                         "cites no artifact that is in this file or in the ledger "
                         f"({first(unresolved) or 'none'})")
    if unresolved:
        plan.warnings.append(f"{where} cites artifacts not in this file "
                             f"({first(unresolved)}); kept as unresolved citations")
    plan.atoms.append(data_in)


def export(view: SubjectView, *, include_private: bool, now: datetime,
           progress: Steps | None = None) -> tuple[dict[str, Any], dict[str, int]]:
    """A Persona document of one subject's atoms (erased ones as hard-redacted)."""
    gone = {a.local_id for a in view.artifacts if a.gone}
    atoms: list[dict[str, Any]] = []
    cited_by: dict[str, list[str]] = {}
    stats = {"atoms": 0, "erased": 0, "consent_warnings": 0, "private_withheld": 0}
    for i, v in enumerate(view.atoms, start=1):
        encoding(progress, i, len(view.atoms))
        if v.withheld and not v.erased:  # archived, soft-redacted: ADR 0018
            continue
        rec = from_view(v)
        if rec.get("cited"):
            rec["cited"] = [c for c in rec["cited"] if c not in gone]
            rec = clean(rec)
        if rec.get("erased"):
            stats["erased"] += 1
        if rec.get("privacy_class") == "sensitive-pii" and \
                rec.get("consent_basis") != "explicit-consent":
            stats["consent_warnings"] += 1
        atoms.append(encode_atom(rec))
        stats["atoms"] += 1
        if not rec.get("erased"):  # a tombstone carries no provenance
            for c in rec.get("cited") or []:
                cited_by.setdefault(c, []).append(v.local_id)
    for i, a in enumerate(atoms):
        for e in validator().iter_errors(a):
            raise AssertionError(f"our own Persona atom {i} is invalid: {konshus.describe(e)}")
    arts = []
    for art in view.artifacts:
        if art.gone:
            continue
        if art.private and not include_private:
            stats["private_withheld"] += 1
        arts.append(konshus.encode_artifact(art, cited_by.get(art.local_id, []),
                                            include_private))
    doc = {"memory": atoms, WIRE: {
        "subject": drop_none({"subject_id": view.ref, "display_name": view.display_name,
                              "locale": view.locale}),
        "exported_at": fmt_instant(now.replace(microsecond=0)), "artifacts": arts}}
    return doc, stats
