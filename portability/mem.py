"""``.mem`` bundles (portable-memory): map to and from the ledger.

Atoms and artifacts are both ``episode`` records (the kind every ``.mem`` reader
keeps, the reference in-memory store included); ``x-memory-ledger`` on the episode
line says which, and carries what the episode's own fields cannot. Erased atoms and
deleted or erased artifacts become tombstones signed per the spec (Ed25519 over the
unsigned canonical line). The subject rides in a vendor kind, ``memoryLedgerSubject``,
which readers pass through verbatim.

Import is stricter than the package (see :mod:`membundle` for the checks): tombstones
are read first; nothing whose id a tombstone targets or lists as derived is created;
trusted tombstones crypto-shred existing items and leave a shredded placeholder so a
later stale bundle cannot bring the item back; untrusted or unsigned ones only
suppress creation unless the caller applies them explicitly.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from portable_memory import (
    BundleExporter,
    ConformanceLevel,
    DerivedRefs,
    MemKind,
    PortableEpisode,
    PortableMemoryStore,
    StoreInfo,
    Tombstone,
    TombstoneOp,
    canonical_json,
    from_wire,
)
from portable_memory.interop import KNOWN_EPISODE_KEYS
from portable_memory.signing import PortableSigningKey, sign_tombstone

from ledger.errors import InputError
from ledger.inputs import ARTIFACT_KINDS, SENSITIVITIES
from ledger.progress import Steps
from portability.common import (
    WIRE,
    Plan,
    Refusal,
    check_subject_ref,
    drop_none,
    first,
    namespaced,
    placeholder,
)
from portability.membundle import TRUSTED, CheckedTombstone, VerifiedBundle
from portability.record import (
    STATUSES,
    Citations,
    Record,
    apply_wire,
    atom_input,
    clean,
    from_view,
    wire_of,
)
from portability.records import DERIVED_KINDS, NOT_RECORDS, TOMBSTONE_KIND
from portability.view import ArtifactView, SubjectView, encoding

SUBJECT_KIND = "memoryLedgerSubject"
GENERATOR = "memory-ledger/0.1.0"
ATOM_SOURCE_TYPE = "memory-atom"
IMPORT_SOURCE = "import.mem"
#: Record keys the episode's own fields state; the wire may not override them.
PROTECTED = frozenset({"id", "text", "sensitivity", "source_sensitivity", "provider",
                       "foreign", "tags"})
#: Native episode fields a foreign episode keeps verbatim (those not mapped to an atom).
EPISODE_KEEP = ("eventTime", "mentionTime", "sourceType", "actors", "metadata",
                "lifecycleState", "extractionState", "pinned", "vaultRefs", "sourceID",
                "deletedAt", "speaker")
_TIME_KEYS = ("eventTime", "mentionTime", "ingestionTime", "lastAccessed", "expirationDate",
              "deletedAt")


def _secs(t: str) -> str:
    """The canonical whole-second form portable-memory writes for an instant."""
    return datetime.fromisoformat(t.replace("Z", "+00:00")).astimezone(UTC).strftime(
        "%Y-%m-%dT%H:%M:%SZ")


def _dt(t: str) -> datetime:
    return datetime.fromisoformat(t.replace("Z", "+00:00")).astimezone(UTC)


# ------------------------------------------------------------------ atom <-> episode
def decode_episode(ep: dict[str, Any], foreign_origin: bool) -> Record:
    """The record an episode line states (no wire applied)."""
    sens = ep["sensitivity"]
    created = ep["ingestionTime"]
    gist = ep["details"] if ep["details"] and ep["details"] != ep["summary"] else None
    rec: Record = {
        "id": ep["id"], "kind": "fact", "text": ep["summary"], "gist": gist,
        "tags": ep["categories"] or None, "confidence": ep["confidence"],
        "sensitivity": sens if sens in SENSITIVITIES else "private",
        "source_sensitivity": None if sens in SENSITIVITIES else sens,
        "valid_from": ep["eventTime"] if ep["eventTime"] != created else None,
        "valid_to": ep.get("expirationDate"), "created_at": created,
        "salience": ep["importance"], "rehearsal_count": ep["accessCount"],
        "last_rehearsed_at": ep.get("lastAccessed"), "session_id": ep.get("contextID"),
        "status": ep["lifecycleState"] if ep["lifecycleState"] in STATUSES else "active",
        "provider": {k: v for k, v in ep.items() if k.startswith("x-") and k != WIRE} or None,
        "foreign": {k: v for k, v in ep.items()
                    if k not in KNOWN_EPISODE_KEYS and not k.startswith("x-")} or None,
    }
    if foreign_origin:
        rec["episode"] = {k: ep[k] for k in EPISODE_KEEP if k in ep}
        # numbers the format allows but an atom's 0..1 fields do not (portable-memory's
        # own signed.mem has importance 3): the atom gets the nearest value, the
        # episode's own number is kept (sealed) and written back on export
        for key, field in (("importance", "salience"), ("confidence", "confidence")):
            v = ep[key]
            if not 0 <= v <= 1:
                rec["episode"][key] = v
                rec[field] = min(max(float(v), 0.0), 1.0)
    return clean(rec)


def encode_episode(rec: Record, subject_ref: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(native episode fields, extra keys) for an atom record; times whole-second."""
    base = rec.get("episode") or {}
    created = _secs(rec["created_at"])
    native: dict[str, Any] = {
        "id": rec["id"],
        "eventTime": base.get("eventTime") or _secs(rec.get("valid_from") or created),
        "mentionTime": base.get("mentionTime") or created, "ingestionTime": created,
        "sourceType": base.get("sourceType", ATOM_SOURCE_TYPE),
        "actors": base.get("actors", [subject_ref]),
        "summary": rec["text"], "details": rec.get("gist") or rec["text"],
        "sensitivity": rec.get("source_sensitivity") or rec["sensitivity"],
        "metadata": base.get("metadata", {}), "categories": rec.get("tags") or [],
        "importance": base.get("importance", rec.get("salience", 0.5)),
        "confidence": base.get("confidence", rec.get("confidence", 1.0)),
        "lifecycleState": base.get("lifecycleState") or rec.get("status", "active"),
        "extractionState": base.get("extractionState", "done"),
        "accessCount": rec.get("rehearsal_count", 0), "pinned": base.get("pinned", False),
        "vaultRefs": base.get("vaultRefs", []),
    }
    for key, value in (("sourceID", base.get("sourceID")), ("deletedAt", base.get("deletedAt")),
                       ("speaker", base.get("speaker")), ("contextID", rec.get("session_id")),
                       ("lastAccessed", rec.get("last_rehearsed_at")),
                       ("expirationDate", rec.get("valid_to"))):
        if value is not None:
            native[key] = _secs(value) if key in _TIME_KEYS else value
    extra: dict[str, Any] = dict(rec.get("provider") or {})
    for k, v in (rec.get("foreign") or {}).items():
        extra.setdefault(k, v)
    canon = json.loads(canonical_json(native))  # numbers as the bundle will hold them
    # read back as the importer will read it: an episode with our wire is not foreign
    wire = wire_of(rec, decode_episode({**canon, **extra}, False), PROTECTED)
    extra[WIRE] = {"record": "atom", **wire}
    return native, extra


