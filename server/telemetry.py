"""Traces and request metrics of ``ledger serve`` (ADR 0054).

Tracing is on when the standard ``OTEL_*`` variables name an exporter
(``OTEL_TRACES_EXPORTER`` otlp or console, or an ``OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT``)
and ``OTEL_SDK_DISABLED`` is not true; the OpenTelemetry SDK and its OTLP exporter are the
``otel`` extra (``pip install 'memory-ledger[otel]'``). Off, no middleware is installed
and :mod:`ledger.tracing` opens nothing.

:class:`Observe` is one ASGI middleware, outermost: a SERVER span per HTTP request (its
parent from a W3C ``traceparent`` header), named ``METHOD /route/{template}``, and the
request's latency counted by route template, method and status (server/metrics.py). Only
the route template is recorded, never the path or the query: paths carry subject refs
and atom ids, queries carry deletion reasons. That is why this is not the contrib ASGI
instrumentation, which records ``url.path`` and ``url.query``.

Spans named and attributed as the GenAI memory conventions say (``search_memory``,
``update_memory``, ``delete_memory``; :func:`memory_span`) wrap the use cases, with ids
only where the conventions allow (``gen_ai.memory.id``), never content or a subject's ref.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, Mapping
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ledger import tracing
from ledger.errors import EnvironmentProblem

STORE = "memory-ledger"
"""``gen_ai.provider.name`` and ``gen_ai.memory.store.name`` of every memory span."""


# ----------------------------------------------------------------------------- set-up
def wanted() -> bool:
    """Whether the ``OTEL_*`` environment asks for traces."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return bool(os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
                or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


def configure_from_env() -> bool:
    """Install the SDK's tracer provider with the exporter ``OTEL_*`` names (OTLP over
    HTTP, or console), once per process; True when tracing is on."""
    if tracing.enabled():
        return True
    if not wanted():
        return False
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
    except ImportError as e:
        raise EnvironmentProblem(
            "OTEL_* asks for traces but the OpenTelemetry SDK is not installed",
            hint="pip install 'memory-ledger[otel]', or unset OTEL_TRACES_EXPORTER and "
                 "OTEL_EXPORTER_OTLP_ENDPOINT") from e
    names = [n.strip().lower() for n in
             os.environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",") if n.strip()]
    exporters: list[SpanExporter] = []
    for name in names:
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporters.append(OTLPSpanExporter())
        elif name == "console":
            from opentelemetry.sdk.trace.export import ConsoleSpanExporter

            exporters.append(ConsoleSpanExporter())
        elif name != "none":
            raise EnvironmentProblem(
                f"OTEL_TRACES_EXPORTER names {name!r}, which ledger serve does not know",
                hint="use otlp (OTLP over HTTP, OTEL_EXPORTER_OTLP_ENDPOINT), console or none")
    resource = Resource.create()  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": STORE}))
    provider = TracerProvider(resource=resource)
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    use(provider)
    return True


def use(provider: Any) -> None:
    """Trace through ``provider`` (the SDK's TracerProvider; tests give one with an
    in-memory exporter)."""
    tracing.enable(provider)


# ----------------------------------------------------------------------------- middleware
def observe(app: ASGIApp, metrics: bool) -> ASGIApp:
    """``app`` wrapped in :class:`Observe` when traces or metrics are on; else ``app``."""
    if not (tracing.enabled() or metrics):
        return app
    return Observe(app, metrics)


