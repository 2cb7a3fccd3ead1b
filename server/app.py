"""`ledger serve`: one ASGI app with the HTTP API (`/v1`), the MCP server (`/mcp`) and the
console (`/console`) over the typed facade (ADR 0030).

The surfaces parse, authenticate, call the facade through :class:`server.backend.Backend`
and render; the caller's scope comes from its credential, never from an id in the
request. Every request is bounded: its body (``max_body``), its headers (uvicorn's
h11 limit), its time (``request_timeout``; a write already queued still finishes and is
logged: it is the answer that is cut, never the command).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import structlog
from fastapi import Body, Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from fastapi.routing import APIRoute
from pydantic import TypeAdapter
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ledger.errors import LedgerError
from ledger.tracing import span
from server import problems
from server.auth_context import CALLER
from server.backend import Backend
from server.drp import install_drp
from server.metrics import add_route as add_metrics_route
from server.metrics import enabled as metrics_on
from server.telemetry import memory_span, observe
from service.caller import Caller
from service.models import (
    MAX_PAGE,
    PAGE,
    ArtifactDeletionIn,
    ArtifactIn,
    ArtifactOut,
    AtomAdded,
    AtomCorrectionIn,
    AtomIn,
    AtomOut,
    AtomsAdded,
    CheckpointOut,
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
    ImportIn,
    ImportReport,
    MemoryRow,
    Problem,
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

log = structlog.get_logger("ledger.server")
Authenticate = Callable[[str | None], Caller]

API_VERSION = "1.0.0"
ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": Problem, "content": {problems.PROBLEM_JSON: {}},
           "description": problems.TITLES[code]}
    for code in (400, 401, 403, 404, 409, 413, 422, 503)}


@dataclass(frozen=True)
class Settings:
    home: Path
    max_body: int = 1024 * 1024  # JSON requests
    max_import: int = 32 * 1024 * 1024  # POST /v1/imports
    request_timeout: float = 30.0
    long_timeout: float = 600.0  # erasure execution, evidence packs, verification
    max_queue: int = 1024
    max_headers: int = 16 * 1024  # the request line's target and every header, in bytes
    resource_metadata: dict[str, Any] | None = None  # RFC 9728, OAuth mode
    writer_process: bool = True  # atom adds committed by a writer process (ADR 0062)


LONG_PATHS = ("/execute", "/evidence-pack", "/verification", "/imports", "/console/audit",
              "/drp/")  # a DRP status may build the Evidence Pack, results an export


class Limits:
    """Pure ASGI middleware: body size and request time, before any route runs; the caller
    (bearer token) for the whole request, so mounted apps (MCP, console) see it too."""

    def __init__(self, app: ASGIApp, settings: Settings, authenticate: Authenticate) -> None:
        self.app = app
        self.settings = settings
        self.authenticate = authenticate
        self.cached: Callable[[str | None], Caller | None] | None = getattr(
            authenticate, "cached", None)
        self.fast = FastAdds.of(app)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope.get("path", "")
        if _header_bytes(scope) > self.settings.max_headers:
            # uvicorn's h11 limit holds only while a header block is incomplete: one that
            # arrives whole in a single read passes it, so the bound is kept here too
            await _send(problems.problem(431, "the request's headers are larger than "
                                              f"{self.settings.max_headers} bytes",
                                         slug="headers-too-large",
                                         hint="send fewer or shorter headers"),
                        scope, receive, send)
            return
        limit = self.settings.max_import if path.startswith("/v1/imports") \
            else self.settings.max_body
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            await _send(problems.problem(413, f"the request body is larger than {limit} "
                                              "bytes", slug="too-large"), scope, receive, send)
            return
        received = 0

        async def bounded_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise _TooLarge()
            return message

        token = None
        who: Caller | None = None
        if path.startswith("/v1/") or path.startswith("/mcp") or path == "/metrics":
            if not _public(path):
                try:
                    auth = headers.get(b"authorization")
                    header = auth.decode("latin-1") if auth else None
                    # a token's first check in a process is an argon2id hash (ADR 0028):
                    # off the event loop; a token checked moments ago is a dict lookup
                    caller = self.cached(header) if self.cached is not None else None
                    if caller is None:
                        caller = await run_in_threadpool(self.authenticate, header)
                except LedgerError as e:
                    log.info("request.refused", path=path, reason=type(e).__name__)
                    await _send(problems.from_error(e), scope, receive, send)
                    return
                token = CALLER.set(caller)
                scope.setdefault("state", {})["caller"] = who = caller
        timeout = self.settings.long_timeout if any(p in path for p in LONG_PATHS) \
            or path.startswith("/mcp") else self.settings.request_timeout
        started = time.perf_counter()
        try:
            async with asyncio.timeout(timeout):  # no task per request, unlike wait_for
                rest: Receive | None = bounded_receive
                if who is not None and self.fast is not None \
                        and scope.get("method") == "POST" and path in self.fast.routes \
                        and headers.get(b"content-type", b"").startswith(b"application/json"):
                    rest = await self.fast(scope, bounded_receive, send, who)
                if rest is not None:
                    await self.app(scope, rest, send)
        except _TooLarge:
            await _send(problems.problem(413, f"the request body is larger than {limit} bytes",
                                         slug="too-large"), scope, receive, send)
        except TimeoutError:
            log.warning("request.timeout", path=path, seconds=timeout)
            await _send(problems.problem(504, f"the request took longer than {timeout:.0f} s; "
                                              "a write it queued still completes",
                                         slug="timeout"), scope, receive, send)
        finally:
            if token is not None:
                CALLER.reset(token)
            log.debug("request.done", path=path,
                      ms=round((time.perf_counter() - started) * 1000, 2))


class _TooLarge(Exception):
    pass


_ATOM_LIST: TypeAdapter[list[AtomIn]] = TypeAdapter(list[AtomIn])
MAX_BATCH = 1000  # atoms in one POST /v1/atoms/batch


class FastAdds:
    """POST /v1/atoms and POST /v1/atoms/batch on their usual path (ADR 0062): the body
    read and validated once (pydantic, from the JSON bytes), the add sent to the writer,
    and its answer sent as the writer encoded it, without the framework's per-request
    dependency solving, re-validation and re-encoding. Anything off that path (a body
    that does not validate, another content type, a disconnect) is handed to the route,
    with the body read so far replayed, so every refusal is the route's, word for word."""

    def __init__(self, backend: Backend, routes: dict[str, Any]) -> None:
        self.backend = backend
        self.routes = routes  # path -> its APIRoute (the telemetry's route label)

    @classmethod
    def of(cls, app: ASGIApp) -> FastAdds | None:
        backend = getattr(getattr(app, "state", None), "backend", None)
        if not isinstance(backend, Backend):
            return None
        routes = {r.path: r for r in getattr(app, "routes", ())
                  if isinstance(r, APIRoute) and "POST" in (r.methods or ())
                  and r.path in ("/v1/atoms", "/v1/atoms/batch")}
        return cls(backend, routes) if len(routes) == 2 else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send, caller: Caller
                       ) -> Receive | None:
        """None once it answered; else the receive the route reads the body from."""
        single = scope["path"] == "/v1/atoms"
        writer = self.backend.writer
        counted = single  # in the writer's arriving until the add is queued
        if counted:
            writer.arriving += 1  # the writer's group waits a little for it (LINGER)
        try:
            chunks: list[bytes] = []
            while True:
                message = await receive()
                if message["type"] != "http.request":
                    return _replay(b"".join(chunks), receive, message)
                chunks.append(message.get("body", b""))
                if not message.get("more_body", False):
                    break
            body = b"".join(chunks)
            try:
                if single:
                    item = AtomIn.model_validate_json(body)
                else:
                    items = _ATOM_LIST.validate_json(body)
                    if not 1 <= len(items) <= MAX_BATCH:
                        return _replay(body, receive)
            except ValueError:  # the route answers it, in the API's 422 form
                return _replay(body, receive)
            scope["route"] = self.routes[scope["path"]]
            status = 201
            answer: Response | None = None
            try:
                if single:
                    counted = False  # add_atom_encoded takes it out once it is queued
                    added = await self.backend.add_atom_encoded(caller, item, arriving=True)
                    encoded = added.json
                    if added.outcome == "rehearsed":
                        status = 200
                else:
                    encoded = await self.backend.add_atoms_encoded(caller, items)
            except LedgerError as e:
                answer = add_refused(e)
            except Exception as e:
                answer = unexpected_error(e)
        finally:
            if counted:
                writer.arriving -= 1
        if answer is not None:
            await answer(scope, receive, send)
            return None
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(encoded)).encode())]})
        await send({"type": "http.response.body", "body": encoded})
        return None