def _episode(native: dict[str, Any]) -> PortableEpisode:
    """The package's episode object for native fields (no per-record type-hint work)."""
    return PortableEpisode(**{_ATTR[k]: (_dt(v) if k in _TIME_KEYS else v)
                              for k, v in native.items()})


_ATTR = {f.metadata.get("json", f.name): f.name
         for f in PortableEpisode.__dataclass_fields__.values()}


# ------------------------------------------------------------------ artifact <-> episode
def encode_artifact(a: ArtifactView, subject_ref: str, include_private: bool
                    ) -> tuple[dict[str, Any], dict[str, Any]]:
    full = not a.private or include_private
    captured = _secs(a.captured_at)
    native = {
        "id": a.local_id, "eventTime": captured, "mentionTime": captured,
        "ingestionTime": captured, "sourceType": a.kind, "actors": [subject_ref],
        "summary": (a.title or "") if full else "", "details": (a.body or "") if full else "",
        "sensitivity": "private", "metadata": {}, "categories": [], "importance": 0,
        "confidence": 1, "lifecycleState": "active", "extractionState": "done",
        "accessCount": 0, "pinned": False, "vaultRefs": [],
    }
    wire = drop_none({"record": "artifact", "captured_at": a.captured_at,
                      "private": a.private, "source": a.source,
                      "media_url": a.media_url if full else None})
    return native, {WIRE: wire}


