"""Konshus AI Memory Portability Standard v0.1: check, import, export.

Checks, in order (the step numbers appear in error messages):

1. the file is at most ``max_bytes`` (checked before reading) and is strict JSON;
2. it validates against ``schemas/konshus-v0.1.json`` (JSON Schema 2020-12, formats
   checked);
3. the provenance rule: an ``inferred`` atom without ``artifact_ids`` or
   ``extractor``, or an ``observed`` atom without ``artifact_ids``, rejects the whole
   export, naming the atom;
4. no unknown core keys (providers extend under ``x-`` only), no duplicate ids;
5. every inferred or observed atom cites at least one artifact that is in the export
   or already in the ledger. Citations of artifacts in neither (the seed's
   ``art_144``) are kept with the atom and exported again; see docs/adr/0010.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

from jsonschema import Draft202012Validator, ValidationError

from ledger import json_schemas
from ledger.errors import InputError
from ledger.progress import Steps, report
from portability.common import (
    WIRE,
    Plan,
    Refusal,
    check_subject_ref,
    drop_none,
    first,
    fmt_instant,
    loads_strict,
    namespaced,
    norm_instant,
    provider_extensions,
)
from portability.record import (
    Record,
    apply_wire,
    clean,
    from_view,
    to_inputs,
    wire_of,
    withheld,
)
from portability.view import ArtifactView, SubjectView, encoding

SCHEMA = "konshus-v0.1.json"
VERSION = "0.1.0"
PROVIDER = "memory-ledger"
KINDS = ("fact", "preference", "relationship", "belief", "goal", "skill")
KIND_OUT = {"episodic": "fact", "semantic": "fact", "procedural": "skill"}
#: Record keys the Konshus core states itself; the wire may not override them.
PROTECTED = frozenset({"id", "text", "sensitivity", "derivation", "cited", "extractor",
                       "human_reviewed", "confidence", "valid_from", "valid_to",
                       "created_at", "provider"})
_KEYS = {
    "$": {"export_version", "exported_at", "source_provider", "subject", "atoms",
          "artifacts"},
    "subject": {"subject_id", "display_name", "locale"},
    "atom": {"atom_id", "kind", "text", "confidence", "sensitivity", "valid_from",
             "valid_to", "created_at", "provenance"},
    "provenance": {"derivation", "artifact_ids", "extractor", "human_reviewed"},
    "artifact": {"artifact_id", "kind", "title", "body", "media_url", "captured_at",
                 "source", "atom_ids", "private"},
}


def validator() -> Draft202012Validator:
    return json_schemas.validator(SCHEMA)


def _short(value: Any) -> str:
    if isinstance(value, str) and len(value) > 40:
        return f"a {len(value)}-character string"
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else f"a {type(value).__name__}"


def describe(e: ValidationError) -> str:
    """One schema error as '<path>: <reason>', never echoing long content."""
    kw, val, inst = e.validator, e.validator_value, e.instance
    if kw == "maxLength":
        reason = f"is {len(inst)} characters, more than the {val} allowed"
    elif kw == "enum":
        reason = f"{_short(inst)} is not one of {', '.join(map(str, val))}"
    elif kw == "const":
        reason = f"{_short(inst)} is not {val!r}"
    elif kw == "format":
        reason = f"{_short(inst)} is not a valid {val}"
    elif kw == "type":
        reason = f"{_short(inst)} is not of type {val}"
    elif kw in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        reason = f"{_short(inst)} violates {kw} {val}"
    else:
        reason = e.message if len(e.message) <= 200 else e.message[:200] + "..."
    return f"{e.json_path}: {reason} ({kw})"


def check_document(doc: Any, what: str = "Konshus export") -> None:
    """Steps 2-4: schema, provenance rule, strict keys. Raises InputError."""
    errors = sorted(validator().iter_errors(doc), key=lambda e: (e.json_path, str(e.validator)))
    if errors:
        raise InputError(f"{what} rejected by the Konshus v0.1 schema (step 2): "
                         + first([describe(e) for e in errors]),
                         hint="fix the fields named above at the source")
    for i, atom in enumerate(doc["atoms"]):
        prov = atom["provenance"]
        name = f"atom {atom['atom_id']!r} ($.atoms[{i}])"
        if prov["derivation"] in ("inferred", "observed") and not prov.get("artifact_ids"):
            raise InputError(
                f"{what} rejected (step 3, provenance rule): {name} is {prov['derivation']} "
                "but cites no artifact_ids; the whole export is refused so that unsourced "
                "conclusions are not laundered", hint="ask the provider for a sourced export")
        if prov["derivation"] == "inferred" and not prov.get("extractor"):
            raise InputError(f"{what} rejected (step 3, provenance rule): {name} is inferred "
                             "but names no extractor")
    unknown = [f"$.{k}" for k in doc if k not in _KEYS["$"] and not k.startswith("x-")]
    unknown += [f"$.subject.{k}" for k in doc["subject"]
                if k not in _KEYS["subject"] and not k.startswith("x-")]
    for part, key in (("atoms", "atom"), ("artifacts", "artifact")):
        for i, item in enumerate(doc[part]):
            unknown += [f"$.{part}[{i}].{k}" for k in item
                        if k not in _KEYS[key] and not k.startswith("x-")]
    for i, atom in enumerate(doc["atoms"]):
        unknown += [f"$.atoms[{i}].provenance.{k}" for k in atom["provenance"]
                    if k not in _KEYS["provenance"] and not k.startswith("x-")]
    if unknown:
        raise InputError(f"{what} has keys Konshus v0.1 does not define (step 4): "
                         f"{first(unknown)}; providers may add fields only under 'x-'",
                         hint="rename provider fields to x-<provider>-<name>")
    for part, key in (("atoms", "atom_id"), ("artifacts", "artifact_id")):
        ids = [item[key] for item in doc[part]]
        dup = sorted({x for x in ids if ids.count(x) > 1})
        if dup:
            raise InputError(f"{what} names {part} twice (step 4): {first(dup)}")


# ------------------------------------------------------------------ atoms
def decode_atom(a: dict[str, Any]) -> Record:
    """The record a Konshus atom states (no wire applied)."""
    prov = a["provenance"]
    return clean({
        "id": a["atom_id"], "kind": a["kind"], "text": a["text"],
        "confidence": a.get("confidence"), "sensitivity": a.get("sensitivity", "private"),
        "valid_from": a.get("valid_from"), "valid_to": a.get("valid_to"),
        "created_at": a["created_at"], "derivation": prov["derivation"],
        "cited": prov.get("artifact_ids"), "extractor": prov.get("extractor"),
        "human_reviewed": prov.get("human_reviewed", False),
        "provider": provider_extensions(a, f"atom {a['atom_id']!r}") or None,
    })


def encode_atom(rec: Record) -> dict[str, Any]:
    prov = drop_none({"derivation": rec["derivation"], "artifact_ids": rec.get("cited"),
                      "extractor": rec.get("extractor"),
                      "human_reviewed": True if rec.get("human_reviewed") else None})
    kind = rec["kind"] if rec["kind"] in KINDS else KIND_OUT.get(rec["kind"], "fact")
    core = drop_none({
        "atom_id": rec["id"], "kind": kind, "text": rec["text"],
        "confidence": rec.get("confidence"), "sensitivity": rec["sensitivity"],
        "valid_from": rec.get("valid_from"), "valid_to": rec.get("valid_to"),
        "created_at": rec["created_at"], "provenance": prov,
    })
    core.update(rec.get("provider") or {})
    wire = wire_of(rec, decode_atom(core), PROTECTED)
    if wire:
        core[WIRE] = wire
    return core


# ------------------------------------------------------------------ artifacts
def encode_artifact(a: ArtifactView, atom_ids: list[str], include_private: bool
                    ) -> dict[str, Any]:
    """A Konshus artifact; a private one without ``include_private`` is a stub."""
    full = not a.private or include_private
    return drop_none({
        "artifact_id": a.local_id, "kind": a.kind,
        "title": a.title if full else None, "body": a.body if full else None,
        "media_url": a.media_url if full else None, "captured_at": a.captured_at,
        "source": a.source, "atom_ids": atom_ids or None, "private": a.private,
    })


def artifact_input(a: dict[str, Any], subject_ref: str, where: str) -> dict[str, Any]:
    """ArtifactInput data for a Konshus-shaped artifact (also used inside Persona files)."""
    local = a["artifact_id"]
    ref, reversible = namespaced(subject_ref, str(local))
    if not reversible:
        raise InputError(f"{where}: artifact id {local!r} cannot be kept as a ledger ref "
                         "(1-128 of A-Z a-z 0-9 . _ : -)")
    return drop_none({
        "subject": subject_ref, "ref": ref, "kind": a["kind"], "title": a.get("title"),
        "body": a.get("body"), "media_url": a.get("media_url"),
        "captured_at": norm_instant(a["captured_at"]), "source": a.get("source"),
        "private": bool(a.get("private", False)),
    })


# ------------------------------------------------------------------ import
def plan_import(data: bytes, *, subject: str | None, artifact_exists: Callable[[str], bool]
                ) -> Plan:
    """Check a Konshus export (steps 1-5) and plan its import; nothing is written."""
    doc = loads_strict(data, "Konshus file")
    if not isinstance(doc, dict):
        raise InputError("Konshus file is not a JSON object (step 2)")
    check_document(doc)
    s = doc["subject"]
    ref = check_subject_ref(subject or s["subject_id"], "$.subject.subject_id")
    plan = Plan(format="konshus", subject=drop_none(
        {"ref": ref, "display_name": s.get("display_name"), "locale": s.get("locale")}))
    dropped = [f"$.{k}" for k in doc if k.startswith("x-")]
    dropped += [f"$.subject.{k}" for k in s if k.startswith("x-")]
    local_refs: dict[str, str] = {}
    for i, a in enumerate(doc["artifacts"]):
        where = f"artifact {a['artifact_id']!r} ($.artifacts[{i}])"
        art = artifact_input(a, ref, where)
        plan.artifacts.append(art)
        local_refs[a["artifact_id"]] = art["ref"]
        dropped += [f"$.artifacts[{i}].{k}" for k in a if k.startswith("x-")]
    if dropped:
        plan.warnings.append("provider fields the ledger has no place for were not kept: "
                             + first(dropped))

    def resolve(local: str) -> str | None:
        if local in local_refs:
            return local_refs[local]
        candidate, _ = namespaced(ref, local)
        return candidate if artifact_exists(candidate) else None

    for i, a in enumerate(doc["atoms"]):
        where = f"atom {a['atom_id']!r} ($.atoms[{i}])"
        rec = apply_wire(decode_atom(a), a.get(WIRE), PROTECTED, where)
        why = withheld(rec)
        if why:
            plan.refused.append(Refusal("atom", str(a["atom_id"]), why))
            continue
        data_in, unresolved = to_inputs(rec, ref, resolve, where)
        if rec["derivation"] in ("inferred", "observed") and not data_in["artifact_ids"]:
            raise InputError(
                f"Konshus export rejected (step 5): {where} is {rec['derivation']} and cites "
                f"only artifacts that are neither in this export nor in the ledger "
                f"({first(unresolved)})",
                hint="import the export that carries those artifacts first")
        if unresolved:
            plan.warnings.append(f"{where} cites artifacts not in this export "
                                 f"({first(unresolved)}); kept as unresolved citations")
        plan.atoms.append(data_in)
    return plan


# ------------------------------------------------------------------ export
def export(view: SubjectView, *, include_private: bool, now: datetime,
           progress: Steps | None = None) -> tuple[dict[str, Any], dict[str, int]]:
    """A Konshus export of one subject, checked like an import before it is returned.

    Erased and deleted items are left out (Konshus has no tombstones); so are
    soft-redacted and archived atoms, and atoms that are inferred or observed but
    whose every source was deleted (unsourced). ``progress`` hears the atoms encoded.
    """
    gone = {a.local_id for a in view.artifacts if a.gone}
    omitted = {"erased": 0, "redacted": 0, "unsourced": 0, "private_withheld": 0}
    atoms: list[dict[str, Any]] = []
    cited_by: dict[str, list[str]] = {}
    for i, v in enumerate(view.atoms, start=1):
        encoding(progress, i, len(view.atoms))
        if v.erased:
            omitted["erased"] += 1
            continue
        if v.withheld:
            omitted["redacted"] += 1
            continue
        rec = from_view(v)
        cited = [c for c in rec.get("cited", []) if c not in gone]
        if len(cited) != len(rec.get("cited", [])):
            rec["cited"] = cited
            rec = clean(rec)
        if rec["derivation"] in ("inferred", "observed") and not cited:
            omitted["unsourced"] += 1
            continue
        atoms.append(encode_atom(rec))
        for c in cited:
            cited_by.setdefault(c, []).append(v.local_id)
    artifacts = []
    for a in view.artifacts:
        if a.gone:
            continue
        if a.private and not include_private:
            omitted["private_withheld"] += 1
        artifacts.append(encode_artifact(a, cited_by.get(a.local_id, []), include_private))
    doc: dict[str, Any] = {
        "export_version": VERSION,
        "exported_at": fmt_instant(now.replace(microsecond=0)),
        "source_provider": PROVIDER,
        "subject": drop_none({"subject_id": view.ref, "display_name": view.display_name,
                              "locale": view.locale}),
        "atoms": atoms, "artifacts": artifacts,
    }
    report(progress, "Checking the export", 0, 1)
    check_document(doc, "our own Konshus export")
    report(progress, "Checking the export", 1, 1)
    return doc, {"atoms": len(atoms), "artifacts": len(artifacts), **omitted}


__all__ = ["check_document", "export", "plan_import"]
