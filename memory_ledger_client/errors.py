"""Problem details (RFC 9457) as typed exceptions: one class per status the HTTP API
answers, so a caller catches what it can act on (``NotFound``, ``Conflict``,
``RateLimited``...) and reads the server's ``detail`` and ``hint`` (the CLI's ``error:``
and ``hint:`` lines) from it."""

from __future__ import annotations

from typing import Any


class ClientError(Exception):
    """Anything this client raises (an answer of the server or no answer at all)."""


class Unreachable(ClientError):
    """The server did not answer: connection refused or cut, or the client's timeout."""


class ApiError(ClientError):
    """The server answered with an error (``application/problem+json``)."""

    status: int = 0

    def __init__(self, status: int, problem: dict[str, Any],
                 retry_after: float | None = None) -> None:
        self.status = status
        self.problem = problem
        self.type: str = str(problem.get("type", "about:blank"))
        self.slug: str = self.type.rsplit("/", 1)[-1]
        self.title: str = str(problem.get("title", ""))
        self.detail: str = str(problem.get("detail", ""))
        hint = problem.get("hint")
        self.hint: str | None = str(hint) if hint is not None else None
        errors = problem.get("errors")
        self.errors: list[dict[str, Any]] = errors if isinstance(errors, list) else []
        self.retry_after = retry_after
        super().__init__(f"{status} {self.slug}: {self.detail}"
                         + (f" (hint: {self.hint})" if self.hint else ""))


class RefusedInput(ApiError):
    """The request was refused for what it carries; nothing was written."""


class BadInput(RefusedInput):
    """400: refused by a rule of the ledger (a value it cannot take, an unknown cursor)."""


class InvalidRequest(RefusedInput):
    """422: the request does not match the API's schema (a field missing, out of range)."""


class Unauthorized(ApiError):
    """401: missing, malformed, expired or revoked credential."""


class Forbidden(ApiError):
    """403: the credential's role may not do this."""


class NotFound(ApiError):
    """404: unknown, or outside the credential's scope (the two read the same)."""


class Conflict(ApiError):
    """409: the ledger's state refuses it (a stale plan digest, a ref in use)."""


class TooLarge(ApiError):
    """413 (body) or 431 (headers): larger than the server's bounds."""


class RateLimited(ApiError):
    """429: too many requests; ``retry_after`` says when to try again."""


class ServerError(ApiError):
    """5xx other than the ones below."""


class VerificationFailed(ServerError):
    """500 ``verification-failed``: the ledger's own data did not verify."""


class Unavailable(ServerError):
    """503: overloaded or its database does not answer; ``retry_after`` says when."""


class TimedOut(ServerError):
    """504: the server cut the answer (a write it queued still completes)."""


_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadInput, 401: Unauthorized, 403: Forbidden, 404: NotFound, 409: Conflict,
    413: TooLarge, 422: InvalidRequest, 429: RateLimited, 431: TooLarge, 503: Unavailable,
    504: TimedOut}


def error_for(status: int, problem: dict[str, Any],
              retry_after: float | None = None) -> ApiError:
    """The typed exception of an error answer."""
    if status == 500 and str(problem.get("type", "")).endswith("/verification-failed"):
        return VerificationFailed(status, problem, retry_after)
    cls = _BY_STATUS.get(status)
    if cls is None:
        cls = ServerError if status >= 500 else ApiError
    return cls(status, problem, retry_after)