def _replay(body: bytes, receive: Receive, pending: Message | None = None) -> Receive:
    """A receive that gives ``body`` (and ``pending``, a message read after it) first."""
    queued: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]
    if pending is not None:
        queued.append(pending)

    async def replayed() -> Message:
        return queued.pop(0) if queued else await receive()
    return replayed


def add_refused(e: LedgerError) -> Response:
    """An atom add's refusal: a similar memory under on_similar refuse is a 409 that names
    them (ADR 0052); any other error as the error table says."""
    from service.memory_cases import SimilarMemoryExists

    if isinstance(e, SimilarMemoryExists):
        return problems.problem(409, str(e), slug="similar-memory", hint=e.hint,
                                similar=e.as_json())
    return problems.from_error(e)


def unexpected_error(e: Exception) -> Response:
    # the class only: an exception's text could quote what a request carried
    log.error("request.failed", error=type(e).__name__)
    return problems.problem(500, "the server failed to answer this request; nothing "
                                 "half-written is kept (commands are atomic)",
                            slug="internal")


def _header_bytes(scope: Scope) -> int:
    """The size of the request's header block as sent: target, names, values, separators."""
    size = len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"")
    for name, value in scope.get("headers") or ():
        size += len(name) + len(value) + 4  # ": " and CRLF
    return int(size)


