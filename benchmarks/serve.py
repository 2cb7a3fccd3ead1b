"""The server against the facade it serves and against the framework's own ceiling,
measured in one run (issues 17 and 30), on SQLite and on PostgreSQL.

Prints, per storage backend:
* in-process: the facade's bulk add rate (``add_atoms`` of 256, the largest group the
  server commits), groups of 32 (``add_atoms_grouped``: the writer's best with 32 clients),
  recall p50/p95 (facade called directly);
* over HTTP (`ledger serve` on loopback): one-atom adds with 1 and 32 concurrent
  keep-alive clients, with ``on_similar`` left at the API's default (``add``: every add
  searches the subject's memories for similar ones, ADR 0052), with texts that differ by
  their numbers only and with varied texts (``benchmarks/memory_texts.py``), and with
  ``on_similar: null`` (no search); the bulk endpoint (batches of 256, one client, as the in-process
  bulk); recall p50/p95 (httpx) and the MCP ``recall`` tool;
* the same lean client against a FastAPI no-op (validates the body, writes nothing),
  measured before and after the ledger's runs (their mean is the ceiling);
* on PostgreSQL, a throwaway server of its own (as the tests start one: fsync off, so
  the event store's commits are cheap; the keystore stays an SQLite file);
* for each load: CPU milliseconds per request of the client (this process) and of the
  server (its process and its writer process, ADR 0062), and the cores each kept busy:
  whether the client competes for the 2 cores, and what the server spends per add;
* the in-process bulk once more, on the same ledger after the HTTP loads: each bulk
  command searches the subject's memories for similar ones (the default), so its rate
  falls as the subject grows, and the HTTP bulk runs after ~50,000 adds; the bulk ratio
  compares the two at the same size (the one against the new ledger is printed too);
* the ratios the issue sets goals for: HTTP add (32 clients) / FastAPI no-op (>= 0.6),
  HTTP bulk / in-process bulk (>= 0.7), HTTP recall p95 / in-process p95 (<= 2).

With ``--overhead`` it measures only what observability costs (ADR 0054): the same
server process started three ways, off (``--no-metrics``, no ``OTEL_*``), metrics on, and
tracing on exporting to an in-process no-op exporter behind the SDK's batch processor;
adds/s with 8 clients and recall p50/p95 with 1, each way run ``--rounds`` times in turn,
the best of each kept; printed as ratios to off (goal: under 5 % each).

Loopback only, bounded in count and time (about a minute per backend at the defaults).
Usage:
    python benchmarks/serve.py [--atoms 2000] [--seconds 8] [--backends sqlite,postgresql]
    python benchmarks/serve.py --overhead [--seconds 5] [--queries 100] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import glob
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.memory_texts import varied as varied_text

BULK = 256  # atoms per bulk command: the in-process bulk's and the HTTP bulk's
TICK = os.sysconf("SC_CLK_TCK")


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(len(s) * q))] * 1000


def cpu_of(pid: int) -> tuple[float, float]:
    """CPU seconds (user + system) of a process and of its child processes, so far."""
    def one(p: int) -> float:
        try:
            f = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(f[11]) + int(f[12])) / TICK

    kids: list[int] = []
    for t in glob.glob(f"/proc/{pid}/task/*/children"):
        kids += [int(x) for x in Path(t).read_text().split()]
    return one(pid), sum(one(k) for k in kids)


def in_process(home: Path, atoms: int, queries: list[str]) -> dict[str, float]:
    from service.caller import local_operator
    from service.models import AtomIn, RecallIn
    from service.root import opened_service

    op = local_operator()
    out: dict[str, float] = {}
    with opened_service(home) as svc:
        out["bulk_rate"] = bulk_in_process(svc, atoms, "bulk memory")
        # what the server's writer does with 32 clients at best: every client's add in
        # one signed command, 32 at a time (a group never holds more adds than requests
        # in flight), with and without the search for similar memories
        groups = max(4, atoms // 128)
        for mode, extra in (("add", {}), ("none", {"on_similar": None})):
            t0 = time.perf_counter()
            for g in range(groups):
                svc.add_atoms_grouped([(op, AtomIn(subject="bench",
                                                   text=f"group {mode} {g} item {i}",
                                                   **extra))
                                       for i in range(32)])
            out[f"group32_{mode}"] = groups * 32 / (time.perf_counter() - t0)
        out["added"] = atoms + 2 * groups * 32
        svc.recall(op, RecallIn(subject="bench", query="warm up", rehearse=False))
        lat = []
        for q in queries:
            t0 = time.perf_counter()
            svc.recall(op, RecallIn(subject="bench", query=q, rehearse=False))
            lat.append(time.perf_counter() - t0)
        out["recall_p50"], out["recall_p95"] = pct(lat, 0.5), pct(lat, 0.95)
    return out


def bulk_in_process(svc: Any, atoms: int, label: str) -> float:
    """Atoms/s of the facade's ``add_atoms`` in commands of ``BULK``, on_similar left at
    its default (``add``, as the HTTP bulk's): each command searches the subject's
    memories, so the rate depends on how many the subject holds already."""
    from service.caller import local_operator
    from service.models import AtomIn

    op = local_operator()
    items = [AtomIn(subject="bench", text=f"{label} {i} about topic {i % 97}")
             for i in range(atoms)]
    t0 = time.perf_counter()
    for start in range(0, atoms, BULK):
        svc.add_atoms(op, items[start:start + BULK])
    return atoms / (time.perf_counter() - t0)


REFUSED: dict[int, bytes] = {}
"""The first answer of each status other than 2xx the loads got (printed: what went wrong)."""
ON_SIMILAR: dict[str, object] = {}
"""Added to every ``--overhead`` add: ``{"on_similar": None}`` with ``--on-similar none``."""


async def http_adds(url: str, token: str, clients: int, seconds: float,
                    on_similar: dict[str, object] | None = None, batch: int = 0,
                    pid: int | None = None, varied: bool = False) -> dict[str, float]:
    """``clients`` keep-alive connections, each posting one atom (``batch``: a list of
    that many to /v1/atoms/batch) at a time and waiting for its answer. The client is a
    few lines over asyncio streams with the requests built ahead of the clock, not httpx:
    on 2 cores httpx's own cost per request (about 1.5 ms of CPU) was the bound of the
    earlier runs, not the server. ``pid``: the server's process, whose CPU (and its
    writer process's) is counted over the run, as this client's own is. Texts differ by
    their numbers only (``memory_texts.crowded``'s kind), or (``varied``) are eight words
    drawn from the project's documentation each."""
    host, port = url.removeprefix("http://").split(":")
    extra = ON_SIMILAR if on_similar is None else on_similar
    lat: list[float] = []
    statuses: dict[int, int] = {}
    deadline = time.monotonic() + seconds
    path = "/v1/atoms/batch" if batch else "/v1/atoms"

    def request(n: int, i: int) -> bytes:
        text = varied_text(i, f"http{n}") if varied else f"http memory {n}-{i}"
        one = {"subject": "bench", "text": text, **extra}
        body = json.dumps([{**one, "text": f"http memory {n}-{i}-{k}"}
                           for k in range(batch)] if batch else one).encode()
        return (f"POST {path} HTTP/1.1\r\nHost: {host}\r\n"
                f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode() + body

    async def one(n: int) -> None:
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            i = 0
            data = request(n, i)
            while time.monotonic() < deadline and i < 100_000:
                t0 = time.perf_counter()
                writer.write(data)
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                body = await reader.readexactly(length)
                lat.append(time.perf_counter() - t0)
                status = int(head[9:12])
                statuses[status] = statuses.get(status, 0) + 1
                if status >= 300:
                    REFUSED.setdefault(status, body[:300])
                i += 1
                data = request(n, i)  # built while the server answers the others
        finally:
            writer.close()
    c0, (s0, w0) = time.process_time(), cpu_of(pid) if pid else (0.0, 0.0)
    t0 = time.perf_counter()
    await asyncio.gather(*[one(n) for n in range(clients)])
    wall = time.perf_counter() - t0
    c1, (s1, w1) = time.process_time(), cpu_of(pid) if pid else (0.0, 0.0)
    ok = statuses.get(201, 0)
    done = max(1, ok)
    return {"rate": ok / wall, "ok": ok * max(1, batch),
            "p50": pct(lat, 0.5), "p95": pct(lat, 0.95),
            "errors": sum(statuses.values()) - ok, "wall": wall,
            "client_ms": (c1 - c0) / done * 1000, "server_ms": (s1 - s0) / done * 1000,
            "writer_ms": (w1 - w0) / done * 1000, "client_cores": (c1 - c0) / wall,
            "server_cores": (s1 - s0) / wall, "writer_cores": (w1 - w0) / wall}


BARE_APP = """
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    more = True
    while more:
        more = (await receive()).get("more_body", False)
    body = b'{"atom_id":"x","archived":[]}'
    await send({"type": "http.response.start", "status": 201,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
"""


FRAMEWORK_APP = """
from fastapi import FastAPI
from pydantic import BaseModel

app = FastAPI()


class AtomIn(BaseModel):
    subject: str
    text: str


class AtomAdded(BaseModel):
    atom_id: str
    archived: list[str] = []


@app.post("/v1/atoms", status_code=201)
async def add(body: AtomIn) -> AtomAdded:
    return AtomAdded(atom_id="x")
"""


@contextlib.contextmanager
def noop_server(source: str = FRAMEWORK_APP) -> Iterator[tuple[str, int]]:
    """An app that writes nothing (``FRAMEWORK_APP``: FastAPI validating the body and its
    answer; ``BARE_APP``: raw ASGI answering 201) under the same uvicorn as the ledger's
    server: what HTTP with the framework costs on this machine by itself. (URL, pid)."""
    import subprocess

    import httpx

    from tests.serving import free_port

    with tempfile.TemporaryDirectory(prefix="bench-bare-") as tmp:
        Path(tmp, "bare_app.py").write_text(source)
        port = free_port()
        proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "bare_app:app", "--port",
                                 str(port), "--log-level", "warning", "--no-access-log"],
                                cwd=tmp)
        try:
            for _ in range(100):
                try:
                    httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
                    break
                except httpx.TransportError:
                    time.sleep(0.1)
            yield f"http://127.0.0.1:{port}", proc.pid
        finally:
            proc.terminate()
            proc.wait(10)


async def recalls(url: str, token: str, queries: list[str]
                  ) -> tuple[dict[str, float], dict[str, float] | None]:
    """Recall over HTTP (httpx's async client: its sockets set TCP_NODELAY, as the MCP
    client's do; with the sync client Nagle's algorithm against the server's delayed ACK
    adds tens of milliseconds to a POST on loopback) and through the MCP ``recall`` tool,
    one query at a time, the two alternating query by query after a warm-up of both: the
    first queries after a burst of writes pay for the read models' catch-up, and whichever
    surface came first used to carry it."""
    import httpx

    body = {"subject": "bench", "rehearse": False}
    http_lat: list[float] = []
    mcp_lat: list[float] = []
    async with httpx.AsyncClient(base_url=url, timeout=120,
                                 headers={"Authorization": f"Bearer {token}"}) as c:
        # the first recall after the loads catches the read models up with every atom
        # they added, which may take longer than a request may (504): the catch-up goes
        # on in the reader, so it is asked again until it answers
        for _ in range(20):
            r = await c.post("/v1/recall", json={**body, "query": "warm up"})
            if r.status_code != 504:
                break
        async def over_http(q: str) -> None:
            r = await c.post("/v1/recall", json={**body, "query": q})
            assert r.status_code == 200, r.text

        try:
            from mcp import ClientSession
            from mcp.client.streamable_http import streamable_http_client
        except ImportError:
            for q in queries[:20]:
                await over_http(q)
            for q in queries:
                t0 = time.perf_counter()
                await over_http(q)
                http_lat.append(time.perf_counter() - t0)
            return {"p50": pct(http_lat, 0.5), "p95": pct(http_lat, 0.95)}, None
        async with streamable_http_client(f"{url}/mcp", http_client=c) as (read, write, *_), \
                ClientSession(read, write) as session:
            await session.initialize()
            for q in queries[:20]:
                await over_http(q)
                await session.call_tool("recall", {**body, "query": q})
            for q in queries:
                t0 = time.perf_counter()
                await over_http(q)
                t1 = time.perf_counter()
                await session.call_tool("recall", {**body, "query": q})
                t2 = time.perf_counter()
                http_lat.append(t1 - t0)
                mcp_lat.append(t2 - t1)
    return ({"p50": pct(http_lat, 0.5), "p95": pct(http_lat, 0.95)},
            {"p50": pct(mcp_lat, 0.5), "p95": pct(mcp_lat, 0.95)})


MODES = ("off", "metrics", "tracing")


def child_serve(home: str, port: int, mode: str) -> None:
    """The server of one ``--overhead`` run (this script, in its own process)."""
    if mode == "tracing":
        from collections.abc import Sequence

        from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            SpanExporter,
            SpanExportResult,
        )

        from server.telemetry import use

        class NoOp(SpanExporter):
            def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
                return SpanExportResult.SUCCESS

        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(NoOp()))
        use(provider)
    for name in ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT",
                 "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        os.environ.pop(name, None)
    if mode == "thread":  # ADR 0030's layout: the adds committed on the writer thread
        import functools

        import server.app

        server.app.Settings = functools.partial(  # type: ignore[misc,assignment]
            server.app.Settings, writer_process=False)
    from server.launch import serve

    serve(Path(home), "127.0.0.1", port, 1, None, None, None,
          metrics=mode in ("metrics", "thread"))