class Observe:
    """A SERVER span and a latency observation per HTTP request (module docstring)."""

    def __init__(self, app: ASGIApp, metrics: bool) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500
        method: str = scope.get("method", "GET")

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        started = time.perf_counter()
        if not tracing.enabled():
            try:
                await self.app(scope, receive, sending)
            finally:
                if self.metrics:
                    from server.metrics import request_done

                    request_done(_route(scope), method, status, time.perf_counter() - started)
            return
        from opentelemetry import context, propagate
        from opentelemetry.trace import Status, StatusCode

        carrier = {k.decode("latin-1"): v.decode("latin-1")
                   for k, v in scope.get("headers") or [] if k in (b"traceparent",
                                                                   b"tracestate")}
        token = context.attach(propagate.extract(carrier))
        try:
            with tracing.span(method, {"http.request.method": method,
                                       "url.scheme": scope.get("scheme", "http")},
                              kind="server") as opened:
                span: Any = opened
                try:
                    await self.app(scope, receive, sending)
                finally:
                    route = _route(scope)
                    if route != "other":
                        span.update_name(f"{method} {route}")
                        span.set_attribute("http.route", route)
                    span.set_attribute("http.response.status_code", status)
                    if status >= 500:
                        span.set_status(Status(StatusCode.ERROR))
                        span.set_attribute("error.type", str(status))
                    if self.metrics:
                        from server.metrics import request_done

                        request_done(route, method, status, time.perf_counter() - started)
        finally:
            context.detach(token)


def _route(scope: Scope) -> str:
    """The matched route's template (a mount's prefix for /mcp and /console); ``other``
    for a path no route matched (a label per unknown path would grow without bound)."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    if isinstance(path, str) and path:
        return path
    asked: str = scope.get("path", "")
    for prefix in MOUNTS:  # mounted apps (FastAPI names only its own routes in the scope)
        if asked == prefix or asked.startswith(prefix + "/"):
            return prefix
    return "other"


MOUNTS = ("/mcp", "/console")


# ----------------------------------------------------------------------------- memory spans
def memory_attributes(operation: str, caller: Any, **extra: Any) -> dict[str, Any]:
    """The GenAI memory attributes of ``operation`` (search_memory, update_memory,
    delete_memory): the store, long-term memory, user scope, the caller's tenant as the
    namespace when it has one. ``extra``: gen_ai.memory.id and the like, ids only."""
    attrs: dict[str, Any] = {"gen_ai.operation.name": operation,
                             "gen_ai.provider.name": STORE,
                             "gen_ai.memory.store.name": STORE,
                             "gen_ai.memory.type": "long_term",
                             "gen_ai.memory.scope": "user"}
    tenant = getattr(caller, "tenant", None)
    if tenant:
        attrs["gen_ai.memory.namespace"] = tenant
    attrs.update({k: v for k, v in extra.items() if v is not None})
    return attrs


def memory_span(operation: str, caller: Any, **extra: Any
                ) -> contextlib.AbstractContextManager[tracing.SpanLike]:
    """A span ``OPERATION memory-ledger`` with :func:`memory_attributes`; a no-op while
    tracing is off."""
    if not tracing.enabled():
        return tracing.span(operation)
    return tracing.span(f"{operation} {STORE}", memory_attributes(operation, caller, **extra))


# ----------------------------------------------------------------------------- MCP
@contextlib.contextmanager
def mcp_span(method: str, params: Mapping[str, Any] | None, meta: Mapping[str, Any] | None,
             request_id: Any, protocol: str | None) -> Iterator[tracing.SpanLike]:
    """The SERVER span of one MCP request (``tools/call remember``), its parent from the
    request's ``params._meta`` (``traceparent``) when it carries one, else the HTTP
    request's span."""
    if not tracing.enabled():
        yield tracing.NO_SPAN
        return
    from opentelemetry import context, propagate

    token = None
    if meta and isinstance(meta.get("traceparent"), str):
        carrier = {k: v for k, v in meta.items()
                   if k in ("traceparent", "tracestate") and isinstance(v, str)}
        token = context.attach(propagate.extract(carrier))
    tool = params.get("name") if method == "tools/call" and params else None
    attrs: dict[str, Any] = {"mcp.method.name": method}
    if isinstance(tool, str):
        attrs["gen_ai.tool.name"] = tool
        attrs["gen_ai.operation.name"] = "execute_tool"
    if request_id is not None:
        attrs["jsonrpc.request.id"] = str(request_id)
    if protocol:
        attrs["mcp.protocol.version"] = protocol
    try:
        with tracing.span(f"{method} {tool}" if isinstance(tool, str) else method, attrs,
                          kind="server") as span:
            yield span
    finally:
        if token is not None:
            context.detach(token)
