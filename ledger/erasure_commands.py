"""The erasure commands: data keys destroyed, atoms redacted, shredded and tombstoned,
sources removed, flags raised and resolved, and the erasure request's and redaction
batch's events (ADR 0019's state machine runs them in ``governance/erasure_steps.py``).

Each runs in the write context of :class:`ledger.write_side.WriteSide` and reads through
its reader (ADR 0071).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import structlog
from eventsourcing.application import AggregateNotFoundError

from ledger import clock, faults, policy_rules
from ledger.domain import (
    OPERATOR,
    WRITER_OR_OPERATOR,
    Artifact,
    Atom,
    ErasureRequest,
    Record,
    RedactionBatch,
)
from ledger.errors import ConflictError, InputError, NotFound
from ledger.write_side import WriteSide

log = structlog.get_logger("ledger")


class ErasureCommands(WriteSide):
    """The commands that take memory out of reach, and the requests that ask for it."""

    # ------------------------------------------------------------------ crypto-shredding
    def archive_atoms(self, reasons: dict[str, str], actor: str | None = None,
                      batch_id: str | None = None) -> list[str]:
        """Archive many atoms in one signed command (the policy sweep's archive step).

        Atoms that are no longer active or soft-redacted when the write lock is held (another
        sweep got there first) are skipped, so a repeated or concurrent run adds nothing.
        Returns the event ids written.
        """
        if not reasons:
            return []
        with self.writing(self.signer(actor), WRITER_OR_OPERATOR) as at:
            todo = []
            for aid, reason in reasons.items():
                atom = self.reader.get_atom(UUID(aid))
                if atom.status not in ("active", "soft-redacted"):
                    continue
                atom.trigger_event(Atom.Redacted, timestamp=at, mode="archive", reason=reason,
                                   batch_id=batch_id, reached=None)
                todo.append(atom)
            ids: list[str] = self.commit(*todo) if todo else []
        policy_rules.log.info("policy.archived", count=len(ids))
        return ids

    def archive_decayed(self, due: dict[str, dict[str, Any]], actor: str | None = None
                        ) -> list[str]:
        """Archive atoms whose salience fell below their decay profile's minimumSalience
        (the sweep's decay rule, ADR 0050): one signed ``Atom.Archived`` per atom, one
        command. ``due`` maps atom ids to ``salience``, ``minimum_salience``,
        ``computed_at`` and ``reason``. Atoms no longer active when the write lock is held
        are skipped, so a repeated or concurrent run adds nothing. Returns the event ids."""
        if not due:
            return []
        with self.writing(self.signer(actor), OPERATOR) as at:
            todo = []
            for aid, d in due.items():
                atom = self.reader.get_atom(UUID(aid))
                if atom.status != "active":
                    continue
                atom.trigger_event(Atom.Archived, timestamp=at,
                                   salience=float(d["salience"]),
                                   minimum_salience=float(d["minimum_salience"]),
                                   computed_at=str(d["computed_at"]), reason=str(d["reason"]))
                todo.append(atom)
            ids: list[str] = self.commit(*todo) if todo else []
        log.info("decay.archived", count=len(ids))
        return ids

    def destroy_data_key(self, aggregate_id: UUID, reason: str,
                         actor: str | None = None) -> str | None:
        """Crypto-shred one item: destroy its data key, then record a signed event.

        Returns the event id, or None when the key was already destroyed and recorded.
        """
        signer = self.signer(actor)
        with self.writing(signer, WRITER_OR_OPERATOR) as at:
            try:
                agg: Any = self.repository.get(aggregate_id)
            except AggregateNotFoundError:
                raise NotFound(f"no item {aggregate_id}") from None
            if agg.data_key_destroyed_at is not None:
                return None
            self.datakeys.destroy([str(aggregate_id)], at)
            agg.trigger_event(type(agg).DataKeyDestroyed, timestamp=at,
                              key_id=str(aggregate_id), reason=reason,
                              kek_epoch=self.datakeys.current_epoch())
            ids = self.commit(agg)
        log.info("data_key.destroyed", item_id=str(aggregate_id))
        return ids[0]

    # ------------------------------------------------------------------ governance primitives
    # Orchestration (routes, probes, evidence) lives in governance/; these are the signed
    # commands it is made of. Each is one all-or-nothing command.
    def redact(self, atom_id: str | UUID, mode: str, reason: str, actor: str | None = None,
               batch_id: str | None = None) -> str:
        """Soft (hidden, reversible) or archive (out of retrieval, kept) redaction."""
        if mode not in ("soft", "archive"):
            raise InputError(f"mode {mode!r} is not soft or archive here",
                             hint="hard and delete go through governance (keys destroyed, "
                                  "routes purged): `ledger redact ATOM --mode hard`")
        with self.writing(self.signer(actor), WRITER_OR_OPERATOR) as at:
            atom = self.reader.get_atom(atom_id)
            if atom.status not in ("active", "soft-redacted") or atom.redaction_mode == mode:
                raise ConflictError(f"atom {atom.id} is {atom.status}; cannot {mode}-redact it")
            atom.trigger_event(Atom.Redacted, timestamp=at, mode=mode, reason=reason,
                               batch_id=batch_id, reached=None)
            ids = self.commit(atom)
        log.info("atom.redacted", atom_id=str(atom.id), mode=mode)
        return ids[0]

    def unredact(self, atom_id: str | UUID, reason: str, actor: str | None = None) -> str:
        with self.writing(self.signer(actor), WRITER_OR_OPERATOR) as at:
            atom = self.reader.get_atom(atom_id)
            if atom.status != "soft-redacted":
                raise ConflictError(f"atom {atom.id} is {atom.status}; only soft redaction is "
                                    "reversible")
            atom.trigger_event(Atom.Unredacted, timestamp=at, reason=reason)
            ids = self.commit(atom)
        log.info("atom.unredacted", atom_id=str(atom.id))
        return ids[0]

    def shred(self, item_ids: Sequence[UUID], reason: str,
              actor: str | None = None, defer: bool = False) -> list[str]:
        """Destroy the data keys of many items, then record one signed event per item.

        Already-shredded items are skipped, so a retried erasure is safe; an item whose key
        an interrupted run destroyed without recording it gets its event now. ``defer``:
        the keystore is compacted and checked later, by ``datakeys.finish_deferred()``
        (an erasure destroys its keys in several commits, ADR 0019).
        """
        with self.writing(self.signer(actor), WRITER_OR_OPERATOR) as at:
            aggs: list[Any] = self.reader.get_many(item_ids)
            todo = [a for a in aggs if getattr(a, "data_key_destroyed_at", None) is None]
            # the keystore files are read for the keys' bytes while the events are written
            self.datakeys.destroy([str(a.id) for a in todo], at, check_later=not defer,
                                  defer=defer)
            faults.point("keys-deleted")
            try:
                epoch = self.datakeys.current_epoch() if todo else None
                for agg in todo:
                    agg.trigger_event(type(agg).DataKeyDestroyed, timestamp=at,
                                      key_id=str(agg.id), reason=reason, kek_epoch=epoch)
                ids = self.commit(*todo) if todo else []
            finally:
                self.datakeys.settle()
        log.info("data_key.destroyed", count=len(todo))
        return ids

    def tombstone(self, atom_ids: Sequence[UUID], artifact_ids: Sequence[UUID], mode: str,
                  reason: str, reached: list[str], batch_id: str | None = None,
                  cascade: dict[str, dict[str, Any]] | None = None,
                  actor: str | None = None, records: Sequence[UUID] = ()) -> list[str]:
        """Signed tombstones after a hard erasure or deletion reached every route."""
        if mode not in ("hard", "delete"):
            raise InputError(f"tombstones are for hard or delete, not {mode!r}")
        with self.writing(self.signer(actor), WRITER_OR_OPERATOR) as at:
            aggs: list[Any] = []
            try:
                atoms = self.reader.get_many(atom_ids)
            except AggregateNotFoundError as e:
                raise NotFound(f"no atom {e}") from None
            for atom in atoms:
                if not isinstance(atom, Atom):
                    raise NotFound(f"{atom.id} is not an atom")
                if atom.status in ("hard-redacted", "deleted"):
                    continue
                atom.trigger_event(Atom.Redacted, timestamp=at, mode=mode, reason=reason,
                                   batch_id=batch_id, reached=reached)
                aggs.append(atom)
            for rec in self.reader.get_many(records):
                if getattr(rec, "status", "active") in ("hard-redacted", "deleted"):
                    continue
                rec.trigger_event(Record.Erased, timestamp=at, mode=mode, reason=reason,
                                  batch_id=batch_id, reached=reached)
                aggs.append(rec)
            for rid in dict.fromkeys(artifact_ids):
                art: Any = self.repository.get(rid)
                if art.status == "deleted":
                    continue
                art.trigger_event(Artifact.Deleted, timestamp=at, reason=reason,
                                  batch_id=batch_id, cascade=(cascade or {}).get(str(rid), {}),
                                  reached=reached)
                aggs.append(art)
            ids = self.commit(*aggs) if aggs else []
        log.info("tombstones.recorded", count=len(ids), mode=mode)
        return ids

    def remove_source(self, atom_id: UUID, artifact_id: UUID, actor: str | None = None) -> str:
        with self.writing(self.signer(actor), WRITER_OR_OPERATOR) as at:
            atom = self.reader.get_atom(atom_id)
            remaining = [a for a in atom.artifact_ids if a != str(artifact_id)]
            atom.trigger_event(Atom.SourceRemoved, timestamp=at, artifact_id=str(artifact_id),
                               remaining=remaining)
            return self.commit(atom)[0]

    def flag(self, atom_id: UUID, flag: str, reason: str, related: list[str] | None = None,
             actor: str | None = None) -> str | None:
        with self.writing(self.signer(actor), WRITER_OR_OPERATOR) as at:
            atom = self.reader.get_atom(atom_id)
            if flag in atom.flags:
                return None
            atom.trigger_event(Atom.Flagged, timestamp=at, flag=flag, reason=reason,
                               related=related)
            return self.commit(atom)[0]

    def resolve_flag(self, atom_id: UUID, flag: str, resolution: str,
                     actor: str | None = None) -> str:
        with self.writing(self.signer(actor), WRITER_OR_OPERATOR) as at:
            atom = self.reader.get_atom(atom_id)
            if flag not in atom.flags:
                raise ConflictError(f"atom {atom.id} has no open {flag!r} flag")
            atom.trigger_event(Atom.FlagResolved, timestamp=at, flag=flag, resolution=resolution)
            return self.commit(atom)[0]

    def receive_request(self, subject: str, reason: str, operator: str,
                        ack_hours: float, complete_hours: float,
                        legal_basis: str | None = None, identifiers: Sequence[str] = (),
                        sessions: Sequence[str] = ()) -> UUID:
        """Step 1 of the right to be forgotten: log the receipt with its deadlines."""
        signer = self.signer(operator)
        with self.writing(signer, OPERATOR) as at:
            sid = self.reader.resolve_subject(subject)
            req = ErasureRequest._create(
                ErasureRequest.Created, id=uuid.uuid4(), timestamp=at, subject_id=str(sid),
                subject_ref=self.reader.get_subject(str(sid)).ref, reason=reason,
                legal_basis=legal_basis, operator=operator, sessions=list(sessions),
                identifiers=list(identifiers) or None, credential=self.acting_credential,
                ack_due=clock.format_instant(at + timedelta(hours=ack_hours)),
                complete_due=clock.format_instant(at + timedelta(hours=complete_hours)))
            req.trigger_event(ErasureRequest.Acknowledged, timestamp=at)
            self.commit(req)
        log.info("request.received", request_id=str(req.id), subject_id=str(sid))
        return req.id

    def open_batch(self, operator: str, request_id: UUID | None, mode: str, reason: str,
                   targets: dict[str, list[str]]) -> UUID:
        """Open and approve a redaction batch, both signed by the operator's key."""
        signer = self.signer(operator)
        with self.writing(signer, OPERATOR) as at:
            batch = RedactionBatch._create(
                RedactionBatch.Created, id=uuid.uuid4(), timestamp=at,
                request_id=str(request_id) if request_id else None, mode=mode, reason=reason,
                targets={k: sorted(v) for k, v in targets.items()})
            batch.trigger_event(RedactionBatch.Approved, timestamp=at, operator=operator,
                                credential=self.acting_credential)
            self.commit(batch)
        log.info("batch.approved", batch_id=str(batch.id))
        return batch.id

    def finish_batch(self, operator: str, batch_id: UUID, event_ids: list[str],
                     reach: dict[str, Any], request_id: UUID | None = None) -> list[str]:
        """Record the executed batch and close it (both steps at once)."""
        ids = self.execute_batch(operator, batch_id, event_ids, reach)
        return [*ids, *self.close_batch(operator, batch_id, request_id)]

    def execute_batch(self, operator: str, batch_id: UUID, event_ids: list[str],
                      reach: dict[str, Any]) -> list[str]:
        """Record what the batch did and reached (its ``Executed`` event)."""
        with self.writing(self.signer(operator), OPERATOR) as at:
            batch: Any = self.repository.get(batch_id)
            if batch.status in ("executed", "closed"):
                return []
            batch.trigger_event(RedactionBatch.Executed, timestamp=at, event_ids=event_ids,
                                reach=reach)
            ids = self.commit(batch)
        log.info("batch.executed", batch_id=str(batch_id), events=len(event_ids))
        return ids

    def close_batch(self, operator: str, batch_id: UUID,
                    request_id: UUID | None = None) -> list[str]:
        """Close an executed batch and destroy its data key (its reason, and the sealed
        notes of its erasure); complete its request and destroy the request's key (its
        reason and identifiers). One commit; a key an interrupted close destroyed gets
        its event now (ADR 0019)."""
        with self.writing(self.signer(operator), OPERATOR) as at:
            batch: Any = self.repository.get(batch_id)
            aggs: list[Any] = []
            if batch.status != "closed":
                batch.trigger_event(RedactionBatch.Closed, timestamp=at, outcome="completed")
            self._destroy_own_key(batch, RedactionBatch.DataKeyDestroyed, "batch closed", at)
            if batch.pending_events:
                aggs.append(batch)
            if request_id is not None:
                req: Any = self.repository.get(request_id)
                if req.completed_at is None:
                    req.trigger_event(ErasureRequest.Completed, timestamp=at,
                                      batch_id=str(batch_id), event_ids=batch.event_ids)
                self._destroy_own_key(req, ErasureRequest.DataKeyDestroyed,
                                      "request completed", at)
                if req.pending_events:
                    aggs.append(req)
            ids = self.commit(*aggs) if aggs else []
        log.info("batch.closed", batch_id=str(batch_id))
        return ids

    def end_partial(self, operator: str, batch_id: UUID, request_id: UUID | None,
                    event_ids: list[str], reach: dict[str, Any],
                    reasons: list[dict[str, Any]]) -> list[str]:
        """Record that a run of the batch ended without erasing all its targets (ADR
        0047): ``batch.ended-partial`` (what it did and reached, why it stopped short) and,
        for a request, ``request.ended-partial``, in one commit. Nothing is destroyed or
        closed here: the batch's and the request's own keys stay for the resume."""
        with self.writing(self.signer(operator), OPERATOR) as at:
            batch: Any = self.repository.get(batch_id)
            if batch.status in ("executed", "closed"):
                raise ConflictError(f"batch {batch_id} is {batch.status}; it cannot end partial")
            batch.trigger_event(RedactionBatch.EndedPartial, timestamp=at,
                                event_ids=event_ids, reach=reach, reasons=reasons)
            aggs: list[Any] = [batch]
            if request_id is not None:
                req: Any = self.repository.get(request_id)
                req.trigger_event(ErasureRequest.EndedPartial, timestamp=at,
                                  batch_id=str(batch_id), reasons=reasons)
                aggs.append(req)
            ids = self.commit(*aggs)
        log.info("batch.ended_partial", batch_id=str(batch_id),
                 reasons=[r.get("code") for r in reasons])
        return ids

    def reject_request(self, operator: str, request_id: UUID, code: str, reason: str
                       ) -> list[str]:
        """Refuse an erasure request that no erasure has started for (ADR 0047): a signed
        ``request.rejected`` (code, the operator's words in clear) and the request's own
        key destroyed (its sealed reason and identifiers), in one commit."""
        with self.writing(self.signer(operator), OPERATOR) as at:
            req: Any = self.repository.get(request_id)
            if not isinstance(req, ErasureRequest):
                raise NotFound(f"{request_id} is not an erasure request")
            if getattr(req, "rejected_at", None) is not None:
                raise ConflictError(f"request {request_id} was already rejected at "
                                    f"{req.rejected_at}")
            if req.completed_at is not None or req.batch_id is not None:
                raise ConflictError(
                    f"request {request_id} has an erasure (batch {req.batch_id}); only a "
                    "request no erasure has started for can be rejected",
                    hint="a started erasure is finished with `ledger requests resume`")
            req.trigger_event(ErasureRequest.Rejected, timestamp=at, code=code,
                              reason=reason, operator=operator,
                              credential=self.acting_credential)
            self._destroy_own_key(req, ErasureRequest.DataKeyDestroyed, "request rejected",
                                  at)
            ids = self.commit(req)
        log.info("request.rejected", request_id=str(request_id), code=code)
        return ids

    def _destroy_own_key(self, agg: Any, event: Any, reason: str, at: datetime) -> None:
        """Destroy the data key of a request or batch (if it ever had one) and record it."""
        kid = str(agg.id)
        if getattr(agg, "data_key_destroyed_at", None) is not None:
            return
        present = self.datakeys.present([kid])
        if not (present or self.datakeys.destroyed_at(kid)):
            return  # never had content to seal
        self.datakeys.destroy([kid], at)
        if not present:  # destroyed by an interrupted close: its bytes were never known
            self.datakeys.vacuum()
        agg.trigger_event(event, timestamp=at, key_id=kid, reason=reason,
                          kek_epoch=self.datakeys.current_epoch())

