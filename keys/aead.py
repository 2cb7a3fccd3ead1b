"""Authenticated encryption of personal fields: AES-256-GCM with a 96-bit random nonce.

Each data key encrypts the events of one atom, artifact or subject, so a key sees
few messages and random nonces are safe. The associated data binds a ciphertext
to the event it belongs to; moving it to another event fails to decrypt.
"""

from __future__ import annotations

import hashlib
import hmac
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from keys.errors import DecryptionFailed

ALGORITHM = "A256GCM"
KEY_BYTES = 32
NONCE_BYTES = 12


def new_data_key() -> bytes:
    return os.urandom(KEY_BYTES)


def seal(key: bytes, plaintext: bytes, associated_data: bytes) -> tuple[bytes, bytes]:
    """Encrypt; return ``(nonce, ciphertext_with_tag)``."""
    nonce = os.urandom(NONCE_BYTES)
    return nonce, AESGCM(key).encrypt(nonce, plaintext, associated_data)


def open_sealed(key: bytes, nonce: bytes, ciphertext: bytes, associated_data: bytes) -> bytes:
    """Decrypt or raise :class:`DecryptionFailed`."""
    try:
        return AESGCM(key).decrypt(nonce, ciphertext, associated_data)
    except (InvalidTag, ValueError) as e:
        raise DecryptionFailed("ciphertext or associated data was altered") from e


def fingerprint(key: bytes, value: bytes) -> str:
    """Keyed fingerprint (HMAC-SHA-256 under the data key) for equality tests.

    It dies with the data key: once the key is destroyed nobody can test a guess.
    """
    return hmac.new(key, b"memory-ledger/fingerprint/v1\x00" + value, hashlib.sha256).hexdigest()
