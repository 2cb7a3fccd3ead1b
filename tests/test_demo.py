"""`make demo` (cli/demo.py): the demo keeps its ledger in the folder it names, and every
command it suggests at the end works when pasted into a shell."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cli import demo


@pytest.mark.slow
def test_demo_keeps_its_ledger_and_its_next_steps_work(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LEDGER_NOW", raising=False)
    monkeypatch.delenv("LEDGER_HOME", raising=False)
    folder = tmp_path / "demo-ledger"
    demo.run(str(folder))
    shown = capsys.readouterr().out
    assert (folder / ".ledger" / "config.toml").exists()
    assert (folder / "evidence.zip").exists()
    steps = demo.next_steps(folder, folder / ".ledger")
    assert f"Its ledger stays in {folder}/" in shown
    for command in steps:
        assert f"  {command}\n" in shown
        r = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=300,  # noqa: S602 - the line a user pastes
                           check=False, cwd=os.getcwd(),
                           env={**os.environ, "PATH": f"{Path(sys.executable).parent}:"
                                                      f"{os.environ.get('PATH', '')}"})
        assert r.returncode == 0, (command, r.stdout[-1000:], r.stderr[-1000:])
    assert (folder / "audit.html").exists()
    # A second run replaces the demo folder (it carries the demo's mark) ...
    demo.run(str(folder))
    # ... and refuses to touch a folder that is not a demo's.
    other = tmp_path / "mine"
    other.mkdir()
    (other / "keep.txt").write_text("x")
    with pytest.raises(SystemExit) as e:
        demo.run(str(other))
    assert e.value.code == 2 and (other / "keep.txt").read_text() == "x"
