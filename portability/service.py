"""Carry out an import plan against a ledger, and run exports.

Import order: every input is validated first (nothing written on any error); then
one ``import_records`` call writes subjects, artifacts, atoms and tombstone
placeholders, all or nothing; then one ``shred`` command destroys the data keys of
the existing items that trusted tombstones cover and of the placeholders. Rows a
tombstone covers were already left out of the plan, so nothing is ever resurrected.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from uuid import UUID

import structlog

from keys.errors import KeyringError
from keys.files import write_private
from keys.keyring import read_public_key_file
from ledger.envelope import pae
from ledger.errors import InputError, NotFound
from ledger.inputs import SIDECAR, ArtifactInput, AtomInput, SubjectInput, parse
from portability.common import Plan
from portability.record import MAX_SIGNED_INT

if TYPE_CHECKING:
    from ledger.application import LedgerApp
    from ledger.progress import Steps

log = structlog.get_logger("portability")

PLACEHOLDER_REASON = "tombstone received on import"


def _check(model: Any, data: dict[str, Any], what: str) -> None:
    try:
        parse(model, data)
    except InputError as e:
        raise InputError(f"{what}: {e}", hint=e.hint) from None


def _exists(app: LedgerApp, kind: str, ref: str) -> UUID | None:
    try:
        if kind == "subject":
            sid: UUID = app.reader.subject_id(ref)
            return sid if app.reader.exists(sid) else None
        found: UUID = app.reader.resolve(kind, ref)
        return found
    except NotFound:
        return None


#: Atom input fields the mapper seals (plaintext JSON under AEAD, any number kept).
_SEALED = frozenset({"text", "gist", "details", "tags", "source_data"})


def _signable(value: Any, where: str) -> None:
    """Refuse a number the signed (RFC 8785) bytes cannot hold, naming where it is."""
    if isinstance(value, bool):
        return
    if isinstance(value, int) and abs(value) > MAX_SIGNED_INT:
        raise InputError(f"{where} is {value}, outside the ±{MAX_SIGNED_INT} a signed event "
                         "can hold in the clear (RFC 8785); nothing was imported",
                         hint="fix the value in the source file")
    if isinstance(value, dict):
        for k, v in value.items():
            _signable(v, f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _signable(v, f"{where}[{i}]")


def apply_plan(app: LedgerApp, plan: Plan, *, dry_run: bool = False, actor: str | None = None,
               apply_untrusted: bool = False, progress: Steps | None = None
               ) -> dict[str, Any]:
    """Validate, then write the plan (unless ``dry_run``); return the import report.
    ``progress`` hears the items checked, recorded, then the events written."""
    _validate(plan, progress)
    shred, not_applied = _erasures(app, plan, apply_untrusted)
    extra_artifacts, extra_atoms = _placeholders(app, plan, apply_untrusted)
    artifacts = plan.artifacts + extra_artifacts
    atoms = plan.atoms + extra_atoms
    rp = _plan_records(app, plan, apply_untrusted)
    shred.extend(rp.shred)
    report = _report(plan, dry_run, shred, not_applied,
                     len(extra_artifacts) + len(extra_atoms), rp)
    if dry_run:
        created, skipped = _would_create(app, plan, artifacts, atoms)
        report.update(created=created, skipped=skipped, archived={"atoms": 0, "ids": []})
        return report

    from portability import records

    result = app.import_records([plan.subject], artifacts, atoms, actor=actor,
                                records=lambda sid, at: records.build(app, sid, rp, at),
                                progress=progress)
    ids = result["ids"]
    for item in extra_artifacts:
        shred.append(UUID(ids["artifacts"][item["ref"]]))
    for item in extra_atoms:
        shred.append(UUID(ids["atoms"][item["ref"]]))
    if shred:
        _shred(app, list(dict.fromkeys(shred)), actor)
    restored = _restore_statuses(app, plan, ids, actor)
    if restored:
        report["statuses_restored"] = restored
    archived = result.get("archived", [])
    result["skipped"]["atoms"] += plan.repeats
    report.update(created=result["created"], skipped=result["skipped"],
                  archived={"atoms": len(archived), "ids": archived})
    log.info("portability.imported", format=plan.format,
             **{f"created_{k}": v for k, v in result["created"].items()},
             **{f"skipped_{k}": v for k, v in result["skipped"].items()},
             refused=len(plan.refused), shredded=len(shred))
    return report


def _validate(plan: Plan, progress: Steps | None) -> None:
    """Every item parses as the ledger's input, and no atom holds a number the signed
    bytes cannot (before anything is written)."""
    _check(SubjectInput, plan.subject, f"subject {plan.subject_ref!r}")
    for a in plan.artifacts:
        _check(ArtifactInput, a, f"artifact {a.get('ref')!r}")
    total = len(plan.atoms)
    for i, m in enumerate(plan.atoms, start=1):
        if progress is not None and (i % 500 == 0 or i == total):
            progress("Checking atoms", i, total)
        _check(AtomInput, m, f"atom {m.get('ref')!r}")
        for k, v in m.items():
            if k not in _SEALED:
                _signable(v, f"atom {m.get('ref')!r}: {k}")


def _erasures(app: LedgerApp, plan: Plan, apply_untrusted: bool
              ) -> tuple[list[UUID], list[str]]:
    """(the existing items the tombstones erase, the untrusted tombstones that erase
    nothing without ``apply_untrusted``)."""
    shred: list[UUID] = []
    not_applied: list[str] = []
    for kind, ref, tomb_id, trusted in _erase_entries(plan):
        found = _exists(app, kind, ref)
        if found is None:
            continue
        if trusted or apply_untrusted:
            shred.append(found)
        else:
            not_applied.append(tomb_id)
    return shred, not_applied


def _placeholders(app: LedgerApp, plan: Plan, apply_untrusted: bool
                  ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(artifacts, atoms) to create only to shred at once: the ledger's memory of the
    tombstones that acted on nothing it holds."""
    extra_artifacts: list[dict[str, Any]] = []
    extra_atoms: list[dict[str, Any]] = []
    untrusted = set(plan.untrusted)
    for kind, ref, data, tomb_id in plan.placeholders:
        if tomb_id in untrusted and not apply_untrusted:
            continue
        if _exists(app, kind, ref) is not None:
            continue
        _check(ArtifactInput if kind == "artifact" else AtomInput, data, f"{kind} {ref!r}")
        (extra_artifacts if kind == "artifact" else extra_atoms).append(data)
    return extra_artifacts, extra_atoms


