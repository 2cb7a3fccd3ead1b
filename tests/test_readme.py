"""The README's "Use" block works when pasted, in order, into a fresh shell opened in the
clone; its Python API block runs as written (twice: it is safe to run again)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text("utf-8")


def block(after: str, lang: str) -> str:
    """The first ```lang block after the heading ``after``."""
    section = README[README.index(after):]
    m = re.search(rf"```{lang}\n(.*?)```", section, re.S)
    assert m, f"no {lang} block after {after!r}"
    return m.group(1)


def fresh_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("LEDGER_") or k == "LEDGER_TEST_PG"}
    # The clone's .venv is the one this test runs in (make test), or comes first anyway.
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    env["TMPDIR"] = str(tmp_path)  # the block's mktemp -d lands here
    env["HOME"] = str(tmp_path)
    return env


def test_the_readme_opens_with_the_two_set_up_commands() -> None:
    first = block("# memory-ledger", "sh").strip().splitlines()
    assert [line.split()[:2] for line in first] == [["make", "demo"], ["make", "test"]]


@pytest.mark.slow
def test_the_use_block_works_pasted_into_a_fresh_shell(tmp_path: Path) -> None:
    script = block("## Use", "sh")
    assert script.count("\nledger ") >= 25
    r = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=REPO,
                       env=fresh_env(tmp_path), capture_output=True, text=True, timeout=900,
                       check=False)
    assert r.returncode == 0, f"{r.stdout[-3000:]}\n---\n{r.stderr[-3000:]}"
    assert "OK: pack verified against the trusted root key" in r.stderr
    assert "nothing recalled" in r.stderr
    assert "Traceback" not in r.stderr
    folders = [p for p in tmp_path.iterdir() if p.is_dir() and (p / ".ledger").is_dir()]
    assert len(folders) == 1 and (folders[0] / "audit.html").exists()


def test_the_python_api_block_runs_as_written(tmp_path: Path) -> None:
    code = block("## For assistant builders", "python")
    for _ in range(2):
        r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=fresh_env(tmp_path),
                           capture_output=True, text=True, timeout=300, check=False)
        assert r.returncode == 0, r.stderr[-3000:]
        assert "Prefers short answers with one example" in r.stdout
