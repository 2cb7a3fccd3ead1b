"""`make serve-demo` works: the server starts, answers over HTTP and MCP, and stops."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_serve_demo_runs_end_to_end(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "server.demo", str(tmp_path / "d")],
                          capture_output=True, text=True, timeout=300, check=False,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "client remember (POST /v1/atoms) -> added" in out  # the typed client (ADR 0057)
    assert "client memories (GET /v1/memories, pages of 1) -> 1 memory listed" in out
    assert "client get_subject('someone_else') -> 404 NotFound" in out
    assert "MCP remember -> atom" in out and "Takes the 7:40 train" in out
    assert "ledger serve stopped" in out
    log = (tmp_path / "d" / "serve.log").read_text()
    assert '"server.stopped"' in log
    assert "Takes the 7:40 train" not in log and "mlt_" not in log  # no content, no token
