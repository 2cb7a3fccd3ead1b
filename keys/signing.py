"""Ed25519 signing keys and key ids (PyNaCl).

A key id is derived from the public key alone, so anyone holding the public key
can recompute it: ``ed25519:`` followed by the first 16 bytes of SHA-256(public
key) in hex.
"""

from __future__ import annotations

import atexit
import fcntl
import functools
import hashlib
import os
import select
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import nacl.exceptions
import nacl.signing
import structlog

from keys.errors import SignatureInvalid

ALGORITHM = "ed25519"

log = structlog.get_logger("keys.signing")


def key_id(public_key: bytes) -> str:
    """Return the stable key id of a 32-byte Ed25519 public key."""
    if len(public_key) != 32:
        raise ValueError(f"an Ed25519 public key has 32 bytes, got {len(public_key)}")
    return f"{ALGORITHM}:{hashlib.sha256(public_key).digest()[:16].hex()}"


@dataclass(frozen=True)
class Signer:
    """A named private signing key held by this process."""

    name: str
    signing_key: nacl.signing.SigningKey

    @property
    def public_key(self) -> bytes:
        return bytes(self.signing_key.verify_key)

    @property
    def kid(self) -> str:
        return key_id(self.public_key)

    def sign(self, message: bytes) -> bytes:
        """Return the 64-byte detached signature of ``message``."""
        return bytes(self.signing_key.sign(message).signature)

    def sign_many(self, messages: Sequence[bytes],
                  during: Callable[[], None] | None = None) -> list[bytes]:
        """``[self.sign(m) for m in messages]``, the same bytes in the same order (Ed25519
        signatures are deterministic), computed by two threads for large batches.

        libsodium's signing runs with the GIL released (PyNaCl calls it through cffi), so
        with :data:`PARALLEL_MIN` messages or more a helper thread signs chunks beside
        this one, both taking the next unsigned chunk until none is left. ``during``, if
        given, runs on this thread first, while the helper signs: work that needs no
        signature (a database write, whose SQLite steps also release the GIL). An
        exception from ``during`` or from signing on either thread is raised here, after
        the helper has stopped.
        """
        n = len(messages)
        if n < PARALLEL_MIN:
            if during is not None:
                during()
            return [self.sign(m) for m in messages]
        signatures: list[bytes] = [b""] * n
        chunks = iter(range(0, n, _CHUNK))
        lock = threading.Lock()
        stop = threading.Event()
        sign = self.sign

        def work() -> None:
            while not stop.is_set():
                with lock:
                    start = next(chunks, None)
                if start is None:
                    return
                for i in range(start, min(start + _CHUNK, n)):
                    signatures[i] = sign(messages[i])

        helper = _helper().submit(work)
        try:
            if during is not None:
                during()
            work()
        except BaseException:
            stop.set()
            raise
        finally:
            # A helper still queued behind another command's is not waited for: this thread
            # has taken every chunk. One that runs is waited for, and its error raised.
            if not helper.cancel():
                helper.result()
        return signatures

    def stream(self, expected: int) -> SignatureStream:
        """A :class:`SignatureStream` for about ``expected`` messages."""
        return SignatureStream(self, expected)

    @classmethod
    def generate(cls, name: str) -> Signer:
        return cls(name, nacl.signing.SigningKey.generate())

    @classmethod
    def from_seed(cls, name: str, seed: bytes) -> Signer:
        return cls(name, nacl.signing.SigningKey(seed))


PARALLEL_MIN = 64  # below this, signing on one thread costs less than the hand-off
PROCESS_MIN = 256  # from this many messages a stream signs in the signing process
_CHUNK = 32
_helper_lock = threading.Lock()
_helper_pool: ThreadPoolExecutor | None = None
_PROCESS_SWITCH = "LEDGER_SIGNING_PROCESS"  # "off": never start the signing process
_WORKER = Path(__file__).with_name("sign_worker.py")
_HEAD = struct.Struct(">cI")
_LEN = struct.Struct(">I")
_KEY = struct.Struct(">32sI")
_CLAIM = struct.Struct(">II")
_TIMEOUT = 60.0  # seconds the signing process may stay silent before it is given up
_IN_FLIGHT = 4  # chunks handed to the signing process and not answered yet, at most


