"""Oversight use cases of the facade: request detail with its batch's reach, reveal and
resolution of review flags, integrity (checkpoint, cosignatures, roster), policy view and
sweeps (ADR 0027, ADR 0032).

Written in the facade's shape: the caller first, scope and role checked here, facade
calls for every lookup (so an id outside the caller's scope answers NotFound exactly as
there). They run on a server's threads like facade methods (``backend.read(lambda svc:
request_detail(svc, caller, rid))``). They live in the service layer, not in a surface, so
that no surface reaches below the facade (tests/test_architecture.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID

from ledger import clock
from ledger.errors import ConflictError, InputError
from service.caller import Caller
from service.facade import Forbidden, MemoryService
from service.models import AtomCorrectionIn, ErasurePlanOut, FlagOut, RequestStatus

REVEAL_REASON_PREFIX = "revealed:"
"""Reason of the signed ``atom.rehearsed.v1`` event a reveal writes: ``revealed:`` and the
credential id (governance/audit.py counts it as a retrieval, under ``logRetrieval``)."""

FLAG = "refers-to-erased"
ACTIONS = ("reanonymise", "redact", "dismiss")


def require(caller: Caller, *roles: str) -> None:
    if caller.role not in roles:
        raise Forbidden(f"a {caller.role} credential may not do this",
                        hint=f"sign in with an {' or '.join(roles)} token")


# ----------------------------------------------------------------------------- requests
@dataclass(frozen=True)
class RequestDetail:
    status: RequestStatus
    subject_ref: str | None
    plan: ErasurePlanOut | None
    batch: dict[str, Any] | None
    timeline: list[dict[str, Any]]
    copies: list[dict[str, str]] | None = None
    """Each copy of the erased keys in words (kind, what, said), once completed."""
    copies_overall: str | None = None
    copies_cls: str = ""


def _batch(svc: MemoryService, batch_id: str) -> dict[str, Any]:
    """A batch reached through a request the caller may see (its reach record, ids only)."""
    b: Any = svc.app.aggregate(UUID(batch_id))
    reach = dict(b.reach or {})
    return {"batch_id": batch_id, "status": b.status, "mode": b.mode,
            "targets": {k: len(v) for k, v in (b.targets or {}).items()},
            "events": len(b.event_ids or []), "routes": list(reach.get("routes", [])),
            "raw_scan": reach.get("raw_scan") or {},
            "flagged_for_review": list(reach.get("flagged_for_review", []))}


def _timeline(st: RequestStatus, now: str) -> list[dict[str, Any]]:
    """The request's moments, oldest first, against its deadlines (as the pack's HTML)."""
    data = st.model_dump()
    rows = [("received", data.get("received_at")), ("acknowledged", data.get("acknowledged_at")),
            ("acknowledgment due", data.get("ack_due")), ("completed", data.get("completed_at")),
            ("completion due", data.get("complete_due")), ("now", now)]
    timed = sorted((clock.parse_instant(at), n, label)  # same instant: in the order above
                   for n, (label, at) in enumerate(rows) if at)
    return [{"label": label, "at": clock.format_instant(t), "deadline": label.endswith("due"),
             "now": label == "now"} for t, _n, label in timed]


def _copies(svc: MemoryService, st: RequestStatus) -> tuple[list[dict[str, str]], str, str]:
    """The copies statement of a completed request's erasure, in words (governance/copies.py):
    the rows of the console's Copies table, the conclusion and its class (ok, late)."""
    from governance import copies as c

    statement = c.statement_for_batch(svc.app, svc.app.aggregate(UUID(str(st.batch_id))),
                                      svc.app.aggregate(UUID(st.request_id)))
    cls = {c.UNRECOVERABLE: "ok", c.PENDING: "late", c.UNBOUNDED: "late"}
    rows = [{"kind": "keystore", "what": "The live keystore",
             "said": c.keystore_words(statement)}]
    for g in statement["older_copies"]:
        what = ("Older copies of the keystore (backups, WAL segments, replicas, dumps): keys "
                f"wrapped under KEK epoch {g['kek_epoch']}" if g["kek_epoch"] else
                "Older copies of the keystore (backups, WAL segments, replicas, dumps): keys "
                "that were not wrapped")
        rows.append({"kind": f"epoch-{g['kek_epoch']}", "what": what,
                     "said": c.group_words(g, clock.format_instant(clock.now()), "by now")})
    for n in statement["not_covered"]:
        label, said = c.NOT_COVERED_WORDS[n["what"]]
        at = c.day(n["made_before"])
        rows.append({"kind": n["what"], "what": label.format(at=at), "said": said.format(at=at)})
    for row in rows:  # `ledger ...` is code in the pack's report; plain words here
        row["said"] = row["said"].replace("`", "")
    return rows, c.overall_words(statement).replace("`", ""), cls[statement["state"]]


def request_detail(svc: MemoryService, caller: Caller, request: str) -> RequestDetail:
    require(caller, "operator", "auditor")
    st = svc.request_status(caller, request)
    plan = None
    batch = None
    if st.completed_at is None and st.batch_id is None and st.status != "rejected":
        plan = svc.plan_request(caller, request)
    if st.batch_id is not None:
        batch = _batch(svc, st.batch_id)
    ref = st.model_dump().get("subject_ref")
    visible = caller.visible_ref(ref) if isinstance(ref, str) else None
    copies, overall, cls = (_copies(svc, st) if st.model_dump().get("copies") is not None
                            else (None, None, ""))
    return RequestDetail(status=st, subject_ref=visible, plan=plan, batch=batch,
                         timeline=_timeline(st, clock.format_instant(clock.now())),
                         copies=copies, copies_overall=overall, copies_cls=cls)


