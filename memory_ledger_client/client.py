"""The sync and the async client of the HTTP API (ADR 0057).

Both speak the API through httpx with a bearer token, send and return the pydantic models
the server publishes in its OpenAPI document (``service/models.py``), raise the typed
exceptions of :mod:`memory_ledger_client.errors` for problem answers, walk paginated
listings as iterators, and retry a call that may be sent twice when the server answers
429 or 503, after the ``Retry-After`` it gives (:class:`RetryPolicy`). Nothing they send
or receive is logged.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from types import TracebackType
from typing import Any, Literal, TypeVar

import httpx

from memory_ledger_client import _endpoints as ep
from memory_ledger_client._calls import Call, RetryPolicy, next_link, raise_for
from memory_ledger_client._endpoints import RequestState
from memory_ledger_client.errors import ApiError, Unreachable
from service.models import (
    ArtifactDeletionIn,
    ArtifactIn,
    ArtifactOut,
    AtomAdded,
    AtomCorrectionIn,
    AtomIn,
    AtomKind,
    AtomOut,
    AtomsAdded,
    Corrected,
    DeletionIn,
    ErasureOutcome,
    ErasurePlanOut,
    ErasureRequestIn,
    EventIds,
    ExecuteIn,
    ExportFormat,
    HistoryEntry,
    ImportFormat,
    ImportReport,
    MemoryRow,
    RecallIn,
    RecallOut,
    RedactIn,
    RedactMode,
    RehearseIn,
    RequestRejectIn,
    RequestStatus,
    RosterEntry,
    SubjectIn,
    SubjectOut,
    VerificationOut,
)

T = TypeVar("T")
RejectionCode = Literal["identity-not-verified", "manifestly-unfounded", "excessive",
                        "legal-exemption", "withdrawn", "duplicate", "other"]
_S = TypeVar("_S", bound="Client")
_A = TypeVar("_A", bound="AsyncClient")


def _headers(token: str | None) -> dict[str, str]:
    headers = {"Accept": "application/json, application/problem+json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return headers


class Client:
    """The HTTP API of ``ledger serve``, blocking.

        with Client("http://127.0.0.1:8765", token=TOKEN) as ledger:
            ledger.remember("Prefers short answers")
            print(ledger.recall("how long should answers be").prompt)

    ``http``: an ``httpx.Client`` of your own (its base URL and headers are used as they
    are; the token is added); ``sleep``: how to wait between tries (tests pass a fake).
    """

    def __init__(self, base_url: str = "", token: str | None = None, *,
                 timeout: float = 60.0, retry: RetryPolicy | None = None,
                 http: httpx.Client | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if http is None:
            http = httpx.Client(base_url=base_url, timeout=timeout)
        http.headers.update(_headers(token))
        self.http = http
        self.retry = retry or RetryPolicy()
        self._sleep = sleep

    def __enter__(self: _S) -> _S:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self.http.close()

    def _response(self, call: Call[Any]) -> httpx.Response:
        attempt = 0
        while True:
            try:
                response = self.http.request(call.method, call.path, **call.request_args())
                raise_for(response)
                return response
            except ApiError as e:
                wait = self.retry.wait(attempt, e) \
                    if call.retryable and e.status in (429, 503) else None
                if wait is None:
                    raise
            except httpx.ConnectError as e:  # nothing was sent
                wait = self.retry.wait(attempt, None) if call.retryable else None
                if wait is None:
                    raise Unreachable(f"{self.http.base_url} does not answer: {e}") from e
            except httpx.TransportError as e:
                raise Unreachable(f"no answer from {self.http.base_url}: "
                                  f"{type(e).__name__}") from e
            self._sleep(wait)
            attempt += 1

    def _send(self, call: Call[T]) -> T:
        return call.read(self._response(call))

    def _send_page(self, call: Call[list[T]]) -> tuple[list[T], str | None]:
        response = self._response(call)
        return call.read(response), next_link(response)

    # ------------------------------------------------------------------ service
    def health(self) -> dict[str, Any]:
        """``GET /v1/health`` (no credential needed)."""
        return self._send(ep.health())

    # ------------------------------------------------------------------ subjects
    def register_subject(self, ref: str, *, display_name: str | None = None,
                         locale: str | None = None,
                         idempotency_key: str | None = None) -> SubjectOut:
        item = SubjectIn(ref=ref, display_name=display_name, locale=locale)
        return self._send(ep.register_subject(item, idempotency_key))

    def get_subject(self, subject: str) -> SubjectOut:
        return self._send(ep.get_subject(subject))

    def state(self, subject: str, *, as_of: str | None = None,
              valid_at: str | None = None) -> dict[str, Any]:
        """The subject's memories as they stood (``as_of``) or as valid at a time."""
        return self._send(ep.state(subject, as_of, valid_at))

    def export(self, subject: str, format: ExportFormat = "konshus", *,
               include_private: bool = False) -> bytes:
        """The export document (JSON) or the ``.mem`` bundle (a zip), as bytes."""
        return self._send(ep.export(subject, format, include_private))

    def import_document(self, content: bytes, format: ImportFormat, *,
                        subject: str | None = None, dry_run: bool = False,
                        skip_unsupported: bool = False,
                        idempotency_key: str | None = None) -> ImportReport:
        return self._send(ep.import_document(content, format, subject, dry_run,
                                             skip_unsupported, idempotency_key))

    # ------------------------------------------------------------------ artifacts
    def capture_artifact(self, artifact: ArtifactIn, *,
                         idempotency_key: str | None = None) -> ArtifactOut:
        return self._send(ep.capture_artifact(artifact, idempotency_key))

    def get_artifact(self, artifact: str) -> ArtifactOut:
        return self._send(ep.get_artifact(artifact))

    def delete_artifact(self, artifact: str, reason: str, *, flag_unsourced: bool = False,
                        idempotency_key: str | None = None) -> ErasureOutcome:
        item = ArtifactDeletionIn(reason=reason, flag_unsourced=flag_unsourced)
        return self._send(ep.delete_artifact(artifact, item, idempotency_key))

    # ------------------------------------------------------------------ atoms
    def remember(self, text: str, *, subject: str | None = None, kind: AtomKind = "fact",
                 idempotency_key: str | None = None, **fields: Any) -> AtomAdded:
        """Record one memory. ``subject`` may be left out when the credential sees exactly
        one subject; ``fields`` are :class:`~service.models.AtomIn`'s other fields."""
        if subject is not None:
            fields["subject"] = subject
        item = AtomIn(text=text, kind=kind, **fields)
        return self._send(ep.add_atom(item, idempotency_key))

    def add_atom(self, atom: AtomIn, *, idempotency_key: str | None = None) -> AtomAdded:
        return self._send(ep.add_atom(atom, idempotency_key))

    def add_atoms(self, atoms: Sequence[AtomIn], *,
                  idempotency_key: str | None = None) -> AtomsAdded:
        """Atoms in one signed command: all of them, or none."""
        return self._send(ep.add_atoms(atoms, idempotency_key))

    def get_atom(self, atom: str) -> AtomOut:
        return self._send(ep.get_atom(atom))

    def history(self, atom: str) -> list[HistoryEntry]:
        return self._send(ep.history(atom))

    def correct_atom(self, atom: str, *, text: str | None = None, gist: str | None = None,
                     confidence: float | None = None, reason: str | None = None,
                     idempotency_key: str | None = None) -> Corrected:
        item = AtomCorrectionIn(**{k: v for k, v in (("text", text), ("gist", gist),
                                                     ("confidence", confidence),
                                                     ("reason", reason)) if v is not None})
        return self._send(ep.correct_atom(atom, item, idempotency_key))

    def redact_atom(self, atom: str, mode: RedactMode, reason: str, *,
                    idempotency_key: str | None = None) -> ErasureOutcome:
        return self._send(ep.redact_atom(atom, RedactIn(mode=mode, reason=reason),
                                         idempotency_key))

    def delete_atom(self, atom: str, reason: str, *,
                    idempotency_key: str | None = None) -> ErasureOutcome:
        """Delete for good: key destroyed, every route purged and probed, a tombstone."""
        return self._send(ep.delete_atom(atom, DeletionIn(reason=reason), idempotency_key))

    def rehearse(self, atom_ids: Sequence[str], *, session_id: str | None = None,
                 idempotency_key: str | None = None) -> EventIds:
        item = RehearseIn(atom_ids=list(atom_ids), session_id=session_id)
        return self._send(ep.rehearse(item, idempotency_key))

    # ------------------------------------------------------------------ recall and reads
    def recall(self, query: str, *, subject: str | None = None, k: int = 5,
               session_id: str | None = None, rehearse: bool = True,
               idempotency_key: str | None = None) -> RecallOut:
        """``result.prompt`` is the "What you remember" block. ``subject`` may be left out
        when the credential sees exactly one subject."""
        fields: dict[str, Any] = {"query": query, "k": k, "rehearse": rehearse}
        if subject is not None:
            fields["subject"] = subject
        if session_id is not None:
            fields["session_id"] = session_id
        return self._send(ep.recall(RecallIn(**fields), idempotency_key))

    def memories(self, subject: str | None = None, *, privacy_class: str | None = None,
                 min_salience: float | None = None,
                 page_size: int | None = None) -> Iterator[MemoryRow]:
        """Every memory of the listing, fetched a page at a time (the ``Link`` header's
        rel="next"); ``page_size`` rows per request (the server's default otherwise)."""
        call = ep.memories_page(subject, privacy_class, min_salience, page_size)
        while True:
            rows, following = self._send_page(call)
            yield from rows
            if following is None:
                return
            call = ep.memories_next(following)

    def inspect_memory(self, atom: str) -> dict[str, Any]:
        return self._send(ep.inspect_memory(atom))

    # ------------------------------------------------------------------ erasure
    def file_request(self, subject: str, reason: str, *, legal_basis: str | None = None,
                     identifiers: Sequence[str] = (), sessions: Sequence[str] = (),
                     idempotency_key: str | None = None) -> RequestStatus:
        """File a right-to-be-forgotten request (an operator executes it)."""
        item = ErasureRequestIn(subject=subject, reason=reason, legal_basis=legal_basis,
                                identifiers=list(identifiers), sessions=list(sessions))
        return self._send(ep.file_request(item, idempotency_key))

    def requests(self, status: RequestState | None = None) -> list[RequestStatus]:
        return self._send(ep.list_requests(status))

    def request_status(self, request_id: str) -> RequestStatus:
        return self._send(ep.request_status(request_id))

    def plan(self, request_id: str) -> ErasurePlanOut:
        """What executing the request would erase, and the digest to approve it by."""
        return self._send(ep.plan(request_id))

    def execute(self, request_id: str, plan_digest: str) -> ErasureOutcome:
        """Execute the request as planned; :class:`Conflict` (nothing written) when the
        plan changed since ``plan_digest`` was read."""
        return self._send(ep.execute(request_id, ExecuteIn(plan_digest=plan_digest)))

    def reject_request(self, request_id: str, reason: str, *,
                       code: RejectionCode = "other",
                       idempotency_key: str | None = None) -> RequestStatus:
        item = RequestRejectIn(code=code, reason=reason)
        return self._send(ep.reject_request(request_id, item, idempotency_key))

    def evidence_pack(self, batch_id: str) -> bytes:
        """The batch's Evidence Pack, zipped (``ledger verify-pack`` checks it)."""
        return self._send(ep.evidence_pack(batch_id))

    # ------------------------------------------------------------------ integrity
    def checkpoint(self) -> str:
        """The latest signed checkpoint, a C2SP signed note."""
        return self._send(ep.checkpoint())

    def verification(self) -> VerificationOut:
        return self._send(ep.verification())

    def keys(self) -> list[RosterEntry]:
        return self._send(ep.keys())


