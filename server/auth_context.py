"""The authenticated caller of the request being served (set by the server's auth layer).

HTTP routes get the caller as a dependency; handlers that the app does not call directly
(the MCP server's tools, mounted at ``/mcp``) read it from :data:`CALLER`, which the
bearer-auth middleware in :mod:`server.app` sets for the whole request.
"""

from __future__ import annotations

from contextvars import ContextVar

from service.caller import Caller

CALLER: ContextVar[Caller | None] = ContextVar("ledger_caller", default=None)


def current_caller() -> Caller:
    caller = CALLER.get()
    if caller is None:  # a route mounted without the auth middleware: a bug, refuse
        from credentials.auth import AuthError

        raise AuthError("no authenticated caller for this request")
    return caller
