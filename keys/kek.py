"""Key-encryption keys (KEKs): where they live, and wrapping data keys under them.

Every data key is stored in the keystore only *wrapped* under the KEK of an *epoch*
(ADR 0044). A KEK never enters a database: it lives in a :class:`KekStore`, which wraps
and unwraps inside itself. Two stores are built here:

* :class:`FileKekStore` (``file:PATH``): one file of 32 random bytes per epoch, mode 0600,
  in a folder of the home by default (``file:kek``) that ``ledger backup`` never copies;
* ``keys.kek_pkcs11.Pkcs11KekStore`` (``pkcs11:...``, RFC 7512): the KEK is a
  non-extractable AES key in a token, and AES-GCM runs inside the token.

A cloud KMS or a Vault transit engine fits the same five operations (``create`` makes a
key version, ``wrap``/``unwrap`` are its encrypt/decrypt with the key id as context,
``destroy`` schedules the version's destruction); docs/deploy.md says how.

The wrapped form is ``0x01 || nonce(12) || AES-256-GCM(kek, data key, aad)``, the same
for every store (:mod:`keys.wrapped`, which both stores import). Epoch 0 is the ledgers
made before wrapping: their rows hold the data key as it is, until the first rotation
wraps them.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Protocol, runtime_checkable

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from keys.errors import KekUnavailable, KeystoreError
from keys.wrapped import AAD_PREFIX, NONCE_BYTES, WRAP_VERSION, WRAPPED_BYTES, check_form

KEK_BYTES = 32
UNWRAPPED_EPOCH = 0
"""Rows of a ledger made before wrapping: the data key as it is."""


@runtime_checkable
class KekStore(Protocol):
    """Where the KEKs of one ledger live. Wrapping and unwrapping happen inside it, so a
    store may keep its keys where no process can read them (an HSM)."""

    spec: str
    """How the home's config names this store (``file:kek``, ``pkcs11:...``), without a PIN."""
    kind: str
    """``file`` or ``pkcs11``: recorded in the signed epoch events."""

    def epochs(self) -> list[int]:
        """The epochs whose KEK exists here, ascending."""
        ...

    def create(self, epoch: int) -> None:
        """Make the KEK of ``epoch``; nothing when it exists already (a resumed rotation)."""
        ...

    def wrap(self, epoch: int, items: list[tuple[str, bytes]]) -> list[bytes]:
        """Wrap each ``(key_id, data_key)`` under the KEK of ``epoch``."""
        ...

    def unwrap(self, epoch: int, items: list[tuple[str, bytes]]) -> list[bytes]:
        """Unwrap each ``(key_id, wrapped)``; :class:`KekUnavailable` when the KEK is gone,
        :class:`KeystoreError` when a wrapped key does not open under it."""
        ...

    def destroy(self, epoch: int) -> None:
        """Destroy the KEK of ``epoch`` (nothing when it is gone already)."""
        ...

    def close(self) -> None:
        ...


