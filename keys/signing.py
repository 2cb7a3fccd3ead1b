"""Ed25519 signing keys and key ids (PyNaCl).

A key id is derived from the public key alone, so anyone holding the public key
can recompute it: ``ed25519:`` followed by the first 16 bytes of SHA-256(public
key) in hex.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import os
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

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


def _helper() -> ThreadPoolExecutor:
    """The process's one signing helper thread, started on first use."""
    global _helper_pool
    with _helper_lock:
        if _helper_pool is None:
            _helper_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ledger-sign")
        return _helper_pool


class _SigningProcess:
    """One ``keys/sign_worker.py`` child: started on first use, used by one stream at a
    time, stopped (and started afresh next time) whenever anything goes wrong."""

    def __init__(self) -> None:
        self.busy = threading.Lock()
        self._child: subprocess.Popen[bytes] | None = None
        self._pid = os.getpid()

    def start(self) -> IO[bytes] | None:
        """The child's stdin, starting it if needed; None if it cannot run here."""
        child = self._child
        if child is not None and child.poll() is None and self._pid == os.getpid():
            return child.stdin
        self.stop()
        try:
            child = subprocess.Popen(  # noqa: S603 (our interpreter and our own file)
                [sys.executable, "-I", str(_WORKER)], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, close_fds=True)
        except OSError as e:
            log.warning("signing.process_unavailable", error=e.__class__.__name__)
            return None
        self._child, self._pid = child, os.getpid()
        return child.stdin

    def read(self, n: int) -> bytes:
        child = self._child
        if child is None or child.stdout is None:
            return b""
        return child.stdout.read(n)

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

    With :data:`PROCESS_MIN` expected messages or more, each chunk goes to the signing
    process (``keys/sign_worker.py``) as it is added: a second interpreter, so signing
    runs beside this one's Python work, not only beside its GIL-free calls (ADR 0008).
    Otherwise, or when that process cannot be used (not startable, busy with another
    thread's stream, died, ``LEDGER_SIGNING_PROCESS=off``), :meth:`finish` signs them
    with :meth:`Signer.sign_many`. Either way the result is ``[signer.sign(m) for m in
    messages]``: the same bytes in the same order (Ed25519 is deterministic), and the
    first and last signatures from the signing process are verified here.
    """

    signer: Signer
    expected: int
    _messages: list[bytes] = field(default_factory=list)
    _pipe: IO[bytes] | None = None
    _owner: _SigningProcess | None = None

    def __post_init__(self) -> None:
        if self.expected < PROCESS_MIN or _process_switched_off():
            return
        owner = _process
        if not owner.busy.acquire(blocking=False):
            return
        pipe = owner.start()
        if pipe is None:
            owner.busy.release()
            return
        self._owner, self._pipe = owner, pipe
        self._send(_HEAD.pack(b"K", 32) + bytes(self.signer.signing_key))

    def add(self, messages: Sequence[bytes]) -> None:
        """Queue ``messages`` for signing, after those already added."""
        self._messages.extend(messages)
        if self._pipe is not None:
            pack = _LEN.pack
            self._send(b"".join([_HEAD.pack(b"M", len(messages)),
                                 *[part for m in messages for part in (pack(len(m)), m)]]))

    def finish(self, during: Callable[[], None] | None = None) -> list[bytes]:
        """Every signature, in order; ``during`` runs on this thread first (as in
        :meth:`Signer.sign_many`), while the signing process works."""
        if self._pipe is None:
            return self.signer.sign_many(self._messages, during)
        self._send(_HEAD.pack(b"E", 0))
        try:
            if during is not None:
                during()
        except BaseException:
            self.cancel()
            raise
        owner, messages = self._owner, self._messages
        assert owner is not None
        try:
            data = owner.read(64 * len(messages)) if self._pipe is not None else b""
        except OSError:
            data = b""
        if len(data) != 64 * len(messages):
            self._give_up("short read")
            return self.signer.sign_many(messages)
        self._release()
        signatures = [data[i:i + 64] for i in range(0, len(data), 64)]
        if messages:
            public = self.signer.public_key
            verify_signature(public, messages[0], signatures[0])
            verify_signature(public, messages[-1], signatures[-1])
        return signatures

    def cancel(self) -> None:
        """Drop what was queued (the command failed before its events were signed): the
        signing process is stopped, so nothing of this stream is left in it."""
        if self._pipe is not None:
            self._give_up(None)

    def _send(self, frame: bytes) -> None:
        if self._pipe is None:
            return
        try:
            self._pipe.write(frame)
            self._pipe.flush()  # the signing process starts on it now
        except OSError as e:
            self._give_up(e.__class__.__name__)

    def _give_up(self, reason: str | None) -> None:
        owner = self._owner
        if owner is not None:
            if reason is not None:
                log.warning("signing.process_failed", reason=reason)
            owner.stop()
        self._release()

    def _release(self) -> None:
        owner, self._owner, self._pipe = self._owner, None, None
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
