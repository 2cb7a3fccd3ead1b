"""What each endpoint sends and how its answer is read, shared by the sync and the async
client (they differ only in how they wait), and the retry rule."""

from __future__ import annotations

import email.utils
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, TypeAdapter

from memory_ledger_client.errors import ApiError, error_for

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

RETRY_STATUSES = (429, 503)
IDEMPOTENT_METHODS = ("GET", "HEAD", "OPTIONS", "PUT", "DELETE")


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request and the reader of its (successful) answer.

    ``idempotent``: sending it twice does what sending it once does, so a 429 or 503 (or
    a connection that never opened) may be retried. GETs are; a POST is when the endpoint
    says so (a recall that rehearses nothing, the execution of an approved plan, an
    Evidence Pack) or when the caller gave an idempotency key."""

    method: str
    path: str
    read: Callable[[httpx.Response], T]
    params: dict[str, Any] = field(default_factory=dict)
    json: Any = None
    content: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    idempotent: bool | None = None

    @property
    def retryable(self) -> bool:
        if self.idempotent is not None:
            return self.idempotent
        return self.method in IDEMPOTENT_METHODS or "Idempotency-Key" in self.headers

    def request_args(self) -> dict[str, Any]:
        args: dict[str, Any] = {"params": {k: v for k, v in self.params.items()
                                           if v is not None} or None,
                                "headers": self.headers or None}
        if self.json is not None:
            args["json"] = self.json
        if self.content is not None:
            args["content"] = self.content
        return args


@dataclass(frozen=True)
class RetryPolicy:
    """At most ``retries`` more tries of a retryable call answered 429 or 503 (or not
    connected at all); the wait is the answer's ``Retry-After`` (seconds or an HTTP date),
    else ``backoff`` doubled each time, never more than ``max_wait`` seconds: a longer
    Retry-After raises at once (the caller decides)."""

    retries: int = 3
    backoff: float = 0.5
    max_wait: float = 30.0

    def wait(self, attempt: int, error: ApiError | None) -> float | None:
        """Seconds to wait before try ``attempt + 1`` (0-based), None to give up."""
        if attempt >= self.retries:
            return None
        if error is not None and error.retry_after is not None:
            return error.retry_after if error.retry_after <= self.max_wait else None
        return float(min(self.backoff * 2.0 ** attempt, self.max_wait))


def retry_after(value: str | None, now: Callable[[], float] = time.time) -> float | None:
    """``Retry-After`` in seconds from now: delta-seconds or an HTTP date (RFC 9110 10.2.3);
    None when absent or unreadable."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, when.timestamp() - now())


def raise_for(response: httpx.Response) -> None:
    """The answer's typed exception, if it is an error."""
    if response.status_code < 400:
        return
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        body = {"title": response.reason_phrase, "status": response.status_code,
                "detail": response.text[:200] or response.reason_phrase}
    raise error_for(response.status_code, body, retry_after(response.headers.get("retry-after")))


def next_link(response: httpx.Response) -> str | None:
    """The URL of the ``Link`` header's rel="next", if any (RFC 8288)."""
    header = str(response.headers.get("link") or "")
    if not header:
        return None
    for part in header.split(","):
        target, _, params = part.partition(";")
        if 'rel="next"' in params.replace(" ", "") or "rel=next" in params.replace(" ", ""):
            return target.strip().lstrip("<").rstrip(">")
    return None


def seg(value: str) -> str:
    """A path segment: an id or ref, quoted so that it stays one segment."""
    return quote(value, safe="")


# ----------------------------------------------------------------------------- readers
def model(cls: type[M]) -> Callable[[httpx.Response], M]:
    return lambda r: cls.model_validate(r.json())


def models(cls: type[M]) -> Callable[[httpx.Response], list[M]]:
    adapter = TypeAdapter(list[cls])  # type: ignore[valid-type]

    def read(r: httpx.Response) -> list[M]:
        found: list[M] = adapter.validate_python(r.json())
        return found

    return read


def as_json(r: httpx.Response) -> Any:
    return r.json()


def as_bytes(r: httpx.Response) -> bytes:
    return r.content


def as_text(r: httpx.Response) -> str:
    return r.text


def body(m: BaseModel) -> dict[str, Any]:
    """A request body: the fields the caller set (the server's defaults stay its own)."""
    data: dict[str, Any] = m.model_dump(mode="json", exclude_unset=True)
    return data


def bodies(items: Sequence[BaseModel]) -> list[dict[str, Any]]:
    return [body(m) for m in items]
