"""The layering rule holds: keys -> ledger -> projections -> governance -> service ->
server, each importing only the layers below it (.importlinter; docs/architecture.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept() -> None:
    exe = Path(sys.executable).with_name("lint-imports")
    r = subprocess.run([str(exe), "--no-cache"], cwd=REPO, capture_output=True, text=True,
                       timeout=300, check=False)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "Contracts: 2 kept, 0 broken." in r.stdout

