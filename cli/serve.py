"""``ledger serve`` and ``ledger mcp``: the HTTP/MCP server and the MCP server on stdio.

Imports stay inside the commands: ``ledger --help`` must not pay for FastAPI, uvicorn or
the MCP SDK (ADR 0026, tests/test_startup.py).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer


def register(cli: typer.Typer, home_of: Callable[[], Path | None]) -> None:
    @cli.command("serve")
    def serve(
        host: Annotated[str, typer.Option(help="Address to listen on (loopback by default; "
                                               "put TLS at a reverse proxy, docs/deploy.md).")]
        = "127.0.0.1",
        port: Annotated[int, typer.Option(help="TCP port.")] = 8765,
        workers: Annotated[int, typer.Option(
            help="Server processes (each with its own reader and writer thread); several "
                 "need PostgreSQL or share SQLite's write lock.")] = 1,
        jwks: Annotated[Path | None, typer.Option(
            help="OAuth 2.1 resource-server mode: a JWKS file whose keys sign the access "
                 "tokens (checked offline).")] = None,
        audience: Annotated[str | None, typer.Option(
            help="With --jwks: this server's URL, which tokens must name in 'aud' "
                 "(RFC 8707).")] = None,
        issuer: Annotated[str | None, typer.Option(help="With --jwks: the issuer to pin.")]
        = None,
        metrics: Annotated[bool, typer.Option(
            help="Count requests, writes and recalls for GET /metrics (Prometheus; an "
                 "operator or auditor token reads it).")] = True,
    ) -> None:
        """Serve the HTTP API (/v1), the MCP server (/mcp) and the console (/console).

        Refuses to start without a credential: create one with `ledger tokens create`, or
        give --jwks and --audience. Stops gracefully on SIGTERM: requests in flight finish.
        Says on stderr when it answers and when it stopped. Traces go where the standard
        OTEL_* variables say (docs/deploy.md).

        Example: ledger tokens create asst-1 --role assistant --subject user_9f4e; ledger serve
        """
        from server.launch import serve as run

        run(home_of(), host, port, workers, jwks, audience, issuer, metrics)

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