def _public(path: str) -> bool:
    return path in ("/v1/health", "/v1/openapi.json")


async def _send(response: Response, scope: Scope, receive: Receive, send: Send) -> None:
    with contextlib.suppress(RuntimeError):  # a response already started: nothing to add
        await response(scope, receive, send)


async def caller(request: Request) -> Caller:  # async: no threadpool hop per request
    found = request.scope.get("state", {}).get("caller")
    if not isinstance(found, Caller):
        from credentials.auth import AuthError

        raise AuthError("no credential")
    return found


CallerDep = Annotated[Caller, Depends(caller)]


async def backend_of(request: Request) -> Backend:
    b: Backend = request.app.state.backend
    return b


BackendDep = Annotated[Backend, Depends(backend_of)]


def create_app(settings: Settings, authenticate: Authenticate,
               mounts: Callable[[FastAPI, Backend], Awaitable[None] | None] | None = None
               ) -> ASGIApp:
    """The server's ASGI app. ``mounts`` adds the MCP server and the console."""
    api = build_api(settings)
    if mounts is not None:
        mounts(api, api.state.backend)
    return observe(Limits(api, settings, authenticate), metrics_on())


def build_api(settings: Settings) -> FastAPI:
    """The FastAPI app of the HTTP API (routes, errors, OpenAPI), without the middleware
    that bounds and authenticates requests (:func:`create_app` adds it)."""
    backend = Backend(settings.home, max_queue=settings.max_queue,
                      writer_process=settings.writer_process)
    lifespans: list[Callable[[], contextlib.AbstractAsyncContextManager[None]]] = []

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        await asyncio.to_thread(backend.start)
        async with contextlib.AsyncExitStack() as stack:
            for make in lifespans:
                await stack.enter_async_context(make())
            log.info("server.started")
            try:
                yield
            finally:
                log.info("server.stopping")
        await asyncio.to_thread(backend.close)
        log.info("server.stopped", write_groups=backend.writer.groups,
                 grouped_adds=backend.writer.grouped_items)

    api = FastAPI(title="memory-ledger", version=API_VERSION, lifespan=lifespan,
                  openapi_url="/v1/openapi.json", docs_url=None, redoc_url=None,
                  description="Signed, event-sourced memory for AI assistants, with proofs of "
                              "erasure. Every request needs `Authorization: Bearer TOKEN`; "
                              "the caller's scope comes from its credential.",
                  responses=ERRORS)
    api.state.backend = backend
    api.state.lifespans = lifespans
    from server.webhook_sender import webhook_lifespan

    lifespans.append(webhook_lifespan(settings.home))  # signed webhooks (ADR 0055)

    @api.exception_handler(LedgerError)
    async def ledger_error(_request: Request, e: LedgerError) -> Response:
        return problems.from_error(e)

    @api.exception_handler(StarletteHTTPException)
    async def http_error(_request: Request, e: StarletteHTTPException) -> Response:
        # the framework's own refusals (a body that is not JSON, an unknown path or
        # method) in the same problem format as everything else
        detail = e.detail if isinstance(e.detail, str) else problems.TITLES.get(
            e.status_code, "error")
        if e.status_code == 400 and "parsing the body" in detail:
            detail = "the request body is not valid JSON"
        return problems.problem(e.status_code, detail, headers=dict(e.headers or {}))

    @api.exception_handler(Exception)
    async def unexpected(_request: Request, e: Exception) -> Response:
        return unexpected_error(e)

    @api.exception_handler(RequestValidationError)
    async def invalid(_request: Request, e: RequestValidationError) -> Response:
        errors = [{"field": ".".join(str(p) for p in err.get("loc", ())[1:]) or "body",
                   "problem": err.get("msg", "invalid")} for err in e.errors()]
        first = errors[0] if errors else {"field": "body", "problem": "invalid"}
        return problems.problem(422, f"{first['field']}: {first['problem']}",
                                slug="invalid-request", errors=errors)

    _routes(api)
    install_drp(api, settings.home)  # the Data Rights Protocol, /drp (ADR 0056)
    if metrics_on():  # GET /metrics, outside the OpenAPI document (ADR 0054)
        add_metrics_route(api, backend)
    if settings.resource_metadata is not None:
        meta = settings.resource_metadata

        @api.get("/.well-known/oauth-protected-resource", include_in_schema=False)
        async def resource_metadata() -> JSONResponse:
            return JSONResponse(meta)

    def openapi() -> dict[str, Any]:
        if api.openapi_schema is None:
            from fastapi.openapi.utils import get_openapi

            schema = get_openapi(title=api.title, version=api.version,
                                 description=api.description, routes=api.routes)
            schema.setdefault("components", {})["securitySchemes"] = {
                "bearer": {"type": "http", "scheme": "bearer",
                           "description": "A token from `ledger tokens create`, or an "
                                          "OAuth 2.1 access token (`ledger serve --jwks`)."}}
            schema["security"] = [{"bearer": []}]
            api.openapi_schema = schema
        return api.openapi_schema

    api.openapi = openapi  # type: ignore[method-assign]
    return api


