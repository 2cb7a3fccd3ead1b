"""Helpers for the witness tests: a log held in memory, and a witness run as a subprocess."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import nacl.signing

from ledger.checkpoint import Checkpoint, sign_checkpoint, vkey_string
from ledger.merkle import MerkleTree
from ledger.transparency import SparseTreeStore
from ledger.witness.wire import AddCheckpoint

REPO = Path(__file__).resolve().parents[1]


class MemoryLog:
    """An RFC 9162 tree in memory and a log key that signs its checkpoints."""

    def __init__(self, origin: str = "example.test/log", seed: bytes = b"L" * 32) -> None:
        self.origin = origin
        self.key = nacl.signing.SigningKey(seed)
        self.tree = MerkleTree(SparseTreeStore(0, {}))
        self.size = 0

    @property
    def vkey(self) -> str:
        return vkey_string(self.origin, bytes(self.key.verify_key))

    def grow(self, n: int, tag: bytes = b"") -> None:
        hashes = [hashlib.sha256(tag + f"leaf {self.size + i}".encode()).digest()
                  for i in range(n)]
        self.size = self.tree.extend(hashes)

    def note(self, size: int | None = None, key: nacl.signing.SigningKey | None = None) -> str:
        size = self.size if size is None else size
        cp = Checkpoint(self.origin, size, self.tree.root(size))
        return sign_checkpoint(cp, self.origin, key or self.key)

    def request(self, old: int, size: int | None = None, note: str | None = None) -> bytes:
        size = self.size if size is None else size
        proof = tuple(self.tree.consistency_proof(old, size)) if 0 < old <= size else ()
        return AddCheckpoint(old, proof, note or self.note(size)).body()


class WitnessProcess:
    """``ledger witness serve`` on 127.0.0.1, an ephemeral port, in a subprocess."""

    def __init__(self, home: Path, env: dict[str, str] | None = None, prefix: str = "") -> None:
        self.home = home
        port_file = home / "port"
        port_file.unlink(missing_ok=True)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ledger", "witness", "serve", "--home", str(home),
             "--listen", "127.0.0.1:0", "--port-file", str(port_file), "--prefix", prefix],
            env={**os.environ, **(env or {})}, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, cwd=REPO)
        deadline = time.monotonic() + 60
        while not port_file.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                self.stop()
                raise RuntimeError(f"witness did not start: {err[-2000:]}")
            time.sleep(0.05)
        self.port = int(port_file.read_text())
        self.url = f"http://127.0.0.1:{self.port}{prefix.rstrip('/')}"
        import httpx

        deadline = time.monotonic() + 30
        while True:  # the port file is written before uvicorn accepts
            try:
                httpx.post(self.url + "/add-checkpoint", content=b"", timeout=2)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise
                time.sleep(0.05)

    def post(self, body: bytes):  # type: ignore[no-untyped-def]
        import httpx

        return httpx.post(self.url + "/add-checkpoint", content=body, timeout=10)

    def get_checkpoint(self, origin: str):  # type: ignore[no-untyped-def]
        """``GET <prefix>/<origin hash>/checkpoint`` (``origin`` hashed here)."""
        import httpx

        from witness.state import origin_hash

        return httpx.get(f"{self.url}/{origin_hash(origin)}/checkpoint", timeout=10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stderr:
            self.proc.stderr.close()


class InProcessWitness:
    """A witness served by uvicorn in a thread of this process (for the ledger-side tests)."""

    def __init__(self, home: Path, name: str | None = None) -> None:
        import threading

        import uvicorn

        from witness.server import bind, make_app
        from witness.state import Witness, init_home

        if name is not None:
            init_home(home, name)
        self.home = home
        self.witness = Witness(home)
        self.vkey = self.witness.vkey
        self.sock = bind("127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        config = uvicorn.Config(make_app(self.witness), log_level="warning", access_log=False)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]},
                                       daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("in-process witness did not start")
            time.sleep(0.01)

    def follow(self, origin: str, vkey: str) -> None:
        self.witness.add_log(origin, vkey)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()
        self.witness.close()

    def cosign_for(self, home: Path) -> None:
        """Follow the ledger of ``home`` and be its witness (config.toml's witnesses)."""
        import dataclasses

        from ledger.application import LedgerApp
        from ledger.home import Config

        cfg = Config.load(home)
        app = LedgerApp(cfg)
        try:
            vkey = app.log_vkey()
        finally:
            app.close()
        self.follow(cfg.origin, vkey)
        dataclasses.replace(cfg, witnesses=((self.url, self.vkey),)).write()


def free_url() -> str:
    """A loopback URL where nothing listens (a witness that is down)."""
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}"