@contextlib.contextmanager
def child_server(home: Path, mode: str) -> Iterator[tuple[str, int]]:
    """``ledger serve`` started by :func:`child_serve` in ``mode``: (its URL, its pid)."""
    import signal
    import subprocess

    import httpx

    from tests.serving import free_port

    port = free_port()
    proc = subprocess.Popen([sys.executable, __file__, "--child-serve", str(home), str(port),
                             mode], stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                if httpx.get(f"{url}/v1/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        yield url, proc.pid
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)


def middleware_cost(calls: int) -> dict[str, float]:
    """CPU microseconds per request that the observability middleware adds in front of an
    app that answers at once, measured in this process by thread CPU time (other processes
    on the machine do not count): metrics on, tracing on (no-op exporter), both; and the
    cost of a span helper while tracing is off."""
    from collections.abc import Sequence

    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    from ledger import tracing
    from server.telemetry import observe, use

    class NoOp(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    class Route:
        path = "/v1/recall"

    async def app(scope: Any, receive: Any, send: Any) -> None:
        scope["route"] = Route
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    async def receive() -> Any:
        return {"type": "http.request", "body": b""}

    async def send(message: Any) -> None:
        return None

    headers = [(b"traceparent", b"00-4bf92f3577b34da6a3ce929c0e4736aa-00f067aa0ba902b7-01")]

    async def run(wrapped: Any) -> float:
        for _ in range(200):
            await wrapped({"type": "http", "method": "POST", "path": "/v1/recall",
                           "headers": headers}, receive, send)
        t0 = time.thread_time()
        for _ in range(calls):
            await wrapped({"type": "http", "method": "POST", "path": "/v1/recall",
                           "headers": headers}, receive, send)
        return (time.thread_time() - t0) / calls * 1e6

    out = {"bare": asyncio.run(run(app)), "metrics": asyncio.run(run(observe(app, True)))}
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(NoOp()))
    use(provider)
    try:
        out["tracing"] = asyncio.run(run(observe(app, False)))
        out["both"] = asyncio.run(run(observe(app, True)))
        from server.telemetry import memory_span
        from service.caller import local_operator

        caller = local_operator()
        t0 = time.thread_time()
        for _ in range(calls):
            with memory_span("search_memory", caller) as s:
                s.set_attribute("gen_ai.memory.search.result.count", 5)
        out["memory_span"] = (time.thread_time() - t0) / calls * 1e6
    finally:
        tracing.disable()
        provider.shutdown()
    t0 = time.thread_time()
    for _ in range(calls):
        with tracing.span("erasure.purge"):
            pass
    out["span_off"] = (time.thread_time() - t0) / calls * 1e6
    return out


def overhead(args: argparse.Namespace) -> None:
    """Observability off, metrics on, tracing on: the same traffic, ratios to off."""
    from ledger.application import LedgerApp
    from service.caller import local_operator
    from service.models import AtomIn, SubjectIn
    from service.root import opened_service
    from tests.serving import issue

    queries = [f"topic {i % 97} memory" for i in range(args.queries)]
    best: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-overhead-") as tmp:
        home = Path(tmp) / "home"
        LedgerApp.initialize(home)
        with opened_service(home) as svc:
            op = local_operator()
            svc.register_subject(op, SubjectIn(ref="bench"))
            items = [AtomIn(subject="bench", text=f"memory {i} about topic {i % 97}")
                     for i in range(1000)]
            for start in range(0, len(items), 256):
                svc.add_atoms(op, items[start:start + 256])
        _, token = issue(home, "bench", "assistant", ["bench"])
        for _ in range(args.rounds):
            for mode in MODES:
                with child_server(home, mode) as (url, _pid):
                    adds = asyncio.run(http_adds(url, token, 8, args.seconds))
                    recall, _ = asyncio.run(recalls(url, token, queries))
                got = {"add_rate": adds["rate"], "add_p50": adds["p50"],
                       "recall_p50": recall["p50"], "recall_p95": recall["p95"]}
                prev = best.setdefault(mode, got)
                best[mode] = {"add_rate": max(prev["add_rate"], got["add_rate"]),
                              **{k: min(prev[k], got[k]) for k in got if k != "add_rate"}}
    counted = tempfile.mkdtemp(prefix="bench-metrics-")  # as ledger serve counts
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = counted
    try:
        cost = middleware_cost(args.calls)
    finally:
        os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)
        import shutil

        shutil.rmtree(counted, ignore_errors=True)
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; observability overhead, "
          f"{args.rounds} rounds of {args.seconds:.0f} s of adds (8 clients) and "
          f"{args.queries} recalls (1 client) per mode, best of the rounds")
    for mode in MODES:
        b = best[mode]
        print(f"{mode:8s} add {b['add_rate']:7.0f} req/s  p50 {b['add_p50']:6.2f} ms   recall "
              f"p50 {b['recall_p50']:6.2f} ms  p95 {b['recall_p95']:6.2f} ms")
    print(f"middleware CPU per request (thread time, {args.calls} calls): bare app "
          f"{cost['bare']:.1f} us; added by metrics {cost['metrics'] - cost['bare']:.1f} us, "
          f"by tracing {cost['tracing'] - cost['bare']:.1f} us, by both "
          f"{cost['both'] - cost['bare']:.1f} us; a memory span {cost['memory_span']:.1f} us; "
          f"a span helper while off {cost['span_off']:.2f} us")
    off = best["off"]
    # a traced request opens its server span and one memory span (an erasure a few more)
    for mode, extra in (("metrics", cost["metrics"] - cost["bare"]),
                        ("tracing", cost["tracing"] - cost["bare"] + cost["memory_span"])):
        print(f"ratio {mode} CPU added / off recall p50: "
              f"{extra / (off['recall_p50'] * 1000):.4f}, / off add p50: "
              f"{extra / (off['add_p50'] * 1000):.4f} (goal < 0.05)")
    for mode in ("metrics", "tracing"):
        b = best[mode]
        print(f"ratio {mode} / off: add rate {b['add_rate'] / off['add_rate']:.3f} "
              f"(goal >= 0.95), recall p50 {b['recall_p50'] / off['recall_p50']:.3f} "
              f"p95 {b['recall_p95'] / off['recall_p95']:.3f} (goal <= 1.05)")


