"""What the console tests share: a ledger with people and memories at pinned times, token
callers, and the console served by uvicorn on a loopback port in this process (so that
``LEDGER_NOW`` set by a test moves the server's clock, which reads it per request)."""

from __future__ import annotations

import hashlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import uvicorn

from ledger.application import LedgerApp
from ledger.home import Config
from server.backend import Backend
from server.console import console_app
from server.console.sessions import SessionStore

# Memory content that must never reach a page unless revealed (each in one atom, artifact
# or display name of the ledger below).
MARKERS = {"alice_atom": "ZEBRA-7f3a", "alice_atom2": "OKAPI-91c2",
           "alice_name": "Alice Marchetti-Quist", "artifact": "KUDU-4e21",
           "bob_atom": "NARWHAL-0b1e", "carol_atom": "TAPIR-3c9d"}
IDENTIFIER = "alice.m@example.org"


def at(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def policy(completion_hours: int = 48) -> dict[str, Any]:
    return {"memoryPolicy": {
        "enabled": True, "maxAtoms": 500,
        "rightToBeForgottenSla": {"acknowledgmentHours": 24,
                                  "completionHours": completion_hours},
        "auditPolicy": {"logCreation": True, "logRetrieval": True, "logRedaction": True,
                        "logRehearsal": True}}}


def build_ledger(home: Path, t0: datetime) -> None:
    """alice (two memories, an artifact), bob (a memory naming alice's e-mail: flagged for
    review when alice is erased), carol (one memory); a policy with a 48 h SLA."""
    os.environ["LEDGER_NOW"] = at(t0)
    LedgerApp.initialize(home)
    app = LedgerApp(Config.load(home))
    try:
        app.set_policy(policy())
        for ref, name in (("alice", MARKERS["alice_name"]), ("bob", None), ("carol", None)):
            app.register_subject({"ref": ref, "display_name": name})
        art = app.capture_artifact({"subject": str(app.reader.resolve_subject("alice")),
                                    "kind": "chat", "ref": "art1", "title": "chat",
                                    "body": f"we talked about {MARKERS['artifact']}"})
        alice = str(app.reader.resolve_subject("alice"))
        app.add_atoms([
            {"subject": alice, "ref": "a1", "kind": "preference",
             "text": f"{MARKERS['alice_atom']} drinks green tea every morning"},
            {"subject": alice, "ref": "a2", "kind": "fact", "derivation": "inferred",
             "artifact_ids": [str(art)], "extractor": "test-model",
             "text": f"{MARKERS['alice_atom2']} prefers tea to coffee"},
            {"subject": str(app.reader.resolve_subject("bob")), "ref": "b1",
             "text": f"{MARKERS['bob_atom']} met {IDENTIFIER} at the board meeting"},
            {"subject": str(app.reader.resolve_subject("carol")), "ref": "c1",
             "text": f"{MARKERS['carol_atom']} likes aisle seats"},
        ])
    finally:
        app.close()


@dataclass
class Tokens:
    """Tokens of the home's token store (credentials/tokens.py), as `ledger tokens create`
    issues them; ``revoke`` as `ledger tokens revoke` does, from another store instance
    (another process would be the same), so the server notices within the store's TTL."""

    home: Path
    ids: dict[str, str] = field(default_factory=dict)

    def create(self, name: str, role: str) -> str:
        from .serving import issue

        token_id, token = issue(self.home, name, role)
        self.ids[token] = token_id
        return token

    def revoke(self, token: str) -> None:
        from .serving import revoke

        revoke(self.home, self.ids[token])


@dataclass
class Served:
    url: str  # the console's URL, ending in /console
    origin: str
    home: Path
    tokens: Tokens
    sessions: SessionStore
    backend: Backend


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def serve(home: Path, sessions: SessionStore | None = None) -> Iterator[Served]:
    """`ledger serve`'s app, composed as server/launch.py's ``app_from_env`` composes it (the
    HTTP API, its bearer authenticator over the home's token store, ``mount_all`` putting
    the console at /console), run by uvicorn on a loopback port in this process: so a
    test's ``LEDGER_NOW`` is the server's clock at its next request. ``sessions``: mount
    the console with this session store instead (a test clock for lifetimes)."""
    from server.app import Settings, create_app
    from server.launch import build_authenticate
    from server.mounts import mount_all

    backends: list[Backend] = []
    stores: list[SessionStore] = []

    def mounts(api: Any, backend: Backend) -> None:
        backends.append(backend)
        if sessions is None:
            mount_all(api, backend)
        else:
            from credentials.tokens import TokenStore

            store = TokenStore.open(Config.load(backend.home))
            api.mount("/console", console_app(backend, store, sessions=sessions))
        console = next(r.app for r in api.routes if getattr(r, "path", "") == "/console")
        stores.append(console.state.console.sessions)

    app = create_app(Settings(home=home), build_authenticate(home), mounts=mounts)
    config = uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning",
                            access_log=False, lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the console server did not start")
        time.sleep(0.02)
    origin = f"http://127.0.0.1:{config.port}"
    try:
        yield Served(f"{origin}/console", origin, home, Tokens(home), stores[0], backends[0])
    finally:
        server.should_exit = True
        thread.join(timeout=60)


def home_digest(home: Path) -> dict[str, str]:
    """SHA-256 of every file of the ledger home (a refused request changes none)."""
    out = {}
    for p in sorted(home.rglob("*")):
        if p.is_file() and not p.name.endswith(("-shm", ".lock")):
            out[str(p.relative_to(home))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def t0() -> datetime:
    """A start time after the real clock (the home is initialised before it)."""
    return (datetime.now(UTC) + timedelta(days=2)).replace(hour=8, minute=0, second=0,
                                                           microsecond=0)
