"""``/metrics`` of ``ledger serve``: the Prometheus exposition (ADR 0054).

Counted in every server process as things happen (request latency by route, method and
status; the writer's queue depth and group-commit sizes; commands the writer committed;
recall latency) and, with ``--workers N``, written to the private folder
``PROMETHEUS_MULTIPROC_DIR`` that ``ledger serve`` makes fresh at each start
(server/launch.py), so any process answers a scrape with the sum over all of them. The
state of the ledger (read-model lag, erasure requests open and overdue, how far the
witnesses' cosignatures trail the log, the current KEK epoch's age) is read once per
scrape from the ledger itself.

Labels are route templates (``/v1/atoms/{atom}``, never the path), methods and status
codes: no subject id, no atom id, no content. ``/metrics`` answers only an operator or
auditor credential (an assistant's is refused with 403), outside the OpenAPI document.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from fastapi import FastAPI, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, Counter, Gauge, Histogram

if TYPE_CHECKING:
    from service.facade import MemoryService

T = TypeVar("T")

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
SWITCH_ENV = "LEDGER_METRICS"  # "off": no counting, no /metrics (ledger serve --no-metrics)
ROLES = ("operator", "auditor")

LATENCY = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
           30.0)
REQUESTS = Histogram("ledger_http_request_duration_seconds",
                     "HTTP requests by route template, method and status, and their latency",
                     ["route", "method", "status"], buckets=LATENCY)
RECALL = Histogram("ledger_recall_duration_seconds",
                   "Recall latency (HTTP and MCP), rehearsal included", buckets=LATENCY)
QUEUE = Gauge("ledger_writer_queue_depth", "Writes waiting for the writer thread",
              multiprocess_mode="livesum")
GROUP = Histogram("ledger_group_commit_size", "Atom adds written as one signed command",
                  buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256))
COMMANDS = Counter("ledger_signed_commands", "Commands the writer committed (a group of adds "
                                             "is one)")


def enabled() -> bool:
    return os.environ.get(SWITCH_ENV, "on").lower() not in ("off", "0", "false", "no")


def request_done(route: str, method: str, status: int, seconds: float) -> None:
    REQUESTS.labels(route, method, str(status)).observe(seconds)


# ----------------------------------------------------------------------------- exposition
def exposition(svc: MemoryService, caller: Any) -> bytes:
    """The text exposition: the counters of every process, then the ledger's state."""
    from prometheus_client import REGISTRY, CollectorRegistry, generate_latest

    if os.environ.get(MULTIPROC_ENV):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]  # untyped in prometheus-client
        counted = generate_latest(registry)
    else:
        counted = generate_latest(REGISTRY)
    state = CollectorRegistry()
    state.register(_State(_ledger_state(svc, caller)))
    return counted + generate_latest(state)


def _ledger_state(svc: MemoryService, caller: Any) -> dict[str, float]:
    out: dict[str, float] = {"lag": float(svc.read_models_behind(caller))}
    requests = svc.list_requests(caller)
    out["open"] = float(sum(1 for r in requests if r.status in ("open", "overdue",
                                                                "partial")))
    out["overdue"] = float(sum(1 for r in requests if r.overdue
                               and r.status in ("open", "overdue", "partial")))
    lag = svc.witness_lag(caller)
    if lag is not None:
        out["witness_lag"] = float(lag[0])
        if lag[1] is not None:
            out["witness_age"] = lag[1]
    current = [e for e in svc.kek_epochs(caller) if e.state == "active"]
    if current:
        started = datetime.fromisoformat(current[-1].started_at.replace("Z", "+00:00"))
        out["kek_age"] = (datetime.now(UTC) - started).total_seconds()
    return out


class _State:
    def __init__(self, values: dict[str, float]) -> None:
        self.values = values

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        yield GaugeMetricFamily("ledger_read_model_lag_events",
                                "Events the slowest read model is behind the log",
                                value=self.values["lag"])
        requests = GaugeMetricFamily("ledger_erasure_requests",
                                     "Erasure requests not yet completed, and those of them "
                                     "past their deadline", labels=["state"])
        requests.add_metric(["open"], self.values["open"])
        requests.add_metric(["overdue"], self.values["overdue"])
        yield requests
        if "witness_lag" in self.values:
            yield GaugeMetricFamily("ledger_witness_cosigning_lag_events",
                                    "Events appended after the largest checkpoint a witness "
                                    "cosigned", value=self.values["witness_lag"])
        if "witness_age" in self.values:
            yield GaugeMetricFamily("ledger_witness_cosigned_age_seconds",
                                    "Seconds since a witness last cosigned the largest "
                                    "cosigned checkpoint", value=self.values["witness_age"])
        if "kek_age" in self.values:
            yield GaugeMetricFamily("ledger_kek_epoch_age_seconds",
                                    "Age of the current KEK epoch", value=self.values["kek_age"])


# ----------------------------------------------------------------------------- the route
class Reads(Protocol):
    """What the route needs of :class:`server.backend.Backend`: a read on the reader's
    service (a Protocol, so that the backend, which counts here, is not imported back)."""

    async def read(self, fn: Callable[[MemoryService], T]) -> T: ...


def add_route(api: FastAPI, backend: Reads) -> None:
    """``GET /metrics`` (outside the OpenAPI document) and, in multiprocess mode, this
    process's gauges marked dead when it stops."""
    from ledger.errors import LedgerError
    from server import problems
    from service.caller import Caller

    @api.get("/metrics", include_in_schema=False)
    async def metrics(request: Request) -> Response:
        caller = request.scope.get("state", {}).get("caller")
        if not isinstance(caller, Caller):
            return problems.problem(401, "this request carries no credential",
                                    slug="unauthenticated")
        if caller.role not in ROLES:
            return problems.problem(403, "/metrics answers an operator or auditor "
                                         "credential, not an assistant's",
                                    slug="forbidden")
        try:
            body = await backend.read(lambda s: exposition(s, caller))
        except LedgerError as e:
            return problems.from_error(e)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    @contextlib.asynccontextmanager
    async def process_gone() -> AsyncIterator[None]:
        try:
            yield
        finally:
            if os.environ.get(MULTIPROC_ENV):
                from prometheus_client import multiprocess

                multiprocess.mark_process_dead(os.getpid())  # type: ignore[no-untyped-call]

    api.state.lifespans.append(process_gone)
