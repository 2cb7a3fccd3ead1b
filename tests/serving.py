"""A real `ledger serve` on a loopback port, for the server tests.

The server runs as its own process (the console script, as a user starts it); tests talk
to it with real clients (httpx, the MCP SDK). Tokens are issued through the home's token
store, as `ledger tokens create` does.
"""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import httpx

from ledger.home import Config

LEDGER = str(Path(sys.executable).with_name("ledger"))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def issue(home: Path, name: str, role: str, subjects: list[str] | None = None,
          tenant: str | None = None, expires_at: datetime | None = None) -> tuple[str, str]:
    """(token id, token) of a new token of the home."""
    from credentials.tokens import TokenStore

    with TokenStore.open(Config.load(home)) as store:
        issued = store.create(name, role, subjects or (), tenant=tenant, expires_at=expires_at)
    return issued.record.token_id, issued.token


def revoke(home: Path, token_id: str) -> None:
    from credentials.tokens import TokenStore

    with TokenStore.open(Config.load(home)) as store:
        store.revoke(token_id)


class Server:
    def __init__(self, proc: subprocess.Popen[bytes], url: str, log: Path) -> None:
        self.proc = proc
        self.url = url
        self.log = log

    def client(self, token: str | None = None, timeout: float = 60.0) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> bool:
        """Signal the server and wait; True when it shut down gracefully: the lifespan
        closed the ledger (uvicorn re-raises the signal after a graceful shutdown, so the
        exit status is -SIG, not 0)."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        code = self.proc.wait(timeout)
        return code in (0, -sig) and '"server.stopped"' in self.output()

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@contextmanager
def serving(home: Path, *extra: str, env: dict[str, str] | None = None,
            startup: float = 60.0) -> Iterator[Server]:
    """Start `ledger serve --home HOME` on a free loopback port; SIGTERM it afterwards."""
    port = free_port()
    log = home.parent / f"serve-{port}.log"
    full_env = {**os.environ, **(env or {}), "LEDGER_LOG_LEVEL": "info"}
    with log.open("wb") as out:
        proc = subprocess.Popen([LEDGER, "--home", str(home), "serve", "--port", str(port),
                                 *extra], stdout=out, stderr=subprocess.STDOUT, env=full_env)
    server = Server(proc, f"http://127.0.0.1:{port}", log)
    deadline = time.monotonic() + startup
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"ledger serve exited {proc.returncode}:\n{server.output()}")
            try:
                if httpx.get(f"{server.url}/v1/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"ledger serve did not start:\n{server.output()}")
            time.sleep(0.1)
        yield server
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def home_digest(home: Path) -> dict[str, str]:
    """SHA-256 of every file of the home that holds data. SQLite's ``-shm`` index is left
    out: readers write their read marks into it, and it holds no data of its own."""
    return {str(p.relative_to(home)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(home.rglob("*")) if p.is_file() and not p.name.endswith("-shm")}
