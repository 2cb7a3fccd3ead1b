"""Credentials at the door: the ``Authorization`` header to a :class:`Caller` (ADR 0028).

Every surface that serves requests (the HTTP API, the MCP server over HTTP, the console's
sign-in) turns the header into a caller here, and nowhere else:

* :func:`caller_from_authorization` parses ``Authorization: Bearer <token>`` strictly
  (RFC 6750 §2.1: one scheme, one token of the ``b64token`` alphabet, ASCII, at most
  :data:`MAX_HEADER` bytes) and hands the token to the credential it names: an ``mlt_``
  token to the token store (credentials/tokens.py), a JWT to the OAuth verifier
  (credentials/oauth.py) when the server runs in resource-server mode.
* Every refusal is an :class:`AuthError` whose ``reason`` is a stable code for the log
  (``missing``, ``malformed_header``, ``malformed``, ``unknown``, ``expired``,
  ``revoked``, ``signature``, ``audience``, ...). The HTTP layer answers all of them alike
  (401 and :func:`www_authenticate`), so a caller learns nothing about which tokens
  exist; the reason goes to the log. No message, log line or attribute of these errors
  holds the token or the header.

This module imports nothing heavy: the HTTP layer imports it on every request path.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Protocol

from ledger.errors import LedgerError

if TYPE_CHECKING:
    from service.caller import Caller

__all__ = [
    "MAX_HEADER",
    "AuthError",
    "Authenticator",
    "ExpiredToken",
    "InsufficientScope",
    "InvalidToken",
    "MalformedAuthorization",
    "MissingCredentials",
    "RevokedToken",
    "caller_from_authorization",
    "www_authenticate",
]

MAX_HEADER = 4096
"""Longest ``Authorization`` value accepted, in bytes (a JWT with many claims fits)."""

REALM = "memory-ledger"

# RFC 6750 §2.1: credentials = "Bearer" 1*SP b64token; b64token = 1*( ALPHA / DIGIT /
# "-" / "." / "_" / "~" / "+" / "/" ) *"="
_B64TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
_PRINTABLE_ASCII = re.compile(r"[\x20-\x7e]*")


class AuthError(LedgerError):
    """A request's credential was refused. ``reason``: a stable code for the log;
    ``error``: the RFC 6750 error code for ``WWW-Authenticate`` (None: no credential
    was offered, RFC 6750 §3.1); ``token_id``: the token's id when the refusal concerns a
    stored token (never its secret)."""

    error: str | None = "invalid_token"
    status = 401

    def __init__(self, message: str, hint: str | None = None, *, reason: str = "invalid",
                 token_id: str | None = None) -> None:
        super().__init__(message, hint)
        self.reason = reason
        self.token_id = token_id


class MissingCredentials(AuthError):
    """No ``Authorization`` header (or an empty one)."""

    error = None

    def __init__(self) -> None:
        super().__init__("this request carries no credential", reason="missing",
                         hint="send `Authorization: Bearer TOKEN` with a token from "
                              "`ledger tokens create`")


class MalformedAuthorization(AuthError):
    """The header is not one ``Bearer`` token (RFC 6750 ``invalid_request``)."""

    error = "invalid_request"


class InvalidToken(AuthError):
    """Malformed, unknown, or not signed by a trusted key for this resource."""


class ExpiredToken(AuthError):
    """Past its expiry (or, for a JWT, not yet valid)."""


class RevokedToken(AuthError):
    """Revoked by an operator (``ledger tokens revoke``)."""


class InsufficientScope(AuthError):
    """A valid token that grants no role of this ledger (RFC 6750 ``insufficient_scope``,
    HTTP 403)."""

    error = "insufficient_scope"
    status = 403


class Authenticator(Protocol):
    """What turns a bearer token into a caller: the token store or the OAuth verifier."""

    def authenticate(self, token: str) -> Caller: ...


def _malformed(message: str) -> MalformedAuthorization:
    return MalformedAuthorization(message, reason="malformed_header",
                                  hint="send exactly `Authorization: Bearer TOKEN`, one "
                                       "token, ASCII")


def _bearer_token(header_value: str | None) -> str:
    """The one token of an ``Authorization: Bearer`` value, or raise (never echoing it)."""
    if header_value is None or not header_value.strip():
        raise MissingCredentials
    if len(header_value) > MAX_HEADER or len(header_value.encode("utf-8")) > MAX_HEADER:
        raise _malformed(f"the Authorization header is longer than {MAX_HEADER} bytes")
    if not header_value.isascii() or not _PRINTABLE_ASCII.fullmatch(header_value):
        raise _malformed("the Authorization header holds characters outside printable ASCII")
    parts = header_value.strip(" ").split(" ")
    scheme, rest = parts[0], [p for p in parts[1:] if p]
    if scheme.lower() != "bearer":
        raise _malformed("the Authorization scheme is not Bearer")
    if len(rest) != 1:
        raise _malformed(f"the Authorization header holds {len(rest)} tokens, not one")
    token = rest[0]
    if not _B64TOKEN.fullmatch(token):
        raise _malformed("the bearer token holds characters a token cannot have "
                         "(RFC 6750 b64token)")
    return token


def _looks_like_jwt(token: str) -> bool:
    return token.count(".") == 2 and not token.startswith("mlt_")


def caller_from_authorization(header_value: str | None, store: Authenticator | None,
                              oauth: Authenticator | None = None) -> Caller:
    """The caller an ``Authorization`` header value proves, or an :class:`AuthError`.

    ``store`` checks the ledger's own ``mlt_`` tokens (:class:`credentials.tokens.TokenStore`),
    ``oauth`` checks JWT access tokens (:class:`credentials.oauth.OAuthVerifier`); either may
    be None when that kind of credential is not configured. Both do I/O or CPU work of
    milliseconds on a first sight of a token: call this from a worker thread, not on an
    event loop.
    """
    token = _bearer_token(header_value)
    if token.startswith("mlt_"):
        if store is None:
            raise InvalidToken("ledger tokens are not accepted by this server",
                               hint="use an OAuth access token for this server",
                               reason="unknown")
        return store.authenticate(token)
    if oauth is not None and _looks_like_jwt(token):
        return oauth.authenticate(token)
    raise InvalidToken("the bearer token is of no kind this server accepts",
                       hint="use a token printed by `ledger tokens create`"
                       + (" or an OAuth access token" if oauth is not None else ""),
                       reason="malformed")


def cached_caller(header_value: str | None, store: Authenticator | None) -> Caller | None:
    """The caller of a well-formed ``Authorization`` value whose ledger token ``store``
    checked moments ago (no I/O, no hashing: callable on an event loop), else None: the
    caller then goes through :func:`caller_from_authorization` on a worker thread."""
    if store is None or header_value is None:
        return None
    cached = getattr(store, "authenticate_cached", None)
    if cached is None:
        return None
    try:
        token = _bearer_token(header_value)
    except AuthError:
        return None
    found: Caller | None = cached(token)
    return found


def www_authenticate(error: AuthError | None = None, resource_metadata: str | None = None,
                     scope: str | None = None) -> str:
    """The ``WWW-Authenticate`` value for a refusal (RFC 6750 §3, RFC 9728 §5.1).

    Generic on purpose: ``error`` names the RFC 6750 code only, never the reason, so the
    answer does not tell an unknown token from a revoked one. ``resource_metadata``: the
    URL of the protected-resource metadata document in OAuth mode.
    """
    params = [f'realm="{REALM}"']
    if error is not None and error.error is not None:
        params.append(f'error="{error.error}"')
    if scope is not None:
        params.append(f'scope="{scope}"')
    if resource_metadata is not None:
        params.append(f'resource_metadata="{resource_metadata}"')
    return "Bearer " + ", ".join(params)
