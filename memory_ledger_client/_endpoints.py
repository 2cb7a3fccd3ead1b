"""The HTTP API's endpoints as :class:`~memory_ledger_client._calls.Call` values, typed
with the models the server publishes in its OpenAPI document (``service/models.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from memory_ledger_client._calls import (
    Call,
    as_bytes,
    as_json,
    as_text,
    bodies,
    body,
    model,
    models,
    seg,
)
from service.models import (
    ArtifactDeletionIn,
    ArtifactIn,
    ArtifactOut,
    AtomAdded,
    AtomCorrectionIn,
    AtomIn,
    AtomOut,
    AtomsAdded,
    Corrected,
    DeletionIn,
    ErasureOutcome,
    ErasurePlanOut,
    ErasureRequestIn,
    EventIds,
    ExecuteIn,
    HistoryEntry,
    ImportReport,
    MemoryRow,
    RecallIn,
    RecallOut,
    RedactIn,
    RehearseIn,
    RequestRejectIn,
    RequestStatus,
    RosterEntry,
    SubjectIn,
    SubjectOut,
    VerificationOut,
)

RequestState = Literal["open", "overdue", "partial", "completed", "completed-late", "rejected"]
IMPORT_MEDIA = {"mem": "application/zip", "text": "text/plain", "claude": "application/json",
                "chatgpt": "application/json", "mem0": "application/json",
                "konshus": "application/json", "persona": "application/json"}


def _key(idempotency_key: str | None) -> dict[str, str]:
    return {"Idempotency-Key": idempotency_key} if idempotency_key else {}


def health() -> Call[dict[str, Any]]:
    return Call("GET", "/v1/health", as_json)


# ----------------------------------------------------------------------------- subjects
def register_subject(item: SubjectIn, key: str | None) -> Call[SubjectOut]:
    return Call("POST", "/v1/subjects", model(SubjectOut), json=body(item), headers=_key(key))


def get_subject(subject: str) -> Call[SubjectOut]:
    return Call("GET", f"/v1/subjects/{seg(subject)}", model(SubjectOut))


def state(subject: str, as_of: str | None, valid_at: str | None) -> Call[dict[str, Any]]:
    return Call("GET", f"/v1/subjects/{seg(subject)}/state", as_json,
                params={"as_of": as_of, "valid_at": valid_at})


def export(subject: str, fmt: str, include_private: bool) -> Call[bytes]:
    return Call("GET", f"/v1/subjects/{seg(subject)}/export", as_bytes,
                params={"format": fmt, "include_private": str(include_private).lower()})


def import_document(content: bytes, fmt: str, subject: str | None, dry_run: bool,
                    skip_unsupported: bool, key: str | None) -> Call[ImportReport]:
    return Call("POST", "/v1/imports", model(ImportReport), content=content,
                params={"format": fmt, "subject": subject, "dry_run": str(dry_run).lower(),
                        "skip_unsupported": str(skip_unsupported).lower()},
                headers={"Content-Type": IMPORT_MEDIA.get(fmt, "application/json"),
                         **_key(key)},
                idempotent=True if dry_run else None)


# ----------------------------------------------------------------------------- artifacts
def capture_artifact(item: ArtifactIn, key: str | None) -> Call[ArtifactOut]:
    return Call("POST", "/v1/artifacts", model(ArtifactOut), json=body(item),
                headers=_key(key))


def get_artifact(artifact: str) -> Call[ArtifactOut]:
    return Call("GET", f"/v1/artifacts/{seg(artifact)}", model(ArtifactOut))


def delete_artifact(artifact: str, item: ArtifactDeletionIn, key: str | None
                    ) -> Call[ErasureOutcome]:
    return Call("POST", f"/v1/artifacts/{seg(artifact)}/deletions", model(ErasureOutcome),
                json=body(item), headers=_key(key))


# ----------------------------------------------------------------------------- atoms
def add_atom(item: AtomIn, key: str | None) -> Call[AtomAdded]:
    return Call("POST", "/v1/atoms", model(AtomAdded), json=body(item), headers=_key(key))


def add_atoms(items: Sequence[AtomIn], key: str | None) -> Call[AtomsAdded]:
    return Call("POST", "/v1/atoms/batch", model(AtomsAdded), json=bodies(items),
                headers=_key(key))


def get_atom(atom: str) -> Call[AtomOut]:
    return Call("GET", f"/v1/atoms/{seg(atom)}", model(AtomOut))


def history(atom: str) -> Call[list[HistoryEntry]]:
    return Call("GET", f"/v1/atoms/{seg(atom)}/history", models(HistoryEntry))


def correct_atom(atom: str, item: AtomCorrectionIn, key: str | None) -> Call[Corrected]:
    return Call("POST", f"/v1/atoms/{seg(atom)}/corrections", model(Corrected),
                json=body(item), headers=_key(key))


def redact_atom(atom: str, item: RedactIn, key: str | None) -> Call[ErasureOutcome]:
    return Call("POST", f"/v1/atoms/{seg(atom)}/redactions", model(ErasureOutcome),
                json=body(item), headers=_key(key))


def delete_atom(atom: str, item: DeletionIn, key: str | None) -> Call[ErasureOutcome]:
    return Call("POST", f"/v1/atoms/{seg(atom)}/deletions", model(ErasureOutcome),
                json=body(item), headers=_key(key))


def rehearse(item: RehearseIn, key: str | None) -> Call[EventIds]:
    return Call("POST", "/v1/rehearsals", model(EventIds), json=body(item), headers=_key(key))


# ----------------------------------------------------------------------------- reads
def recall(item: RecallIn, key: str | None) -> Call[RecallOut]:
    # a recall that rehearses nothing writes nothing
    return Call("POST", "/v1/recall", model(RecallOut), json=body(item), headers=_key(key),
                idempotent=True if not item.rehearse else None)


def memories_page(subject: str | None, privacy_class: str | None,
                  min_salience: float | None, limit: int | None) -> Call[list[MemoryRow]]:
    return Call("GET", "/v1/memories", models(MemoryRow),
                params={"subject": subject, "privacy_class": privacy_class,
                        "min_salience": min_salience, "limit": limit})


def memories_next(url: str) -> Call[list[MemoryRow]]:
    return Call("GET", url, models(MemoryRow))


def inspect_memory(atom: str) -> Call[dict[str, Any]]:
    return Call("GET", f"/v1/memories/{seg(atom)}", as_json)


# ----------------------------------------------------------------------------- erasure
def file_request(item: ErasureRequestIn, key: str | None) -> Call[RequestStatus]:
    return Call("POST", "/v1/requests", model(RequestStatus), json=body(item),
                headers=_key(key))


def list_requests(status: RequestState | None) -> Call[list[RequestStatus]]:
    return Call("GET", "/v1/requests", models(RequestStatus), params={"status": status})


def request_status(request_id: str) -> Call[RequestStatus]:
    return Call("GET", f"/v1/requests/{seg(request_id)}", model(RequestStatus))


def plan(request_id: str) -> Call[ErasurePlanOut]:
    return Call("GET", f"/v1/requests/{seg(request_id)}/plan", model(ErasurePlanOut))


def execute(request_id: str, item: ExecuteIn) -> Call[ErasureOutcome]:
    # the approved plan's digest makes it safe to send again: a second execution finds
    # the request completed, or the plan changed, and writes nothing
    return Call("POST", f"/v1/requests/{seg(request_id)}/execute", model(ErasureOutcome),
                json=body(item), idempotent=True)


def reject_request(request_id: str, item: RequestRejectIn, key: str | None
                   ) -> Call[RequestStatus]:
    return Call("POST", f"/v1/requests/{seg(request_id)}/reject", model(RequestStatus),
                json=body(item), headers=_key(key))


def evidence_pack(batch_id: str) -> Call[bytes]:
    # building a pack appends nothing to the log (ADR 0048)
    return Call("POST", f"/v1/batches/{seg(batch_id)}/evidence-pack", as_bytes,
                idempotent=True)


# ----------------------------------------------------------------------------- integrity
def checkpoint() -> Call[str]:
    return Call("GET", "/v1/checkpoint", as_text)


def verification() -> Call[VerificationOut]:
    return Call("GET", "/v1/verification", model(VerificationOut))


def keys() -> Call[list[RosterEntry]]:
    return Call("GET", "/v1/keys", models(RosterEntry))
