"""The README's "Use" block works when pasted, in order, into a fresh shell opened in the
clone, and so does its "Witnesses and receipts" block (a witness served in the background);
its Python API block runs as written (twice: it is safe to run again)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
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


def _end_group(pgid: int, wait: float) -> bool:
    """Wait up to ``wait`` seconds for every process of the group the test started to exit,
    then kill what is left; True if none was left."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.slow
def test_the_witness_block_works_pasted_into_a_fresh_shell(tmp_path: Path) -> None:
    """A witness set up and used before the erasure, whose pack and receipt then meet the
    policy `ledger witness policy` wrote. The block runs in a session of its own: its
    witness listens on a free loopback port (port 0, told by its port file) in the
    background and is stopped by the block's `kill %1`; whatever happens, every process of
    that session is ended, and the run is bounded in time."""
    script = block("**Witnesses and receipts.**", "sh")
    assert "/srv" not in script and "ORIGIN" not in script and "VKEY" not in script
    assert "127.0.0.1:0 " in script and script.rstrip().endswith("# stop the witness")
    proc = subprocess.Popen(["bash", "-e", "-o", "pipefail", "-c", script], cwd=REPO,
                            env=fresh_env(tmp_path), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=300)
    finally:
        stopped = _end_group(proc.pid, 10 if proc.returncode == 0 else 0)
    assert proc.returncode == 0, f"{out[-3000:]}\n---\n{err[-3000:]}"
    assert stopped, "the witness was still running after the block's `kill %1`"
    assert "Traceback" not in err
    listening = re.search(r"OK: witness listening on (http://127\.0\.0\.1:\d+) ", err)
    assert listening and not listening.group(1).endswith(":0")
    url = listening.group(1)
    assert f"OK: checkpoints will be sent to {url}\n" in err
    assert f"OK: witness {url}: cosigned\n" in err
    assert ("OK: policy of 1 witness written to witnesses.policy; quorum: witness "
            "dpo.example/witness\n") in err
    verified = next(ln for ln in err.splitlines() if ln.startswith("OK: pack verified"))
    assert verified.startswith("OK: pack verified against the trusted root key")
    assert "cosigned before by dpo.example/witness, after by dpo.example/witness" in verified
    assert "; witness policy quorum: witness dpo.example/witness: met" in verified
    receipt = next(ln for ln in err.splitlines() if ln.startswith("OK: receipt for request"))
    assert "witnesses: dpo.example/witness; quorum: witness dpo.example/witness" in receipt
    ledgers = [p for p in tmp_path.iterdir() if (p / ".ledger").is_dir()]
    assert len(ledgers) == 1
    folder = ledgers[0]
    assert {"witnesses.policy", "erasure.json", "pack", "receipt.json", "receipt.html"} <= {
        p.name for p in folder.iterdir()}
    policy = (folder / "witnesses.policy").read_text()
    assert policy.splitlines()[-1] == "quorum dpo.example/witness"
    assert "witness dpo.example/witness dpo.example/witness+" in policy and url in policy


def test_the_python_api_block_runs_as_written(tmp_path: Path) -> None:
    code = block("## For assistant builders: the Python API", "python")
    for _ in range(2):
        r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=fresh_env(tmp_path),
                           capture_output=True, text=True, timeout=300, check=False)
        assert r.returncode == 0, r.stderr[-3000:]
        assert "Prefers short answers with one example" in r.stdout
