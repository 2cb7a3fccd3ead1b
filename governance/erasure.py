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
   file the ledger owns must not find the content's bytes (its reading of the files the
   purge does not write starts as soon as the keys are gone, and any of them written
   meanwhile is read again); otherwise the erasure stops here, loudly, naming the route
   (the keys are already gone; a re-run finishes it);
6. signed tombstones list the routes reached; the batch records the reach results and
   closes; a checkpoint is taken before and after, for the Evidence Pack.

An erasure that cannot erase everything (a read model's store unreachable after retries,
items under a legal hold of the policy) ends *partial* instead (ADR 0047,
governance/partial.py): what it could do is done and recorded, signed
(``batch.ended-partial``, ``request.ended-partial``), the batch stays open, and a later
run (``ledger requests resume``) finishes it.

The rooms: governance/erasure_content.py (the targets and what is looked for),
governance/erasure_plan.py (what a right-to-be-forgotten request erases and flags),
governance/erasure_steps.py (the run, step by step, ADR 0066),
governance/erasure_reach.py (purge, probes, raw scan, residue repair). This module holds
the commands that start, resume and refuse erasures.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any
from uuid import UUID

from governance import partial as part
from governance.erasure_content import (
    MIN_PROBE_CHARS,
    SAME_WORDS,
    Targets,
    held_by_others,
    held_inside_others,
    plural_items,
    successors,
)
from governance.erasure_plan import ErasurePlan, plan_user_erasure
from governance.erasure_steps import (
    STEPS,
    ErasureIncomplete,
    ErasureRun,
    check_operator,
    held_refusal,
    open_batch,
    settled,
)
from ledger import envelope, faults
from ledger.errors import ConflictError, InputError, NotFound
from ledger.progress import Steps, report
from ledger.tracing import traced
from projections.atoms import GONE
from projections.service import Projections

if TYPE_CHECKING:
    from ledger.application import LedgerApp
    from ledger.domain import ErasureRequest

__all__ = ["DEFAULT_ACK_HOURS", "DEFAULT_COMPLETION_HOURS", "GONE", "MIN_PROBE_CHARS",
           "SAME_WORDS", "STEPS", "ErasureIncomplete", "ErasurePlan", "Targets",
           "check_operator", "delete_artifact", "erasure_request", "hard_erase",
           "held_by_others", "held_inside_others", "open_request", "plan_user_erasure",
           "plural_items", "redact_user", "reject_request", "resume_request", "successors"]

DEFAULT_ACK_HOURS = 24.0  # Persona Schema §7 rightToBeForgottenSla defaults
DEFAULT_COMPLETION_HOURS = 720.0


@settled
@traced("erasure.run", lambda out, *a, **k: {"ledger.erasure.mode": k.get("mode", "")})
def hard_erase(app: LedgerApp, proj: Projections, targets: Targets, *, mode: str, reason: str,
               operator: str, request_id: UUID | None = None,
               cascade: dict[str, dict[str, Any]] | None = None,
               referring: Sequence[str] | Mapping[str, str] = (),
               review_artifacts: Sequence[str] = (), batch: Any = None,
               fresh: bool = False, progress: Steps | None = None) -> dict[str, Any]:
    """Destroy, purge, probe, tombstone, close: one resumable batch (ADR 0019).

    Each step is recorded (signed events, the keystore) before the next begins, and each
    is idempotent, so a run that stopped anywhere is finished by running it again: the
    batch left open for the same targets (or ``batch``, the request's) is continued,
    never a second one opened. What the probes and the raw scan look for is taken before
    the first key is destroyed and kept sealed under the batch's data key, in the
    keystore, until the batch closes (its key destroyed last). ``fresh``: the request was
    received just now, so it has no batch to look for. Returns batch id, event ids and
    reach results, and ``status``: ``completed``, or ``partial`` with ``reasons``.

    A run that cannot erase everything ends partial (ADR 0047): a read model's store
    unreachable after :data:`governance.partial.ATTEMPTS` tries (the other routes are
    purged and probed, the keys destroyed stay destroyed, nothing is tombstoned), or items
    a legal hold of the enforced policy keeps (kept with their keys; the others erased
    and tombstoned). The batch stays open and the next run continues it. A hard erasure
    without a request (a deletion) of a held item is refused before anything is written.

    ``referring``: memories of others to flag ``refers-to-erased`` (a mapping gives each
    flag's reason: ids, identifier positions, field names, never content);
    ``review_artifacts``: other subjects' artifacts listed for review in the reach record.
    ``progress`` hears each step and its count (ledger/progress.py).
    """
    return ErasureRun(app, proj, targets, mode=mode, reason=reason, operator=operator,
                      request_id=request_id, cascade=cascade, referring=referring,
                      review_artifacts=review_artifacts, batch=batch, fresh=fresh,
                      progress=progress).run().as_json()


