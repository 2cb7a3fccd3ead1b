"""``ledger serve`` over a fleet: one ledger per tenant, the tenant chosen by the
credential (ADR 0061, service/fleet.py, credentials/fleet.py).

:class:`FleetApp` is the ASGI app of a server process of a fleet. It authenticates each
request against the fleet's token store, takes the tenant from the token (a token is
bound to its tenant when it is issued; a fleet-wide operator or auditor token names the
tenant in the ``Ledger-Tenant`` header, which a tenant's token may only repeat), and
hands the request to that tenant's app: the same app as a one-ledger server's
(server/app.py: the HTTP API and the MCP server, its own reader and writer threads, its
own group commit), over the tenant's own ledger home. Nothing in a request's path or
body selects the ledger, so a tenant's token reaches no other tenant's ledger: an
unknown tenant, or another tenant's, answers 404.

Tenants are opened when a request first needs them and kept in a bounded cache
(``LEDGER_FLEET_OPEN``, default :data:`DEFAULT_OPEN`): past the bound the tenant used
least recently, with no request in flight, is closed (its queued writes finish first).
Every few seconds the registry is read again and the tenants no longer active are closed,
so a tenant offboarded by another process is closed and refused here too.

The console, the Data Rights Protocol endpoints and ``/metrics`` are a one-ledger
server's (they authenticate with the home's own tokens); a fleet serves ``/v1`` and
``/mcp``, and answers 404 elsewhere.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
from collections import OrderedDict
from pathlib import Path
from typing import Any

import structlog
from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ledger.errors import LedgerError
from server import problems
from service.caller import Caller

log = structlog.get_logger("ledger.server")

DEFAULT_OPEN = 16
OPEN_ENV = "LEDGER_FLEET_OPEN"
TENANT_HEADER = b"ledger-tenant"
POOL_ENV = "POSTGRES_POOL_SIZE"  # eventsourcing's, read from the environment
RECHECK = 5.0  # seconds an open tenant's registry row is trusted
FLEET_CALLER: contextvars.ContextVar[Caller | None] = contextvars.ContextVar(
    "fleet_caller", default=None)


class _Passed:
    """The authenticator of a tenant's app: the caller the fleet app already
    authenticated for this request (a context variable of the request's task)."""

    def cached(self, _header: str | None) -> Caller | None:
        return FLEET_CALLER.get()

    def __call__(self, _header: str | None) -> Caller:
        found = FLEET_CALLER.get()
        if found is None:
            from credentials.auth import MissingCredentials

            raise MissingCredentials
        return found


class _Tenant:
    """One tenant's app, started (its lifespan runs in a task of its own)."""

    def __init__(self, name: str, app: ASGIApp) -> None:
        self.name = name
        self.app = app
        self.in_flight = 0
        self._to_app: asyncio.Queue[Message] = asyncio.Queue()
        self._from_app: asyncio.Queue[Message] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        scope: Scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
        async def run() -> None:
            await self.app(scope, self._to_app.get, self._from_app.put)

        self._task = asyncio.create_task(run())
        await self._to_app.put({"type": "lifespan.startup"})
        said = await self._from_app.get()
        if said["type"] != "lifespan.startup.complete":
            await self._task
            raise RuntimeError(f"tenant {self.name} did not start: {said.get('message')}")

    async def stop(self) -> None:
        """Finish the queued work and close the tenant's ledger."""
        if self._task is None:
            return
        while self.in_flight:
            await asyncio.sleep(0.05)
        await self._to_app.put({"type": "lifespan.shutdown"})
        await self._from_app.get()
        await self._task
        self._task = None


class FleetApp:
    """The ASGI app of a fleet's server process (module docstring)."""

    def __init__(self, home: Path, max_open: int | None = None) -> None:
        from credentials.fleet import FleetWithTokens

        # a tenant's ledger keeps one idle connection per pool, not eventsourcing's five:
        # one server process holds many ledgers, and PostgreSQL counts every connection
        # (docs/scale.md); an operator's own setting wins
        os.environ.setdefault(POOL_ENV, "1")
        self.home = home
        self.fleet = FleetWithTokens.open(home)
        self.max_open = max_open or int(os.environ.get(OPEN_ENV, DEFAULT_OPEN))
        self.open: OrderedDict[str, _Tenant] = OrderedDict()
        self.opening: dict[str, asyncio.Future[_Tenant]] = {}
        self.closing: set[asyncio.Task[None]] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path: str = scope.get("path", "")
        if path == "/v1/health":
            await JSONResponse({"status": "ok"})(scope, receive, send)
            return
        if not (path.startswith("/v1/") or path == "/mcp" or path.startswith("/mcp/")):
            await _send(problems.problem(404, "a fleet serves /v1 and /mcp only; the "
                                              "console, /drp and /metrics are a "
                                              "one-ledger server's", slug="not-found"),
                        scope, receive, send)
            return
        try:
            caller, name = await self._caller(scope)
            tenant = await self._tenant(name)
        except LedgerError as e:
            log.info("request.refused", path=path, reason=type(e).__name__)
            await _send(problems.from_error(e), scope, receive, send)
            return
        tenant.in_flight += 1
        token = FLEET_CALLER.set(caller)
        try:
            await tenant.app(scope, receive, send)
        finally:
            FLEET_CALLER.reset(token)
            tenant.in_flight -= 1

    async def _caller(self, scope: Scope) -> tuple[Caller, str]:
        """The caller of the request's credential, in its tenant's ledger, and that
        tenant's name."""
        from credentials.auth import cached_caller, caller_from_authorization
        from credentials.fleet import tenant_caller

        headers = dict(scope.get("headers") or [])
        auth = headers.get(b"authorization")
        header = auth.decode("latin-1") if auth else None
        store = self.fleet.tokens
        caller = cached_caller(header, store)
        if caller is None:
            caller = await run_in_threadpool(caller_from_authorization, header, store, None)
        named = headers.get(TENANT_HEADER)
        asked = named.decode("latin-1").strip() if named is not None else None
        return tenant_caller(caller, asked)

    async def _tenant(self, name: str) -> _Tenant:
        found = self.open.get(name)
        if found is not None:  # still active: _watch closes it within RECHECK otherwise
            self.open.move_to_end(name)
            return found
        pending = self.opening.get(name)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[_Tenant] = asyncio.get_running_loop().create_future()
        self.opening[name] = future
        try:
            tenant = await self._start(name)
        except BaseException as e:
            future.set_exception(e)
            future.exception()  # retrieved: no warning when nobody else waited
            raise
        finally:
            self.opening.pop(name, None)
        future.set_result(tenant)
        self.open[name] = tenant
        self._evict()
        return tenant

    async def _start(self, name: str) -> _Tenant:
        from server.app import Settings, create_app
        from server.mounts import mount_all

        await run_in_threadpool(self._registered, name)
        home = self.fleet.tenant_home(name)
        app = await run_in_threadpool(create_app, Settings(home=home), _Passed(),
                                      mount_all)
        tenant = _Tenant(name, app)
        await tenant.start()
        log.info("fleet.tenant_opened", tenant=name, open=len(self.open) + 1)
        return tenant

    def _registered(self, name: str) -> None:
        """Raise unless ``name`` is an active tenant: NotFound (unknown, offboarded), or
        EnvironmentProblem (HTTP 503) when the fleet's database does not answer."""
        self.fleet.tenant(name)

    def _evict(self) -> None:
        for name in list(self.open):
            if len(self.open) <= self.max_open:
                return
            tenant = self.open[name]
            if tenant.in_flight == 0:
                del self.open[name]
                self._close(tenant)

    def _close(self, tenant: _Tenant) -> None:
        task = asyncio.create_task(tenant.stop())
        self.closing.add(task)
        task.add_done_callback(self.closing.discard)
        log.info("fleet.tenant_closed", tenant=tenant.name)

    async def _watch(self) -> None:
        """Every few seconds, close the open tenants that are no longer active (offboarded
        by another process), so their background work stops too, not only their
        requests."""
        while True:
            await asyncio.sleep(RECHECK)
            if not self.open:
                continue
            try:
                active = {t.name for t in await asyncio.to_thread(self.fleet.tenants)
                          if t.state == "active"}
            except Exception as e:  # the fleet's database away a moment: next round
                log.warning("fleet.watch_failed", error=type(e).__name__)
                continue
            for name in [n for n in self.open if n not in active]:
                tenant = self.open.pop(name)
                self._close(tenant)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        watch: asyncio.Task[None] | None = None
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                watch = asyncio.create_task(self._watch())
                log.info("server.started", fleet=self.fleet.fleet_id)
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                log.info("server.stopping")
                if watch is not None:
                    watch.cancel()
                for tenant in list(self.open.values()):
                    self._close(tenant)
                self.open.clear()
                if self.closing:
                    await asyncio.gather(*self.closing, return_exceptions=True)
                await asyncio.to_thread(self.fleet.close)
                log.info("server.stopped", fleet=self.fleet.fleet_id)
                await send({"type": "lifespan.shutdown.complete"})
                return


async def _send(response: Response, scope: Scope, receive: Receive, send: Send) -> None:
    await response(scope, receive, send)


def fleet_app(home: Path) -> Any:
    """uvicorn's app of a fleet's server process (server/launch.py)."""
    from server.telemetry import configure_from_env

    configure_from_env()
    return FleetApp(home)
