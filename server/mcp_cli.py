"""``ledger mcp``: the MCP server on stdio, registered on the ``ledger`` CLI.

Imports stay inside the command: ``ledger --help`` must not pay for the MCP SDK
(ADR 0026, tests/test_startup.py).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer


def register(cli: typer.Typer, home_of: Callable[[], Path | None]) -> None:
    @cli.command("mcp")
    def mcp(
        token_file: Annotated[Path | None, typer.Option(
            "--token-file", help="A file whose first line is the token (else LEDGER_TOKEN).")]
        = None,
    ) -> None:
        """Serve the MCP server on stdin/stdout, for a desktop client (Claude, Cursor...).

        Authenticated: the token (from `ledger tokens create`) comes from LEDGER_TOKEN or
        --token-file and is checked again on every request; without one it refuses to
        start. Only the protocol goes to stdout; logs go to stderr. Over HTTP the same
        server is at /mcp of `ledger serve`.

        Example: LEDGER_TOKEN=mlt_... ledger mcp --home ~/assistant-ledger
        """
        from server.mcp_server import run_stdio

        run_stdio(home_of(), token_file)
