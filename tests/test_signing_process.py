"""The signing process of ADR 0008 (keys/signing.py SignatureStream, keys/sign_worker.py):
the same signatures in the same order as signing one by one, a fallback to in-process
signing whenever the process cannot be used, and nothing of the caller's program run
twice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from keys import signing
from keys.signing import Signer
from ledger import envelope

SIGNER = Signer.from_seed("t", bytes(range(32)))
OTHER = Signer.from_seed("u", bytes(range(1, 33)))


def _messages(n: int, salt: int = 0) -> list[bytes]:
    return [os.urandom(40 + (i * 7 + salt) % 900) for i in range(n)]


def _stream(signer: Signer, messages: list[bytes], chunk: int = 64) -> list[bytes]:
    stream = signer.stream(len(messages))
    for i in range(0, len(messages), chunk):
        stream.add(messages[i:i + chunk])
    return stream.finish()


def _child_pid() -> int | None:
    child = signing._process._child
    return None if child is None or child.poll() is not None else child.pid


@pytest.mark.parametrize("n", [signing.PROCESS_MIN, 1000, 2500])
def test_the_signing_process_gives_the_sequential_bytes_in_order(n: int) -> None:
    messages = _messages(n)
    assert _stream(SIGNER, messages) == [SIGNER.sign(m) for m in messages]
    pid = _child_pid()
    assert pid is not None and pid != os.getpid()  # a second process made them
    # the next stream, under another key, reuses the process and is keyed afresh
    others = _messages(n, salt=3)
    assert _stream(OTHER, others) == [OTHER.sign(m) for m in others]
    assert _child_pid() == pid


def test_chunks_answered_by_the_signing_process_are_its_signatures() -> None:
    messages = _messages(signing._IN_FLIGHT * 64)
    stream = SIGNER.stream(len(messages))
    for i in range(0, len(messages), 64):
        stream.add(messages[i:i + 64])
    while stream._answered < len(stream._sent):  # let it answer every chunk first
        assert stream._collect(wait=None)
    assert stream.finish() == [SIGNER.sign(m) for m in messages]
    assert stream._from_child == list(range(signing._IN_FLIGHT))


def test_small_streams_and_the_switch_stay_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    signing._process.stop()
    small = _messages(signing.PROCESS_MIN - 1)
    assert _stream(SIGNER, small) == [SIGNER.sign(m) for m in small]
    assert _child_pid() is None
    monkeypatch.setenv("LEDGER_SIGNING_PROCESS", "off")
    large = _messages(600)
    assert _stream(SIGNER, large) == [SIGNER.sign(m) for m in large]
    assert _child_pid() is None


def test_a_dead_signing_process_falls_back_and_is_restarted() -> None:
    messages = _messages(700)
    stream = SIGNER.stream(len(messages))
    stream.add(messages[:300])
    pid = _child_pid()
    assert pid is not None
    signing._process._child.kill()  # type: ignore[union-attr]
    signing._process._child.wait()  # type: ignore[union-attr]
    stream.add(messages[300:])
    assert stream.finish() == [SIGNER.sign(m) for m in messages]
    assert _stream(SIGNER, messages) == [SIGNER.sign(m) for m in messages]
    assert _child_pid() not in (None, pid)


def test_a_cancelled_stream_stops_the_process_and_runs_during_once() -> None:
    messages = _messages(500)
    stream = SIGNER.stream(len(messages))
    stream.add(messages)
    assert _child_pid() is not None

    def fail() -> None:
        raise ValueError("during failed")

    with pytest.raises(ValueError, match="during failed"):
        stream.finish(fail)
    assert _child_pid() is None  # nothing of the failed command is left in it
    calls: list[str] = []
    stream = SIGNER.stream(len(messages))
    stream.add(messages)
    assert stream.finish(lambda: calls.append("x")) == [SIGNER.sign(m) for m in messages]
    assert calls == ["x"]


def test_a_second_thread_signs_in_process_while_the_first_holds_the_process() -> None:
    first, second = _messages(400), _messages(400, salt=5)
    held = SIGNER.stream(len(first))
    held.add(first)
    got: list[list[bytes]] = []
    t = threading.Thread(target=lambda: got.append(_stream(OTHER, second)))
    t.start()
    t.join()
    assert got == [[OTHER.sign(m) for m in second]]
    assert held.finish() == [SIGNER.sign(m) for m in first]


def test_seal_many_from_a_generator_is_seal_signed() -> None:
    envs = [{"v": 1, "seq": i, "payload": {"x": i / 3, "t": "\u00e9" * (i % 5)}}
            for i in range(700)]
    built: list[int] = []

    def gen():  # type: ignore[no-untyped-def]
        for e in envs:
            built.append(e["seq"])
            yield e

    assert envelope.seal_many(gen(), SIGNER, expected=len(envs)) == [
        envelope.seal_signed(e, SIGNER) for e in envs]
    assert built == list(range(700))


def test_a_script_without_a_main_guard_runs_once(tmp_path: Path) -> None:
    """The signing process imports nothing of the caller: a script with no
    ``if __name__ == "__main__"`` guard is not run again (multiprocessing's spawn would)."""
    marker = tmp_path / "runs.txt"
    script = tmp_path / "bulk.py"
    script.write_text(
        "import os\n"
        "from keys.signing import Signer\n"
        f"open({str(marker)!r}, 'a').write('run\\n')\n"
        "s = Signer.from_seed('t', bytes(32))\n"
        "m = [os.urandom(100) for _ in range(1000)]\n"
        "st = s.stream(len(m))\n"
        "st.add(m)\n"
        "assert st.finish() == [s.sign(x) for x in m]\n"
        "from keys import signing\n"
        "assert signing._process._child is not None\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    subprocess.run([sys.executable, str(script)], check=True, env=env, cwd=tmp_path,
                   timeout=120)
    assert marker.read_text() == "run\n"


def _stopped_child() -> int:
    _stream(SIGNER, _messages(signing.PROCESS_MIN))  # make sure it runs
    pid = _child_pid()
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    return pid


def test_this_thread_signs_from_the_back_while_the_process_is_stalled() -> None:
    """A signing process that falls behind (here: stopped) leaves the chunks to this
    thread, which claims them; resumed, the process skips them instead of signing."""
    pid = _stopped_child()
    messages = _messages(900)
    timer = threading.Timer(1.0, os.kill, (pid, signal.SIGCONT))
    timer.start()
    try:
        stream = SIGNER.stream(len(messages))
        for i in range(0, len(messages), 64):
            stream.add(messages[i:i + 64])
        assert len(stream._sent) == signing._IN_FLIGHT  # the rest stayed here
        assert stream.finish() == [SIGNER.sign(m) for m in messages]
    finally:
        timer.cancel()
        os.kill(pid, signal.SIGCONT)
    assert stream._from_child == []  # every chunk was signed here
    assert _child_pid() == pid  # still in use: it answered every chunk, skipping them


def test_a_silent_signing_process_is_given_up_after_the_timeout(
        monkeypatch: pytest.MonkeyPatch) -> None:
    pid = _stopped_child()
    monkeypatch.setattr(signing, "_TIMEOUT", 0.5)
    messages = _messages(700)
    try:
        assert _stream(SIGNER, messages) == [SIGNER.sign(m) for m in messages]
    finally:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
    assert _child_pid() is None  # stopped: the next stream starts a new one
    assert _stream(SIGNER, messages) == [SIGNER.sign(m) for m in messages]
    assert _child_pid() not in (None, pid)


def test_the_signing_process_is_used_when_descriptors_pass_1024() -> None:
    """A long-lived process (a server, a test session holding many ledger files) has
    descriptors numbered over 1024, where ``select(2)`` refuses to wait: the stream must
    still be signed by the signing process, with the sequential bytes."""
    signing._process.stop()
    spare = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        assert max(spare) >= 1024
        messages = _messages(signing.PROCESS_MIN)
        assert _stream(SIGNER, messages) == [SIGNER.sign(m) for m in messages]
        child = signing._process._child
        assert child is not None and child.stdout is not None
        assert child.stdout.fileno() >= 1024  # the pipes were opened past the limit
        assert _child_pid() is not None
    finally:
        for fd in spare:
            os.close(fd)