def redact_user(app: LedgerApp, proj: Projections, subject: str, *, reason: str, operator: str,
                identifiers: Sequence[str] = (), sessions: Sequence[str] = (),
                legal_basis: str | None = None, dry_run: bool = False,
                ack_hours: float = DEFAULT_ACK_HOURS,
                completion_hours: float = DEFAULT_COMPLETION_HOURS,
                resume: bool = False, expect_plan: str | None = None,
                progress: Steps | None = None) -> dict[str, Any]:
    """The right to be forgotten (Persona Schema §5): receipt, gather, approve, erase, flag,
    confirm. ``progress`` hears each step and its count (ledger/progress.py).

    A dry run checks what the real run checks (reason, subject, operator key and role,
    identifiers, sessions) and then reports the plan with its digest; a real run given
    ``expect_plan`` (that digest) refuses, before writing anything, if its plan differs.
    A subject with a request still open (an interrupted run) gets that request finished,
    never a second one (ADR 0019); ``resume`` asks for exactly that, and refuses when
    there is nothing to resume."""
    if not resume and not reason.strip():
        raise InputError("a reason is required", hint='e.g. --reason "GDPR Art. 17 request"')
    try:
        sid = app.reader.resolve_subject(subject)
    except NotFound:
        raise NotFound(f"no subject {subject!r} in this ledger",
                       hint="check the subject's id with `ledger subject show`") from None
    faults.point("start")
    earlier = _earlier_request(app, proj, subject, str(sid), operator, dry_run, resume,
                               progress)
    if earlier is not None:
        return earlier
    check_operator(app, operator)
    t0 = time.perf_counter()
    proj.catch_up_steps(progress)
    report(progress, "Gathering what to erase", 0, 1)
    gathered_plan = plan_user_erasure(app, proj, str(sid), identifiers, sessions)
    report(progress, "Gathering what to erase", 1, 1)
    targets = gathered_plan.targets
    gathered = round(time.perf_counter() - t0, 4)
    plan = gathered_plan.as_json()
    if dry_run:
        return {"dry_run": True, **plan}
    _same_plan(expect_plan, gathered_plan, plan["plan_digest"])
    if targets.count == 0:
        done = _completed_request(app, proj, str(sid))
        if done is not None:
            return {"status": "already-completed", "no_op": True, **done, **plan}
        raise ConflictError(f"subject {subject} has nothing left to erase")
    request_id = app.receive_request(str(sid), reason, operator, ack_hours, completion_hours,
                                     legal_basis=legal_basis, identifiers=identifiers,
                                     sessions=sessions)
    faults.point("after-receipt")
    result = hard_erase(app, proj, targets, mode="hard", reason=reason, operator=operator,
                        request_id=request_id, referring=gathered_plan.flag_reasons,
                        review_artifacts=gathered_plan.review_artifacts, fresh=True,
                        progress=progress)
    result["seconds"] = {"gather": gathered, **result["seconds"]}
    return {"status": "completed", "request_id": str(request_id), **result, **plan}


