"""`make serve-demo`: start `ledger serve` on loopback, use it over HTTP and from an MCP
client, stop it.

    python -m server.demo [DIR]     # default serve-demo-ledger/, replaced on each run

The ledger stays in DIR with its tokens' ids (the tokens themselves are printed once,
here, as `ledger tokens create` prints them) so the next commands can be tried on it.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from memory_ledger_client import Client, NotFound


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _ledger(*args: str) -> str:
    exe = str(Path(sys.executable).with_name("ledger"))
    done = subprocess.run([exe, *args], capture_output=True, text=True,  # noqa: S603 - our own CLI
                          check=False)
    if done.returncode != 0:
        raise SystemExit(f"ledger {' '.join(args[:3])} failed:\n{done.stderr}")
    return done.stdout


async def _mcp(url: str, token: str) -> None:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    transport = streamable_http_client(f"{url}/mcp", http_client=httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"}, timeout=60))
    async with Client(transport) as client:
        tools = await client.list_tools()
        _say("MCP tools: " + ", ".join(t.name for t in tools.tools))
        r = await client.call_tool("remember", {
            "text": "Takes the 7:40 train and reads on the way"})
        data: Any = r.structured_content
        _say(f"MCP remember -> atom {data['atom_id']}")
        # words the memory holds: without the `semantic` extra recall matches by words
        r = await client.call_tool("recall", {"query": "which train does she take", "k": 3})
        data = r.structured_content
        shown = str(data["prompt"]).splitlines() or ["(nothing recalled)"]
        _say("MCP recall ->\n" + "\n".join("    " + line for line in shown))


def main(argv: list[str]) -> int:
    folder = Path(argv[0] if argv else "serve-demo-ledger").resolve()
    if folder.exists():
        shutil.rmtree(folder)
    home = folder / ".ledger"
    _ledger("init", "--home", str(home))
    _ledger("--home", str(home), "subject", "add", "user_9f4e")
    op = json.loads(_ledger("--home", str(home), "tokens", "create", "dpo", "--role",
                            "operator", "--json"))
    asst = json.loads(_ledger("--home", str(home), "tokens", "create", "assistant-1",
                              "--role", "assistant", "--subject", "user_9f4e", "--json"))
    port = _port()
    url = f"http://127.0.0.1:{port}"
    exe = str(Path(sys.executable).with_name("ledger"))
    log = (folder / "serve.log").open("wb")
    proc = subprocess.Popen([exe, "--home", str(home), "serve", "--port", str(port)],  # noqa: S603
                            stdout=log, stderr=subprocess.STDOUT,
                            env={**os.environ, "LEDGER_LOG_LEVEL": "info"})
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/v1/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"ledger serve did not start; see {folder / 'serve.log'}")
            time.sleep(0.1)
        _say(f"ledger serve is listening on {url} (pid {proc.pid})")
        # the typed client (memory_ledger_client, ADR 0057): the token names one subject,
        # so the calls below need not
        with Client(url, token=asst["token"]) as c:
            added = c.remember("Prefers direct feedback, in writing", kind="preference")
            _say(f"client remember (POST /v1/atoms) -> {added.outcome} {added.atom_id}")
            found = c.recall("feedback style", k=3)
            _say(f"client recall (POST /v1/recall) -> {len(found.items)} memory recalled")
            rows = list(c.memories(page_size=1))
            _say(f"client memories (GET /v1/memories, pages of 1) -> {len(rows)} "
                 f"memor{'y' if len(rows) == 1 else 'ies'} listed")
            try:
                c.get_subject("someone_else")
            except NotFound as e:
                _say(f"client get_subject('someone_else') -> {e.status} NotFound (outside "
                     "the token's scope: not found, as an unknown id)")
        asyncio.run(_mcp(url, asst["token"]))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        log.close()
    _say("ledger serve stopped (SIGTERM: requests in flight finished first)")
    _say(f"""
The ledger is in {home}. Try:
  ledger --home {home} serve --port 8765
  curl -s -H 'Authorization: Bearer {asst['token']}' \\
       -H 'Content-Type: application/json' -d '{{"query": "train"}}' \\
       http://127.0.0.1:8765/v1/recall
  open http://127.0.0.1:8765/console/ and sign in with the operator token {op['token']}
  ledger --home {home} tokens list""")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