def decode_artifact(ep: dict[str, Any], wire: dict[str, Any], subject_ref: str,
                    where: str) -> dict[str, Any]:
    unknown = set(wire) - {"record", "captured_at", "private", "source", "media_url"}
    if unknown:
        raise InputError(f"{where}: {WIRE} has unknown artifact keys {sorted(unknown)}")
    if ep["sourceType"] not in ARTIFACT_KINDS:
        raise InputError(f"{where}: artifact kind {ep['sourceType']!r} is not one of "
                         f"{', '.join(ARTIFACT_KINDS)}")
    ref, reversible = namespaced(subject_ref, ep["id"])
    if not reversible:
        raise InputError(f"{where}: artifact id {ep['id']!r} cannot be kept as a ledger ref")
    return drop_none({
        "subject": subject_ref, "ref": ref, "kind": ep["sourceType"],
        "title": ep["summary"] or None, "body": ep["details"] or None,
        "media_url": wire.get("media_url"),
        "captured_at": wire.get("captured_at") or ep["eventTime"],
        "source": wire.get("source"), "private": bool(wire.get("private", False)),
    })


# ------------------------------------------------------------------ import
def _tombstone_kind(t: Tombstone) -> str | None:
    """atom or artifact (our ids say which), atom for a foreign episode, else None."""
    parts = str(t.id).split(":", 2)
    if len(parts) == 3 and parts[0] == "tomb" and parts[1] in ("atom", "artifact"):
        return parts[1]
    return "atom" if t.target_kind == "episode" else None


def plan_import(bundle: VerifiedBundle, *, subject: str | None,
                artifact_exists: Callable[[str], bool], skip_unsupported: bool = False
                ) -> Plan:
    """Plan the import of a verified bundle; nothing is written."""
    subj_lines = bundle.records(SUBJECT_KIND)
    if len(subj_lines) > 1:
        raise InputError(f"the bundle names {len(subj_lines)} subjects; import one at a time")
    s = subj_lines[0] if subj_lines else {}
    ref = check_subject_ref(subject or s.get("subject_id"), "bundle subject")
    plan = Plan(format="mem", subject=drop_none(
        {"ref": ref, "display_name": s.get("display_name"), "locale": s.get("locale")}))
    plan.manifest_signature = bundle.manifest_trust
    if bundle.manifest_trust == "untrusted":
        plan.warnings.append("manifest.sig is by a key not given with --trust; the bundle's "
                             "integrity is checked, its origin is not")
    return plan_records(plan, bundle.streams, bundle.tombstones,
                        artifact_exists=artifact_exists, skip_unsupported=skip_unsupported)


def plan_records(plan: Plan, streams: dict[str, list[dict[str, Any]]],
                 tombstones: list[CheckedTombstone], *, artifact_exists: Callable[[str], bool],
                 skip_unsupported: bool, source: str = IMPORT_SOURCE) -> Plan:
    """Tombstones first, then episodes (ours and foreign); other kinds are unsupported.

    ``source`` names the artifact that foreign, sourceless episodes are said to be
    inferred from (one per subject and input format).
    """
    ref = plan.subject_ref
    covered = _plan_tombstones(plan, tombstones)
    _plan_other_records(plan, streams)
    citations = Citations(ref, artifact_exists, covered)
    for where, ep, wire in _plan_artifacts(plan, streams.get("episode", []), citations):
        _plan_atom(plan, where, ep, wire, citations, skip_unsupported, source)
    if citations.sourceless and \
            not any(a["ref"] == citations.here[source] for a in plan.artifacts):
        plan.artifacts.append({"subject": ref, "ref": citations.here[source],
                               "kind": "document", "source": f"{plan.format}-import",
                               "private": True})
        plan.warnings.append("records from other tools were imported as atoms inferred by an "
                             f"unknown extractor, citing the artifact {source!r}")
    return plan


def _plan_tombstones(plan: Plan, tombstones: list[CheckedTombstone]) -> set[str]:
    """Tombstones first: what they cover is never created. Returns the ids covered."""
    covered: set[str] = set()
    counts = {"total": 0, TRUSTED: 0, "untrusted": 0, "unsigned": 0}
    for ct in tombstones:
        counts["total"] += 1
        counts[ct.trust] += 1
        covered.update(_plan_tombstone(plan, ct))
    plan.tombstones = counts
    if counts["untrusted"] + counts["unsigned"]:
        plan.warnings.append(
            f"{counts['untrusted'] + counts['unsigned']} tombstone(s) are unsigned or signed "
            "by a key not given with --trust: they stop their items from being created, but "
            "erase nothing already in the ledger unless --apply-untrusted-tombstones")
    return covered