def _report(plan: Plan, dry_run: bool, shred: list[UUID], not_applied: list[str],
            placeholders: int, rp: Any) -> dict[str, Any]:
    """The import report, but for what was created and skipped."""
    report: dict[str, Any] = {
        "format": plan.format, "subject": plan.subject_ref, "dry_run": dry_run,
        "refused": {"artifacts": sum(r.kind == "artifact" for r in plan.refused),
                    "atoms": sum(r.kind == "atom" for r in plan.refused),
                    "other": sum(r.kind not in ("artifact", "atom") for r in plan.refused)},
        "refusals": [r.as_json() for r in plan.refused],
        "tombstones": {**plan.tombstones, "placeholders": placeholders,
                       "erased_existing": len(set(shred)),
                       "not_applied_untrusted": sorted(set(not_applied))},
        "warnings": list(plan.warnings),
    }
    report["records"] = {"created": sum(c[2] is not None for c in rp.create),
                         "placeholders": sum(c[2] is None for c in rp.create),
                         "superseded": len(rp.supersede), "skipped": rp.skipped,
                         "erased_existing": len(rp.shred),
                         "by_kind": _by_kind(c[1] for c in rp.create if c[2] is not None)}
    if plan.manifest_signature is not None:
        report["manifest_signature"] = plan.manifest_signature
    return report


def _would_create(app: LedgerApp, plan: Plan, artifacts: list[dict[str, Any]],
                  atoms: list[dict[str, Any]]) -> tuple[dict[str, int], dict[str, int]]:
    """A dry run's (created, skipped) counts: what is not in the ledger yet."""
    created = {"subjects": 0, "artifacts": 0, "atoms": 0}
    skipped = dict(created)
    if _exists(app, "subject", plan.subject_ref) is None:
        created["subjects"] = 1
    else:
        skipped["subjects"] = 1
    for key, kind, items in (("artifacts", "artifact", artifacts), ("atoms", "atom", atoms)):
        for item in items:
            if _exists(app, kind, item["ref"]) is None:
                created[key] += 1
            else:
                skipped[key] += 1
    skipped["atoms"] += plan.repeats
    return created, skipped


def _restore_statuses(app: LedgerApp, plan: Plan, ids: dict[str, dict[str, str]],
                      actor: str | None) -> int:
    """Corrections and expiries survive a round trip (issue 19 item 7): an atom the
    source recorded as superseded or expired gets that status here too, by its own
    signed event, after the atoms exist (a re-run of the import finishes it)."""
    from portability.common import namespaced

    items: list[tuple[UUID, str, UUID | None, str | None]] = []
    for m in plan.atoms:
        side = (m.get("extensions") or {}).get(SIDECAR) or {}
        status = side.get("status")
        if status not in ("superseded", "expired") or m["ref"] not in ids["atoms"]:
            continue
        successor = None
        if status == "superseded" and side.get("superseded_by"):
            successor = app.reader.ref_id("atom", namespaced(plan.subject_ref,
                                                       str(side["superseded_by"]))[0])
        items.append((UUID(ids["atoms"][m["ref"]]), status, successor, m.get("valid_to")))
    if not items:
        return 0
    n: int = app.restore_statuses(items, actor=actor)
    return n


def _plan_records(app: LedgerApp, plan: Plan, apply_untrusted: bool) -> Any:
    """Portable records (ADR 0017): what to create, supersede, skip and shred."""
    from portability import records

    untrusted = set(plan.untrusted)

    def acts(tomb_id: str) -> bool:
        return tomb_id not in untrusted or apply_untrusted

    covered = {(k, i) for k, i, _ in plan.record_erase}
    return records.plan(app, plan.subject_ref, plan.record_lines, covered,
                        [(k, i, acts(t)) for k, i, t in plan.record_erase],
                        [(k, i) for k, i, t in plan.record_placeholders if acts(t)])


