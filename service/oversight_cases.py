"""Oversight use cases of the facade, for the console's pages: request detail with its
batch's reach and copies, reveal of a flagged memory, integrity (checkpoint, cosignatures,
roster), the policy view and the erasure routes (ADR 0027, ADR 0032). The console calls
them as every surface calls the facade (``backend.read(lambda svc:
svc.request_detail(caller, rid))``); resolving a flag and sweeping are the facade's own
``resolve_review`` and ``sweep``, the CLI's too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from uuid import UUID

from ledger import clock
from ledger.errors import ConflictError, InputError
from service.caller import Caller
from service.core import FacadeCore
from service.models import ErasurePlanOut, FlagOut, RequestStatus

if TYPE_CHECKING:
    from datetime import datetime

    from service.models import AtomOut, CheckpointOut, RosterEntry

REVEAL_REASON_PREFIX = "revealed:"
"""Reason of the signed ``atom.rehearsed.v1`` event a reveal writes: ``revealed:`` and the
credential id (governance/audit.py counts it as a retrieval, under ``logRetrieval``)."""


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


@dataclass(frozen=True)
class Revealed:
    atom_id: str
    text: str | None
    gist: str | None
    event_id: str


class OversightCases(FacadeCore):
    """What an operator or auditor looks at in the console, scoped like every use case."""

    if TYPE_CHECKING:  # the use cases the pages show, joined beside this in MemoryService
        # (service/facade.py): service/erasure_cases.py, memory_cases.py, ledger_cases.py
        def request_status(self, caller: Caller, request: str,
                           now: datetime | None = None) -> RequestStatus: ...

        def plan_request(self, caller: Caller, request: str) -> ErasurePlanOut: ...

        def list_flags(self, caller: Caller) -> list[FlagOut]: ...

        def get_atom(self, caller: Caller, atom: str) -> AtomOut: ...

        def checkpoint(self, caller: Caller) -> CheckpointOut: ...

        def roster(self, caller: Caller) -> list[RosterEntry]: ...

        def policy(self, caller: Caller) -> dict[str, Any] | None: ...

    # ------------------------------------------------------------------ requests
    def request_detail(self, caller: Caller, request: str) -> RequestDetail:
        """An erasure request with its plan (while open), its batch and its copies."""
        self._require(caller, "operator", "auditor")
        st = self.request_status(caller, request)
        plan = None
        batch = None
        if st.completed_at is None and st.batch_id is None and st.status != "rejected":
            plan = self.plan_request(caller, request)
        if st.batch_id is not None:
            batch = self._batch(st.batch_id)
        ref = st.model_dump().get("subject_ref")
        visible = caller.visible_ref(ref) if isinstance(ref, str) else None
        copies, overall, cls = (self._copies(st) if st.model_dump().get("copies") is not None
                                else (None, None, ""))
        return RequestDetail(status=st, subject_ref=visible, plan=plan, batch=batch,
                             timeline=_timeline(st, clock.format_instant(clock.now())),
                             copies=copies, copies_overall=overall, copies_cls=cls)

    def request_batch(self, caller: Caller, request: str) -> dict[str, Any]:
        """The batch that executed a request the caller may see."""
        st = self.request_status(caller, request)
        if st.batch_id is None:
            raise ConflictError("this request has not been executed: it has no batch yet",
                                hint="approve and execute it first")
        return self._batch(st.batch_id)

    def _batch(self, batch_id: str) -> dict[str, Any]:
        """A batch reached through a request the caller may see (its reach, ids only)."""
        b: Any = self.app.reader.aggregate(UUID(batch_id))
        reach = dict(b.reach or {})
        return {"batch_id": batch_id, "status": b.status, "mode": b.mode,
                "targets": {k: len(v) for k, v in (b.targets or {}).items()},
                "events": len(b.event_ids or []), "routes": list(reach.get("routes", [])),
                "raw_scan": reach.get("raw_scan") or {},
                "flagged_for_review": list(reach.get("flagged_for_review", []))}

    def _copies(self, st: RequestStatus) -> tuple[list[dict[str, str]], str, str]:
        """The copies statement of a completed request's erasure, in words (governance/copies.py):
        the rows of the console's Copies table, the conclusion and its class (ok, late)."""
        from governance import copies as c

        statement = c.statement_for_batch(self.app,
                                          self.app.reader.aggregate(UUID(str(st.batch_id))),
                                          self.app.reader.aggregate(UUID(st.request_id)))
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
            rows.append({"kind": n["what"], "what": label.format(at=at),
                         "said": said.format(at=at)})
        for row in rows:  # `ledger ...` is code in the pack's report; plain words here
            row["said"] = row["said"].replace("`", "")
        return rows, c.overall_words(statement).replace("`", ""), cls[statement["state"]]


    # ------------------------------------------------------------------ review
    def _flagged(self, caller: Caller, atom: str) -> FlagOut:
        for f in self.list_flags(caller):
            if f.atom_id == atom:
                return f
        raise InputError(f"atom {atom} has no open review flag",
                         hint="only memories in the review queue can be revealed or "
                              "resolved here")

    def reveal_flagged(self, caller: Caller, atom: str) -> Revealed:
        """Show a flagged memory's content: first a signed retrieval event (the writer
        key's ``atom.rehearsed.v1``, reason ``revealed:<credential id>``), then the
        content. No event, no content: an atom that is no longer active is refused."""
        self._require(caller, "operator")
        self._flagged(caller, atom)
        found = self.get_atom(caller, atom)
        if found.content_erased or found.status != "active":
            raise ConflictError(f"atom {atom} is {found.status}"
                                + (" and its content was erased" if found.content_erased
                                   else "") + ": there is no content to reveal")
        ids = self.app.rehearse_atoms([found.atom_id], None,
                                      reason=REVEAL_REASON_PREFIX + caller.credential_id)
        if not ids:
            raise ConflictError(f"atom {atom} could not be recorded as revealed; nothing is "
                                "shown")
        extra = found.model_dump()
        return Revealed(atom_id=found.atom_id, text=found.text, gist=extra.get("gist"),
                        event_id=str(ids[0]))

    # ------------------------------------------------------------------ integrity, policy
    def integrity(self, caller: Caller) -> dict[str, Any]:
        """The latest checkpoint, its witness cosignatures, the key roster."""
        self._require(caller, "operator", "auditor")
        cp = self.checkpoint(caller)
        roster = self.roster(caller)
        cosigned = []
        for line, vkey in self.app.reader.cosignature_rows(cp.size):
            name = line.lstrip("\u2014 ").split(" ", 1)[0]
            cosigned.append({"witness": name, "vkey": vkey.split("+", 2)[0]})
        witnesses = [{"url": url, "vkey": vkey.split("+", 2)[0]}
                     for url, vkey in getattr(self.app.config, "witnesses", []) or []]
        return {"checkpoint": cp, "roster": roster, "cosignatures": cosigned,
                "witnesses": witnesses}

    def policy_view(self, caller: Caller) -> dict[str, Any]:
        """The policy in force, its signed history, and `ledger policy check`'s warnings."""
        self._require(caller, "operator", "auditor")
        from governance.audit import policy_history
        from governance.policy_check import check_policy

        return {"in_force": self.policy(caller), "history": policy_history(self.app),
                "check": check_policy(self.app, self.proj)}

    def erasure_routes(self, caller: Caller) -> list[str]:
        """The erasure routes registered by the read models (what every erasure reaches)."""
        self._require(caller, "operator", "auditor")
        return [r.name for r in self.proj.registry.routes()]


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


__all__ = ["OversightCases", "RequestDetail", "Revealed"]