def _plan_tombstone(plan: Plan, ct: CheckedTombstone) -> list[str]:
    """One tombstone's erasures, records and placeholder; returns the ids it covers."""
    ref = plan.subject_ref
    t = ct.tombstone
    d = t.derived
    ids = [t.target_id, *d.sentence_ids, *d.fact_ids, *d.edge_ids, *d.entity_ids,
           *d.chunk_ids]
    if ct.trust != TRUSTED:
        plan.untrusted.append(t.id)
    for i in ids:
        plan.erase.append(("any", namespaced(ref, i)[0], t.id))
    plan.record_lines.append((TOMBSTONE_KIND, ct.raw))
    if t.target_kind not in NOT_RECORDS:
        plan.record_erase.append((t.target_kind, t.target_id, t.id))
        plan.record_placeholders.append((t.target_kind, t.target_id, t.id))
    for attr, rkind in DERIVED_KINDS.items():
        for i in getattr(d, attr):
            plan.record_erase.append((rkind, i, t.id))
    kind = _tombstone_kind(t)
    if kind is not None:
        target = namespaced(ref, t.target_id)[0]
        plan.placeholders.append((kind, target, placeholder(kind, ref, target, None), t.id))
    return ids


def _plan_other_records(plan: Plan, streams: dict[str, list[dict[str, Any]]]) -> None:
    """The portable records of other kinds (ADR 0017) are kept, unless a tombstone
    covers them."""
    covered_records = {(k, i) for k, i, _ in plan.record_erase}
    for kind, lines in sorted(streams.items()):
        if kind in ("episode", SUBJECT_KIND, "tombstone"):
            continue
        for line in lines:
            if (kind, str(line.get("id"))) in covered_records:
                plan.refused.append(Refusal(kind, str(line.get("id")),
                                            "covered by a tombstone"))
            else:
                plan.record_lines.append((kind, line))


def _plan_artifacts(plan: Plan, episodes: list[dict[str, Any]], citations: Citations
                    ) -> list[tuple[str, dict[str, Any], dict[str, Any] | None]]:
    """Plan the episodes that are artifacts; return the others (where, episode, wire),
    atoms to plan once every artifact of the bundle is known."""
    atom_lines: list[tuple[str, dict[str, Any], dict[str, Any] | None]] = []
    for n, ep in enumerate(episodes, 1):
        where = f"episode {ep['id']!r} (items/episode.jsonl line {n})"
        wire = ep.get(WIRE)
        if wire is not None and not isinstance(wire, dict):
            raise InputError(f"{where}: {WIRE} must be an object")
        is_artifact = isinstance(wire, dict) and wire.get("record") == "artifact"
        if ep["id"] in citations.covered:
            plan.refused.append(Refusal("artifact" if is_artifact else "atom", ep["id"],
                                        "covered by a tombstone"))
            continue
        if is_artifact:
            assert wire is not None
            art = decode_artifact(ep, wire, plan.subject_ref, where)
            plan.artifacts.append(art)
            citations.here[ep["id"]] = art["ref"]
        else:
            atom_lines.append((where, ep, wire))
    return atom_lines


def _plan_atom(plan: Plan, where: str, ep: dict[str, Any], wire: dict[str, Any] | None,
               citations: Citations, skip_unsupported: bool, source: str) -> None:
    """Plan one episode that is an atom: ours (it has our wire) or a foreign one that
    fits an atom; refused when it does not fit (with ``skip_unsupported``), is withheld
    at the source, or cites only tombstoned or missing sources."""
    foreign_origin = wire is None
    if foreign_origin:
        problem = _foreign_fit(ep)
        if problem:
            if not skip_unsupported:
                raise InputError(f"{where}: {problem}; nothing was imported",
                                 hint="pass --skip-unsupported to import the rest")
            plan.refused.append(Refusal("atom", ep["id"], problem))
            return
    rec = decode_episode(ep, foreign_origin)
    rec = apply_wire(rec, {k: v for k, v in (wire or {}).items() if k != "record"},
                     PROTECTED, where)
    planned = atom_input(plan, rec, where, citations, source)
    if planned is None:
        return
    data, unresolved = planned
    if rec["derivation"] in ("inferred", "observed") and not data["artifact_ids"]:
        plan.refused.append(Refusal("atom", ep["id"], "every source it cites is "
                                    "tombstoned or missing"))
        return
    if unresolved:
        plan.warnings.append(f"{where} cites artifacts not in this bundle "
                             f"({first(unresolved)}); kept as unresolved citations")
    plan.atoms.append(data)


