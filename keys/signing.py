"""Ed25519 signing keys and key ids (PyNaCl).

A key id is derived from the public key alone, so anyone holding the public key
can recompute it: ``ed25519:`` followed by the first 16 bytes of SHA-256(public
key) in hex.
"""

from __future__ import annotations

import functools
import hashlib
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import nacl.exceptions
import nacl.signing

from keys.errors import SignatureInvalid

ALGORITHM = "ed25519"


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

    @classmethod
    def generate(cls, name: str) -> Signer:
        return cls(name, nacl.signing.SigningKey.generate())

    @classmethod
    def from_seed(cls, name: str, seed: bytes) -> Signer:
        return cls(name, nacl.signing.SigningKey(seed))


PARALLEL_MIN = 64  # below this, signing on one thread costs less than the hand-off
_CHUNK = 32
_helper_lock = threading.Lock()
_helper_pool: ThreadPoolExecutor | None = None


def _helper() -> ThreadPoolExecutor:
    """The process's one signing helper thread, started on first use."""
    global _helper_pool
    with _helper_lock:
        if _helper_pool is None:
            _helper_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ledger-sign")
        return _helper_pool


def _forget_helper() -> None:
    global _helper_pool
    _helper_pool = None  # a forked child has no helper thread; it starts its own


os.register_at_fork(after_in_child=_forget_helper)


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
