"""The erasure use cases of the facade: redaction and deletion, right-to-be-forgotten
requests (file, plan, execute, resume; `ledger redact-user` in one run), the review
queue, Evidence Packs and receipts, and the policy's sweeps. Joined into
:class:`service.facade.MemoryService`."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from ledger import clock
from ledger.errors import EnvironmentProblem, InputError, NotFound
from ledger.inputs import is_uuid
from service.caller import Caller
from service.core import (
    FacadeCore,
    Forbidden,
    _outcome,
    _reason,
)
from service.models import (
    ErasureOutcome,
    ErasurePlanOut,
    ErasureReceipt,
    ErasureReport,
    ErasureRequestIn,
    FlagOut,
    PackCountersigned,
    PackOut,
    PackWritten,
    PolicyCheck,
    RedactIn,
    RequestRegister,
    RequestRejectIn,
    RequestStatus,
    SweepReport,
)

if TYPE_CHECKING:
    from keys.signing import Signer

log = structlog.get_logger("service")


class ErasureCases(FacadeCore):
    """Erasure, its requests and review, and what proves it.

    Where the CLI and the API report the same act differently, one method does it and the
    other wraps it (ADR 0042): :meth:`redact`, :meth:`erase_atom`, :meth:`erase_artifact`
    and :meth:`write_pack` take the CLI's inputs as given and return what governance
    reported, whole (for the local caller, the application's lookups, checks and words, in
    its order: ADR 0040); :meth:`redact_atom`, :meth:`delete_atom`,
    :meth:`delete_artifact` and :meth:`build_pack` are the API's: a reason required, the
    tombstones' event ids, a pack as a verified zip."""

    @contextmanager
    def _erasing(self, caller: Caller) -> Iterator[None]:
        """The block of a use case that can destroy data keys (hard redaction, deletion,
        a request, a review's redaction, a sweep): signed for the caller's credential, as
        :meth:`_acting`, then, when the block appended to the log, the home's erasure
        journal brought up to it: the one place where the journal follows the erasures
        (ADR 0045). Also after a block that stopped (an interrupted erasure may have
        destroyed keys already), where a failure to write the journal is logged, not
        raised over the erasure's own error."""
        from governance.journal import refresh_journal

        before = self.app.reader.head_position()
        done = False
        try:
            with self._acting(caller):
                yield
            done = True
        finally:
            if self.app.reader.head_position() != before:
                try:
                    refresh_journal(self.app)
                except Exception as e:
                    if done:
                        raise EnvironmentProblem(
                            f"the erasure is recorded, but the erasure journal could not be "
                            f"written: {e}", hint="run `ledger journal export FILE`, which "
                            "writes it again and copies it out") from e
                    log.warning("journal.not_refreshed", error=e.__class__.__name__)

    def file_request(self, caller: Caller, data: ErasureRequestIn) -> RequestStatus:
        """File a right-to-be-forgotten request: receipt logged with its deadlines. Its
        execution is an operator's act (:meth:`execute_request`)."""
        self._require(caller, "assistant", "operator")
        from governance.erasure import open_request
        from governance.requests import sla_hours
        from ledger.errors import ConflictError

        sid = self.subject_id(caller, data.subject)
        pending = open_request(self.app, sid)
        if pending is not None:
            raise ConflictError(f"subject already has an open erasure request {pending.id}",
                                hint="see its status; one request per subject at a time")
        ack, complete = sla_hours(self.app.reader.policy())
        with self._acting(caller):
            rid = self.app.receive_request(sid, data.reason, self._signing_key(caller), ack,
                                           complete, legal_basis=data.legal_basis,
                                           identifiers=data.identifiers,
                                           sessions=data.sessions)
        return self.request_status(caller, str(rid))

    def list_requests(self, caller: Caller, status: str | None = None,
                      now: datetime | None = None) -> list[RequestStatus]:
        from governance.requests import list_requests

        rows = [r for r in list_requests(self.app, now)
                if self._visible(caller, r["subject_id"]) is not None]
        if status is not None:
            rows = [r for r in rows if r["status"] == status]
        return [RequestStatus(**r) for r in rows]

    def reject_request(self, caller: Caller, request: str, data: RequestRejectIn
                       ) -> RequestStatus:
        """Refuse a request no erasure has started for (ADR 0047): signed with the caller's
        operator key (``request.rejected``: a code and the operator's words, in clear and
        shown in the register, so naming no one), and the request's own key (its reason
        and identifiers) destroyed. A rejected request is closed: never executed."""
        self._require(caller, "operator")
        from governance.erasure import reject_request

        req = self._request(caller, request)
        with self._acting(caller):
            reject_request(self.app, str(req.id), self._signing_key(caller), data.code,
                           data.reason)
        return self.request_status(caller, str(req.id))

    def request_register(self, caller: Caller, date_from: str | None = None,
                         date_to: str | None = None, packs: Path | None = None,
                         now: datetime | None = None) -> RequestRegister:
        """The request register (ADR 0048): one row per request the caller may see,
        received in [``date_from``, ``date_to``], with its dates, status, reasons,
        approver, SLA and, from the Evidence Packs kept under ``packs`` (each verified
        first), the pack's digest and countersigners. Operators and auditors."""
        self._require(caller, "operator", "auditor")
        from governance.register import COLUMNS, read_packs, register_rows

        at = now or clock.now()
        found = (read_packs(packs, self.app.root_public_key, self.app.ledger_id)
                 if packs is not None else None)
        rows = register_rows(self.app, [r.model_dump() for r in self.list_requests(caller,
                                                                                  now=at)],
                             at, date_from, date_to, found)
        return RequestRegister(
            generated_at=clock.format_instant(at), date_from=date_from, date_to=date_to,
            columns=list(COLUMNS), rows=rows,
            packs_verified=None if found is None else found.read,
            packs_refused=None if found is None else dict(sorted(found.refused.items())))

    def request_status(self, caller: Caller, request: str,
                       now: datetime | None = None) -> RequestStatus:
        from governance.requests import request_row

        req = self._request(caller, request)
        return RequestStatus(**request_row(self.app, req, now or clock.now()))

    def plan_request(self, caller: Caller, request: str) -> ErasurePlanOut:
        """The dry run of a filed request: what its execution would erase and flag."""
        self._require(caller, "operator", "auditor")
        from governance.erasure import plan_user_erasure

        req = self._request(caller, request)
        plan = plan_user_erasure(self.app, self.proj, req.subject_id, req.identifiers or (),
                                 req.sessions or ()).as_json()
        return ErasurePlanOut(request_id=str(req.id), **plan)

    def _digest_as_read(self, caller: Caller, request: str) -> str:
        """The plan's digest on the read models as they stand: writes nothing."""
        from governance.erasure import plan_user_erasure

        req = self._request(caller, request)
        return str(plan_user_erasure(self.app, self.proj, req.subject_id,
                                     req.identifiers or (), req.sessions or (),
                                     catch_up=False).as_json()["plan_digest"])

    def execute_request(self, caller: Caller, request: str, plan_digest: str
                        ) -> ErasureOutcome:
        """Approve and execute a filed request, as `ledger redact-user` does: the batch is
        signed with the caller's operator key. Refused, writing nothing, when the plan
        changed since the operator saw ``plan_digest``."""
        self._require(caller, "operator")
        from governance.erasure import check_operator, resume_request
        from ledger.errors import ConflictError

        req = self._request(caller, request)
        check_operator(self.app, self._signing_key(caller))
        if req.completed_at is None and req.batch_id is None:
            # first on the read models as they stand, writing nothing: they are at least
            # as new as when the plan was shown (showing it caught them up), so a digest
            # that differs here is stale whatever the log holds beyond them (ADR 0057)
            current = self._digest_as_read(caller, request)
            if current == plan_digest:
                current = self.plan_request(caller, request).plan_digest
            if current != plan_digest:
                raise ConflictError(
                    f"the ledger changed since the plan was shown: it was {plan_digest}, it "
                    f"is {current} now; nothing was written",
                    hint="review the plan again and approve its new digest")
        with self._erasing(caller):
            return _outcome(resume_request(self.app, self.proj, str(req.id),
                                           self._signing_key(caller)), self.app)

    def redact(self, caller: Caller, atom: str, mode: str, reason: str) -> ErasureReport:
        """`ledger redact`: soft (hidden, reversible), archive (kept for audit) or hard
        (destroyed everywhere: a batch, its events and reach record)."""
        self._require(caller, "operator")
        from governance.erasure import Targets, hard_erase

        aid = self._atom_id(caller, atom)
        key = self._signing_key(caller)
        with self._erasing(caller) if mode == "hard" else self._acting(caller):
            if mode in ("soft", "archive"):
                event = self.app.redact(aid, mode, reason, actor=key)
                data: dict[str, Any] = {"atom_id": str(aid), "mode": mode, "event_ids": [event]}
            elif mode == "hard":
                data = hard_erase(self.app, self.proj, Targets(atoms=[str(aid)]), mode="hard",
                                  reason=reason, operator=key)
            else:
                raise InputError(f"unknown mode {mode!r}", hint="use soft, archive or hard")
        return ErasureReport(report=data, atom_id=str(aid))

    def redact_atom(self, caller: Caller, atom: str, data: RedactIn) -> ErasureOutcome:
        """Soft, archive or hard redaction of one atom: an operator's act (:meth:`redact`
        with a reason required and the tombstones' event ids)."""
        report = self.redact(caller, atom, data.mode, _reason(data.reason)).report
        if data.mode in ("soft", "archive"):
            return ErasureOutcome(event_ids=report["event_ids"],
                                  tombstone_ids=report["event_ids"],
                                  atom_id=report["atom_id"], mode=data.mode)
        return _outcome(report, self.app)

    def unredact(self, caller: Caller, atom: str, reason: str) -> ErasureReport:
        """`ledger unredact`: undo a soft redaction (the report names the atom as given)."""
        self._require(caller, "operator")
        aid = self._atom_id(caller, atom)
        with self._acting(caller):
            event = self.app.unredact(aid, reason, actor=self._signing_key(caller))
        return ErasureReport(report={"atom_id": atom, "event_ids": [event]}, atom_id=str(aid))

    def erase_atom(self, caller: Caller, atom: str, reason: str) -> ErasureReport:
        """`ledger delete`: the atom deleted for good (the mechanics of hard redaction)."""
        self._require(caller, "assistant", "operator")
        from governance.erasure import Targets, hard_erase

        aid = self._atom_id(caller, atom)
        with self._erasing(caller):
            data = hard_erase(self.app, self.proj, Targets(atoms=[str(aid)]), mode="delete",
                              reason=reason, operator=self._signing_key(caller))
        return ErasureReport(report=data, atom_id=str(aid))

    def delete_atom(self, caller: Caller, atom: str, reason: str) -> ErasureOutcome:
        """Delete one atom for good (`ledger delete`): key destroyed, every route purged and
        probed, a signed tombstone left. Assistants may delete their subjects' atoms. A
        reason is required; the outcome carries the tombstone's event id."""
        return _outcome(self.erase_atom(caller, atom, _reason(reason)).report, self.app)

    def erase_artifact(self, caller: Caller, artifact: str, reason: str,
                       flag_unsourced: bool = False) -> ErasureReport:
        """`ledger artifact delete`: the artifact deleted, the atoms citing it re-evaluated
        (deleted, kept with other sources, or flagged unsourced: the report's cascade)."""
        self._require(caller, "assistant", "operator")
        from governance.erasure import delete_artifact

        target = str(self._artifact(caller, artifact).id)
        with self._erasing(caller):
            data = delete_artifact(self.app, self.proj, target, reason=reason,
                                   operator=self._signing_key(caller),
                                   flag_unsourced=flag_unsourced)
        return ErasureReport(report=data)

    def delete_artifact(self, caller: Caller, artifact: str, reason: str,
                        flag_unsourced: bool = False) -> ErasureOutcome:
        """Delete an artifact (the subject's own removal: same mechanics as hard
        erasure); atoms citing it are re-evaluated (Konshus cascade). A reason is
        required; the outcome carries the tombstones' event ids (:meth:`erase_artifact`
        is the same act as `ledger artifact delete` reports it)."""
        return _outcome(self.erase_artifact(caller, artifact, _reason(reason),
                                            flag_unsourced).report, self.app)

    def redact_user(self, caller: Caller, subject: str, *, reason: str,
                    identifiers: Sequence[str] = (), sessions: Sequence[str] = (),
                    legal_basis: str | None = None, dry_run: bool = False,
                    expect_plan: str | None = None, resume: bool = False,
                    progress: Callable[[str, int, int], None] | None = None) -> ErasureReport:
        """`ledger redact-user`: the right to be forgotten in one run, under the policy's
        SLA (governance/erasure.py redact_user: a dry run's plan, a request finished or
        found completed). Its report names other subjects: unrestricted operators only."""
        self._require_ledger_operator(caller)
        from governance.erasure import redact_user
        from governance.requests import sla_hours

        ack_hours, completion_hours = sla_hours(self.app.reader.policy())  # Persona §7 SLA in force
        with self._erasing(caller):
            data = redact_user(self.app, self.proj, subject, reason=reason,
                               operator=self._signing_key(caller),
                               identifiers=list(identifiers), sessions=list(sessions),
                               legal_basis=legal_basis, ack_hours=ack_hours,
                               completion_hours=completion_hours, dry_run=dry_run,
                               expect_plan=expect_plan, resume=resume, progress=progress)
        return ErasureReport(report=data)

    def resume_request(self, caller: Caller, request: str) -> ErasureReport:
        """`ledger requests resume`: finish an interrupted erasure request, from the step
        where it stopped (ADR 0019)."""
        self._require_ledger_operator(caller)
        from governance.erasure import resume_request

        with self._erasing(caller):
            data = resume_request(self.app, self.proj, request, self._signing_key(caller))
        return ErasureReport(report=data)

    def resolve_review(self, caller: Caller, atom: str, action: str,
                       flag: str = "refers-to-erased", text: str | None = None
                       ) -> ErasureReport:
        """`ledger review resolve`: re-anonymise (a correction with ``text``), redact (hard)
        or dismiss, and resolve the atom's ``flag``."""
        self._require(caller, "operator")
        from governance.erasure import Targets, hard_erase

        aid = self._atom_id(caller, atom)
        if action not in ("reanonymise", "redact", "dismiss"):
            raise InputError(f"unknown action {action!r}",
                             hint="use reanonymise, redact or dismiss")
        if action == "reanonymise" and (not text or not text.strip()):
            raise InputError("--action reanonymise needs --text with the new wording")
        key = self._signing_key(caller)
        self.app.signer(key)  # a missing key is said first, as the signed command would
        if flag not in (self.app.reader.get_atom(aid).flags or ()):
            raise InputError(f"atom {aid} has no open {flag!r} flag")  # nothing written
        with self._erasing(caller) if action == "redact" else self._acting(caller):
            if action == "reanonymise":
                assert text is not None  # checked above
                # A correction is a memory event (writer role, ADR 0012): signed by the
                # caller's writer key; the operator signs the flag's resolution.
                new = self.app.correct_atom(str(aid), {"text": text, "reason": "re-anonymised"},
                                            caller.writer_key)
                ids = [self.app.resolve_flag(aid, flag, "re-anonymised", actor=key)]
                data: dict[str, Any] = {"atom_id": str(aid), "new_atom_id": str(new),
                                        "event_ids": ids}
            elif action == "redact":
                data = hard_erase(self.app, self.proj, Targets(atoms=[str(aid)]), mode="hard",
                                  reason="review: redacted", operator=key)
                if data.get("status") != "partial":  # the flag stays open until it is done
                    data["event_ids"].append(self.app.resolve_flag(aid, flag, "redacted",
                                                                   actor=key))
            else:  # dismiss
                data = {"atom_id": str(aid),
                        "event_ids": [self.app.resolve_flag(aid, flag, "dismissed", actor=key)]}
        return ErasureReport(report=data, atom_id=str(aid))

    def list_flags(self, caller: Caller) -> list[FlagOut]:
        self._require(caller, "operator", "auditor")
        from governance.review import open_flags

        out = []
        for row in open_flags(self.app):
            try:
                atom = self.app.reader.get_atom(row["atom_id"])
            except NotFound:
                continue
            if self._visible(caller, atom.subject_id) is not None:
                out.append(FlagOut(subject_id=atom.subject_id, **row))
        return out

    def pack_signer(self, caller: Caller) -> Signer:
        """The key that signs the caller's Evidence Packs, refused before anything is
        written when verify-pack would not accept it as a pack's signer: one holding
        neither the operator nor the auditor role now."""
        self._require(caller, "operator", "auditor")
        from keys.errors import KeyNotAuthorized

        name = self._signing_key(caller)
        key = self.app.signer(name)
        state, at = self.app.reader.roster().state, clock.now()
        for role in ("operator", "auditor"):
            try:
                state.check(key.kid, role, at)
                return key
            except KeyNotAuthorized:
                continue
        raise InputError(f"{name} ({key.kid}) holds neither the operator nor the auditor role; "
                         "an Evidence Pack signed by it would not verify",
                         hint="sign with an operator or auditor key: --as operator")

    def write_pack(self, caller: Caller, batch_id: str, out: Path, *, make_zip: bool = False,
                   progress: Callable[[str, int, int], None] | None = None) -> PackWritten:
        """`ledger evidence-pack BATCH --out DIR`: the Evidence Pack of a closed batch,
        signed with the caller's key, written to a new folder (and DIR.zip)."""
        from governance.pack import build_pack

        self.pack_signer(caller)
        self._batch_in_scope(caller, batch_id)
        path = build_pack(self.app, batch_id, out, make_zip=make_zip,
                          operator=self._signing_key(caller), progress=progress)
        return PackWritten(
            pack=str(path), files=sorted(str(p.relative_to(path)) for p in path.rglob("*")
                                         if p.is_file()),
            zip=str(path.with_suffix(".zip")) if make_zip else None)

    def build_pack(self, caller: Caller, batch_id: str) -> PackOut:
        """Build the Evidence Pack of a closed batch, signed with the caller's key, verify
        it, and hand it back as a zip."""
        self._require(caller, "operator")
        from governance.pack_verify import read_pack_zip, verify_pack_bytes

        if not is_uuid(batch_id):
            raise NotFound(f"no batch {batch_id!r}")
        with tempfile.TemporaryDirectory(prefix="ledger-pack-") as tmp:
            written = self.write_pack(caller, batch_id, Path(tmp) / "pack", make_zip=True)
            content = Path(str(written.zip)).read_bytes()
        # what is verified is the bytes handed out
        report = verify_pack_bytes(read_pack_zip(content), self.app.root_public_key, None)
        return PackOut(batch_id=batch_id, filename=f"evidence-pack-{batch_id}.zip",
                       content=content, verification=report.as_json())

    def countersign_pack(self, caller: Caller, folder: Path) -> PackCountersigned:
        """`ledger evidence-pack sign DIR`: add the caller's key's signature to a pack,
        which must still verify with it (governance/pack.py countersign)."""
        from governance.pack import countersign

        countersign(folder, self.pack_signer(caller))
        return PackCountersigned(pack=str(folder), signed_by=self._signing_key(caller))

    def erasure_receipt(self, caller: Caller, request: str, html: bool = False,
                        locale: str | None = None) -> ErasureReceipt:
        """The signed receipt of a completed erasure request for the data subject, signed
        with the caller's operator key (no memory content), and its HTML page if asked,
        in ``locale`` (default: the subject's, else the ledger's; governance/i18n.py)."""
        self._require(caller, "operator")
        from governance.receipt import build_receipt, render_html

        request = str(self._request(caller, request).id)
        key = self._signing_key(caller)
        with self._acting(caller):
            data = build_receipt(self.app, request, operator=key, locale=locale)
        return ErasureReceipt(request_id=request, content=data,
                              html=render_html(data) if html else None)

    def sweep(self, caller: Caller, dry_run: bool = False,
              progress: Callable[[str, int, int], None] | None = None) -> SweepReport:
        """Apply the policy's retention and decay rules: archive or erase what is due,
        signed with the caller's operator key (``dry_run``: only say what is due)."""
        self._require_ledger_operator(caller)
        from governance.sweep import sweep

        key = self._signing_key(caller)
        with self._erasing(caller):
            return SweepReport(**sweep(self.app, self.proj, operator=key, dry_run=dry_run,
                                       progress=progress))

    def check_policy(self, caller: Caller) -> PolicyCheck:
        """Stored memories against the policy in force (Persona Schema §8): warnings with
        the ids to fix; reference integrity only when no policy is in force."""
        self._require(caller, "operator", "auditor")
        if not caller.unrestricted:
            raise Forbidden("a credential scoped to subjects or a tenant may not check the "
                            "whole ledger", hint="use an unrestricted credential")
        from governance.policy_check import check_policy

        return PolicyCheck(**check_policy(self.app, self.proj))