def _foreign_fit(ep: dict[str, Any]) -> str | None:
    """Why a foreign episode does not fit an atom, or None."""
    if not 1 <= len(ep["summary"].strip()) <= 500:
        return "its summary must have 1 to 500 characters to become an atom's text"
    if ep["details"] != ep["summary"] and len(ep["details"]) > 2000:
        return "its details are longer than the 2000 characters of an atom's gist"
    return None


# ------------------------------------------------------------------ export
class _Store(PortableMemoryStore):  # type: ignore[misc]  # the package ships no types
    """What the portable-memory exporter reads: our episodes, ext, tombstones, subject."""

    def __init__(self, episodes: list[PortableEpisode], ext: dict[str, str],
                 tombstones: list[Any], subject_line: str,
                 records: dict[str, list[dict[str, Any]]] | None = None) -> None:
        self._episodes = episodes
        self._ext = ext
        self._tombstones = tombstones
        self._subject = subject_line
        self._records = records or {}

    def _kind(self, kind: str) -> list[Any]:
        return [_Line(r) for r in self._records.get(kind, [])]

    def export_entities(self) -> list[Any]:
        return self._kind("entity")

    def export_edges(self) -> list[Any]:
        return self._kind("edge")

    def export_facts(self) -> list[Any]:
        return self._kind("fact")

    def export_fact_links(self) -> list[Any]:
        return self._kind("factLink")

    def export_episode_links(self) -> list[Any]:
        return self._kind("episodeLink")

    def export_resources(self) -> list[Any]:
        return self._kind("resource")

    def export_chunks(self) -> list[Any]:
        return self._kind("chunk")

    def export_core_blocks(self) -> list[Any]:
        return self._kind("core")

    def export_procedures(self) -> list[Any]:
        return self._kind("procedure")

    def export_contexts(self) -> list[Any]:
        return self._kind("context")

    def export_communities(self) -> list[Any]:
        return self._kind("community")

    def export_categories(self) -> list[Any]:
        return self._kind("category")

    def export_preferences(self) -> list[Any]:
        return self._kind("preference")

    def export_secret_refs(self) -> list[Any]:
        return self._kind("secretRef")

    def store_info(self) -> StoreInfo:
        return StoreInfo(generator=GENERATOR)

    def export_episodes(self) -> list[PortableEpisode]:
        return self._episodes

    def export_episode_ext(self) -> dict[str, str]:
        return self._ext

    def export_tombstones(self, since: datetime | None) -> list[Tombstone]:
        return self._tombstones

    def export_passthrough_kinds(self) -> list[str]:
        return [SUBJECT_KIND, *sorted(k for k in self._records if k not in _KNOWN_KINDS)]

    def export_passthrough_lines(self, kind: str) -> list[str]:
        if kind == SUBJECT_KIND:
            return [self._subject]
        # vendor kinds verbatim: the line's own key order, as it was received
        return sorted(json.dumps(r, ensure_ascii=False, separators=(",", ":"),
                                 allow_nan=False) for r in self._records.get(kind, []))


class _Line(dict[str, Any]):
    """A kept record line, handed to the package's exporter as it is (``to_line`` takes a
    plain value); attribute reads (the exporter's ``since`` filter, context ids) see the
    line's keys, absent ones None."""

    def __getattr__(self, name: str) -> Any:
        return self.get(name)


_KNOWN_KINDS = frozenset(k.value for k in MemKind)


def tombstone_for(kind: str, local_id: str, at: str | None, deleted: bool, ledger_id: str,
                  key: PortableSigningKey) -> Tombstone:
    t = Tombstone(id=f"tomb:{kind}:{local_id}",
                  op=TombstoneOp.DELETE if deleted else TombstoneOp.REDACT,
                  target_kind="episode", target_id=local_id,
                  deleted_at=_dt(at or "1970-01-01T00:00:00Z"),
                  actor=f"memory-ledger:{ledger_id}", derived=DerivedRefs())
    return sign_tombstone(t, key)