def _poll(fds: dict[int, int], timeout: float) -> list[tuple[int, int]]:
    """``poll(2)`` on ``fds`` (descriptor -> events) for up to ``timeout`` seconds: the
    ready descriptors. Not ``select(2)``, which refuses descriptors of 1024 and above,
    as a long-lived process that holds many files open reaches them."""
    poller = select.poll()
    for fd, events in fds.items():
        poller.register(fd, events)
    return poller.poll(max(0.0, timeout) * 1000)


def _helper() -> ThreadPoolExecutor:
    """The process's one signing helper thread, started on first use."""
    global _helper_pool
    with _helper_lock:
        if _helper_pool is None:
            _helper_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ledger-sign")
        return _helper_pool


class _WorkerGone(Exception):
    """The signing process ended, timed out, or answered out of protocol."""


class _SigningProcess:
    """One ``keys/sign_worker.py`` child: started on first use, used by one stream at a
    time, stopped (and started afresh next time) whenever anything goes wrong."""

    def __init__(self) -> None:
        self.busy = threading.Lock()
        self._child: subprocess.Popen[bytes] | None = None
        self._control = -1  # write end of the claims pipe
        self._pid = os.getpid()
        self._buffer = bytearray()
        self._streams = 0

    def start(self) -> int | None:
        """A new stream number, starting the child if needed; None if it cannot run."""
        child = self._child
        if child is None or child.poll() is not None or self._pid != os.getpid():
            self.stop()
            read_end, write_end = os.pipe()
            try:
                child = subprocess.Popen(  # noqa: S603 (our interpreter and our own file)
                    [sys.executable, "-I", str(_WORKER), str(read_end)], bufsize=0,
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL, pass_fds=(read_end,))
            except OSError as e:
                os.close(write_end)
                log.warning("signing.process_unavailable", error=e.__class__.__name__)
                return None
            finally:
                os.close(read_end)
            assert child.stdin is not None
            os.set_blocking(child.stdin.fileno(), False)  # send() waits in select instead
            if hasattr(fcntl, "F_SETPIPE_SZ"):  # Linux: room for the chunks in flight
                try:
                    fcntl.fcntl(child.stdin.fileno(), fcntl.F_SETPIPE_SZ, 1 << 20)
                except OSError:
                    pass
            self._child, self._control, self._pid = child, write_end, os.getpid()
            self._buffer.clear()
        self._streams = (self._streams + 1) % 2**32
        return self._streams

    def send(self, data: bytes) -> None:
        """Write ``data`` to the child, taking in its answers meanwhile: the child answers
        each chunk at once, and must never block on a full pipe while this process
        blocks on writing to it."""
        child = self._child
        if child is None or child.stdin is None or child.stdout is None:
            raise _WorkerGone("not running")
        into, out = child.stdin.fileno(), child.stdout.fileno()
        view = memoryview(data)
        while view:
            ready = dict(_poll({out: select.POLLIN, into: select.POLLOUT}, _TIMEOUT))
            readable, writable = out in ready, into in ready
            if not readable and not writable:
                raise _WorkerGone("timed out")
            if readable:
                self._take(out)
            if writable:
                try:
                    view = view[os.write(into, view):]
                except BlockingIOError:
                    pass

    def _take(self, fd: int) -> None:
        data = os.read(fd, 1 << 16)
        if not data:
            raise _WorkerGone("ended")
        self._buffer.extend(data)

    def claim(self, stream: int, first_chunk: int) -> None:
        """Tell the child this process signs ``first_chunk`` and later ones itself."""
        os.write(self._control, _CLAIM.pack(stream, first_chunk))

    def answer(self, wait: float | None) -> list[bytes] | None:
        """The next chunk's signatures (``[]`` if the child skipped it), or None when
        none is complete within ``wait`` seconds (0: do not wait)."""
        child = self._child
        if child is None or child.stdout is None:
            raise _WorkerGone("not running")
        fd = child.stdout.fileno()
        while True:
            buf = self._buffer
            if len(buf) >= _HEAD.size:
                kind, n = _HEAD.unpack_from(buf)
                if kind != b"R":
                    raise _WorkerGone("unexpected frame")
                end = _HEAD.size + 64 * n
                if len(buf) >= end:
                    sigs = [bytes(buf[i:i + 64]) for i in range(_HEAD.size, end, 64)]
                    del buf[:end]
                    return sigs
            ready = _poll({fd: select.POLLIN}, wait if wait is not None else _TIMEOUT)
            if not ready:
                if wait is None:
                    raise _WorkerGone("timed out")
                return None
            self._take(fd)

    def stop(self) -> None:
        child, self._child = self._child, None
        if child is None or self._pid != os.getpid():
            return  # a forked child does not own its parent's signing process
        for stream in (child.stdin, child.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        try:
            os.close(self._control)
        except OSError:
            pass
        try:
            child.kill()
            child.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            pass


_process = _SigningProcess()
atexit.register(_process.stop)


def _forget_helper() -> None:
    global _helper_pool, _process
    _helper_pool = None  # a forked child has no helper thread; it starts its own
    _process = _SigningProcess()  # nor may it write to its parent's signing process


os.register_at_fork(after_in_child=_forget_helper)


def _process_switched_off() -> bool:
    return os.environ.get(_PROCESS_SWITCH, "").lower() in ("off", "0", "false", "no")


@dataclass
class SignatureStream:
    """Signatures of messages handed over chunk by chunk while the caller goes on working.

    With :data:`PROCESS_MIN` expected messages or more, chunks go to the signing process
    (``keys/sign_worker.py``) as they are added, as long as it has fewer than
    :data:`_IN_FLIGHT` unanswered: a second interpreter, so signing runs beside this
    one's Python work, not only beside its GIL-free calls (ADR 0008). Chunks it is too
    busy to take stay here. :meth:`finish` signs those, then helps with the rest from
    the last one backwards while the signing process goes on from the front, until they
    meet: a signing process that falls behind (starting up, or sharing its core) costs no
    more than signing here. When that process cannot be used (not startable, busy with
    another thread's stream, died, silent for :data:`_TIMEOUT` seconds,
    ``LEDGER_SIGNING_PROCESS=off``), or for fewer messages, :meth:`finish` signs with
    :meth:`Signer.sign_many`. Either way the result is ``[signer.sign(m) for m in
    messages]``: the same bytes in the same order (Ed25519 is deterministic); the first
    and last signatures from the signing process are verified here.
    """

    signer: Signer
    expected: int
    _chunks: list[list[bytes]] = field(default_factory=list)
    _results: list[list[bytes] | None] = field(default_factory=list)
    _sent: list[int] = field(default_factory=list)  # chunk indexes, in the order sent
    _answered: int = 0  # how many of the sent chunks the signing process answered
    _from_child: list[int] = field(default_factory=list)
    _owner: _SigningProcess | None = None
    _number: int = 0

    def __post_init__(self) -> None:
        if self.expected < PROCESS_MIN or _process_switched_off():
            return
        owner = _process
        if not owner.busy.acquire(blocking=False):
            return
        number = owner.start()
        if number is None:
            owner.busy.release()
            return
        self._owner, self._number = owner, number
        self._send(_HEAD.pack(b"K", _KEY.size)
                   + _KEY.pack(bytes(self.signer.signing_key), number))

    def add(self, messages: Sequence[bytes]) -> None:
        """Queue ``messages`` for signing, after those already added."""
        chunk = list(messages)
        if not chunk:
            return
        self._chunks.append(chunk)
        self._results.append(None)
        if self._owner is None or not self._collect():
            return
        if len(self._sent) - self._answered < _IN_FLIGHT:
            pack = _LEN.pack
            self._sent.append(len(self._chunks) - 1)
            self._send(b"".join([_HEAD.pack(b"M", len(chunk)),
                                 *[part for m in chunk for part in (pack(len(m)), m)]]))

    def finish(self, during: Callable[[], None] | None = None) -> list[bytes]:
        """Every signature, in order; ``during`` runs on this thread first (as in
        :meth:`Signer.sign_many`), while the signing process works."""
        chunks, results = self._chunks, self._results
        if self._owner is None and not self._sent:
            return self.signer.sign_many([m for c in chunks for m in c], during)
        try:
            if during is not None:
                during()
        except BaseException:
            self.cancel()
            raise
        sign = self.signer.sign
        sent = set(self._sent)
        for index, chunk in enumerate(chunks):  # the chunks the signing process never got
            if index not in sent:
                results[index] = [sign(m) for m in chunk]
                self._collect()
        try:
            self._meet()
        except (OSError, _WorkerGone) as e:
            self._give_up(str(e) or e.__class__.__name__)
        self._release()
        signatures: list[bytes] = []
        for chunk, got in zip(chunks, results, strict=True):
            signatures.extend(got if got is not None else [sign(m) for m in chunk])
        if self._from_child:  # the signing process's work, checked at both ends
            public = self.signer.public_key
            first, last = self._from_child[0], self._from_child[-1]
            verify_signature(public, chunks[first][0], results[first][0])  # type: ignore[index]
            verify_signature(public, chunks[last][-1], results[last][-1])  # type: ignore[index]
        return signatures

    def _collect(self, wait: float | None = 0) -> bool:
        """Take in the signing process's answers that are complete (or wait for one);
        False if the process was given up."""
        owner = self._owner
        try:
            while owner is not None and self._answered < len(self._sent):
                got = owner.answer(wait)
                if got is None:
                    break
                index = self._sent[self._answered]
                self._answered += 1
                if got:
                    if len(got) != len(self._chunks[index]):
                        raise _WorkerGone("a chunk came back short")
                    if self._results[index] is None:
                        self._results[index] = got
                        self._from_child.append(index)
                if wait is None:
                    break
        except (OSError, _WorkerGone) as e:
            self._give_up(str(e) or e.__class__.__name__)
            return False
        return self._owner is not None

    def _meet(self) -> None:
        """Sign the sent chunks from the back while the signing process answers from
        the front; then take its answer to every chunk sent (claimed ones are skipped)."""
        owner, sign = self._owner, self.signer.sign
        back = len(self._sent)
        while owner is not None and self._answered < back:
            before = self._answered
            if not self._collect():
                return
            if self._answered == before:  # nothing ready: the last unclaimed one, here
                back -= 1
                owner.claim(self._number, back)
                index = self._sent[back]
                self._results[index] = [sign(m) for m in self._chunks[index]]
        while self._owner is not None and self._answered < len(self._sent):
            self._collect(wait=None)

    def cancel(self) -> None:
        """Drop what was queued (the command failed before its events were signed): the
        signing process is stopped, so nothing of this stream is left in it."""
        if self._owner is not None:
            self._give_up(None)

    def _send(self, frame: bytes) -> None:
        owner = self._owner
        if owner is None:
            return
        try:
            owner.send(frame)
        except (OSError, _WorkerGone) as e:
            self._give_up(e.__class__.__name__)

    def _give_up(self, reason: str | None) -> None:
        owner = self._owner
        if owner is not None:
            if reason is not None:
                log.warning("signing.process_failed", reason=reason)
            owner.stop()
        self._release()

    def _release(self) -> None:
        owner, self._owner = self._owner, None
        if owner is not None:
            owner.busy.release()


@functools.lru_cache(maxsize=256)
def _verify_key(public_key: bytes) -> nacl.signing.VerifyKey:
    return nacl.signing.VerifyKey(public_key)


def verify_signature(public_key: bytes, message: bytes, signature: bytes) -> None:
    """Raise :class:`SignatureInvalid` unless ``signature`` signs ``message``."""
    if len(signature) != 64:
        raise SignatureInvalid(f"an Ed25519 signature has 64 bytes, got {len(signature)}")
    try:
        _verify_key(public_key).verify(message, signature)
    except (nacl.exceptions.BadSignatureError, nacl.exceptions.ValueError) as e:
        raise SignatureInvalid(f"signature does not verify under {key_id(public_key)}") from e