class FileKekStore:
    """KEKs as files ``epoch-NNNNNN.kek`` (32 random bytes, mode 0600) in one folder.

    Destroying one overwrites the file with zeros, flushes it, unlinks it and flushes the
    folder. On flash storage and copy-on-write file systems an overwrite does not reach
    every physical copy (NIST SP 800-88r2): where that matters, keep the KEK in an HSM.
    """

    kind = "file"

    def __init__(self, folder: Path, spec: str) -> None:
        self.folder = folder
        self.spec = spec
        self._ciphers: dict[int, AESGCM] = {}

    def path(self, epoch: int) -> Path:
        return self.folder / f"epoch-{epoch:06d}.kek"

    def epochs(self) -> list[int]:
        if not self.folder.is_dir():
            return []
        found = (re.fullmatch(r"epoch-(\d{6})\.kek", p.name) for p in self.folder.iterdir())
        return sorted(int(m.group(1)) for m in found if m)

    def create(self, epoch: int) -> None:
        from keys.files import make_dirs, write_private

        if self.path(epoch).exists():
            return
        make_dirs(self.folder, mode=0o700, exist_ok=True)
        tag = self.folder / "CACHEDIR.TAG"
        if not tag.exists():  # tar/borg/restic --exclude-caches skip this folder
            tag.write_text("Signature: 8a477f597d28d172789f06886806bc55\n"
                           "# memory-ledger key-encryption keys: never back this folder up "
                           "with the data (docs/deploy.md).\n", encoding="utf-8")
        tmp = self.folder / f".epoch-{epoch:06d}.kek.new"
        tmp.unlink(missing_ok=True)
        write_private(tmp, os.urandom(KEK_BYTES))
        os.replace(tmp, self.path(epoch))
        _fsync_dir(self.folder)

    def _cipher(self, epoch: int) -> AESGCM:
        cipher = self._ciphers.get(epoch)
        if cipher is None:
            path = self.path(epoch)
            try:
                raw = path.read_bytes()
            except FileNotFoundError:
                raise KekUnavailable(
                    f"the key-encryption key of epoch {epoch} is not in {self.folder} "
                    "(destroyed by a rotation, or this is not the ledger's KEK folder)",
                    epoch) from None
            except OSError as e:
                raise KekUnavailable(f"cannot read {path}: {e.strerror}", epoch) from e
            if len(raw) != KEK_BYTES:
                raise KekUnavailable(f"{path} is not a key-encryption key "
                                     f"({len(raw)} bytes, not {KEK_BYTES})", epoch)
            cipher = self._ciphers[epoch] = AESGCM(raw)
        return cipher

    def wrap(self, epoch: int, items: list[tuple[str, bytes]]) -> list[bytes]:
        enc = self._cipher(epoch).encrypt
        # the nonces of a batch from one call of the OS's generator, sliced: the same
        # random bytes as a call per key, without a system call per key
        nonces = os.urandom(NONCE_BYTES * len(items))
        suffix = b"\x00" + str(epoch).encode()
        out = []
        for i, (key_id, dek) in enumerate(items):
            nonce = nonces[i * NONCE_BYTES:(i + 1) * NONCE_BYTES]
            out.append(WRAP_VERSION + nonce + enc(nonce, dek, AAD_PREFIX + key_id.encode()
                                                  + suffix))
        return out

    def unwrap(self, epoch: int, items: list[tuple[str, bytes]]) -> list[bytes]:
        dec = self._cipher(epoch).decrypt
        suffix = b"\x00" + str(epoch).encode()
        out = []
        for key_id, wrapped in items:
            if len(wrapped) != WRAPPED_BYTES or wrapped[0] != 1:
                check_form(key_id, wrapped)
            try:
                out.append(dec(wrapped[1:13], wrapped[13:],
                               AAD_PREFIX + key_id.encode() + suffix))
            except InvalidTag:
                raise KeystoreError(
                    f"the wrapped data key {key_id} does not open under the KEK of epoch "
                    f"{epoch}: the keystore row was altered or belongs to another ledger"
                ) from None
        return out

    def rewrap(self, old: int, new: int, items: list[tuple[str, bytes]]) -> list[bytes]:
        """:meth:`unwrap` under ``old`` and :meth:`wrap` under ``new`` in one pass, for a
        rotation within this store (the plain data keys live only inside the loop)."""
        dec, enc = self._cipher(old).decrypt, self._cipher(new).encrypt
        nonces = os.urandom(NONCE_BYTES * len(items))
        was, now = b"\x00" + str(old).encode(), b"\x00" + str(new).encode()
        out = []
        for i, (key_id, wrapped) in enumerate(items):
            if len(wrapped) != WRAPPED_BYTES or wrapped[0] != 1:
                check_form(key_id, wrapped)
            kid = AAD_PREFIX + key_id.encode()
            try:
                dek = dec(wrapped[1:13], wrapped[13:], kid + was)
            except InvalidTag:
                raise KeystoreError(
                    f"the wrapped data key {key_id} does not open under the KEK of epoch "
                    f"{old}: the keystore row was altered or belongs to another ledger"
                ) from None
            nonce = nonces[i * NONCE_BYTES:(i + 1) * NONCE_BYTES]
            out.append(WRAP_VERSION + nonce + enc(nonce, dek, kid + now))
        return out

    def destroy(self, epoch: int) -> None:
        self._ciphers.pop(epoch, None)
        path = self.path(epoch)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return
        try:
            os.write(fd, b"\x00" * KEK_BYTES)
            os.fsync(fd)
        finally:
            os.close(fd)
        path.unlink()
        _fsync_dir(self.folder)

    def close(self) -> None:
        self._ciphers.clear()


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


