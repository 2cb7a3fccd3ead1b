"""The Data Rights Protocol (DRP 0.9.4) mapped onto the ledger's requests (ADR 0056).

A privacy tool (a DRP *Authorized Agent*) sends signed Data Rights Exercise requests;
this module checks them as the protocol's section 3.07 orders, and maps them onto the
facade's use cases:

* ``deletion`` files a right-to-be-forgotten request for the one subject the identity
  names (its ``identifier`` claim: the subject ref, inside the credential's tenant). Its
  approval and execution stay an operator's acts (`ledger requests ...`, the console, the
  HTTP API). An identity naming no subject, or more than one, is answered ``denied`` /
  ``no_match`` and files nothing: never an erasure on a loose match.
* ``access`` (when the business entry lists it) is answered ``fulfilled`` with a results
  URL where the same agent reads the subject's Konshus export, made when it is read.
* status maps the erasure request's state onto DRP's (:func:`drp_state`); ``fulfilled``
  names the Evidence Pack by the SHA-256 of its in-toto statement (ADR 0048), built once,
  when the agent first sees the request completed, and kept for the agent to download.
* revoke rejects a request no erasure has started for (code ``withdrawn``, reason
  "revoked by the requester", ADR 0047) and is refused once its erasure started.

What the protocol keeps about a request that the signed log does not (the agent, its
``agent-request-id``, a denial, the pack handed over) is in the table ``drp_requests`` of
the event store's database, beside ``auth_tokens`` (stores/drp_requests.py, ADR 0075):
ids, states and the pack; no claim of the identity, no memory content. The agents and this
business are described by the home's ``drp.json`` (schema
``schemas/drp/directory.v0.9.4.json``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import tempfile
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from ledger import clock
from ledger.errors import ConflictError, LedgerError, NotFound
from service.caller import Caller
from service.core import FacadeCore
from service.models import ErasureRequestIn, RequestRejectIn
from stores.drp_requests import DrpRequestStore

if TYPE_CHECKING:
    from collections.abc import Callable
    from datetime import datetime

    from service.models import ExportFormat, ExportOut, PackWritten, RequestStatus

log = structlog.get_logger("service")

DRP_VERSION = "0.9.4"
AGENT_ROLE = "privacy-agent"
DIRECTORY_FILE = "drp.json"
API_BASE = "/drp"  # the routes: API_BASE + "/v1/data-rights-request" ... (server/drp.py)
CLOCK_SKEW = timedelta(seconds=60)
"""How far an agent's ``issued-at`` may be ahead of this server's clock (section 3.07)."""
RESULTS_DAYS = 30
"""Days after fulfilment during which the results URL answers (the status' expires_at)."""
REVOKED_REASON = "revoked by the requester"
SIGNATURE_BYTES = 64

# the erasure request's rejection codes (ADR 0047) as DRP denial reasons (section 3.02)
DENIAL_REASONS = {"identity-not-verified": "insuf_verification",
                  "manifestly-unfounded": "suspected_fraud",
                  "excessive": "too_many_requests",
                  "legal-exemption": "claim_not_covered",
                  "duplicate": "other", "other": "other"}


class DrpRefused(LedgerError):
    """A DRP call refused as the protocol's section 3.06 says: an HTTP ``status``, a
    message, and whether the request will never be processed (``fatal``). Nothing was
    written."""

    def __init__(self, status: int, message: str, *, fatal: bool | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.fatal = fatal


# ----------------------------------------------------------------------------- schemas
@cache
def _validators() -> dict[str, Any]:
    from jsonschema import Draft202012Validator
    from referencing import Registry, Resource

    folder = resources.files("schemas") / "drp"
    docs = {p.name: json.loads(p.read_text(encoding="utf-8"))
            for p in folder.iterdir() if p.name.endswith(".json")}
    registry: Registry[Any] = Registry().with_resources(
        (d["$id"], Resource.from_contents(d)) for d in docs.values())
    return {name.split(".v")[0]: Draft202012Validator(
        d, registry=registry, format_checker=Draft202012Validator.FORMAT_CHECKER)
        for name, d in docs.items()}


def schema_errors(kind: str, doc: Any) -> list[str]:
    """What is wrong with ``doc`` against ``schemas/drp/<kind>.v0.9.4.json`` (``kind``:
    exercise-request, revoke-request, exercise-status, error, directory, business); empty
    when it is valid."""
    validator = _validators()[kind]
    return [f"{'/'.join(str(p) for p in e.absolute_path) or 'body'}: {e.message}"
            for e in sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))]