def _routes(api: FastAPI) -> None:
    @api.get("/v1/health", tags=["service"], openapi_extra={"security": []})
    async def health() -> dict[str, str]:
        """Whether the server answers: `{"status": "ok"}`. Needs no credential."""
        return {"status": "ok"}

    # ------------------------------------------------------------------ subjects
    @api.post("/v1/subjects", status_code=201, tags=["subjects"])
    async def register_subject(body: SubjectIn, c: CallerDep, b: BackendDep) -> SubjectOut:
        return await b.write(lambda s: s.register_subject(c, body))

    @api.get("/v1/subjects/{subject}", tags=["subjects"])
    async def show_subject(subject: str, c: CallerDep, b: BackendDep) -> SubjectOut:
        return await b.read(lambda s: s.get_subject(c, subject))

    @api.get("/v1/subjects/{subject}/state", tags=["memories"])
    async def state(subject: str, c: CallerDep, b: BackendDep,
                    as_of: str | None = None, valid_at: str | None = None) -> dict[str, Any]:
        return await b.read(lambda s: s.state(c, subject, as_of, valid_at))

    @api.get("/v1/subjects/{subject}/export", tags=["portability"],
             responses={200: {"content": {"application/json": {}, "application/zip": {}},
                              "description": "The export document, or the .mem bundle "
                                             "zipped."}})
    async def export(subject: str, c: CallerDep, b: BackendDep,
                     format: ExportFormat = "konshus",
                     include_private: bool = False) -> Response:
        out = await b.read(lambda s: s.export(c, subject, format, include_private))
        return Response(out.content, media_type=out.media_type, headers={
            "Content-Disposition": f'attachment; filename="{out.filename}"'})

    # ------------------------------------------------------------------ artifacts
    @api.post("/v1/artifacts", status_code=201, tags=["artifacts"])
    async def capture_artifact(body: ArtifactIn, c: CallerDep, b: BackendDep) -> ArtifactOut:
        return await b.write(lambda s: s.capture_artifact(c, body))

    @api.get("/v1/artifacts/{artifact}", tags=["artifacts"])
    async def show_artifact(artifact: str, c: CallerDep, b: BackendDep) -> ArtifactOut:
        return await b.read(lambda s: s.get_artifact(c, artifact))

    @api.post("/v1/artifacts/{artifact}/deletions", tags=["artifacts"])
    async def delete_artifact(artifact: str, body: ArtifactDeletionIn, c: CallerDep,
                              b: BackendDep) -> ErasureOutcome:
        """Delete an artifact; atoms citing it are re-evaluated (Konshus cascade)."""
        return await b.write(lambda s: s.delete_artifact(c, artifact, body.reason,
                                                         body.flag_unsourced))

    @api.delete("/v1/artifacts/{artifact}", tags=["artifacts"], deprecated=True)
    async def delete_artifact_by_query(
            artifact: str, c: CallerDep, b: BackendDep,
            reason: Annotated[str, Query(min_length=1, max_length=1000)],
            flag_unsourced: bool = False) -> ErasureOutcome:
        """Deprecated: the reason travels in the URL. Use POST
        /v1/artifacts/{artifact}/deletions, which takes it in the body (ADR 0043)."""
        return await b.write(lambda s: s.delete_artifact(c, artifact, reason, flag_unsourced))

    # ------------------------------------------------------------------ atoms
    @api.post("/v1/atoms", status_code=201, tags=["atoms"], response_model=AtomAdded,
              responses={200: {"description": "on_similar rehearse: the most similar "
                                              "memory was rehearsed, no atom was added"},
                         409: {"description": "on_similar refuse: the subject has memories "
                                              "that say the same (problem+json: `similar`)"}})
    async def add_atom(body: AtomIn, c: CallerDep, b: BackendDep, response: Response
                       ) -> AtomAdded | Response:
        """Add one atom. The subject's memories that say the same thing come back in
        `similar`; `on_similar` decides what the add does about them (ADR 0052)."""
        from service.memory_cases import SimilarMemoryExists

        try:
            added = await b.add_atom(c, body)
        except SimilarMemoryExists as e:
            return add_refused(e)
        if added.outcome == "rehearsed":
            response.status_code = 200
        return added

    @api.post("/v1/atoms/batch", status_code=201, tags=["atoms"])
    async def add_atoms(body: Annotated[list[AtomIn], Body(min_length=1, max_length=1000)],
                        c: CallerDep, b: BackendDep) -> AtomsAdded:
        return await b.add_atoms(c, body)

    @api.get("/v1/atoms/{atom}", tags=["atoms"])
    async def show_atom(atom: str, c: CallerDep, b: BackendDep) -> AtomOut:
        return await b.read(lambda s: s.get_atom(c, atom))

    @api.get("/v1/atoms/{atom}/history", tags=["atoms"])
    async def atom_history(atom: str, c: CallerDep, b: BackendDep) -> list[HistoryEntry]:
        return await b.read(lambda s: s.history(c, atom))

    @api.post("/v1/atoms/{atom}/corrections", status_code=201, tags=["atoms"])
    async def correct_atom(atom: str, body: AtomCorrectionIn, c: CallerDep,
                           b: BackendDep) -> Corrected:
        with memory_span("update_memory", c, **{"gen_ai.memory.id": atom}):
            return await b.write(lambda s: s.correct_atom(c, atom, body))

    @api.post("/v1/atoms/{atom}/redactions", tags=["atoms"])
    async def redact_atom(atom: str, body: RedactIn, c: CallerDep,
                          b: BackendDep) -> ErasureOutcome:
        return await b.write(lambda s: s.redact_atom(c, atom, body))

    @api.post("/v1/atoms/{atom}/deletions", tags=["atoms"])
    async def delete_atom(atom: str, body: DeletionIn, c: CallerDep,
                          b: BackendDep) -> ErasureOutcome:
        """Delete an atom for good: key destroyed, every route purged and probed, a signed
        tombstone left."""
        with memory_span("delete_memory", c, **{"gen_ai.memory.id": atom}):
            return await b.write(lambda s: s.delete_atom(c, atom, body.reason))

    @api.delete("/v1/atoms/{atom}", tags=["atoms"], deprecated=True)
    async def delete_atom_by_query(atom: str, c: CallerDep, b: BackendDep,
                                   reason: Annotated[str, Query(min_length=1, max_length=1000)]
                                   ) -> ErasureOutcome:
        """Deprecated: the reason travels in the URL. Use POST /v1/atoms/{atom}/deletions,
        which takes it in the body (ADR 0043)."""
        with memory_span("delete_memory", c, **{"gen_ai.memory.id": atom}):
            return await b.write(lambda s: s.delete_atom(c, atom, reason))

    @api.post("/v1/rehearsals", status_code=201, tags=["atoms"])
    async def rehearse(body: RehearseIn, c: CallerDep, b: BackendDep) -> EventIds:
        return await b.write(lambda s: s.rehearse(c, body.atom_ids, body.session_id))

    # ------------------------------------------------------------------ recall and reads
    @api.post("/v1/recall", tags=["memories"])
    async def recall(body: RecallIn, c: CallerDep, b: BackendDep) -> RecallOut:
        found = await b.recall(c, body)
        return found

    @api.get("/v1/memories", tags=["memories"])
    async def list_memories(request: Request, response: Response, c: CallerDep,
                            b: BackendDep, subject: str | None = None,
                            privacy_class: str | None = None,
                            min_salience: Annotated[float | None, Query(ge=0, le=1)] = None,
                            limit: Annotated[int, Query(
                                ge=1, le=MAX_PAGE,
                                description="At most this many rows; the `Link` header "
                                            "(rel=next) names the next page.")] = PAGE,
                            after: Annotated[str | None, Query(
                                max_length=200,
                                description="The atom_id of the previous page's last "
                                            "row.")] = None,
                            ) -> list[MemoryRow]:
        rows = await b.read(lambda s: s.list_memories(
            c, subject, privacy_class, min_salience, limit=limit + 1, after=after))
        if len(rows) > limit:
            rows = rows[:limit]
            following = request.url.include_query_params(after=rows[-1].atom_id)
            response.headers["Link"] = f'<{following.path}?{following.query}>; rel="next"'
        return rows

    @api.get("/v1/memories/{atom}", tags=["memories"])
    async def inspect_memory(atom: str, c: CallerDep, b: BackendDep) -> dict[str, Any]:
        return await b.read(lambda s: s.inspect_memory(c, atom))

    # ------------------------------------------------------------------ import
    @api.post("/v1/imports", tags=["portability"],
              openapi_extra={"requestBody": {"required": True, "content": {
                  "application/json": {"schema": {"type": "object"}},
                  "application/zip": {"schema": {"type": "string", "format": "binary"}},
                  "text/plain": {"schema": {"type": "string"}}}}})
    async def import_document(request: Request, c: CallerDep, b: BackendDep,
                              format: ImportFormat,
                              subject: str | None = None, dry_run: bool = False,
                              skip_unsupported: bool = False) -> ImportReport:
        content = await request.body()
        options = ImportIn(format=format, subject=subject, dry_run=dry_run,
                           skip_unsupported=skip_unsupported)
        run = b.read if dry_run else b.write
        return await run(lambda s: s.import_document(c, content, options))

    # ------------------------------------------------------------------ erasure requests
    @api.post("/v1/requests", status_code=201, tags=["erasure"])
    async def file_request(body: ErasureRequestIn, c: CallerDep,
                           b: BackendDep) -> RequestStatus:
        return await b.write(lambda s: s.file_request(c, body))

    @api.get("/v1/requests", tags=["erasure"])
    async def list_requests(c: CallerDep, b: BackendDep,
                            status: Literal["open", "overdue", "partial", "completed",
                                            "completed-late", "rejected"] | None = None
                            ) -> list[RequestStatus]:
        return await b.read(lambda s: s.list_requests(c, status))

    @api.get("/v1/requests/{request_id}", tags=["erasure"])
    async def request_status(request_id: str, c: CallerDep, b: BackendDep) -> RequestStatus:
        return await b.read(lambda s: s.request_status(c, request_id))

    @api.get("/v1/requests/{request_id}/plan", tags=["erasure"])
    async def request_plan(request_id: str, c: CallerDep, b: BackendDep) -> ErasurePlanOut:
        return await b.read(lambda s: s.plan_request(c, request_id))

    @api.post("/v1/requests/{request_id}/execute", tags=["erasure"])
    async def execute_request(request_id: str, body: ExecuteIn, c: CallerDep,
                              b: BackendDep) -> ErasureOutcome:
        with memory_span("delete_memory", c):  # the whole subject's memory (scope user)
            return await b.write(lambda s: s.execute_request(c, request_id,
                                                             body.plan_digest))

    @api.post("/v1/requests/{request_id}/reject", tags=["erasure"])
    async def reject_request(request_id: str, body: RequestRejectIn, c: CallerDep,
                             b: BackendDep) -> RequestStatus:
        return await b.write(lambda s: s.reject_request(c, request_id, body))

    @api.post("/v1/batches/{batch_id}/evidence-pack", tags=["erasure"],
              responses={200: {"content": {"application/zip": {}},
                               "description": "The Evidence Pack, zipped."}})
    async def evidence_pack(batch_id: str, c: CallerDep, b: BackendDep) -> Response:
        with span("erasure.pack", {"ledger.erasure.batch_id": batch_id}):
            pack = await b.write(lambda s: s.build_pack(c, batch_id))
        return Response(pack.content, media_type="application/zip", headers={
            "Content-Disposition": f'attachment; filename="{pack.filename}"'})

    # ------------------------------------------------------------------ integrity
    @api.get("/v1/checkpoint", tags=["integrity"], response_class=PlainTextResponse,
             responses={200: {"content": {"text/plain": {}},
                              "description": "The latest signed checkpoint (C2SP note)."}})
    async def checkpoint(c: CallerDep, b: BackendDep) -> PlainTextResponse:
        cp: CheckpointOut = await b.read(lambda s: s.checkpoint(c))
        return PlainTextResponse(cp.note)

    @api.get("/v1/verification", tags=["integrity"])
    async def verification(c: CallerDep, b: BackendDep) -> VerificationOut:
        return await b.read(lambda s: s.verification(c))

    @api.get("/v1/keys", tags=["integrity"])
    async def roster(c: CallerDep, b: BackendDep) -> list[RosterEntry]:
        return await b.read(lambda s: s.roster(c))
