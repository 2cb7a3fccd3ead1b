"""Hard erasure that reaches every copy, and the right-to-be-forgotten flow.

One mechanism serves `ledger redact --mode hard`, `ledger delete`, `ledger artifact
delete` and `ledger redact-user`:

1. an operator-approved redaction batch names the targets (ids only);
2. the plaintext of each target is read once, held in memory for the probes, never
   logged or stored;
3. the targets' data keys are destroyed and one signed event per key is appended;
4. the read models apply those events (physical purge plus compaction), and every
   registered route is purged again explicitly;
5. every route's probe, by id and by content, must find nothing, and a raw scan of every
   file the ledger owns must not find the content's bytes; otherwise the erasure stops
   here, loudly, naming the route (the keys are already gone; a re-run finishes it);
6. signed tombstones list the routes reached; the batch records the reach results and
   closes; a checkpoint is taken before and after, for the Evidence Pack.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import UUID

import sqlalchemy as sa
import structlog

from keys.errors import KeyNotAuthorized
from ledger import clock
from ledger.errors import ConflictError, InputError, NotFound, VerificationFailed
from projections.routes import Reach
from projections.service import Projections
from projections.store import content_needles

log = structlog.get_logger("governance")

DEFAULT_ACK_HOURS = 24.0  # Persona Schema §7 rightToBeForgottenSla defaults
DEFAULT_COMPLETION_HOURS = 720.0
GONE = ("hard-redacted", "deleted")
MIN_PROBE_CHARS = 8


class ErasureIncomplete(VerificationFailed):
    """Something is still reachable after the purge; the batch stays open."""


@dataclass
class Targets:
    atoms: list[str] = field(default_factory=list)
    artifacts: list[str] = field(default_factory=list)
    subjects: list[str] = field(default_factory=list)
    why: dict[str, str] = field(default_factory=dict)

    def as_json(self) -> dict[str, list[str]]:
        return {"atoms": sorted(self.atoms), "artifacts": sorted(self.artifacts),
                "subjects": sorted(self.subjects)}

    @property
    def count(self) -> int:
        return len(self.atoms) + len(self.artifacts) + len(self.subjects)


def check_operator(app: Any, operator: str) -> None:
    """Refuse before anything is written unless ``operator`` holds the operator role now."""
    signer = app.signer(operator)
    try:
        app.roster().state.check(signer.kid, "operator", clock.now())
    except KeyNotAuthorized as e:
        raise InputError(f"{operator} is not an authorized operator: {e}",
                         hint="an operator key is needed: `ledger keys authorize NAME "
                              "--role operator`") from e


# ----------------------------------------------------------------------------- content
def _content_of(proj: Projections, conn: Any, t: Targets) -> dict[str, list[str]]:
    """Plaintext of every target, for probes only. Never logged, never stored.

    Free text only (text, gist, details, title, body, display name): tags are short
    labels other memories legitimately share, so they are probed by id, not by value.
    Texts shorter than :data:`MIN_PROBE_CHARS` say nothing about where a memory went
    (a one-word text matches everywhere); they too are probed by id only.
    """
    out: dict[str, list[str]] = {}
    for row in proj.atoms.atoms_by_id(conn, t.atoms):
        texts = [row.get("text"), row.get("gist"),
                 *(d.get("content") for d in (row.get("details") or []))]
        out[row["atom_id"]] = [x for x in texts if isinstance(x, str)]
    art, ac = proj.atoms.artifacts, proj.atoms.artifact_content
    if t.artifacts:
        for r in conn.execute(sa.select(ac).where(ac.c.artifact_id.in_(t.artifacts))):
            out[str(r.artifact_id)] = [x for x in (r.title, r.body, r.media_url) if x]
    for sid in t.subjects:
        subject_row = proj.atoms.subject(conn, sid)
        if subject_row and subject_row.get("display_name"):
            out[sid] = [subject_row["display_name"]]
    assert art is not None
    return {k: [x for x in v if x and len(x) >= MIN_PROBE_CHARS] for k, v in out.items()}


def scan_files(folder: Path, needles: Sequence[bytes]) -> dict[str, Any]:
    """Raw scan of every file below ``folder`` for any needle (no SQL, no parsing)."""
    files = [p for p in sorted(folder.rglob("*")) if p.is_file()]
    hits = []
    for path in files:
        data = path.read_bytes()
        count = sum(data.count(n) for n in needles if n)
        if count:
            hits.append({"file": str(path.relative_to(folder)), "count": count})
    return {"files": len(files), "needles": len(needles), "hits": hits,
            "checked_at": clock.format_instant(clock.now())}


# ----------------------------------------------------------------------------- erasure
def hard_erase(app: Any, proj: Projections, targets: Targets, *, mode: str, reason: str,
               operator: str, request_id: UUID | None = None,
               cascade: dict[str, dict[str, Any]] | None = None,
               referring: Sequence[str] = ()) -> dict[str, Any]:
    """Destroy, purge, probe, tombstone. Returns batch id, event ids and reach results."""
    if mode not in ("hard", "delete"):
        raise InputError(f"hard_erase takes mode hard or delete, not {mode!r}")
    check_operator(app, operator)
    proj.catch_up()
    before = app.checkpoint()
    batch_id = app.open_batch(operator, request_id, mode, reason, targets.as_json())
    with proj.store.engine.connect() as conn:
        content = _content_of(proj, conn, targets)
    ids = [UUID(i) for i in [*targets.atoms, *targets.artifacts, *targets.subjects]]
    shred_ids = app.shred(ids, reason, actor=operator)
    proj.catch_up()
    routes = [r for r in proj.registry.routes() if r.name != "sqlite-files"]
    per_route: dict[str, dict[str, Any]] = {r.name: {"route": r.name, "items": 0,
                                                      "reach": Reach.NOT_REACHABLE.value}
                                            for r in routes}
    with proj.store.engine.begin() as conn:  # explicit purge of every route, one compaction
        for item in ids:
            proj.registry.purge(conn, str(item))
    proj.runner.compact([m.name for m in proj.models])
    problems = []
    for item in ids:
        texts = content.get(str(item), [])
        for route in routes:
            results = [route.probe(str(item), None)] + [route.probe(str(item), t) for t in texts]
            per_route[route.name]["items"] += 1
            for res in results:
                if res.reach is Reach.REACHABLE:
                    per_route[route.name]["reach"] = Reach.REACHABLE.value
                    problems.append(f"{route.name} still reaches {item} "
                                    f"({', '.join(h.where for h in res.hits)})")
    needles = sorted({n for texts in content.values() for t in texts
                      for n in content_needles(t)})
    raw = scan_files(app.config.home, needles)
    checked_at = clock.format_instant(clock.now())
    for entry in per_route.values():
        entry["checked_at"] = checked_at
    if raw["hits"]:
        problems.append("raw scan found erased content in " +
                        ", ".join(h["file"] for h in raw["hits"]))
    if problems:
        log.error("erasure.incomplete", batch_id=str(batch_id), problems=len(problems))
        raise ErasureIncomplete(
            "erasure incomplete: " + "; ".join(problems[:5]),
            hint=f"keys are destroyed; fix the route and run the command again (batch "
                 f"{batch_id} stays open)")
    reached = [*sorted(per_route), "raw-file-scan"]
    tomb_ids = app.tombstone([UUID(a) for a in targets.atoms],
                             [UUID(a) for a in targets.artifacts], mode, reason, reached,
                             batch_id=str(batch_id), cascade=cascade, actor=operator)
    flag_ids = []
    for other in referring:
        fid = app.flag(UUID(other), "refers-to-erased", f"refers to memory erased by batch "
                       f"{batch_id}", related=None, actor=operator)
        if fid:
            flag_ids.append(fid)
    reach = {"routes": [per_route[n] for n in sorted(per_route)],
             "raw_scan": {k: raw[k] for k in ("files", "needles", "hits", "checked_at")},
             "flagged_for_review": sorted(referring),
             "checkpoint_before": before.size}
    event_ids = [*shred_ids, *tomb_ids, *flag_ids]
    close_ids = app.finish_batch(operator, batch_id, event_ids, reach, request_id=request_id)
    proj.catch_up()
    after = app.checkpoint()
    log.info("erasure.completed", batch_id=str(batch_id), items=len(ids),
             events=len(event_ids))
    return {"batch_id": str(batch_id), "event_ids": [*event_ids, *close_ids],
            "targets": targets.as_json(), "reach": reach,
            "checkpoints": {"before": before.size, "after": after.size}}


# ----------------------------------------------------------------------------- gathering
def _matches(texts: Iterable[str | None], identifiers: Sequence[str]) -> bool:
    low = [i.lower() for i in identifiers]
    return any(t and any(i in t.lower() for i in low) for t in texts)


def _atom_texts(row: dict[str, Any]) -> list[str | None]:
    return [row.get("text"), row.get("gist"), *(row.get("tags") or []),
            *(d.get("content") for d in (row.get("details") or []))]


def plan_user_erasure(app: Any, proj: Projections, subject: str,
                      identifiers: Sequence[str] = (), sessions: Sequence[str] = ()
                      ) -> tuple[Targets, list[str]]:
    """Gather what belongs to the subject, and what of others refers to it."""
    sid = str(app.resolve_subject(subject))
    proj.catch_up()
    t = Targets()
    with proj.store.engine.connect() as conn:
        rows = proj.atoms.list_atoms(conn)
        arts = proj.atoms.artifacts_of(conn, sid)
        subj = proj.atoms.subject(conn, sid)
        ac = proj.atoms.artifact_content
        art_rows = list(conn.execute(sa.select(proj.atoms.artifacts.c.artifact_id,
                                               proj.atoms.artifacts.c.subject_id,
                                               ac.c.title, ac.c.body).select_from(
            proj.atoms.artifacts.outerjoin(
                ac, proj.atoms.artifacts.c.artifact_id == ac.c.artifact_id))))
    sessions_set = set(sessions)
    for row in rows:
        if row["status"] in GONE and row["content_erased"]:
            continue  # already erased and tombstoned; a half-done erasure is picked up again
        why = None
        if row["subject_id"] == sid:
            why = "subject"
        elif row.get("session_id") and row["session_id"] in sessions_set:
            why = "session"
        elif identifiers and _matches(_atom_texts(row), identifiers):
            why = "identifier"
        if why:
            t.atoms.append(row["atom_id"])
            t.why[row["atom_id"]] = why
    for a in arts:
        if not a.get("content_erased"):
            t.artifacts.append(str(a["artifact_id"]))
    if identifiers:
        for r in art_rows:
            aid = str(r.artifact_id)
            if aid not in t.artifacts and _matches([r.title, r.body], identifiers):
                t.artifacts.append(aid)
    if subj is not None and not subj.get("content_erased"):
        t.subjects.append(sid)
    # Memories of others that refer to the erased ones: shared tags, session, identifiers.
    target_set = set(t.atoms)
    tags = {tag for row in rows if row["atom_id"] in target_set for tag in (row.get("tags") or [])}
    sess = {row.get("session_id") for row in rows if row["atom_id"] in target_set} - {None}
    referring = []
    for row in rows:
        if row["atom_id"] in target_set or row["status"] in GONE:
            continue
        if (tags & set(row.get("tags") or [])) or (row.get("session_id") in sess) or \
                (identifiers and _matches(_atom_texts(row), identifiers)):
            referring.append(row["atom_id"])
    return t, referring


def redact_user(app: Any, proj: Projections, subject: str, *, reason: str, operator: str,
                identifiers: Sequence[str] = (), sessions: Sequence[str] = (),
                legal_basis: str | None = None, dry_run: bool = False,
                ack_hours: float = DEFAULT_ACK_HOURS,
                completion_hours: float = DEFAULT_COMPLETION_HOURS) -> dict[str, Any]:
    """The right to be forgotten (Persona Schema §5): receipt, gather, approve, erase, flag,
    confirm."""
    if not reason.strip():
        raise InputError("a reason is required", hint='e.g. --reason "GDPR Art. 17 request"')
    try:
        sid = app.resolve_subject(subject)
    except NotFound:
        raise NotFound(f"no subject {subject!r} in this ledger",
                       hint="check the subject's id with `ledger subject show`") from None
    targets, referring = plan_user_erasure(app, proj, str(sid), identifiers, sessions)
    plan = {"subject_id": str(sid), "targets": targets.as_json(),
            "gathered_by": _count(targets.why.values()), "flag_for_review": sorted(referring)}
    if dry_run:
        return {"dry_run": True, **plan}
    check_operator(app, operator)
    if targets.count == 0:
        done = _completed_request(app, proj, str(sid))
        if done is not None:
            return {"status": "already-completed", "no_op": True, **done, **plan}
        raise ConflictError(f"subject {subject} has nothing left to erase")
    request_id = app.receive_request(str(sid), reason, operator, ack_hours, completion_hours,
                                     legal_basis=legal_basis, identifiers=identifiers,
                                     sessions=sessions)
    result = hard_erase(app, proj, targets, mode="hard", reason=reason, operator=operator,
                        request_id=request_id, referring=referring)
    return {"status": "completed", "request_id": str(request_id), **result, **plan}


def _count(values: Iterable[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return out


def _completed_request(app: Any, proj: Projections, sid: str) -> dict[str, Any] | None:
    from ledger import envelope
    from ledger.domain import ErasureRequest

    received = app.recorder.select_notifications(start=1, limit=10**9,
                                                 topics=[ErasureRequest.Created.TOPIC])
    rows = [str(n.originator_id) for n in received
            if envelope.open_state(n.state).envelope["payload"].get("subject_id") == sid]
    for rid in reversed(rows):
        req = app.repository.get(UUID(rid))
        if isinstance(req, ErasureRequest) and req.completed_at:
            return {"request_id": rid, "batch_id": req.batch_id,
                    "completed_at": req.completed_at, "event_ids": req.event_ids}
    return None


# ----------------------------------------------------------------------------- artifacts
def delete_artifact(app: Any, proj: Projections, artifact: str, *, reason: str, operator: str,
                    flag_unsourced: bool = False) -> dict[str, Any]:
    """Delete an artifact; re-evaluate every atom whose provenance cites it (Konshus)."""
    aid = str(app.resolve("artifact", artifact))
    proj.catch_up()
    with proj.store.engine.connect() as conn:
        rows = [r for r in proj.atoms.list_atoms(conn)
                if aid in (r.get("artifact_ids") or []) and r["status"] not in GONE]
    gone: set[str] = set()
    deleted_atoms: list[str] = []
    flagged: list[str] = []
    kept: list[tuple[str, list[str]]] = []
    for r in rows:
        remaining = [a for a in (r.get("artifact_ids") or []) if a != aid and a not in gone]
        needs = r.get("min_sources") or 1
        if r["derivation"] in ("inferred", "observed") and len(remaining) < needs:
            (flagged if flag_unsourced else deleted_atoms).append(r["atom_id"])
        else:
            kept.append((r["atom_id"], remaining))
    check_operator(app, operator)
    for atom_id, _remaining in kept:
        app.remove_source(UUID(atom_id), UUID(aid), actor=operator)
    for atom_id in flagged:
        app.remove_source(UUID(atom_id), UUID(aid), actor=operator)
        app.flag(UUID(atom_id), "unsourced", f"its source artifact {aid} was deleted",
                 actor=operator)
    cascade = {aid: {"deleted_atoms": sorted(deleted_atoms),
                     "kept_atoms": sorted(a for a, _ in kept),
                     "flagged_unsourced": sorted(flagged)}}
    targets = Targets(atoms=deleted_atoms, artifacts=[aid])
    result = hard_erase(app, proj, targets, mode="delete", reason=reason, operator=operator,
                        cascade=cascade)
    return {**result, "cascade": cascade[aid]}