def _by_kind(kinds: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for k in kinds:
        out[k] = out.get(k, 0) + 1
    return dict(sorted(out.items()))


def _erase_entries(plan: Plan) -> list[tuple[str, str, str, bool]]:
    out: list[tuple[str, str, str, bool]] = []
    untrusted = set(plan.untrusted)
    for kind, ref, tomb_id in plan.erase:
        kinds = ("atom", "artifact") if kind == "any" else (kind,)
        out += [(k, ref, tomb_id, tomb_id not in untrusted) for k in kinds]
    return out


def _shred(app: LedgerApp, ids: Sequence[UUID], actor: str | None) -> None:
    """Crypto-shred in one command where the ledger offers it, else item by item."""
    if hasattr(app, "shred"):
        app.shred(ids, PLACEHOLDER_REASON, actor=actor)
        return
    for i in ids:  # pragma: no cover - a ledger without the batch command
        app.destroy_data_key(i, PLACEHOLDER_REASON, actor=actor)


# ------------------------------------------------------------------ files in and out
def read_trusted_key(path: Path) -> bytes:
    """A trusted Ed25519 public key: a ledger ``.pub`` file, or 64 hex characters."""
    try:
        return read_public_key_file(path)
    except KeyringError:
        pass
    try:
        text = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read trusted key {path}: {e}") from e
    if text.startswith("ed25519:"):
        text = text.split(":")[1]
    try:
        raw = bytes.fromhex(text)
    except ValueError:
        raw = b""
    if len(raw) != 32:
        raise InputError(f"{path} is neither a ledger .pub file nor a 64-character hex "
                         "Ed25519 public key")
    return raw


def plan_file(app: LedgerApp, path: Path, fmt: str, *, subject: str | None,
              trusted: Sequence[bytes], max_bytes: int | None,
              skip_unsupported: bool) -> Plan:
    """Check ``path`` (before touching the ledger) and plan its import.

    Every failure is an :class:`InputError` (exit 2) or, for a forged signature by a
    trusted key, ``VerificationFailed``: an exception the checks did not foresee on this
    untrusted input is reported as the input's problem, with its place, never as a
    traceback (issue 19 item 6); nothing has been written by then."""
    try:
        return _plan_file(app, path, fmt, subject=subject, trusted=trusted,
                          max_bytes=max_bytes, skip_unsupported=skip_unsupported)
    except (TypeError, ValueError, KeyError, AttributeError, IndexError, OverflowError,
            RecursionError, UnicodeError, AssertionError) as e:
        log.warning("portability.input_unreadable", format=fmt, error=type(e).__name__)
        raise InputError(f"{path} could not be read as {fmt}: {type(e).__name__}: "
                         f"{str(e)[:200]}; nothing was imported",
                         hint="check the file against the format's schema") from e


def _plan_file(app: LedgerApp, path: Path, fmt: str, *, subject: str | None,
               trusted: Sequence[bytes], max_bytes: int | None,
               skip_unsupported: bool) -> Plan:
    from portability import formats

    def artifact_exists(ref: str) -> bool:
        return _exists(app, "artifact", ref) is not None

    ctx = formats.ReadContext(subject=subject, trusted=trusted, max_bytes=max_bytes,
                              skip_unsupported=skip_unsupported,
                              artifact_exists=artifact_exists,
                              known_source_ids=lambda ref: _source_ids(app, ref))
    return formats.get(fmt, "read").plan(path, ctx)


def _source_ids(app: LedgerApp, subject_ref: str) -> set[str]:
    """The sealed source ids of a subject's atoms (empty for a new subject)."""
    from portability import view

    if _exists(app, "subject", subject_ref) is None:
        return set()
    return {str(a.sidecar["id"]) for a in view.load(app, subject_ref).atoms
            if a.sidecar.get("id")}


def write_document(out: Path, doc: dict[str, Any], signer: Any | None, payload_type: str
                   ) -> list[str]:
    """Write a JSON export (mode 0600, never over an existing file); with a signer, a
    DSSE envelope over the exact bytes beside it. Returns the paths written."""
    data = (json.dumps(doc, ensure_ascii=False, indent=2, allow_nan=False) + "\n").encode()
    written = [_write_new_file(out, data)]
    if signer is not None:
        sig = signer.sign(pae(payload_type, data))
        env = {"payloadType": payload_type, "payload": base64.b64encode(data).decode(),
               "signatures": [{"keyid": signer.kid, "sig": base64.b64encode(sig).decode()}]}
        written.append(_write_new_file(out.with_name(out.name + ".dsse.json"),
                                       (json.dumps(env, indent=2) + "\n").encode()))
    return written


def _write_new_file(path: Path, data: bytes) -> str:
    try:
        write_private(path, data)
    except FileExistsError:
        raise InputError(f"{path} already exists", hint="choose a new --out, or remove it"
                         ) from None
    except OSError as e:
        raise InputError(f"cannot write {path}: {e.strerror or e}") from e
    return str(path)
