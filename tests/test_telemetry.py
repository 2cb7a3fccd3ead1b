"""Traces of `ledger serve` (ADR 0054), read from the OpenTelemetry SDK's in-memory exporter.

The server's app runs in this process (uvicorn on a loopback port, composed as
server/launch.py composes it) with a tracer provider whose spans land in memory. A client
sends W3C ``traceparent`` headers (and an MCP request its ``params._meta``); the test reads
the spans of a recall, an add, a correction, a forget and a whole redact-user: names and
attributes as the GenAI memory conventions say, the erasure's steps as children, parent
and child across the HTTP hop, and no content (texts, queries, reasons, subject refs) in
any span's name, attributes or events.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ledger import tracing

from .serving import free_port, issue

TRACE = "4bf92f3577b34da6a3ce929c0e4736"  # + 2 hex digits per request
PARENT = "00f067aa0ba902b7"
MARK_TEXT = "Zanzibar-quokka-7731"
MARK_QUERY = "Pomegranate-walrus-5520"
MARK_REASON = "Heliotrope-marmot-9046"
MARK_FIX = "Tangerine-ibis-3318"
SUBJECT = "user_okapi_4471"


@pytest.fixture
def traced_server(home: Path) -> Iterator[tuple[str, InMemorySpanExporter, dict[str, str]]]:
    from server.app import Settings, create_app
    from server.launch import build_authenticate
    from server.mounts import mount_all
    from server.telemetry import use

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    use(provider)
    tokens = {"op": issue(home, "operator-1", "operator")[1],
              "asst": issue(home, "assistant-1", "assistant", [SUBJECT])[1]}
    app = create_app(Settings(home=home), build_authenticate(home), mounts=mount_all)
    config = uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning",
                            access_log=False, lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    try:
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "server did not start"
            time.sleep(0.02)
        yield f"http://127.0.0.1:{config.port}", exporter, tokens
    finally:
        server.should_exit = True
        thread.join(timeout=60)
        tracing.disable()
        provider.shutdown()


def _finished(exporter: InMemorySpanExporter, *traces: int) -> list[ReadableSpan]:
    """The finished spans, once each trace's root (the span whose parent is the client's)
    has ended: a server span ends just after its response's last byte, which the client
    may read first."""
    deadline = time.monotonic() + 10
    while True:
        spans = list(exporter.get_finished_spans())
        ended = {n for n in traces for s in _of_trace(spans, n)
                 if s.parent is not None and s.parent.is_remote}
        if ended == set(traces) or time.monotonic() > deadline:
            return spans
        time.sleep(0.05)


def _traceparent(n: int) -> dict[str, str]:
    return {"traceparent": f"00-{TRACE}{n:02x}-{PARENT}-01"}


def _trace_id(n: int) -> int:
    return int(f"{TRACE}{n:02x}", 16)


def _of_trace(spans: list[ReadableSpan], n: int) -> list[ReadableSpan]:
    return [s for s in spans if s.context is not None and s.context.trace_id == _trace_id(n)]


def _one(spans: list[ReadableSpan], name: str) -> ReadableSpan:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, (name, [s.name for s in spans])
    return found[0]


def _child_of(child: ReadableSpan, parent: ReadableSpan) -> bool:
    assert child.parent is not None and parent.context is not None
    return child.parent.span_id == parent.context.span_id


def _server_span(spans: list[ReadableSpan], name: str, status: int) -> ReadableSpan:
    span = _one(spans, name)
    assert span.kind.name == "SERVER"
    assert span.parent is not None and span.parent.span_id == int(PARENT, 16)  # the header's
    assert span.parent.is_remote
    attrs = dict(span.attributes or {})
    assert attrs["http.response.status_code"] == status
    assert "url.path" not in attrs and "url.query" not in attrs and "url.full" not in attrs
    return span


def _memory_attrs(span: ReadableSpan, operation: str) -> dict[str, Any]:
    attrs = dict(span.attributes or {})
    assert span.name == f"{operation} memory-ledger"
    assert attrs["gen_ai.operation.name"] == operation
    assert attrs["gen_ai.provider.name"] == "memory-ledger"
    assert attrs["gen_ai.memory.store.name"] == "memory-ledger"
    assert attrs["gen_ai.memory.type"] == "long_term"
    assert attrs["gen_ai.memory.scope"] == "user"
    assert "gen_ai.memory.content" not in attrs and "gen_ai.memory.query" not in attrs
    assert "gen_ai.memory.namespace" not in attrs  # no tenant: the subject's ref never is
    return attrs


def _no_content(spans: list[ReadableSpan]) -> None:
    """No marker string anywhere in what the spans carry."""
    seen: list[str] = []
    for s in spans:
        seen.append(s.name)
        for key, value in (s.attributes or {}).items():
            seen += [key, str(value)]
        for event in s.events:
            seen.append(event.name)
            for key, value in (event.attributes or {}).items():
                seen += [key, str(value)]
        seen += [str(k) + str(v) for k, v in s.resource.attributes.items()]
    blob = "\n".join(seen)
    for marker in (MARK_TEXT, MARK_QUERY, MARK_REASON, MARK_FIX, SUBJECT, "Bearer", "mlt_"):
        assert marker not in blob, marker


def test_spans_of_recall_add_forget_and_redact_user(
        traced_server: tuple[str, InMemorySpanExporter, dict[str, str]]) -> None:
    url, exporter, tokens = traced_server
    asst = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {tokens['asst']}"},
                        timeout=120)
    op = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {tokens['op']}"},
                      timeout=300)
    assert asst.post("/v1/subjects", json={"ref": SUBJECT}).status_code == 201
    # 1: an add
    r = asst.post("/v1/atoms", headers=_traceparent(1),
                  json={"subject": SUBJECT, "text": f"{MARK_TEXT} drinks green tea"})
    assert r.status_code == 201, r.text
    atom = r.json()["atom_id"]
    other = asst.post("/v1/atoms", json={"subject": SUBJECT,
                                         "text": f"{MARK_TEXT} walks to work"}).json()["atom_id"]
    # 2: a recall
    r = asst.post("/v1/recall", headers=_traceparent(2),
                  json={"subject": SUBJECT, "query": f"{MARK_QUERY} tea", "k": 5})
    assert r.status_code == 200, r.text
    found = len(r.json()["items"])
    # 3: a correction
    r = asst.post(f"/v1/atoms/{atom}/corrections", headers=_traceparent(3),
                  json={"text": f"{MARK_FIX} drinks black tea", "reason": MARK_REASON})
    assert r.status_code == 201, r.text
    # 4: a forget
    r = op.post(f"/v1/atoms/{other}/deletions", headers=_traceparent(4),
                json={"reason": MARK_REASON})
    assert r.status_code == 200, r.text
    # 5: a whole redact-user: filed, planned, executed
    rid = asst.post("/v1/requests", json={"subject": SUBJECT,
                                          "reason": MARK_REASON}).json()["request_id"]
    plan = op.get(f"/v1/requests/{rid}/plan").json()
    r = op.post(f"/v1/requests/{rid}/execute", headers=_traceparent(5),
                json={"plan_digest": plan["plan_digest"]})
    assert r.status_code == 200, r.text
    spans = _finished(exporter, 1, 2, 3, 4, 5)

    add = _of_trace(spans, 1)
    http = _server_span(add, "POST /v1/atoms", 201)
    update = _one(add, "update_memory memory-ledger")
    assert _child_of(update, http)
    assert _memory_attrs(update, "update_memory")["gen_ai.memory.id"] == atom

    recall = _of_trace(spans, 2)
    http = _server_span(recall, "POST /v1/recall", 200)
    search = _one(recall, "search_memory memory-ledger")
    assert _child_of(search, http)
    assert _memory_attrs(search, "search_memory")["gen_ai.memory.search.result.count"] == found
    assert found >= 1

    fix = _of_trace(spans, 3)
    http = _server_span(fix, "POST /v1/atoms/{atom}/corrections", 201)
    assert _child_of(_one(fix, "update_memory memory-ledger"), http)

    forget = _of_trace(spans, 4)
    http = _server_span(forget, "POST /v1/atoms/{atom}/deletions", 200)
    delete = _one(forget, "delete_memory memory-ledger")
    assert _child_of(delete, http)
    assert _memory_attrs(delete, "delete_memory")["gen_ai.memory.id"] == other
    run = _one(forget, "erasure.run")  # the erasure's steps, on the writer thread
    assert _child_of(run, delete)
    for step in ("erasure.key_destruction", "erasure.purge", "erasure.reach_probes",
                 "erasure.raw_scan", "erasure.tombstones"):
        assert _child_of(_one(forget, step), run), step

    erase = _of_trace(spans, 5)
    http = _server_span(erase, "POST /v1/requests/{request_id}/execute", 200)
    delete = _one(erase, "delete_memory memory-ledger")
    assert _child_of(delete, http)
    assert "gen_ai.memory.id" not in _memory_attrs(delete, "delete_memory")  # the whole scope
    run = _one(erase, "erasure.run")
    keys = _one(erase, "erasure.key_destruction")
    assert _child_of(keys, run)
    # the subject's atoms (the corrected one, its successor) and its subject record
    assert dict(keys.attributes or {})["ledger.erasure.keys_destroyed"] >= 3
    purge = dict(_one(erase, "erasure.purge").attributes or {})
    assert purge["ledger.erasure.routes"] and purge["ledger.erasure.routes_not_reached"] == ()
    probes = dict(_one(erase, "erasure.reach_probes").attributes or {})
    assert probes["ledger.erasure.still_reachable"] == 0
    assert set(probes["ledger.erasure.routes"]) == set(purge["ledger.erasure.routes"])
    assert dict(_one(erase, "erasure.raw_scan").attributes or {})["ledger.erasure.hits"] == 0
    plans = [s for s in spans if s.name == "erasure.plan"]
    assert plans and all(dict(p.attributes or {})["ledger.erasure.atoms"] >= 1 for p in plans)
    for s in erase:
        assert s.end_time is not None and s.start_time is not None
        assert s.end_time >= s.start_time
    _no_content(spans)


def test_mcp_tool_span_takes_its_parent_from_meta(
        traced_server: tuple[str, InMemorySpanExporter, dict[str, str]]) -> None:
    url, exporter, tokens = traced_server
    headers = {"Authorization": f"Bearer {tokens['asst']}",
               "Accept": "application/json, text/event-stream",
               "Content-Type": "application/json"}
    httpx.post(f"{url}/v1/subjects", json={"ref": SUBJECT}, headers=headers, timeout=60)
    meta_parent = "b7ad6b7169203331"
    body = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "remember",
                       "arguments": {"subject": SUBJECT, "text": f"{MARK_TEXT} keeps bees"},
                       "_meta": {"traceparent": f"00-{TRACE}06-{meta_parent}-01"}}}
    r = httpx.post(f"{url}/mcp", json=body, headers={**headers, **_traceparent(7)},
                   timeout=60)
    assert r.status_code == 200, r.text
    assert "error" not in r.json() and not r.json()["result"].get("isError"), r.text
    spans = _finished(exporter, 6, 7)
    http = _server_span(_of_trace(spans, 7), "POST /mcp", 200)  # the HTTP hop's own trace
    assert http is not None
    tool = _one(_of_trace(spans, 6), "tools/call remember")  # its parent from _meta
    assert tool.parent is not None and tool.parent.span_id == int(meta_parent, 16)
    attrs = dict(tool.attributes or {})
    assert attrs["mcp.method.name"] == "tools/call"
    assert attrs["gen_ai.tool.name"] == "remember"
    assert attrs["gen_ai.operation.name"] == "execute_tool"
    assert attrs["jsonrpc.request.id"] == "7"
    update = _one(_of_trace(spans, 6), "update_memory memory-ledger")
    assert _child_of(update, tool)
    _no_content(spans)


def test_tracing_off_opens_nothing_and_installs_no_middleware(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from server.app import Limits, Settings, create_app
    from server.launch import build_authenticate
    from server.telemetry import configure_from_env, wanted

    for name in ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT",
                 "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LEDGER_METRICS", "off")
    issue(home, "operator-1", "operator")
    assert not wanted() and not configure_from_env() and not tracing.enabled()
    assert tracing.span("x") is tracing.span("y")  # one shared no-op context
    app = create_app(Settings(home=home), build_authenticate(home))
    assert isinstance(app, Limits)  # neither traces nor metrics: nothing in front of it
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert not wanted()
    monkeypatch.setenv("OTEL_SDK_DISABLED", "false")
    assert wanted()
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    assert not wanted()


def test_unknown_exporter_is_refused_with_a_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    from ledger.errors import EnvironmentProblem
    from server.telemetry import configure_from_env

    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "zipkin")
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
    with pytest.raises(EnvironmentProblem, match="zipkin") as e:
        configure_from_env()
    assert e.value.hint is not None and "otlp" in e.value.hint
    assert not tracing.enabled()


@pytest.mark.parametrize("env, service", [
    ({"OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "ledger-eu1"}, "ledger-eu1"),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}, "memory-ledger"),
])
def test_otel_environment_configures_the_exporter(env: dict[str, str], service: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from server.telemetry import configure_from_env

    for name in ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SDK_DISABLED",
                 "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    try:
        assert configure_from_env() and tracing.enabled()
        assert tracing._tracer.resource.attributes["service.name"] == service
    finally:
        tracing.disable()
