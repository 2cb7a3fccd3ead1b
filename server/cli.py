"""``ledger serve``: mounted on the ``ledger`` CLI by :func:`register`.

Imports stay inside the command: ``ledger --help`` must not pay for FastAPI, uvicorn or
the MCP SDK (ADR 0026).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

HOME_ENV = "LEDGER_SERVE_HOME"
JWKS_ENV = "LEDGER_SERVE_JWKS"
AUDIENCE_ENV = "LEDGER_SERVE_AUDIENCE"
ISSUER_ENV = "LEDGER_SERVE_ISSUER"


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
    ) -> None:
        """Serve the HTTP API (/v1), the MCP server (/mcp) and the console (/console).

        Refuses to start without a credential: create one with `ledger tokens create`, or
        give --jwks and --audience. Stops gracefully on SIGTERM: requests in flight finish.

        Example: ledger tokens create asst-1 --role assistant --subject user_9f4e; ledger serve
        """
        import uvicorn

        from ledger.errors import EnvironmentProblem, InputError
        from ledger.home import Config, find_home

        home = find_home(home_of())
        config = Config.load(home)
        if (jwks is None) != (audience is None):
            raise InputError("--jwks and --audience go together",
                             hint="ledger serve --jwks keys.json --audience https://ledger.example")
        if jwks is None and not _has_tokens(config):
            raise EnvironmentProblem(
                "no credential is configured: the server refuses to start without one",
                hint="create one: ledger tokens create NAME --role assistant --subject REF")
        if workers < 1:
            raise InputError("--workers must be at least 1")
        os.environ[HOME_ENV] = str(home)
        for env, value in ((JWKS_ENV, jwks), (AUDIENCE_ENV, audience), (ISSUER_ENV, issuer)):
            if value is not None:
                os.environ[env] = str(value)
            else:
                os.environ.pop(env, None)
        if jwks is not None:
            build_authenticate(home)  # a bad JWKS file fails here, not in every worker
        uvicorn.run("server.cli:app_from_env", factory=True, host=host, port=port,
                    workers=workers, log_level="warning", access_log=False,
                    timeout_graceful_shutdown=30, limit_concurrency=512,
                    h11_max_incomplete_event_size=16 * 1024, server_header=False)


def _has_tokens(config: Any) -> bool:
    from service.tokens import TokenStore

    with TokenStore.open(config) as store:
        return store.has_active()


def build_authenticate(home: Path) -> Callable[[str | None], Any]:
    """The request authenticator of a server process: bearer tokens of the home's token
    store, or (OAuth mode) JWT access tokens checked against the JWKS file."""
    from ledger.home import Config
    from service.auth import cached_caller, caller_from_authorization
    from service.tokens import TokenStore

    config = Config.load(home)
    oauth = None
    if os.environ.get(JWKS_ENV):
        from service.oauth import OAuthVerifier

        oauth = OAuthVerifier.from_file(Path(os.environ[JWKS_ENV]),
                                        audience=os.environ[AUDIENCE_ENV],
                                        issuer=os.environ.get(ISSUER_ENV))
    store = TokenStore.open(config)
    return RequestAuthenticator(
        lambda header: caller_from_authorization(header, store, oauth),
        lambda header: cached_caller(header, store))


class RequestAuthenticator:
    """Called with an ``Authorization`` value (on a worker thread: a token's first check
    is an argon2id hash); :meth:`cached` answers on the event loop for a token checked
    moments ago, None otherwise."""

    def __init__(self, check: Callable[[str | None], Any],
                 cached: Callable[[str | None], Any]) -> None:
        self.check = check
        self.cached = cached

    def __call__(self, header: str | None) -> Any:
        return self.check(header)


def app_from_env() -> Any:
    """uvicorn's app factory (one call per worker process)."""
    from server.app import Settings, create_app
    from server.mounts import mount_all

    home = Path(os.environ[HOME_ENV])
    metadata = None
    if os.environ.get(JWKS_ENV):
        from service.oauth import resource_metadata

        metadata = resource_metadata(os.environ[AUDIENCE_ENV], os.environ.get(ISSUER_ENV))
    return create_app(Settings(home=home, resource_metadata=metadata),
                      build_authenticate(home), mounts=mount_all)
