"""The wrapped form of a data key, the same whichever KEK store made it (ADR 0044).

``0x01 || nonce(12) || AES-256-GCM(kek, data key, aad)`` with
``aad = "memory-ledger/wrapped-key/v1" 0x00 key_id 0x00 epoch``: a wrapped key moved to
another key id or epoch fails to unwrap. :class:`keys.kek.FileKekStore` and
:class:`keys.kek_pkcs11.Pkcs11KekStore` both write and read these very bytes, so the two
stores are interchangeable row for row; both import the form from here (pure: bytes in,
bytes out or :class:`KeystoreError`).
"""

from __future__ import annotations

from keys.errors import KeystoreError

__all__ = ["AAD_PREFIX", "NONCE_BYTES", "WRAPPED_BYTES", "WRAP_VERSION", "check_form",
           "wrap_aad"]

WRAP_VERSION = b"\x01"
NONCE_BYTES = 12
WRAPPED_BYTES = 1 + NONCE_BYTES + 32 + 16
AAD_PREFIX = b"memory-ledger/wrapped-key/v1\x00"


def wrap_aad(key_id: str, epoch: int) -> bytes:
    return AAD_PREFIX + key_id.encode() + b"\x00" + str(epoch).encode()


def check_form(key_id: str, wrapped: bytes) -> None:
    """Refuse (:class:`KeystoreError`) a keystore row that is not a wrapped key."""
    if len(wrapped) != WRAPPED_BYTES or wrapped[:1] != WRAP_VERSION:
        raise KeystoreError(f"the keystore row of data key {key_id} is not a wrapped key "
                            f"({len(wrapped)} bytes)")