def cpu_line(label: str, r: dict[str, float]) -> str:
    return (f"  {label:30s} CPU ms per request: client {r['client_ms']:.3f}, server "
            f"{r['server_ms']:.3f} + writer process {r['writer_ms']:.3f}; cores busy: client "
            f"{r['client_cores']:.2f}, server {r['server_cores']:.2f}, writer process "
            f"{r['writer_cores']:.2f}")


def median(runs: list[dict[str, float]]) -> dict[str, float]:
    return sorted(runs, key=lambda r: r["rate"])[len(runs) // 2]


def one_backend(backend: str, args: argparse.Namespace, pg_url: str | None) -> None:
    """Everything the module docstring lists, for one storage backend, printed at once.
    The 32-client loads that are compared (the no-op, the ledger with its writer process,
    the ledger with ADR 0030's writer thread) run in turn, ``--rounds`` times, against
    servers started once; each one's median round is kept, so a burst of other work on
    the machine does not land on one side only."""
    import uuid

    from ledger.application import LedgerApp
    from service.caller import local_operator
    from service.models import SubjectIn
    from service.root import opened_service
    from tests.serving import issue, serving

    queries = [f"topic {i % 97} memory" for i in range(args.queries)]
    secs = args.seconds
    none: dict[str, object] = {"on_similar": None}
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        home = Path(tmp) / "home"
        db = None if pg_url is None else f"{pg_url}?schema=serve_{uuid.uuid4().hex[:8]}"
        LedgerApp.initialize(home, db=db)
        with opened_service(home) as svc:
            svc.register_subject(local_operator(), SubjectIn(ref="bench"))
        print(f"[{backend}] in process ...", file=sys.stderr)
        inproc = in_process(home, args.atoms, queries)
        _, token = issue(home, "bench", "assistant", ["bench"])
        runs: dict[str, list[dict[str, float]]] = {"noop": [], "process": [], "thread": []}
        with noop_server() as (noop_url, noop_pid), serving(home) as server, \
                child_server(home, "thread") as (thread_url, thread_pid):
            pid = server.proc.pid
            # first, while the read models are current: the search for similar memories
            # of each group then catches them up with the groups before it only (after
            # the loads below it would first catch up with all of their atoms at once)
            print(f"[{backend}] HTTP adds on_similar add ...", file=sys.stderr)
            many_add = asyncio.run(http_adds(server.url, token, 32, secs, {}, pid=pid))
            many_varied = asyncio.run(http_adds(server.url, token, 32, secs, {}, pid=pid,
                                                varied=True))
            for n in range(args.rounds):
                print(f"[{backend}] round {n + 1}: no-op, writer process, writer thread ...",
                      file=sys.stderr)
                runs["noop"].append(asyncio.run(http_adds(noop_url, "x", 32, secs, {},
                                                          pid=noop_pid)))
                runs["process"].append(asyncio.run(http_adds(server.url, token, 32, secs,
                                                             none, pid=pid)))
                runs["thread"].append(asyncio.run(http_adds(thread_url, token, 32, secs,
                                                            none, pid=thread_pid)))
            # one no-op run more, so that every round's ledger runs have one before and
            # one after them: the machine's speed drifts within a minute
            closing = asyncio.run(http_adds(noop_url, "x", 32, secs, {}, pid=noop_pid))
            print(f"[{backend}] HTTP adds 1 client, bulk, recall ...", file=sys.stderr)
            one = asyncio.run(http_adds(server.url, token, 1, secs / 2, none, pid=pid))
            bulk = asyncio.run(http_adds(server.url, token, 1, secs, {}, batch=BULK,
                                         pid=pid))
            recall, mcp = asyncio.run(recalls(server.url, token, queries))
            server.stop()
            groups = [line for line in server.output().splitlines()
                      if "server.stopped" in line]
        # the in-process bulk again, on the same ledger right after the HTTP bulk: its
        # subject now holds every atom the loads added, as the HTTP bulk's did, and
        # each command's search for similar memories reads all of them
        print(f"[{backend}] in process bulk, after the loads ...", file=sys.stderr)
        held = int(inproc["added"] + sum(
            r["ok"] for r in [many_add, many_varied, one, bulk, *runs["process"], *runs["thread"]]))
        with opened_service(home) as svc:
            # what the server's processes left behind of the read models' catching up
            # is not this bulk's to pay: it is timed on current read models
            t0 = time.perf_counter()
            svc.proj.catch_up()
            caught_up = time.perf_counter() - t0
            after = bulk_in_process(svc, args.atoms, "bulk after")
    noop, many_none, thread = (median(runs[k]) for k in ("noop", "process", "thread"))
    bulk_rate = bulk["rate"] * BULK
    load = os.getloadavg()
    print(f"== {backend}: load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
          f"{args.atoms} atoms in process, {secs:.0f} s per HTTP run, {args.rounds} rounds "
          "of the compared loads (median kept)")
    print(f"in-process  bulk add {inproc['bulk_rate']:8.0f} atoms/s ({BULK} a command)   "
          f"groups of 32: {inproc['group32_add']:6.0f} atoms/s on_similar add, "
          f"{inproc['group32_none']:6.0f} none   recall p50 {inproc['recall_p50']:6.1f} ms "
          f"p95 {inproc['recall_p95']:6.1f} ms")
    for label, key in (("FastAPI no-op 32 clients (writes nothing)     ", "noop"),
                       ("HTTP add 32 clients, on_similar none         ", "process"),
                       ("  the same, adds on the writer thread (0030) ", "thread")):
        rates = ", ".join(f"{r['rate']:.0f}" for r in runs[key])
        r = median(runs[key])
        print(f"{label} {r['rate']:7.0f} req/s  p50 {r['p50']:6.1f} ms  p95 "
              f"{r['p95']:6.1f} ms  non-201 {r['errors']:.0f}  (rounds: {rates})")
        print(cpu_line("", r))
    for label, r in (("HTTP add  1 client,  on_similar none        ", one),
                     ("HTTP add 32 clients, on_similar add (default)", many_add),
                     ("  the same, varied texts                     ", many_varied)):
        print(f"{label} {r['rate']:7.0f} req/s  p50 {r['p50']:6.1f} ms  p95 "
              f"{r['p95']:6.1f} ms  non-201 {r['errors']:.0f}")
        print(cpu_line("", r))
    print(f"HTTP bulk 1 client, {BULK} a request {bulk_rate:7.0f} atoms/s  p50 "
          f"{bulk['p50']:6.1f} ms  non-201 {bulk['errors']:.0f}")
    if groups:
        g = json.loads(groups[-1])
        print(f"group commit (writer process, every load): {g['grouped_adds']} adds in "
              f"{g['write_groups']} signed commands "
              f"({g['grouped_adds'] / max(1, g['write_groups']):.1f} per command)")
    print(f"HTTP recall     p50 {recall['p50']:6.1f} ms  p95 {recall['p95']:6.1f} ms")
    if mcp is not None:
        print(f"MCP recall tool p50 {mcp['p50']:6.1f} ms  p95 {mcp['p95']:6.1f} ms")
    for status, body in sorted(REFUSED.items()):
        print(f"first answer {status}: {body.decode(errors='replace')}")
    REFUSED.clear()
    print(f"ratio HTTP add (32 clients, on_similar none) / FastAPI no-op: "
          f"{many_none['rate'] / noop['rate']:.3f} (goal >= 0.6); with the writer thread "
          f"{thread['rate'] / noop['rate']:.3f}")
    around = [(a["rate"] + b["rate"]) / 2
              for a, b in zip(runs["noop"], [*runs["noop"][1:], closing], strict=True)]
    per_round = [r["rate"] / n for r, n in zip(runs["process"], around, strict=True)]
    print("  the same, each round against the mean of the no-op runs before and after it: "
          + ", ".join(f"{x:.3f}" for x in per_round)
          + f" (median {statistics.median(per_round):.3f}; closing no-op run "
            f"{closing['rate']:.0f} req/s)")
    print(f"ratio HTTP add (32 clients, on_similar add, the default) / FastAPI no-op: "
          f"{many_add['rate'] / noop['rate']:.3f} (goal >= 0.6); varied texts "
          f"{many_varied['rate'] / noop['rate']:.3f}")
    print(f"ratio HTTP add (32 clients, on_similar add) / in-process groups of 32: "
          f"{many_add['rate'] / inproc['group32_add']:.3f}; on_similar none: "
          f"{many_none['rate'] / inproc['group32_none']:.3f} (the writer's own bound)")
    print(f"in-process  bulk add {after:8.0f} atoms/s again, after the loads (the subject "
          f"then held {held} atoms, as for the HTTP bulk; the read models caught up "
          f"first, in {caught_up:.1f} s)")
    print(f"ratio HTTP bulk / in-process bulk on the same ledger after the loads: "
          f"{bulk_rate / after:.3f} (goal >= 0.7); against the in-process bulk on the new "
          f"ledger (its subject empty at the start): {bulk_rate / inproc['bulk_rate']:.3f}")
    print(f"ratio HTTP recall p95 / in-process recall p95: "
          f"{recall['p95'] / inproc['recall_p95']:.2f} (goal <= 2)")
    sys.stdout.flush()


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--child-serve":
        child_serve(sys.argv[2], int(sys.argv[3]), sys.argv[4])
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--atoms", type=int, default=2000)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--backends", default="sqlite,postgresql",
                    help="comma-separated: sqlite, postgresql (a throwaway server started "
                         "as the tests start one, fsync off, unless --pg)")
    ap.add_argument("--pg", default=None, help="a PostgreSQL URL to use instead")
    ap.add_argument("--overhead", action="store_true",
                    help="measure only the cost of metrics and of tracing (ADR 0054)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds of the compared 32-client loads (--overhead: of each "
                         "mode)")
    ap.add_argument("--on-similar", choices=["add", "none"], default="add",
                    help="--overhead: its adds look for similar memories (add, the API's "
                         "default) or not (none: on_similar null)")
    ap.add_argument("--calls", type=int, default=20000,
                    help="--overhead: calls of the middleware measured in process")
    args = ap.parse_args()
    if args.on_similar == "none":
        ON_SIMILAR["on_similar"] = None
    import logging

    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request otherwise
    if args.overhead:
        overhead(args)
        return
    os.environ.pop("LEDGER_NOW", None)
    for backend in args.backends.split(","):
        if backend == "sqlite":
            one_backend(backend, args, None)
        elif backend == "postgresql":
            sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
            import pgserver

            # its own server unless --pg: the shared one carries other work's load
            with pgserver.given_or_throwaway(args.pg) as url:
                one_backend(backend, args, url)
        else:
            raise SystemExit(f"unknown backend {backend!r}: sqlite or postgresql")


if __name__ == "__main__":
    main()
