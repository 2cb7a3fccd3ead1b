"""Starting the server of ``ledger serve`` (the command is ``cli/serve.py``): the checks
before it listens, uvicorn's app factory and each process's request authenticator."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

HOME_ENV = "LEDGER_SERVE_HOME"
JWKS_ENV = "LEDGER_SERVE_JWKS"
AUDIENCE_ENV = "LEDGER_SERVE_AUDIENCE"
ISSUER_ENV = "LEDGER_SERVE_ISSUER"


def serve(home: Path | None, host: str, port: int, workers: int, jwks: Path | None,
          audience: str | None, issuer: str | None) -> None:
    """Check the configuration, then run uvicorn until SIGTERM (``ledger serve``)."""
    import uvicorn

    from ledger.errors import EnvironmentProblem, InputError
    from ledger.home import Config, find_home

    home = find_home(home)
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
    if workers > 1:  # ADR 0032: said at start, not discovered as random sign-outs
        sys.stderr.write(
            f"note: with --workers {workers}, a console sign-in lives in the process that made "
            "it, and a browser request that reaches another process is asked to sign in "
            "again: route /console/ with sticky sessions (docs/deploy.md); the API and MCP "
            "are not affected\n")
    os.environ[HOME_ENV] = str(home)
    for env, value in ((JWKS_ENV, jwks), (AUDIENCE_ENV, audience), (ISSUER_ENV, issuer)):
        if value is not None:
            os.environ[env] = str(value)
        else:
            os.environ.pop(env, None)
    if jwks is not None:
        build_authenticate(home)  # a bad JWKS file fails here, not in every worker
    uvicorn.run("server.launch:app_from_env", factory=True, host=host, port=port,
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