class AsyncClient:
    """The same API as :class:`Client`, for asyncio: every method is a coroutine, and
    :meth:`memories` an async iterator.

        async with AsyncClient("http://127.0.0.1:8765", token=TOKEN) as ledger:
            found = await ledger.recall("how long should answers be")
    """

    def __init__(self, base_url: str = "", token: str | None = None, *,
                 timeout: float = 60.0, retry: RetryPolicy | None = None,
                 http: httpx.AsyncClient | None = None,
                 sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep) -> None:
        if http is None:
            http = httpx.AsyncClient(base_url=base_url, timeout=timeout)
        http.headers.update(_headers(token))
        self.http = http
        self.retry = retry or RetryPolicy()
        self._sleep = sleep

    async def __aenter__(self: _A) -> _A:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, value: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.http.aclose()

    async def _response(self, call: Call[Any]) -> httpx.Response:
        attempt = 0
        while True:
            try:
                response = await self.http.request(call.method, call.path,
                                                   **call.request_args())
                raise_for(response)
                return response
            except ApiError as e:
                wait = self.retry.wait(attempt, e) \
                    if call.retryable and e.status in (429, 503) else None
                if wait is None:
                    raise
            except httpx.ConnectError as e:  # nothing was sent
                wait = self.retry.wait(attempt, None) if call.retryable else None
                if wait is None:
                    raise Unreachable(f"{self.http.base_url} does not answer: {e}") from e
            except httpx.TransportError as e:
                raise Unreachable(f"no answer from {self.http.base_url}: "
                                  f"{type(e).__name__}") from e
            await self._sleep(wait)
            attempt += 1

    async def _send(self, call: Call[T]) -> T:
        return call.read(await self._response(call))

    async def _send_page(self, call: Call[list[T]]) -> tuple[list[T], str | None]:
        response = await self._response(call)
        return call.read(response), next_link(response)

    # ------------------------------------------------------------------ service
    async def health(self) -> dict[str, Any]:
        """``GET /v1/health`` (no credential needed)."""
        return await self._send(ep.health())

    # ------------------------------------------------------------------ subjects
    async def register_subject(self, ref: str, *, display_name: str | None = None,
                               locale: str | None = None,
                               idempotency_key: str | None = None) -> SubjectOut:
        item = SubjectIn(ref=ref, display_name=display_name, locale=locale)
        return await self._send(ep.register_subject(item, idempotency_key))

    async def get_subject(self, subject: str) -> SubjectOut:
        return await self._send(ep.get_subject(subject))

    async def state(self, subject: str, *, as_of: str | None = None,
                    valid_at: str | None = None) -> dict[str, Any]:
        """The subject's memories as they stood (``as_of``) or as valid at a time."""
        return await self._send(ep.state(subject, as_of, valid_at))

    async def export(self, subject: str, format: ExportFormat = "konshus", *,
                     include_private: bool = False) -> bytes:
        """The export document (JSON) or the ``.mem`` bundle (a zip), as bytes."""
        return await self._send(ep.export(subject, format, include_private))

    async def import_document(self, content: bytes, format: ImportFormat, *,
                              subject: str | None = None, dry_run: bool = False,
                              skip_unsupported: bool = False,
                              idempotency_key: str | None = None) -> ImportReport:
        return await self._send(ep.import_document(content, format, subject, dry_run,
                                             skip_unsupported, idempotency_key))

    # ------------------------------------------------------------------ artifacts
    async def capture_artifact(self, artifact: ArtifactIn, *,
                               idempotency_key: str | None = None) -> ArtifactOut:
        return await self._send(ep.capture_artifact(artifact, idempotency_key))

    async def get_artifact(self, artifact: str) -> ArtifactOut:
        return await self._send(ep.get_artifact(artifact))

    async def delete_artifact(self, artifact: str, reason: str, *, flag_unsourced: bool = False,
                              idempotency_key: str | None = None) -> ErasureOutcome:
        item = ArtifactDeletionIn(reason=reason, flag_unsourced=flag_unsourced)
        return await self._send(ep.delete_artifact(artifact, item, idempotency_key))

    # ------------------------------------------------------------------ atoms
    async def remember(self, text: str, *, subject: str | None = None, kind: AtomKind = "fact",
                       idempotency_key: str | None = None, **fields: Any) -> AtomAdded:
        """Record one memory. ``subject`` may be left out when the credential sees exactly
        one subject; ``fields`` are :class:`~service.models.AtomIn`'s other fields."""
        if subject is not None:
            fields["subject"] = subject
        item = AtomIn(text=text, kind=kind, **fields)
        return await self._send(ep.add_atom(item, idempotency_key))

    async def add_atom(self, atom: AtomIn, *, idempotency_key: str | None = None) -> AtomAdded:
        return await self._send(ep.add_atom(atom, idempotency_key))

    async def add_atoms(self, atoms: Sequence[AtomIn], *,
                        idempotency_key: str | None = None) -> AtomsAdded:
        """Atoms in one signed command: all of them, or none."""
        return await self._send(ep.add_atoms(atoms, idempotency_key))

    async def get_atom(self, atom: str) -> AtomOut:
        return await self._send(ep.get_atom(atom))

    async def history(self, atom: str) -> list[HistoryEntry]:
        return await self._send(ep.history(atom))

    async def correct_atom(self, atom: str, *, text: str | None = None, gist: str | None = None,
                           confidence: float | None = None, reason: str | None = None,
                           idempotency_key: str | None = None) -> Corrected:
        item = AtomCorrectionIn(**{k: v for k, v in (("text", text), ("gist", gist),
                                                     ("confidence", confidence),
                                                     ("reason", reason)) if v is not None})
        return await self._send(ep.correct_atom(atom, item, idempotency_key))

    async def redact_atom(self, atom: str, mode: RedactMode, reason: str, *,
                          idempotency_key: str | None = None) -> ErasureOutcome:
        return await self._send(ep.redact_atom(atom, RedactIn(mode=mode, reason=reason),
                                         idempotency_key))

    async def delete_atom(self, atom: str, reason: str, *,
                          idempotency_key: str | None = None) -> ErasureOutcome:
        """Delete for good: key destroyed, every route purged and probed, a tombstone."""
        return await self._send(ep.delete_atom(atom, DeletionIn(reason=reason), idempotency_key))

    async def rehearse(self, atom_ids: Sequence[str], *, session_id: str | None = None,
                       idempotency_key: str | None = None) -> EventIds:
        item = RehearseIn(atom_ids=list(atom_ids), session_id=session_id)
        return await self._send(ep.rehearse(item, idempotency_key))

    # ------------------------------------------------------------------ recall and reads
    async def recall(self, query: str, *, subject: str | None = None, k: int = 5,
                     session_id: str | None = None, rehearse: bool = True,
                     idempotency_key: str | None = None) -> RecallOut:
        """``result.prompt`` is the "What you remember" block. ``subject`` may be left out
        when the credential sees exactly one subject."""
        fields: dict[str, Any] = {"query": query, "k": k, "rehearse": rehearse}
        if subject is not None:
            fields["subject"] = subject
        if session_id is not None:
            fields["session_id"] = session_id
        return await self._send(ep.recall(RecallIn(**fields), idempotency_key))

    async def memories(self, subject: str | None = None, *, privacy_class: str | None = None,
                       min_salience: float | None = None,
                       page_size: int | None = None) -> AsyncIterator[MemoryRow]:
        """Every memory of the listing, fetched a page at a time (the ``Link`` header's
        rel="next"); ``page_size`` rows per request (the server's default otherwise)."""
        call = ep.memories_page(subject, privacy_class, min_salience, page_size)
        while True:
            rows, following = await self._send_page(call)
            for row in rows:
                yield row
            if following is None:
                return
            call = ep.memories_next(following)

    async def inspect_memory(self, atom: str) -> dict[str, Any]:
        return await self._send(ep.inspect_memory(atom))

    # ------------------------------------------------------------------ erasure
    async def file_request(self, subject: str, reason: str, *, legal_basis: str | None = None,
                           identifiers: Sequence[str] = (), sessions: Sequence[str] = (),
                           idempotency_key: str | None = None) -> RequestStatus:
        """File a right-to-be-forgotten request (an operator executes it)."""
        item = ErasureRequestIn(subject=subject, reason=reason, legal_basis=legal_basis,
                                identifiers=list(identifiers), sessions=list(sessions))
        return await self._send(ep.file_request(item, idempotency_key))

    async def requests(self, status: RequestState | None = None) -> list[RequestStatus]:
        return await self._send(ep.list_requests(status))

    async def request_status(self, request_id: str) -> RequestStatus:
        return await self._send(ep.request_status(request_id))

    async def plan(self, request_id: str) -> ErasurePlanOut:
        """What executing the request would erase, and the digest to approve it by."""
        return await self._send(ep.plan(request_id))

    async def execute(self, request_id: str, plan_digest: str) -> ErasureOutcome:
        """Execute the request as planned; :class:`Conflict` (nothing written) when the
        plan changed since ``plan_digest`` was read."""
        return await self._send(ep.execute(request_id, ExecuteIn(plan_digest=plan_digest)))

    async def reject_request(self, request_id: str, reason: str, *,
                             code: RejectionCode = "other",
                             idempotency_key: str | None = None) -> RequestStatus:
        item = RequestRejectIn(code=code, reason=reason)
        return await self._send(ep.reject_request(request_id, item, idempotency_key))

    async def evidence_pack(self, batch_id: str) -> bytes:
        """The batch's Evidence Pack, zipped (``ledger verify-pack`` checks it)."""
        return await self._send(ep.evidence_pack(batch_id))

    # ------------------------------------------------------------------ integrity
    async def checkpoint(self) -> str:
        """The latest signed checkpoint, a C2SP signed note."""
        return await self._send(ep.checkpoint())

    async def verification(self) -> VerificationOut:
        return await self._send(ep.verification())

    async def keys(self) -> list[RosterEntry]:
        return await self._send(ep.keys())