def export(view: SubjectView, out: Path, *, include_private: bool, key: PortableSigningKey,
           sign_manifest: bool, progress: Steps | None = None) -> dict[str, int]:
    """Write one subject's bundle to ``out`` (a new directory); return counts.
    ``progress`` hears the atoms encoded."""
    episodes: list[PortableEpisode] = []
    ext: dict[str, str] = {}
    tombstones: list[Any] = []
    stats = {"atoms": 0, "artifacts": 0, "tombstones": 0, "withheld_redacted": 0,
             "private_withheld": 0}
    for a in view.artifacts:
        if a.gone:
            tombstones.append(tombstone_for("artifact", a.local_id, a.gone_at, a.deleted,
                                            view.ledger_id, key))
            continue
        if a.private and not include_private:
            stats["private_withheld"] += 1
        native, extra = encode_artifact(a, view.ref, include_private)
        episodes.append(_episode(native))
        ext[a.local_id] = canonical_json(extra)
        stats["artifacts"] += 1
    for i, v in enumerate(view.atoms, start=1):
        encoding(progress, i, len(view.atoms))
        if v.erased:
            kept = v.sidecar.get("tombstone")
            if kept is not None:
                tombstones.append(from_wire(Tombstone, kept))
            else:
                tombstones.append(tombstone_for("atom", v.local_id, v.erased_at,
                                                v.status == "deleted", view.ledger_id, key))
            continue
        if v.withheld:
            stats["withheld_redacted"] += 1
            continue
        native, extra = encode_episode(from_view(v), view.ref)
        episodes.append(_episode(native))
        ext[v.local_id] = canonical_json(extra)
        stats["atoms"] += 1
    records, tombstones = _records(view, tombstones)
    stats["records"] = sum(len(x) for x in records.values())
    ids = [e.id for e in episodes]
    if len(set(ids)) != len(ids):
        dup = sorted({i for i in ids if ids.count(i) > 1})
        raise InputError(f"an atom and an artifact share the export id {first(dup)}; "
                         "a bundle needs distinct episode ids")
    stats["tombstones"] = len(tombstones)
    subject_line = canonical_json(drop_none({"subject_id": view.ref,
                                             "display_name": view.display_name,
                                             "locale": view.locale}))
    store = _Store(episodes, ext, tombstones, subject_line, records)
    _write_new_dir(out, lambda tmp: BundleExporter().export(
        store, tmp, level=ConformanceLevel.L3 if sign_manifest else ConformanceLevel.L2,
        signing_key=key if sign_manifest else None))
    return stats


def _records(view: SubjectView, tombstones: list[Any]
             ) -> tuple[dict[str, list[dict[str, Any]]], list[Any]]:
    """The subject's portable records by kind, and the bundle's tombstones: received
    tombstones are kept (sealed) as records and go out verbatim; the ledger's own
    tombstone for the same target (a placeholder's) is then not written twice."""
    records: dict[str, list[dict[str, Any]]] = {}
    for r in view.records:
        if r.content is not None:
            records.setdefault(r.kind, []).append(r.content)
    kept = records.get(TOMBSTONE_KIND, [])
    seen_tombs = {str(t.get("id")) for t in kept}
    seen_targets = {(str(t.get("targetKind")), str(t.get("targetID"))) for t in kept}
    tombstones = [t for t in tombstones if t.id not in seen_tombs
                  and (t.target_kind, t.target_id) not in seen_targets]
    tombstones += [_Line(t) for t in records.pop(TOMBSTONE_KIND, [])]
    return records, tombstones


def _write_new_dir(out: Path, write: Any) -> None:
    """Write into a private temporary directory beside ``out``, then move it in place."""
    if out.exists():
        raise InputError(f"{out} already exists", hint="choose a new --out, or remove it")
    parent = out.parent if str(out.parent) else Path(".")
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=parent))
    try:
        write(tmp)
        for p in tmp.rglob("*"):
            os.chmod(p, 0o700 if p.is_dir() else 0o600)
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def signing_key(seed: bytes) -> PortableSigningKey:
    """A portable-memory signing key from an Ed25519 seed (the ledger's key files)."""
    return PortableSigningKey(raw_representation=seed)

