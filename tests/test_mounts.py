"""`ledger serve` builds its MCP endpoint on the first request to `/mcp` (ADR 0072): a
server never asked over MCP never imports the SDK; the first requests, however many
arrive at once, build it once; a refused credential builds nothing; the server stops
gracefully with the endpoint's session manager running."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from ledger.application import LedgerApp

from .serving import issue, serving

MCP_HEADERS = {"Accept": "application/json, text/event-stream",
               "Content-Type": "application/json"}
TOOLS_LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}


def test_the_server_app_is_built_without_the_mcp_sdk(tmp_path: Path) -> None:
    home = tmp_path / "home"
    LedgerApp.initialize(home)
    issue(home, "t", "operator")
    code = ("import sys; from server.launch import app_from_env; app_from_env(); "
            "print(sorted(m for m in sys.modules if m == 'mcp' or m.startswith('mcp.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "LEDGER_SERVE_HOME": str(home),
                              "LEDGER_LOG_LEVEL": "warning"}, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_the_first_requests_build_the_endpoint_once(tmp_path: Path) -> None:
    home = tmp_path / "home"
    LedgerApp.initialize(home)
    _, token = issue(home, "assistant", "operator")
    with serving(home) as server:
        assert httpx.get(f"{server.url}/v1/health").status_code == 200
        refused = httpx.post(f"{server.url}/mcp", json=TOOLS_LIST, headers=MCP_HEADERS)
        assert refused.status_code == 401
        assert '"mcp.ready"' not in server.output()  # nothing built for a refusal

        def tools_list(_: int) -> list[str]:
            r = httpx.post(f"{server.url}/mcp", json=TOOLS_LIST, timeout=60,
                           headers={**MCP_HEADERS, "Authorization": f"Bearer {token}"})
            assert r.status_code == 200, r.text
            return sorted(t["name"] for t in r.json()["result"]["tools"])

        with ThreadPoolExecutor(4) as pool:
            listed = list(pool.map(tools_list, range(4)))
        assert listed[0] and all(names == listed[0] for names in listed)
        assert {"recall", "remember"} <= set(listed[0])
        assert tools_list(5) == listed[0]
        assert server.output().count('"mcp.ready"') == 1
        assert server.stop()  # graceful: the session manager's task ended with the server
