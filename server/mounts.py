"""What `ledger serve` mounts beside the HTTP API: the MCP server at /mcp and the console
at /console."""

from __future__ import annotations

from typing import Any

from server.backend import Backend


def mount_all(api: Any, backend: Backend) -> None:
    """Mount the MCP server and the console on the FastAPI app ``api``."""
    from credentials.tokens import TokenStore
    from ledger.home import Config
    from server.console.app import console_app
    from server.mcp_server import mount_mcp

    mount_mcp(api, backend)  # /mcp, streamable HTTP; its session manager in the lifespan
    store = TokenStore.open(Config.load(backend.home))
    api.mount("/console", console_app(backend, store))