DEFAULT_SPEC = "file:kek"
KEK_ENV = "LEDGER_KEK"
"""The KEK store of a new ledger when ``ledger init --kek`` is not given."""
FIRST_EPOCH = 1


def check_kek_spec(spec: str) -> None:
    """Refuse (:class:`ValueError`) a KEK store spec that names no store we build."""
    if spec.startswith("file:") and spec[len("file:"):]:
        return
    if spec.startswith("pkcs11:") and "module-path=" in spec and "token=" in spec:
        return
    raise ValueError(f"{spec!r} is not a KEK store: give file:FOLDER or an RFC 7512 URI "
                     "pkcs11:token=LABEL;object=NAME?module-path=/path/to/module.so"
                     "&pin-source=file:/path/to/pin")


def without_pin(spec: str) -> str:
    """``spec`` without a ``pin-value`` query attribute: what config.toml, the keystore and
    the signed events keep (a PIN is given by ``pin-source`` or ``LEDGER_PKCS11_PIN``)."""
    if not spec.startswith("pkcs11:") or "?" not in spec:
        return spec
    path, _, query = spec.partition("?")
    kept = [a for a in query.split("&") if a and not a.startswith("pin-value=")]
    return f"{path}?{'&'.join(kept)}" if kept else path


def named_kek_spec(spec: str, ledger_id: str) -> str:
    """``spec`` with a ``pkcs11:`` URI's ``object`` set to one of this ledger's own
    (``memory-ledger-<ledger id>``) when it names none, so ledgers sharing a token never
    share a KEK."""
    if not spec.startswith("pkcs11:"):
        return spec
    path, sep, query = spec[len("pkcs11:"):].partition("?")
    if any(a.split("=", 1)[0] == "object" for a in path.split(";") if a):
        return spec
    path = ";".join(a for a in (path, f"object=memory-ledger-{ledger_id}") if a)
    return f"pkcs11:{path}{sep}{query}"


def open_kek_store(spec: str, home: Path) -> KekStore:
    """The KEK store a home's config names: ``file:PATH`` (relative to the home) or an
    RFC 7512 ``pkcs11:`` URI. Raises :class:`ValueError` for anything else."""
    if spec.startswith("file:"):
        raw = spec[len("file:"):]
        if not raw:
            raise ValueError("file: names no folder (for example file:kek)")
        folder = Path(raw)
        return FileKekStore(folder if folder.is_absolute() else home / folder, spec)
    if spec.startswith("pkcs11:"):
        from keys.kek_pkcs11 import Pkcs11KekStore

        return Pkcs11KekStore.from_uri(spec)
    raise ValueError(f"unknown KEK store {spec.split(':', 1)[0]!r}: give file:PATH or an "
                     "RFC 7512 pkcs11: URI")


class KekRing:
    """The KEK stores one keystore's epochs live in, opened when first needed.

    ``spec`` is the store the home's config names (where a new epoch's KEK is made);
    older epochs may live in another store (a ledger moved from a file onto a token keeps
    its old epochs where they were until a rotation destroys them). ``home`` resolves a
    relative ``file:`` spec. ``spec=None``: a ledger made before wrapping (epoch 0 only).
    """

    def __init__(self, home: Path | None, spec: str | None = None) -> None:
        self.home = home
        self.spec = spec
        self._open: dict[str, KekStore] = {}

    def store(self, spec: str | None = None) -> KekStore:
        spec = spec or self.spec
        if spec is None or self.home is None:
            raise KekUnavailable("this ledger has no key-encryption key store configured "
                                 "(a ledger made before wrapping): run `ledger keys "
                                 "rotate-kek` to start one", UNWRAPPED_EPOCH)
        found = self._open.get(spec)
        if found is None:
            try:
                found = self._open[spec] = open_kek_store(spec, self.home)
            except ValueError as e:
                raise KekUnavailable(f"the KEK store {spec!r} cannot be opened: {e}",
                                     UNWRAPPED_EPOCH) from None
        return found

    def store_of(self, epoch: int, stores: dict[int, str]) -> KekStore:
        """The store holding ``epoch``'s KEK, as the keystore recorded it."""
        spec = stores.get(epoch)
        if spec is None:
            raise KekUnavailable(f"the keystore records no KEK epoch {epoch}", epoch)
        return self.store(spec)

    def close(self) -> None:
        for store in self._open.values():
            store.close()
        self._open.clear()
