"""The Data Rights Protocol endpoints (DRP 0.9.4, ADR 0056): what a privacy tool calls.

Under ``/drp`` (the business's ``api_base`` in the DRP directory is the server's URL
with ``/drp``), outside the OpenAPI document of ``/v1`` (the protocol is their schema:
``schemas/drp/``):

* ``POST /drp/v1/data-rights-request``: a signed exercise request (text/plain: base64 of
  the Ed25519 signature and the JSON body), answered with an Exercise Status;
* ``GET /drp/v1/data-rights-request/{id}``: its status;
* ``DELETE /drp/v1/data-rights-request/{id}``: revoke it (a signed body);
* ``GET /drp/v1/data-rights-request/{id}/results``: the results a fulfilled status points
  to (the Evidence Pack of a deletion, the export of an access request);
* ``GET /drp/v1/agent/{agent-id}``: the agent information endpoint (``{}``);
* ``GET /.well-known/data-rights.json``: the business's directory entry (public).

Every call but the last needs a ``privacy-agent`` bearer token (``ledger tokens create
AGENT_ID --role privacy-agent``); every other token is refused here, and a privacy-agent
token is refused everywhere else (credentials/tokens.py). Errors are DRP's (section 3.06):
``{"code": "403", "message": ..., "fatal": ...}``; a refused call writes nothing.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import structlog
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from credentials.auth import AuthError
from ledger.errors import ConflictError, LedgerError
from server import problems
from server.backend import Backend
from service.caller import Caller
from service.drp import API_BASE, Directory, DrpRefused

log = structlog.get_logger("ledger.server")

REQUESTS = f"{API_BASE}/v1/data-rights-request"


def error(status: int, message: str, fatal: bool | None = None,
          headers: dict[str, str] | None = None) -> JSONResponse:
    """A DRP error body (section 3.06)."""
    body: dict[str, Any] = {"code": str(status), "message": message}
    if fatal is not None:
        body["fatal"] = fatal
    return JSONResponse(body, status_code=status, headers=headers)


def _error_of(e: LedgerError) -> JSONResponse:
    if isinstance(e, DrpRefused):
        return error(e.status, str(e), e.fatal)
    if isinstance(e, AuthError):
        return error(e.status, str(e), headers={"WWW-Authenticate": "Bearer"}
                     if e.status == 401 else None)
    if isinstance(e, ConflictError):  # one open erasure request per person
        return error(409, "a request to erase this person's data is already open; follow "
                          "the status of that request", fatal=False)
    status, _ = problems.status_of(e)
    return error(status, str(e), fatal=False if status >= 500 else None)


def install_drp(api: FastAPI, home: Path) -> None:
    """Add the DRP routes to ``api`` (server/app.py's ``build_api``)."""
    from credentials.tokens import TokenStore
    from ledger.home import Config

    stores: list[TokenStore] = []  # opened at the first DRP call (the OpenAPI build has none)

    opening = threading.Lock()

    def store() -> TokenStore:
        with opening:
            if not stores:
                stores.append(TokenStore.open(Config.load(home)))
            return stores[0]

    @contextlib.asynccontextmanager
    async def closing() -> AsyncIterator[None]:
        try:
            yield
        finally:
            for opened in stores:
                opened.close()

    api.state.lifespans.append(closing)
    router = APIRouter(include_in_schema=False)

    async def agent(request: Request) -> Caller:
        header = request.headers.get("authorization")
        parts = (header or "").split(" ")
        if header is None:
            raise AuthError("this request carries no credential", reason="missing",
                            hint="send `Authorization: Bearer TOKEN`")
        if len(parts) != 2 or parts[0] != "Bearer" or not parts[1]:
            raise AuthError("the Authorization header is not one Bearer token",
                            reason="malformed")
        caller: Caller = await run_in_threadpool(lambda: store().authenticate_agent(parts[1]))
        return caller

    async def answer(request: Request,
                     run: Callable[[Caller, Backend], Awaitable[Any]]) -> Response:
        backend: Backend = request.app.state.backend
        try:
            caller = await agent(request)
            result = await run(caller, backend)
        except LedgerError as e:
            log.info("drp.refused", path=request.url.path, error=type(e).__name__)
            return _error_of(e)
        if isinstance(result, Response):
            return result
        return JSONResponse(result)

    @router.get("/.well-known/data-rights.json")
    async def discovery() -> Response:
        try:
            return JSONResponse(Directory.load(home).business)
        except DrpRefused:
            return error(404, "this ledger answers no Data Rights Protocol requests")

    async def exercise(request: Request) -> Response:
        body = await request.body()
        return await answer(request, lambda c, b: b.write(
            lambda s: s.drp_exercise(c, home, body)))

    router.add_api_route(REQUESTS, exercise, methods=["POST"])
    router.add_api_route(REQUESTS + "/", exercise, methods=["POST"])  # DRP before 0.9.3

    @router.get(REQUESTS + "/{request_id}")
    async def status(request_id: str, request: Request) -> Response:
        return await answer(request, lambda c, b: b.read(
            lambda s: s.drp_status(c, request_id)))

    @router.delete(REQUESTS + "/{request_id}")
    async def revoke(request_id: str, request: Request) -> Response:
        body = await request.body()
        return await answer(request, lambda c, b: b.write(
            lambda s: s.drp_revoke(c, home, request_id, body)))

    @router.get(REQUESTS + "/{request_id}/results")
    async def results(request_id: str, request: Request) -> Response:
        async def run(c: Caller, b: Backend) -> Response:
            media, content = await b.read(lambda s: s.drp_results(c, request_id))
            name = "evidence-pack.zip" if media == "application/zip" else "export.json"
            return Response(content, media_type=media, headers={
                "Content-Disposition": f'attachment; filename="{request_id}-{name}"'})

        return await answer(request, run)

    @router.get(f"{API_BASE}/v1/agent/{{agent_id}}")
    async def agent_information(agent_id: str, request: Request) -> Response:
        async def run(c: Caller, _b: Backend) -> Response:
            if c.name != agent_id:
                return error(403, "this bearer token is not the agent's")
            return JSONResponse({})

        return await answer(request, run)

    api.include_router(router)