# ----------------------------------------------------------------------------- directory
@dataclass(frozen=True)
class Directory:
    """The home's ``drp.json``: this business's entry and the agents it accepts."""

    business: dict[str, Any]
    agents: dict[str, dict[str, Any]]

    @classmethod
    def load(cls, home: Path) -> Directory:
        path = home / DIRECTORY_FILE
        if not path.is_file():
            raise DrpRefused(503, "the Data Rights Protocol is not configured on this ledger "
                                  f"(no {DIRECTORY_FILE} in its home; see docs/drp.md)",
                             fatal=False)
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise DrpRefused(503, f"{DIRECTORY_FILE} cannot be read: {e.__class__.__name__}",
                             fatal=False) from e
        errors = schema_errors("directory", doc)
        if errors:
            raise DrpRefused(503, f"{DIRECTORY_FILE} is not valid: {errors[0]}", fatal=False)
        return cls(business=doc["business"], agents={a["id"]: a for a in doc["agents"]})


def open_message(body: bytes, verify_key: str) -> tuple[bytes, bytes]:
    """Section 3.07 steps 1-2: the body decodes from base64 and starts with an Ed25519
    signature of the rest by ``verify_key`` (base64, the agent's directory entry); the
    signature and the signed JSON bytes are returned. Raises :class:`DrpRefused` (403)
    otherwise."""
    from nacl.exceptions import BadSignatureError, CryptoError
    from nacl.signing import VerifyKey

    try:
        blob = base64.b64decode(body.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise DrpRefused(400, "the request body is not base64 (DRP 3.07: a signed message, "
                              "sent as text/plain)", fatal=True) from None
    if len(blob) <= SIGNATURE_BYTES:
        raise DrpRefused(400, "the request body is shorter than an Ed25519 signature and a "
                              "message", fatal=True)
    try:
        key = VerifyKey(base64.b64decode(verify_key))
        return blob[:SIGNATURE_BYTES], bytes(key.verify(blob))
    except (BadSignatureError, CryptoError, ValueError):
        raise DrpRefused(403, "the request's signature does not verify with the agent's "
                              "key in this ledger's directory", fatal=True) from None


def _json_object(message: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(message)
    except ValueError:
        raise DrpRefused(400, "the signed message is not JSON", fatal=True) from None
    if not isinstance(doc, dict):
        raise DrpRefused(400, "the signed message is not a JSON object", fatal=True)
    return doc


def check_exercise(message: bytes, agent_id: str, directory: Directory,
                   now: datetime) -> dict[str, Any]:
    """Section 3.07 steps 3-6 and the schema of an exercise request: returns the request,
    or raises :class:`DrpRefused` (nothing is written)."""
    doc = _json_object(message)
    errors = schema_errors("exercise-request", doc)
    if errors:
        raise DrpRefused(400, f"the request does not follow DRP {DRP_VERSION}: {errors[0]}",
                         fatal=True)
    if doc["agent-id"] != agent_id:  # step 3: no request of one agent replayed by another
        raise DrpRefused(403, "agent-id is not the agent of this bearer token", fatal=True)
    if doc["business-id"] != directory.business["id"]:  # step 4
        raise DrpRefused(403, f"business-id names another business (this one is "
                              f"{directory.business['id']})", fatal=True)
    issued = clock.parse_instant(doc["issued-at"], "issued-at")
    expires = clock.parse_instant(doc["expires-at"], "expires-at")
    if issued > now + CLOCK_SKEW:  # step 5
        raise DrpRefused(400, "issued-at is in the future: check the agent's clock",
                         fatal=True)
    if now >= expires:  # step 6: no replay of an old request
        raise DrpRefused(400, "the request has expired (expires-at has passed)", fatal=True)
    if doc["exercise"] not in directory.business["supported_actions"]:
        raise DrpRefused(400, f"unsupported rights action {doc['exercise']!r}: this business "
                              f"supports {', '.join(directory.business['supported_actions'])}",
                         fatal=True)
    return doc


def check_revoke(message: bytes) -> dict[str, Any]:
    doc = _json_object(message)
    errors = schema_errors("revoke-request", doc)
    if errors:
        raise DrpRefused(400, f"the request does not follow DRP {DRP_VERSION}: {errors[0]}",
                         fatal=True)
    return doc


def identifiers_of(doc: Mapping[str, Any]) -> list[str]:
    """The ids the identity names the person by (schema.org/Person ``identifier``)."""
    ident = doc.get("identifier")
    if ident is None:
        return []
    return sorted(set([ident] if isinstance(ident, str) else ident))


# ----------------------------------------------------------------------------- state map
def drp_state(row: Mapping[str, Any], status: Mapping[str, Any] | None
              ) -> dict[str, Any]:
    """The DRP status fields (section 3.02) of a stored DRP request ``row`` and, for a
    deletion, the erasure request's status row (governance/requests.py):

    ========================================  ==============================
    erasure request                           DRP
    ========================================  ==============================
    open, overdue (no erasure started)        in_progress
    open with its batch, partial              in_progress (the details say)
    completed, completed-late                 fulfilled (+ results_url)
    rejected, code withdrawn, by a revoke     revoked
    rejected, other codes                     denied / DENIAL_REASONS[code]
    (no subject matched; nothing filed)       denied / no_match
    ========================================  ==============================
    """
    if row["state"] == "denied":
        return {"status": "denied", "reason": row["reason"],
                "processing_details": row["details"]}
    if row["state"] == "access":
        return {"status": "fulfilled",
                "processing_details": "the export of your memories is at results_url"}
    assert status is not None
    s = status["status"]
    if s in ("completed", "completed-late"):
        return {"status": "fulfilled"}
    if s == "rejected":
        code = (status.get("rejection") or {}).get("code", "other")
        if row["state"] == "revoked" or code == "withdrawn":
            return {"status": "revoked"}
        return {"status": "denied", "reason": DENIAL_REASONS.get(code, "other"),
                "processing_details": "the business refused this request "
                                      f"({code.replace('-', ' ')})"}
    if s == "partial":
        details = ("the erasure ran but could not finish everything yet; it will be "
                   "resumed")
    elif status.get("batch_id"):
        details = "the erasure is under way"
    else:
        details = "received; waiting for an operator of the business to approve the erasure"
    return {"status": "in_progress", "processing_details": details}


# ----------------------------------------------------------------------------- use cases
class DrpCases(FacadeCore):
    """The DRP use cases of the facade, for a ``privacy-agent`` caller only. Each acts
    through the facade's own use cases under a caller derived from the agent's credential
    (same credential id, same tenant): filing as an assistant files, rejecting a revoked
    request as an operator signs with the home's operator key, reading as an auditor
    reads; the events record the agent's credential."""

    _drp_store: DrpRequestStore | None = None

    if TYPE_CHECKING:  # the use cases the DRP acts through, joined beside this in
        # MemoryService (service/facade.py): service/erasure_cases.py, memory_cases.py
        def file_request(self, caller: Caller, data: ErasureRequestIn) -> RequestStatus: ...

        def reject_request(self, caller: Caller, request: str, data: RequestRejectIn
                           ) -> RequestStatus: ...

        def request_status(self, caller: Caller, request: str,
                           now: datetime | None = None) -> RequestStatus: ...

        def write_pack(self, caller: Caller, batch_id: str, out: Path, *,
                       make_zip: bool = False,
                       progress: Callable[[str, int, int], None] | None = None
                       ) -> PackWritten: ...

        def export(self, caller: Caller, subject: str, fmt: ExportFormat,
                   include_private: bool = False) -> ExportOut: ...

    def _drp(self) -> DrpRequestStore:
        if self._drp_store is None:
            self._drp_store = DrpRequestStore.open(self.app.config.events)
        return self._drp_store

    def _agent(self, caller: Caller) -> str:
        self._require(caller, AGENT_ROLE)
        assert caller.name is not None
        return caller.name

    @staticmethod
    def _as(caller: Caller, role: str) -> Caller:
        return Caller(credential_id=caller.credential_id, role=role,  # type: ignore[arg-type]
                      tenant=caller.tenant, name=caller.name)

    def _row(self, caller: Caller, request_id: str) -> dict[str, Any]:
        """The agent's own request; any other id (unknown, another agent's, another
        tenant's) is answered 403 alike, as section 2.02.1 says."""
        agent = self._agent(caller)
        row = self._drp().get(request_id) if _is_uuid(request_id) else None
        if row is None or row["agent_id"] != agent or row["tenant"] != caller.tenant:
            raise DrpRefused(403, "this agent manages no request with that id")
        return row

    def drp_exercise(self, caller: Caller, home: Path, body: bytes,
                     now: datetime | None = None) -> dict[str, Any]:
        """POST /v1/data-rights-request: check, map, record; the Exercise Status."""
        agent = self._agent(caller)
        directory = Directory.load(home)
        entry = directory.agents.get(agent)
        if entry is None:
            raise DrpRefused(403, f"agent {agent} is not in this ledger's directory",
                             fatal=True)
        at = now or clock.now()
        signature, message = open_message(body, entry["verify_key"])
        doc = check_exercise(message, agent, directory, at)
        # a signed request is used once: the same bytes sent again before they expire are
        # refused (the signature's digest is kept: only the agent's key can make one)
        seen = hashlib.sha256(signature).hexdigest()
        earlier = self._drp().by_signature(seen)
        if earlier is not None:
            raise DrpRefused(409, f"this signed request was received already: it is request "
                                  f"{earlier}", fatal=False)
        refs = identifiers_of(doc)
        reader = self._as(caller, "auditor")
        found: set[str] = set()
        for ref in refs:
            try:
                found.add(self.subject_id(reader, ref))
            except NotFound:
                continue
        rid = str(uuid.uuid4())
        row: dict[str, Any] = {
            "request_id": rid, "agent_id": agent, "token_id": caller.credential_id,
            "tenant": caller.tenant, "agent_request_id": doc.get("agent-request-id"),
            "exercise": doc["exercise"], "received_at": clock.format_instant(at),
            "signature_digest": seen}
        if len(found) != 1:
            details = ("the identity names no person this business knows: send the "
                       "person's identifier (schema.org/Person identifier) as the business "
                       "knows it" if not found else
                       "the identity names more than one person; nothing was done")
            row.update(state="denied", reason="no_match", details=details)
            self._drp().add(row)
            log.info("drp.denied", request_id=rid, agent=agent, reason="no_match",
                     matched=len(found))
            return self.drp_status(caller, rid, at)
        sid = found.pop()
        if doc["exercise"] == "access":
            row.update(state="access", subject_id=sid)
            self._drp().add(row)
            log.info("drp.access", request_id=rid, agent=agent)
            return self.drp_status(caller, rid, at)
        claims = [doc[k] for k in ("name", "email", "phone_number") if doc.get(k)]
        regime = doc.get("regime")
        filed = self.file_request(self._as(caller, "assistant"), ErasureRequestIn(
            subject=sid, reason=f"Data Rights Protocol deletion request from agent {agent}",
            legal_basis="CCPA (DRP regime ccpa)" if regime == "ccpa"
            else "voluntary (DRP request without a regime)",
            identifiers=claims))
        row.update(state="filed", subject_id=sid, erasure_request_id=filed.request_id)
        try:
            self._drp().add(row)
        except Exception:  # the filed request must not stay without its DRP record
            log.error("drp.record_failed", erasure_request_id=filed.request_id)
            self.reject_request(self._as(caller, "operator"), filed.request_id,
                                RequestRejectIn(code="other", reason="the Data Rights "
                                                "Protocol record could not be written"))
            raise
        log.info("drp.filed", request_id=rid, agent=agent,
                 erasure_request_id=filed.request_id)
        return self.drp_status(caller, rid, at)

    def drp_status(self, caller: Caller, request_id: str, now: datetime | None = None
                   ) -> dict[str, Any]:
        """GET /v1/data-rights-request/{id}: the Exercise Status (section 3.03)."""
        row = self._row(caller, request_id)
        at = now or clock.now()
        status = None
        if row["erasure_request_id"] is not None:
            status = self.request_status(self._as(caller, "auditor"),
                                         row["erasure_request_id"], at).model_dump()
        out: dict[str, Any] = {"request_id": row["request_id"]}
        if row["agent_request_id"] is not None:
            out["agent_request_id"] = row["agent_request_id"]
        out["received_at"] = row["received_at"]
        out.update(drp_state(row, status))
        if out["status"] == "in_progress":
            assert status is not None
            out["expected_by"] = status["complete_due"]
        if out["status"] == "fulfilled":
            done = row["received_at"] if status is None else status["completed_at"]
            out["results_url"] = f"{API_BASE}/v1/data-rights-request/{row['request_id']}/results"
            out["expires_at"] = clock.format_instant(
                clock.parse_instant(done) + timedelta(days=RESULTS_DAYS))
            if status is not None:
                digest = row["pack_digest"] or self._drp_pack(caller, row, status)
                out["processing_details"] = (
                    f"erased; Evidence Pack sha256:{digest} (the SHA-256 of its in-toto "
                    "statement), at results_url")
        return out

    def _drp_pack(self, caller: Caller, row: Mapping[str, Any],
                  status: Mapping[str, Any]) -> str:
        """Build the Evidence Pack of a completed request's batch once, keep it for the
        agent, and return its digest (ADR 0048's: the SHA-256 of its in-toto statement)."""
        from governance.certificate import pack_digest
        from governance.pack_verify import read_pack_zip

        with tempfile.TemporaryDirectory(prefix="ledger-drp-pack-") as tmp:
            written = self.write_pack(self._as(caller, "auditor"), str(status["batch_id"]),
                                      Path(tmp) / "pack", make_zip=True)
            content = Path(str(written.zip)).read_bytes()
        digest = pack_digest(read_pack_zip(content))
        self._drp().keep_pack(row["request_id"], digest, content)
        log.info("drp.pack_kept", request_id=row["request_id"], digest=digest)
        return digest

    def drp_revoke(self, caller: Caller, home: Path, request_id: str, body: bytes
                   ) -> dict[str, Any]:
        """DELETE /v1/data-rights-request/{id}: revoke a request no erasure has started for
        (the erasure request rejected: withdrawn, "revoked by the requester"); refused
        (409, nothing written) once its erasure started or the request is final."""
        agent = self._agent(caller)
        directory = Directory.load(home)
        entry = directory.agents.get(agent)
        if entry is None:
            raise DrpRefused(403, f"agent {agent} is not in this ledger's directory",
                             fatal=True)
        _, message = open_message(body, entry["verify_key"])
        row = self._row(caller, request_id)
        check_revoke(message)  # the agent's reason is the person's words: not kept
        if row["state"] == "revoked":
            return self.drp_status(caller, request_id)
        if row["state"] != "filed":
            raise DrpRefused(409, "this request is final; it cannot be revoked")
        try:
            self.reject_request(self._as(caller, "operator"), row["erasure_request_id"],
                                RequestRejectIn(code="withdrawn", reason=REVOKED_REASON))
        except ConflictError as e:
            raise DrpRefused(409, "the erasure of this request has started or is done; it "
                                  "cannot be revoked") from e
        self._drp().mark_revoked(request_id)
        log.info("drp.revoked", request_id=request_id, agent=agent)
        return self.drp_status(caller, request_id)

    def drp_results(self, caller: Caller, request_id: str,
                    now: datetime | None = None) -> tuple[str, bytes]:
        """The results of a fulfilled request (media type, bytes): the Evidence Pack of a
        deletion (the one its status names), the Konshus export of an access request."""
        status = self.drp_status(caller, request_id, now)
        if status["status"] != "fulfilled":
            raise DrpRefused(404, f"this request is {status['status']}; results come once it "
                                  "is fulfilled")
        if (now or clock.now()) >= clock.parse_instant(status["expires_at"]):
            raise DrpRefused(404, "the results of this request have expired")
        row = self._row(caller, request_id)
        if row["state"] == "access":
            out = self.export(self._as(caller, "auditor"), row["subject_id"], "konshus")
            return out.media_type, out.content
        return "application/zip", bytes(row["pack_zip"])

    def drp_close(self) -> None:
        if self._drp_store is not None:
            self._drp_store.close()
            self._drp_store = None


def _is_uuid(value: str) -> bool:
    try:
        return str(uuid.UUID(value)) == value
    except ValueError:
        return False