def batch_of_request(svc: MemoryService, caller: Caller, request: str) -> dict[str, Any]:
    st = svc.request_status(caller, request)
    if st.batch_id is None:
        raise ConflictError("this request has not been executed: it has no batch yet",
                            hint="approve and execute it first")
    return _batch(svc, st.batch_id)


# ----------------------------------------------------------------------------- review
@dataclass(frozen=True)
class Revealed:
    atom_id: str
    text: str | None
    gist: str | None
    event_id: str


def _flagged(svc: MemoryService, caller: Caller, atom: str) -> FlagOut:
    for f in svc.list_flags(caller):
        if f.atom_id == atom:
            return f
    raise InputError(f"atom {atom} has no open review flag",
                     hint="only memories in the review queue can be revealed or resolved here")


def reveal(svc: MemoryService, caller: Caller, atom: str) -> Revealed:
    """Show a flagged memory's content: first a signed retrieval event (the writer key's
    ``atom.rehearsed.v1``, reason ``revealed:<credential id>``), then the content. No event,
    no content: an atom that is no longer active is refused."""
    require(caller, "operator")
    _flagged(svc, caller, atom)
    found = svc.get_atom(caller, atom)
    if found.content_erased or found.status != "active":
        raise ConflictError(f"atom {atom} is {found.status}"
                            + (" and its content was erased" if found.content_erased else "")
                            + ": there is no content to reveal")
    ids = svc.app.rehearse_atoms([found.atom_id], None,
                                 reason=REVEAL_REASON_PREFIX + caller.credential_id)
    if not ids:
        raise ConflictError(f"atom {atom} could not be recorded as revealed; nothing is shown")
    extra = found.model_dump()
    return Revealed(atom_id=found.atom_id, text=found.text, gist=extra.get("gist"),
                    event_id=str(ids[0]))


def resolve(svc: MemoryService, caller: Caller, atom: str, action: str,
            text: str | None) -> dict[str, Any]:
    """`ledger review resolve`: re-anonymise by correction, redact, or dismiss."""
    require(caller, "operator")
    if action not in ACTIONS:
        raise InputError(f"unknown action {action!r}", hint="reanonymise, redact or dismiss")
    _flagged(svc, caller, atom)
    aid = UUID(svc.get_atom(caller, atom).atom_id)
    key = caller.signing_key or "operator"
    if action == "reanonymise":
        if not text or not text.strip():
            raise InputError("re-anonymising needs the new wording",
                             hint="write the sentence without what refers to the erased person")
        corrected = svc.correct_atom(caller, str(aid),
                                     AtomCorrectionIn(text=text, reason="re-anonymised"))
        ids = [svc.app.resolve_flag(aid, FLAG, "re-anonymised", actor=key)]
        return {"atom_id": str(aid), "action": action, "new_atom_id": corrected.new_atom_id,
                "event_ids": ids}
    if action == "redact":
        from service.models import RedactIn

        out = svc.redact_atom(caller, str(aid), RedactIn(mode="hard",
                                                        reason="review: redacted"))
        ids = [*out.event_ids, svc.app.resolve_flag(aid, FLAG, "redacted", actor=key)]
        return {"atom_id": str(aid), "action": action, "batch_id": out.batch_id,
                "event_ids": ids}
    return {"atom_id": str(aid), "action": action,
            "event_ids": [svc.app.resolve_flag(aid, FLAG, "dismissed", actor=key)]}


# ----------------------------------------------------------------------------- integrity
def integrity(svc: MemoryService, caller: Caller) -> dict[str, Any]:
    """The latest checkpoint, its witness cosignatures, the key roster."""
    require(caller, "operator", "auditor")
    cp = svc.checkpoint(caller)
    roster = svc.roster(caller)
    cosigned = []
    for line, vkey in svc.app.cosignature_rows(cp.size):
        name = line.lstrip("\u2014 ").split(" ", 1)[0]
        cosigned.append({"witness": name, "vkey": vkey.split("+", 2)[0]})
    witnesses = [{"url": url, "vkey": vkey.split("+", 2)[0]}
                 for url, vkey in getattr(svc.app.config, "witnesses", []) or []]
    return {"checkpoint": cp, "roster": roster, "cosignatures": cosigned,
            "witnesses": witnesses}


# ----------------------------------------------------------------------------- policy
def policy_view(svc: MemoryService, caller: Caller) -> dict[str, Any]:
    """The policy in force, its signed history, and `ledger policy check`'s warnings."""
    require(caller, "operator", "auditor")
    from governance.audit import policy_history
    from governance.policy_check import check_policy

    return {"in_force": svc.policy(caller), "history": policy_history(svc.app),
            "check": check_policy(svc.app, svc.proj)}


def sweep(svc: MemoryService, caller: Caller, dry_run: bool) -> dict[str, Any]:
    """`ledger sweep [--dry-run]`, signed with the caller's operator key."""
    require(caller, "operator")
    from governance.sweep import sweep as run

    return run(svc.app, svc.proj, operator=caller.signing_key or "operator", dry_run=dry_run)


def routes(svc: MemoryService, caller: Caller) -> list[str]:
    """The erasure routes registered by the read models (what every erasure must reach)."""
    require(caller, "operator", "auditor")
    return [r.name for r in svc.proj.registry.routes()]
