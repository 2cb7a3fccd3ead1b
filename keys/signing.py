"""Ed25519 signing keys and key ids (PyNaCl).

A key id is derived from the public key alone, so anyone holding the public key
can recompute it: ``ed25519:`` followed by the first 16 bytes of SHA-256(public
key) in hex.
"""

from __future__ import annotations

import functools
import hashlib
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

    @classmethod
    def generate(cls, name: str) -> Signer:
        return cls(name, nacl.signing.SigningKey.generate())

    @classmethod
    def from_seed(cls, name: str, seed: bytes) -> Signer:
        return cls(name, nacl.signing.SigningKey(seed))


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
