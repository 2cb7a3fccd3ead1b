"""Errors as RFC 9457 problem details, with the CLI's wording (ADR 0030).

One table maps the ledger's error vocabulary (``ledger/errors.py``) to HTTP statuses, as
``cli/main.py`` maps it to exit codes: the ``detail`` is the CLI's ``error:`` line and
``hint`` its ``hint:`` line. Nothing else of an exception reaches a response.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.responses import JSONResponse

from ledger.errors import (
    ClockError,
    ConflictError,
    EnvironmentProblem,
    InputError,
    LedgerError,
    NotFound,
    VerificationFailed,
)

if TYPE_CHECKING:
    from credentials.auth import AuthError

PROBLEM_JSON = "application/problem+json"
BASE = "https://memory-ledger.invalid/problems/"


class Overloaded(LedgerError):
    """Too many writes are waiting; try again shortly (HTTP 503). Raised by the server
    itself (:class:`server.backend.Backend`'s bounded queue), so it is defined here, beside
    the table that answers it, and the backend imports it."""


def status_of(e: LedgerError) -> tuple[int, str]:
    """(HTTP status, problem type slug) of a ledger error."""
    from credentials.auth import AuthError
    from service.facade import Forbidden

    if isinstance(e, AuthError):
        return e.status, "unauthorized" if e.status == 401 else "insufficient-scope"
    if isinstance(e, Forbidden):
        return 403, "forbidden"
    if isinstance(e, NotFound):
        return 404, "not-found"
    if isinstance(e, ConflictError):
        return 409, "conflict"
    if isinstance(e, Overloaded):
        return 503, "overloaded"
    if isinstance(e, EnvironmentProblem):
        return 503, "unavailable"
    if isinstance(e, VerificationFailed):
        return 500, "verification-failed"
    if isinstance(e, (InputError, ClockError)):
        return 400, "bad-input"
    return 400, "bad-input"


TITLES = {400: "Bad input", 401: "Not authenticated", 403: "Not allowed",
          404: "Not found", 409: "Conflict", 413: "Request too large",
          415: "Unsupported media type", 422: "Invalid request", 429: "Too many requests",
          431: "Request headers too large",
          500: "Verification failed", 503: "Unavailable", 504: "Took too long"}


def problem(status: int, detail: str, *, slug: str | None = None, hint: str | None = None,
            headers: dict[str, str] | None = None, **extra: Any) -> JSONResponse:
    body: dict[str, Any] = {"type": BASE + (slug or str(status)),
                            "title": TITLES.get(status, "Error"), "status": status,
                            "detail": detail}
    if hint:
        body["hint"] = hint
    body.update(extra)
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON, headers=headers)


def from_error(e: LedgerError) -> JSONResponse:
    from credentials.auth import AuthError

    status, slug = status_of(e)
    headers: dict[str, str] = {}
    if isinstance(e, AuthError):
        headers["WWW-Authenticate"] = _www_authenticate(e)
    if status == 503:
        headers["Retry-After"] = "1"
    if status == 401:  # which tokens exist, expired or were revoked is nobody's business
        return problem(401, "missing, malformed, expired or revoked credential", slug=slug,
                       hint="send Authorization: Bearer TOKEN (`ledger tokens create`)",
                       headers=headers)
    return problem(status, str(e), slug=slug, hint=e.hint, headers=headers)


def _www_authenticate(e: AuthError) -> str:
    from credentials.auth import www_authenticate

    return www_authenticate(e)
