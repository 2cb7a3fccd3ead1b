"""Starting the server of ``ledger serve`` (the command is ``cli/serve.py``): the checks
before it listens, uvicorn's app factory and each process's request authenticator."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

HOME_ENV = "LEDGER_SERVE_HOME"
FLEET_ENV = "LEDGER_SERVE_FLEET"
JWKS_ENV = "LEDGER_SERVE_JWKS"
AUDIENCE_ENV = "LEDGER_SERVE_AUDIENCE"
ISSUER_ENV = "LEDGER_SERVE_ISSUER"
MAX_HEADER_READ = 1024 * 1024  # bytes of an incomplete header block h11 buffers
METRICS_ENV = "LEDGER_METRICS"  # server/metrics.py's switch
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def serve(home: Path | None, host: str, port: int, workers: int, jwks: Path | None,
          audience: str | None, issuer: str | None, metrics: bool = True) -> None:
    """Check the configuration, then run uvicorn until SIGTERM (``ledger serve``); one
    line on stderr once it answers, one when it stopped (ADR 0054)."""
    import uvicorn

    from ledger.errors import EnvironmentProblem, InputError
    from ledger.home import find_home
    from service.fleet import find_fleet, is_fleet

    given = home if home is not None else Path(os.environ.get("LEDGER_HOME") or ".ledger")
    fleet = is_fleet(given)  # a fleet home: one ledger per tenant (ADR 0061)
    home = find_fleet(home) if fleet else find_home(home)
    if fleet and jwks is not None:
        raise InputError("a fleet takes its own tokens only (ledger tenants tokens create); "
                         "--jwks serves one ledger", hint="drop --jwks")
    if (jwks is None) != (audience is None):
        raise InputError("--jwks and --audience go together",
                         hint="ledger serve --jwks keys.json --audience https://ledger.example")
    if jwks is None and not _has_tokens(home, fleet):
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
    os.environ[FLEET_ENV] = "1" if fleet else "0"
    for env, value in ((JWKS_ENV, jwks), (AUDIENCE_ENV, audience), (ISSUER_ENV, issuer)):
        if value is not None:
            os.environ[env] = str(value)
        else:
            os.environ.pop(env, None)
    if jwks is not None:
        build_authenticate(home)  # a bad JWKS file fails here, not in every worker
    from server.telemetry import configure_from_env

    configure_from_env()  # OTEL_* asking for an exporter not installed fails here
    os.environ[METRICS_ENV] = "on" if metrics else "off"
    counted = tempfile.mkdtemp(prefix="ledger-metrics-") if metrics else None  # mode 0700
    if counted is not None:  # fresh at each start: no counts of an earlier server
        os.environ[MULTIPROC_ENV] = counted
    else:
        os.environ.pop(MULTIPROC_ENV, None)
    auth = f"OAuth access tokens (audience {audience})" if jwks is not None \
        else "bearer tokens"
    from server import writer_process

    ready = _Ready(host, port, auth, workers)
    ready.start()
    # uvicorn re-raises the signal that stopped it once it shut down gracefully: caught
    # here, so the folder is removed and the line said, then raised again for the exit
    # status (-SIGTERM) that says how it stopped
    stopped_by: list[int] = []

    def stop_here(sig: int, _frame: Any) -> None:
        stopped_by.append(sig)
        raise _Stopped()

    previous = {sig: signal.signal(sig, stop_here) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        if workers == 1 and not fleet:  # its start-up overlaps this process's (ADR 0073)
            writer_process.start_early(home)
        uvicorn.run("server.launch:app_from_env", factory=True, host=host, port=port,
                    workers=workers, log_level="warning", access_log=False,
                    timeout_graceful_shutdown=30, limit_concurrency=512,
                    # h11 refuses, as a plain 400, only header blocks still incomplete
                    # past this size; the app answers 431 for any block over 16 KiB
                    # (server/app.py Limits), however it was read (ADR 0057)
                    h11_max_incomplete_event_size=MAX_HEADER_READ, server_header=False)
    except _Stopped:
        pass
    finally:
        ready.stop()
        writer_process.stop_unclaimed()
        if counted is not None:
            shutil.rmtree(counted, ignore_errors=True)
        if ready.said:
            sys.stderr.write(f"ledger serve: stopped ({ready.url})\n")
            sys.stderr.flush()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if stopped_by:  # at its default: a server started with SIGINT ignored (a background
        # job) that a SIGINT stopped all the same exits saying so, not with 0
        signal.signal(stopped_by[0], signal.SIG_DFL)
        signal.raise_signal(stopped_by[0])


class _Stopped(Exception):
    pass


class _Ready(threading.Thread):
    """Polls the server's health route until it answers, then says so in one line."""

    def __init__(self, host: str, port: int, auth: str, workers: int) -> None:
        super().__init__(name="ledger-ready", daemon=True)
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{port}"
        local = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)  # noqa: S104  # the any-address, polled on loopback
        self.target = (local, port)
        self.auth = auth
        self.workers = workers
        self.said = False
        self.done = threading.Event()

    def run(self) -> None:
        import http.client

        while not self.done.wait(0.1):
            conn = http.client.HTTPConnection(*self.target, timeout=2)
            try:
                conn.request("GET", "/v1/health")
                if conn.getresponse().status != 200:
                    continue
            except OSError:
                continue
            finally:
                conn.close()
            if self.done.is_set():
                return
            procs = f"; {self.workers} workers" if self.workers > 1 else ""
            sys.stderr.write(f"ledger serve: listening on {self.url} (API {self.url}/v1, "
                             f"console {self.url}/console/, MCP {self.url}/mcp; "
                             f"authentication: {self.auth}{procs}); Ctrl-C or SIGTERM "
                             "stops it\n")
            sys.stderr.flush()
            self.said = True
            return

    def stop(self) -> None:
        self.done.set()


def _has_tokens(home: Path, fleet: bool) -> bool:
    from credentials.tokens import TokenStore
    from ledger.home import Config

    if fleet:
        from credentials.fleet import FleetWithTokens

        with FleetWithTokens.open(home) as f:
            return f.tokens.has_active()
    with TokenStore.open(Config.load(home)) as store:
        return store.has_active()


def build_authenticate(home: Path) -> Callable[[str | None], Any]:
    """The request authenticator of a server process: bearer tokens of the home's token
    store, or (OAuth mode) JWT access tokens checked against the JWKS file."""
    from credentials.auth import cached_caller, caller_from_authorization
    from credentials.tokens import TokenStore
    from ledger.home import Config

    config = Config.load(home)
    oauth = None
    if os.environ.get(JWKS_ENV):
        from credentials.oauth import OAuthVerifier

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
    from server.telemetry import configure_from_env

    configure_from_env()  # this process's exporter, from OTEL_*

    home = Path(os.environ[HOME_ENV])
    if os.environ.get(FLEET_ENV) == "1":
        from server.tenants import FleetApp

        return FleetApp(home)
    metadata = None
    if os.environ.get(JWKS_ENV):
        from credentials.oauth import resource_metadata

        metadata = resource_metadata(os.environ[AUDIENCE_ENV], os.environ.get(ISSUER_ENV))
    return create_app(Settings(home=home, resource_metadata=metadata),
                      build_authenticate(home), mounts=mount_all)
