"""Errors raised by the keys package. The CLI maps them to exit codes."""

from __future__ import annotations


class KeyError_(Exception):
    """Base class for key management errors."""


class SignatureInvalid(KeyError_):
    """A signature did not verify under the given public key."""


class KeyNotAuthorized(KeyError_):
    """A key is unknown to the roster, lacks the role, or was not valid at that time."""


class DataKeyUnavailable(KeyError_):
    """A data key was destroyed (crypto-shredded) or never existed."""


class DecryptionFailed(KeyError_):
    """Ciphertext or its associated data was altered, or the wrong key was used."""


class KeystoreError(KeyError_):
    """The keystore could not complete an operation (for example a secure delete)."""


class KeystoreBlocked(KeystoreError):
    """An open read transaction in another process kept the keystore's write-ahead log
    from being checkpointed and emptied for the whole busy timeout: a destroyed key's
    bytes may still be in it. ``path`` is the keystore file, ``seconds`` the wait."""

    def __init__(self, message: str, path: str, seconds: float) -> None:
        super().__init__(message)
        self.path = path
        self.seconds = seconds


class KeyringError(KeyError_):
    """A private key file is missing, unreadable or has unsafe permissions."""


class PublicKeyFileError(KeyringError):
    """A public key file named on the command line is missing or is not a key (exit 2)."""


class KekUnavailable(KeystoreError):
    """The key-encryption key of an epoch is not in its store: destroyed by a rotation,
    a store that does not answer (a token that refuses), or the wrong store. ``epoch``
    names it."""

    def __init__(self, message: str, epoch: int) -> None:
        super().__init__(message)
        self.epoch = epoch