def _earlier_request(app: LedgerApp, proj: Projections, subject: str, sid: str,
                     operator: str, dry_run: bool, resume: bool, progress: Steps | None
                     ) -> dict[str, Any] | None:
    """The subject's request an interrupted run left open, finished (not in a dry run);
    else, with ``resume``, the last completed one reported, or a refusal when there is
    none. None: a new request is to be made."""
    pending = None if dry_run else open_request(app, sid)
    if pending is not None:
        check_operator(app, operator)
        return _resume_request(app, proj, pending, operator, progress)
    if not resume:
        return None
    done = _completed_request(app, proj, sid)
    if done is not None:
        return {"status": "already-completed", "no_op": True, **done,
                "subject_id": sid, "targets": Targets().as_json(),
                "flag_for_review": []}
    raise NotFound(f"subject {subject} has no erasure request to resume",
                   hint="start one with `ledger redact-user SUBJECT --reason ...`")


def _same_plan(expect_plan: str | None, plan: ErasurePlan, digest: str) -> None:
    """A real run given the dry run's digest refuses, before writing anything, when its
    own plan differs."""
    if expect_plan is None or expect_plan == digest:
        return
    targets = plan.targets
    raise ConflictError(
        f"the ledger changed since the dry run: its plan was {expect_plan}, the plan now "
        f"is {digest} ({len(targets.atoms)} atoms, "
        f"{len(targets.artifacts)} artifacts to erase, {len(plan.flags)} "
        "memories of others to flag); nothing was written",
        hint="run the dry run again, review it, and pass its new --plan")


def erasure_request(app: LedgerApp, request: str) -> Any:
    """The :class:`ErasureRequest` whose id is ``request``, or :class:`NotFound`."""
    from eventsourcing.application import AggregateNotFoundError

    from ledger.domain import ErasureRequest

    try:
        req = app.reader.aggregate(UUID(request))
    except (ValueError, AggregateNotFoundError):
        raise NotFound(f"no erasure request {request!r}",
                       hint="see `ledger requests list`") from None
    if not isinstance(req, ErasureRequest):
        raise NotFound(f"{request} is not an erasure request", hint="see `ledger requests list`")
    return req


def resume_request(app: LedgerApp, proj: Projections, request: str, operator: str
                   ) -> dict[str, Any]:
    """`ledger requests resume REQUEST`: finish an interrupted erasure request."""
    req = erasure_request(app, request)
    check_operator(app, operator)
    if req.rejected_at is not None:
        raise ConflictError(f"request {req.id} was rejected at {req.rejected_at} "
                            f"({(req.rejection or {}).get('code')}): a rejected request is "
                            "closed and never executed",
                            hint="a new request can be filed for the subject")
    if req.completed_at is not None and req.data_key_destroyed_at is not None:
        return {"status": "already-completed", "no_op": True, "request_id": str(req.id),
                "batch_id": req.batch_id, "completed_at": req.completed_at,
                "event_ids": req.event_ids, "subject_id": req.subject_id,
                "targets": Targets().as_json(), "flag_for_review": []}
    return _resume_request(app, proj, req, operator)


def _resume_request(app: LedgerApp, proj: Projections, req: ErasureRequest, operator: str,
                    progress: Steps | None = None) -> dict[str, Any]:
    """Continue the request's batch from where it stopped (or open it, if the run
    stopped after the receipt), and close both."""
    batch = open_batch(app, req.id, None)
    if batch is None:
        plan = plan_user_erasure(app, proj, req.subject_id, req.identifiers or (),
                                 req.sessions or ())
        if plan.targets.count == 0:
            raise ConflictError(f"request {req.id} has nothing left to erase",
                                hint="its subject's memories are already gone")
        result = hard_erase(app, proj, plan.targets, mode="hard", reason=req.reason or
                            f"erasure request {req.id}", operator=operator,
                            request_id=req.id, referring=plan.flag_reasons,
                            review_artifacts=plan.review_artifacts, fresh=True,
                            progress=progress)
    else:
        result = hard_erase(app, proj, Targets(), mode=batch.mode, reason="",
                            operator=operator, request_id=req.id, batch=batch,
                            progress=progress)
    flagged = (result.get("reach") or {}).get("flagged_for_review", [])
    return {"status": "completed", "request_id": str(req.id), **result, "resumed": True,
            "subject_id": req.subject_id, "flag_for_review": flagged,
            **({"partial_before": [dict(p) for p in req.partials]} if req.partials else {})}


