"""Progress bars (ledger/progress.py): drawn on a terminal, never on a pipe, nor with
``--json`` or ``-q``. The terminal is a real pseudo-terminal (stdlib ``pty``), the command
a real ``ledger`` process."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ledger import progress

from .conftest import run_cli

QUIET_LOGS = {"LEDGER_LOG_LEVEL": "warning"}  # a user's default: the suite logs at debug


def on_terminal(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run ``ledger ARGS`` with stdout and stderr on a new pseudo-terminal."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "ledger", *args], stdin=slave,
                            stdout=slave, stderr=slave, close_fds=True,
                            env={**os.environ, **QUIET_LOGS, "COLUMNS": "100", **(env or {})})
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + 120
    poller = select.poll()  # not select(): a long suite may have passed fd 1024
    poller.register(master, select.POLLIN)
    while time.monotonic() < deadline:
        ready = poller.poll(500)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    os.close(master)
    return proc.wait(timeout=60), b"".join(chunks).decode("utf-8", "replace")


def on_pipe(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ledger", *args], capture_output=True,
                          text=True, timeout=120, check=False, env={**os.environ, **QUIET_LOGS})


def make_home(home: Path) -> Path:
    assert run_cli("--home", str(home), "init").code == 0
    assert run_cli("--home", str(home), "subject", "add", "u1").code == 0
    for i in range(5):
        assert run_cli("--home", str(home), "atom", "add", "--subject", "u1",
                       "--text", f"fact {i}").code == 0
    return home


@pytest.fixture
def busy_home(tmp_path: Path) -> Path:
    return make_home(tmp_path / "home")


def counted(stage: str, screen: str) -> list[str]:
    """The counts (``done/total``) a bar of ``stage`` showed, in order."""
    return re.findall(re.escape(stage) + r"\s+\[[#-]*\]\s+(\d+/\d+)", screen)


def test_verify_draws_a_bar_on_a_terminal(busy_home: Path) -> None:
    code, screen = on_terminal("--home", str(busy_home), "verify")
    assert code == 0, screen
    assert "Verifying events" in screen
    assert "100%" in screen and "\r" in screen  # redrawn in place, finished
    assert "OK: " in screen


def test_verify_draws_nothing_on_a_pipe(busy_home: Path) -> None:
    r = on_pipe("--home", str(busy_home), "verify")
    assert r.returncode == 0, r.stderr
    assert "Verifying" not in r.stderr and "%" not in r.stderr and "\r" not in r.stderr
    assert r.stderr.startswith("OK: ") and r.stderr.count("\n") == 1


@pytest.mark.parametrize("args", [("-q", "verify"), ("verify", "--json")])
def test_quiet_and_json_draw_nothing_on_a_terminal(busy_home: Path,
                                                   args: tuple[str, ...]) -> None:
    code, screen = on_terminal("--home", str(busy_home), *args)
    assert code == 0, screen
    assert "Verifying events" not in screen
    assert "%" not in screen


def test_the_helper_is_silent_off_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    with progress.bar("Working", total=10) as bar:
        for _ in range(10):
            bar.advance()
    assert not bar.drawn and bar.done == 10
    assert capsys.readouterr().err == ""
    assert list(progress.tracked(range(1000), bar, every=100)) == list(range(1000))
    assert bar.done == 1010


def test_always_draws_and_never_silences(monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("LEDGER_PROGRESS", "always")
    with progress.bar("Working", total=3) as bar:
        bar.update(3)
    assert bar.drawn and "Working" in capsys.readouterr().err
    monkeypatch.setenv("LEDGER_PROGRESS", "never")
    assert not progress.enabled()


def test_stages_relabel_one_bar_and_restart_its_count(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    monkeypatch.setenv("LEDGER_PROGRESS", "always")
    with progress.bar("Working", total=1) as bar:
        bar.step("Destroying data keys", 0, 3)
        bar.step("Destroying data keys", 3, 3)
        bar.step("Nothing to do", 0, 0)  # a stage of nothing is not shown
        bar.step("Writing tombstones", 0, 2)
        bar.step("Writing tombstones", 1, 2)
    assert bar.stages == ["Destroying data keys", "Writing tombstones"]
    assert (bar.done, bar.total) == (1, 2)
    screen = capsys.readouterr().err
    assert counted("Destroying data keys", screen)[-1] == "3/3"
    assert counted("Writing tombstones", screen) == ["0/2", "1/2"]
    assert "Nothing to do" not in screen


def test_activity_line_on_a_terminal_is_wiped_before_other_output(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("LEDGER_PROGRESS", "always")
    with progress.activity("Erasing"):
        time.sleep(1.5)
        sys.stderr.write("OK: done\n")
    err = capsys.readouterr().err
    assert "Erasing ... 0 s" in err or "Erasing ... 1 s" in err
    assert "\r\033[KOK: done\n" in err  # the line is cleared first, never mixed
    monkeypatch.setenv("LEDGER_PROGRESS", "auto")  # capsys is not a terminal: nothing
    with progress.activity("Erasing"):
        time.sleep(1.2)
    assert capsys.readouterr().err == ""


def test_a_slow_command_shows_activity_on_a_terminal_only(busy_home: Path) -> None:
    env = {"LEDGER_PROGRESS_DELAY": "0"}  # draw at once: this command is quick here
    code, screen = on_terminal("--home", str(busy_home), "recall", "fact", "--subject", "u1",
                               "--no-rehearse", env=env)
    assert code == 0, screen
    assert "Recalling ... 0 s" in screen
    assert "OK: recalled" in screen
    visible = [line.rsplit("\r", 1)[-1] for line in screen.split("\n")]
    assert not any("Recalling" in line for line in visible), screen  # wiped, never mixed
    r = on_pipe("--home", str(busy_home), "recall", "fact", "--subject", "u1", "--no-rehearse")
    assert r.returncode == 0 and "Recalling" not in r.stderr and "\r" not in r.stderr


def test_import_draws_a_counted_bar_on_a_terminal_and_nothing_on_a_pipe(
        busy_home: Path, tmp_path: Path) -> None:
    doc = tmp_path / "u1.konshus.json"
    r = on_pipe("--home", str(busy_home), "export", "--format", "konshus", "--subject", "u1",
                "--out", str(doc))
    assert r.returncode == 0, r.stderr
    assert "\r" not in r.stderr and "Encoding" not in r.stderr and r.stderr.startswith("OK: ")
    args = ("import", str(doc), "--format", "konshus")
    code, screen = on_terminal("--home", str(make_home(tmp_path / "t1")), *args)
    assert code == 0, screen
    assert counted("Recording items", screen)[-1] == "6/6", screen  # subject + 5 atoms
    assert counted("Signing and writing events", screen)[-1] == "5/5", screen
    assert "100%" in screen and "OK: imported" in screen
    code, screen = on_terminal("--home", str(make_home(tmp_path / "t2")), "-q", *args)
    assert code == 0 and "Recording" not in screen and "%" not in screen, screen
    r = on_pipe("--home", str(make_home(tmp_path / "t3")), *args)
    assert r.returncode == 0, r.stderr
    assert "Recording" not in r.stderr and "\r" not in r.stderr and "%" not in r.stderr
    assert r.stdout.startswith("created: ") and r.stderr.startswith("OK: imported")


def test_redact_user_draws_counted_bars_on_a_terminal_and_nothing_on_a_pipe(
        busy_home: Path, tmp_path: Path) -> None:
    args = ("redact-user", "u1", "--reason", "test", "--operator", "operator", "--yes")
    code, screen = on_terminal("--home", str(busy_home), *args)
    assert code == 0, screen
    assert counted("Destroying data keys", screen)[-1] == "6/6", screen  # 5 atoms, subject
    assert counted("Writing tombstones", screen)[-1] == "5/5", screen
    assert "Catching up read models" in screen and "OK: erased 5 atoms" in screen
    r = on_pipe("--home", str(make_home(tmp_path / "other")), *args)
    assert r.returncode == 0, r.stderr
    assert "Destroying" not in r.stderr and "\r" not in r.stderr and "%" not in r.stderr
    assert r.stderr.startswith("OK: erased 5 atoms")
    assert len(r.stdout.splitlines()) < 5  # a summary, not an event id per line
