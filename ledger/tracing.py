"""Spans for the code below the server (ADR 0054): the erasure's steps, the memory use cases.

Only ``opentelemetry-api`` is used here, and only once a surface turned tracing on
(:func:`enable`, called by ``server/telemetry.py`` when an ``OTEL_*`` exporter is
configured). Until then :func:`span` returns one shared no-op context and imports
nothing, so tracing that is off costs a function call and an attribute read, and the CLI
pays no import for it (ADR 0026).

What a span carries is decided where it is opened: names, counts, durations, route
names, ids where the GenAI memory conventions allow one (``gen_ai.memory.id``). Never
content (texts, queries, reasons), never a subject's ref.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol, TypeVar

T = TypeVar("T")

TRACER_NAME = "memory-ledger"
Attribute = str | bool | int | float | list[str] | list[int]


class SpanLike(Protocol):
    def set_attribute(self, key: str, value: Any) -> None: ...

    def add_event(self, name: str, attributes: Any = None) -> None: ...


class _NoSpan:
    """What :func:`span` yields while tracing is off: accepts and drops everything."""

    def set_attribute(self, key: str, value: Any) -> None:
        return None

    def add_event(self, name: str, attributes: Any = None) -> None:
        return None


NO_SPAN = _NoSpan()
_OFF: contextlib.AbstractContextManager[SpanLike] = contextlib.nullcontext(NO_SPAN)
_tracer: Any = None  # an opentelemetry Tracer once enabled


def enable(provider: Any = None) -> None:
    """Open spans from now on, through ``provider`` (an SDK TracerProvider), or the
    global one when None."""
    global _tracer
    from opentelemetry import trace

    _tracer = trace.get_tracer(TRACER_NAME, tracer_provider=provider)


def disable() -> None:
    global _tracer
    _tracer = None


def enabled() -> bool:
    return _tracer is not None


def span(name: str, attributes: Mapping[str, Attribute] | None = None,
         kind: str = "internal") -> contextlib.AbstractContextManager[SpanLike]:
    """A span around a block, child of the current one; ``kind``: internal, server or
    client. A no-op while tracing is off. An exception leaving the block marks the span
    with ``error.type`` (its class only: an exception's text may quote content)."""
    if _tracer is None:
        return _OFF
    return _open(name, attributes, kind)


@contextlib.contextmanager
def _open(name: str, attributes: Mapping[str, Attribute] | None, kind: str
          ) -> Iterator[SpanLike]:
    from opentelemetry.trace import SpanKind, Status, StatusCode

    kinds = {"internal": SpanKind.INTERNAL, "server": SpanKind.SERVER,
             "client": SpanKind.CLIENT}
    with _tracer.start_as_current_span(name, kind=kinds[kind],
                                       attributes=dict(attributes or {}),
                                       record_exception=False,
                                       set_status_on_exception=False) as s:
        try:
            yield s
        except BaseException as e:
            s.set_attribute("error.type", type(e).__name__)
            s.set_status(Status(StatusCode.ERROR))
            raise


def carry(fn: Callable[..., T]) -> Callable[..., T]:
    """``fn`` bound to the current trace context, to run on another thread (the server's
    reader and writer threads), so the spans it opens are children of this one. ``fn``
    itself while tracing is off."""
    if _tracer is None:
        return fn
    from opentelemetry import context

    ctx = context.get_current()

    def run(*args: Any, **kwargs: Any) -> T:
        token = context.attach(ctx)
        try:
            return fn(*args, **kwargs)
        finally:
            context.detach(token)

    return run


def traced(name: str, describe: Callable[..., Mapping[str, Attribute]] | None = None
           ) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """A function run inside a span ``name``; ``describe(result, *args, **kwargs)`` gives
    the span's attributes from what it returned (counts, route names: never content). The
    function's behaviour and result are untouched; while tracing is off it is called
    straight away."""

    def wrap(fn: Callable[..., T]) -> Callable[..., T]:
        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> T:
            if _tracer is None:
                return fn(*args, **kwargs)
            with span(name) as s:
                result = fn(*args, **kwargs)
                if describe is not None:
                    for key, value in describe(result, *args, **kwargs).items():
                        s.set_attribute(key, value)
                return result

        return run

    return wrap
