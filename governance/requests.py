"""Right-to-be-forgotten deadlines: `ledger requests list [--overdue]` (ADR 0014).

Each erasure request (``ErasureRequest``: received, acknowledged, completed, all
operator-signed) is listed with its deadlines and its status at the command clock
(``ledger.clock.now()``, so ``LEDGER_NOW`` moves it):

* ``completed`` / ``completed-late``: completed before / after its completion deadline;
* ``rejected``: refused by an operator before any erasure (``request.rejected``: its code
  and reason in ``rejection``); closed, never executed (ADR 0047);
* ``partial``: its erasure ended without erasing all it was asked to (``request.ended-
  partial``: ``reasons``, ids only, governance/partial.py); open until a resume completes
  it, and ``overdue`` too once its deadline passes (ADR 0047);
* ``open``: not completed, the completion deadline not reached (``seconds_left`` > 0);
* ``overdue``: not completed and ``now >= complete_due`` (at the deadline instant it is
  overdue: the SLA is "complete within N hours", and N hours have passed).

An unacknowledged request whose acknowledgment deadline has passed is ``ack_overdue``.
A completed request also says what its erasure is worth in older copies of the keystore
(``copies``, governance/copies.py): ``pending`` until the KEK rotation due at ``until``
(copies made before the erasure can still be decrypted; the request is completed for the
live stores), ``unrecoverable`` since ``until``, or ``unbounded`` (keys not wrapped).
The deadlines were fixed at receipt from the SLA then in force (:func:`sla_hours`), so a
later policy change does not move the deadline of a request already received.
Identifiers the subject gave are never listed (they are personal and shredded on completion).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from governance.erasure import DEFAULT_ACK_HOURS, DEFAULT_COMPLETION_HOURS
from ledger import clock, policy_rules
from ledger.domain import ErasureRequest

if TYPE_CHECKING:
    from ledger.application import LedgerApp

__all__ = ["copies_of", "format_left", "list_requests", "request_row", "request_status",
           "sla_hours"]


def sla_hours(policy: Mapping[str, Any] | None) -> tuple[float, float]:
    """(acknowledgment, completion) hours from the policy in force; the Persona §7
    defaults (24, 720) when no policy is enforced or it states no SLA value."""
    doc = policy_rules.enforced(policy) or {}
    sla = doc.get("rightToBeForgottenSla")
    sla = sla if isinstance(sla, Mapping) else {}
    return (float(sla.get("acknowledgmentHours", DEFAULT_ACK_HOURS)),
            float(sla.get("completionHours", DEFAULT_COMPLETION_HOURS)))


def _t(value: str | None) -> datetime | None:
    return None if value is None else clock.parse_instant(value)


def format_left(seconds: float) -> str:
    """``3d 04:05:06`` (or ``-…`` when the deadline has passed)."""
    sign = "-" if seconds < 0 else ""
    s = int(abs(seconds))
    days, rest = divmod(s, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{sign}{days}d {hours:02d}:{minutes:02d}:{secs:02d}"


def request_status(req: Any, now: datetime, copies: Mapping[str, Any] | None = None
                   ) -> dict[str, Any]:
    """The status row of one request at ``now`` (pure: no clock, no I/O); ``copies``: the
    summary of its erasure's copies statement (:func:`copies_of`), None until completed."""
    complete_due = _t(req.complete_due)
    ack_due = _t(req.ack_due)
    completed = _t(req.completed_at)
    rejected = getattr(req, "rejected_at", None)
    partial_at = getattr(req, "partial_at", None)
    assert complete_due is not None and ack_due is not None
    late = False
    if completed is not None:
        status = "completed" if completed <= complete_due else "completed-late"
        left = None
    elif rejected is not None:
        status, left = "rejected", None
    else:
        left = (complete_due - now).total_seconds()
        late = now >= complete_due
        status = "partial" if partial_at is not None else "overdue" if late else "open"
    ack_overdue = req.acknowledged_at is None and now >= ack_due and rejected is None
    extra: dict[str, Any] = {}
    if partial_at is not None:  # the partial outcome (kept once completed: both records)
        extra["partial_at"] = partial_at
        extra["partial_reasons"] = [dict(r) for r in req.partial_reasons or []]
    if rejected is not None:
        extra["rejected_at"] = rejected
        extra["rejection"] = dict(req.rejection or {})
    return {
        "request_id": str(req.id), "subject_id": req.subject_id,
        "subject_ref": req.subject_ref, "received_at": req.received_at,
        "acknowledged_at": req.acknowledged_at, "ack_due": req.ack_due,
        "complete_due": req.complete_due, "completed_at": req.completed_at,
        "batch_id": req.batch_id, "status": status,
        "overdue": late or ack_overdue, "ack_overdue": ack_overdue,
        "seconds_left": None if left is None else round(left, 6),
        "time_left": None if left is None else format_left(left),
        "copies": None if copies is None else dict(copies),
        **extra,
    }


def copies_of(app: LedgerApp, req: Any, now: datetime, shared: list[Any] | None = None
              ) -> dict[str, Any] | None:
    """The copies summary of a completed request's erasure, from the signed events
    (governance/copies.py); None while it is not completed. ``shared``: the events every
    request's statement reads (:func:`governance.copies.shared_rows`), read once for a list."""
    from governance.copies import statement_for_batch, summary
    from ledger.domain import RedactionBatch

    if req.completed_at is None or not req.batch_id:
        return None
    batch = app.reader.aggregate(UUID(req.batch_id))
    if not isinstance(batch, RedactionBatch) or batch.status != "closed":
        return None
    return summary(statement_for_batch(app, batch, req, shared), clock.format_instant(now))


def request_row(app: LedgerApp, req: Any, now: datetime) -> dict[str, Any]:
    """:func:`request_status` with the copies of its erasure."""
    return request_status(req, now, copies_of(app, req, now))


def list_requests(app: LedgerApp, now: datetime | None = None,
                  overdue_only: bool = False) -> list[dict[str, Any]]:
    """Every erasure request, oldest first, with its status at ``now`` (default: the
    command clock) and, once completed, the copies of its erasure."""
    from governance.copies import shared_rows

    at = now or clock.now()
    received = app.reader.notifications(start=1, limit=10**9,
                                 topics=[ErasureRequest.Created.TOPIC])
    rows = []
    shared: list[Any] | None = None
    for n in received:
        req = app.reader.aggregate(UUID(str(n.originator_id)))
        if isinstance(req, ErasureRequest):
            if req.completed_at is not None and shared is None:
                shared = shared_rows(app)
            rows.append(request_status(req, at, copies_of(app, req, at, shared)))
    if overdue_only:
        rows = [r for r in rows if r["overdue"]]
    return rows