def open_request(app: LedgerApp, sid: str) -> ErasureRequest | None:
    """The subject's erasure request that is not completed (or whose key is not yet
    destroyed), if any."""
    from ledger.domain import ErasureRequest

    received = app.reader.notifications(start=1, limit=10**9,
                                 topics=[ErasureRequest.Created.TOPIC])
    for n in reversed(received):
        if envelope.open_state(n.state).envelope["payload"].get("subject_id") != sid:
            continue
        req = app.reader.aggregate(UUID(str(n.originator_id)))
        if isinstance(req, ErasureRequest) and (
                (req.completed_at is None and req.rejected_at is None) or
                (req.data_key_destroyed_at is None
                 and app.reader.data_keys_present([str(req.id)]))):
            return req
    return None


def reject_request(app: LedgerApp, request: str, operator: str, code: str, reason: str
                   ) -> dict[str, Any]:
    """`ledger requests reject REQUEST --reason ...`: refuse a request before any erasure
    of it started (ADR 0047). The reason is kept in clear and shown in the request
    register: it must say why in words that name no one. Returns the request's id, the
    rejection and the signed events."""
    from ledger.domain import REJECTION_CODES

    if code not in REJECTION_CODES:
        raise InputError(f"unknown rejection code {code!r}",
                         hint="one of: " + ", ".join(REJECTION_CODES))
    words = reason.strip()
    if not words:
        raise InputError("a reason is required: it is what the register says about why",
                         hint='e.g. --reason "identity could not be verified"')
    if len(words) > 500:
        raise InputError("the reason is longer than 500 characters",
                         hint="say why in a sentence; it must name no one")
    req = erasure_request(app, request)
    check_operator(app, operator)
    batch = open_batch(app, req.id, None)
    if batch is not None:
        raise ConflictError(
            f"request {req.id} has an erasure (batch {batch.id}, {batch.status}); only a "
            "request no erasure has started for can be rejected",
            hint=f"finish it with `ledger requests resume {req.id}`")
    ids = app.reject_request(operator, req.id, code, words)
    return {"request_id": str(req.id), "status": "rejected", "code": code, "reason": words,
            "event_ids": ids}


def _completed_request(app: LedgerApp, proj: Projections, sid: str) -> dict[str, Any] | None:
    from ledger.domain import ErasureRequest

    received = app.reader.notifications(start=1, limit=10**9,
                                 topics=[ErasureRequest.Created.TOPIC])
    rows = [str(n.originator_id) for n in received
            if envelope.open_state(n.state).envelope["payload"].get("subject_id") == sid]
    for rid in reversed(rows):
        req = app.reader.aggregate(UUID(rid))
        if isinstance(req, ErasureRequest) and req.completed_at:
            return {"request_id": rid, "batch_id": req.batch_id,
                    "completed_at": req.completed_at, "event_ids": req.event_ids}
    return None


# ----------------------------------------------------------------------------- artifacts
def delete_artifact(app: LedgerApp, proj: Projections, artifact: str, *, reason: str, operator: str,
                    flag_unsourced: bool = False) -> dict[str, Any]:
    """Delete an artifact; re-evaluate every atom whose provenance cites it (Konshus)."""
    aid = str(app.reader.resolve("artifact", artifact))
    proj.catch_up()
    with proj.atoms.reading() as reads:
        rows = [r for r in reads.all_atoms()
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
    held = part.held_items(app, {"atoms": deleted_atoms, "artifacts": [aid]},
                           part.holds_in_force(app.reader.policy()))
    if held:  # refused before the cascade writes anything (ADR 0047)
        raise held_refusal(held, "deletion")
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

