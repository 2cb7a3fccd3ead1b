"""What `ledger serve` mounts beside the HTTP API: the MCP server at /mcp and the console
at /console."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import structlog
from anyio.abc import TaskGroup, TaskStatus
from starlette.types import ASGIApp, Receive, Scope, Send

from server.backend import Backend

log = structlog.get_logger("ledger.server")


def mount_all(api: Any, backend: Backend) -> None:
    """Mount the MCP server and the console on the FastAPI app ``api``."""
    from starlette.routing import Route

    from credentials.tokens import TokenStore
    from ledger.home import Config
    from server.console.app import console_app

    mcp = LazyMCP(backend)  # /mcp, streamable HTTP; its session manager in the lifespan
    api.router.routes.append(Route("/mcp", endpoint=mcp, include_in_schema=False))
    api.state.lifespans.append(mcp.lifespan)
    store = TokenStore.open(Config.load(backend.home))
    api.mount("/console", console_app(backend, store))


class LazyMCP:
    """``/mcp``, built on its first request (ADR 0072): the MCP SDK and the tools' schemas
    take about a second of CPU to import and build, which a server that is never asked
    over MCP (and every tenant of a fleet that is not) no longer pays at start-up. The
    first request waits for the build, made in a worker thread while the event loop goes
    on serving; the session manager then runs in a task of the app's lifespan, which
    stops it with the server."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self._app: ASGIApp | None = None
        self._lock = anyio.Lock()
        self._tasks: TaskGroup | None = None

    @contextlib.asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        async with anyio.create_task_group() as tasks:
            self._tasks = tasks
            try:
                yield
            finally:
                self._tasks = None
                tasks.cancel_scope.cancel()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        app = self._app or await self._built()
        await app(scope, receive, send)

    async def _built(self) -> ASGIApp:
        async with self._lock:
            if self._app is None:
                if self._tasks is None:
                    raise RuntimeError("the MCP endpoint was called outside the app's lifespan")
                started = time.perf_counter()
                mount = await anyio.to_thread.run_sync(_build, self.backend)
                await self._tasks.start(self._run, mount.lifespan)
                self._app = mount.app
                log.info("mcp.ready", ms=round((time.perf_counter() - started) * 1000, 1))
            return self._app

    @staticmethod
    async def _run(lifespan: Any, *, task_status: TaskStatus[None]) -> None:
        async with lifespan():
            task_status.started()
            await anyio.sleep_forever()


def _build(backend: Backend) -> Any:
    """The SDK imported and the endpoint built (in a worker thread: the import is most of
    the cost, and the event loop must not wait on it)."""
    from server.mcp_server import mcp_asgi_app

    return mcp_asgi_app(backend)
