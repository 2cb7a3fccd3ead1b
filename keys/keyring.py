"""The local keyring: private signing keys in ``<home>/keys``, files mode 0600.

Private keys never live in the repository. Each key is a JSON file
``<name>.key`` holding the 32-byte Ed25519 seed; ``<name>.pub`` holds the
public key and key id, for auditors and for ``--root-key``. This module is the one
reader and writer of both formats (:func:`private_key_document`,
:func:`read_private_key_file`, :func:`public_key_document`, :func:`read_public_key_file`),
and of the bare seed file a witness home keeps (:func:`write_seed_file`,
:func:`read_seed_file`: one line of base64, mode 0600; the format witness homes have
always had).
"""

from __future__ import annotations

import base64
import json
import re
import stat
from pathlib import Path

from keys.errors import KeyringError, PublicKeyFileError
from keys.files import write_file, write_private
from keys.signing import Signer, key_id

_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")


def _check_name(name: str) -> None:
    if not _NAME.match(name):
        raise KeyringError(
            f"key name {name!r} is invalid: use 1-64 lowercase letters, digits, '-' or '_', "
            "starting with a letter"
        )


def public_key_document(name: str, public_key: bytes) -> dict[str, str]:
    return {
        "name": name,
        "algorithm": "ed25519",
        "kid": key_id(public_key),
        "public_key": base64.b64encode(public_key).decode(),
    }


def private_key_document(signer: Signer) -> dict[str, str]:
    return {"name": signer.name, "algorithm": "ed25519", "kid": signer.kid,
            "seed": bytes(signer.signing_key).hex()}


def read_private_key_file(path: Path, name: str) -> Signer:
    """Read a ``.key`` file written by :class:`Keyring` and check its key id."""
    return read_private_key_document(_key_bytes(path), path, name)


def _key_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise KeyringError(f"cannot read private key {path}: {e}") from e


def read_private_key_document(data: bytes, path: Path, name: str) -> Signer:
    """The key of the bytes of a ``.key`` file (``path`` names it in errors), its key id
    checked."""
    try:
        doc = json.loads(data.decode("utf-8"))
        signer = Signer.from_seed(name, bytes.fromhex(doc["seed"]))
    except (ValueError, KeyError, TypeError) as e:
        raise KeyringError(f"cannot read private key {path}: {e}") from e
    if signer.kid != doc.get("kid"):
        raise KeyringError(f"private key {path}: stored key id does not match the key")
    return signer


def read_public_key_file(path: Path) -> bytes:
    """Read a ``.pub`` file written by :class:`Keyring` and check its key id."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise PublicKeyFileError(f"cannot read public key file {path}: {e}") from e
    return parse_public_key_document(data, f"public key file {path}")


def parse_public_key_document(data: bytes, where: str) -> bytes:
    """The key of a ``.pub`` document (:func:`public_key_document`), its key id checked;
    ``where`` names it in the error."""
    try:
        doc = json.loads(data.decode("utf-8"))
        public_key = base64.b64decode(doc["public_key"], validate=True)
        kid = doc["kid"]
    except (ValueError, KeyError, TypeError) as e:
        raise PublicKeyFileError(f"cannot read {where}: {e}") from e
    if key_id(public_key) != kid:
        raise PublicKeyFileError(f"{where}: key id {kid} does not match its key")
    return public_key


def write_seed_file(path: Path, seed: bytes) -> None:
    """Create a bare seed file (base64, one line, mode 0600); never overwrite one."""
    write_private(path, base64.b64encode(seed).decode() + "\n")


def read_seed_file(path: Path) -> bytes:
    """The 32-byte seed of a file written by :func:`write_seed_file` (``OSError``,
    ``ValueError`` when it cannot be read or is not base64)."""
    return base64.b64decode(path.read_text(encoding="utf-8").strip(), validate=True)


class Keyring:
    """Private keys in one folder. Creating refuses to overwrite."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        # a key read, by name, with the bytes of the file it was read from: every command
        # loads its signer, and parsing the file and deriving the key again cost more
        # than reading the file and comparing its bytes (ADR 0080)
        self._read: dict[str, tuple[bytes, Signer]] = {}

    def _key_path(self, name: str) -> Path:
        _check_name(name)
        return self.folder / f"{name}.key"

    def create(self, name: str) -> Signer:
        path = self._key_path(name)
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        signer = Signer.generate(name)
        try:
            write_private(path, json.dumps(private_key_document(signer)))
        except FileExistsError as e:
            raise KeyringError(f"a key named {name!r} already exists in {self.folder}") from e
        self._write_public(signer)
        return signer

    def install(self, signer: Signer) -> None:
        """Put ``signer`` in this keyring under its name, replacing the key there (a
        rotation): the private file is swapped whole, then the public file rewritten."""
        self.public_key_path(signer.name).unlink(missing_ok=True)
        write_private(self._key_path(signer.name), json.dumps(private_key_document(signer)),
                      replace=True)
        self._write_public(signer)

    def _write_public(self, signer: Signer) -> None:
        write_file(self.public_key_path(signer.name),
                   json.dumps(public_key_document(signer.name, signer.public_key)))

    def load(self, name: str) -> Signer:
        path = self._key_path(name)
        try:
            st = path.stat()
        except FileNotFoundError as e:
            raise KeyringError(
                f"no private key named {name!r} in {self.folder}; "
                "list keys with `ledger keys list`"
            ) from e
        mode = stat.S_IMODE(st.st_mode)
        if mode & 0o077:
            raise KeyringError(
                f"private key {path} is readable by others (mode {oct(mode)}); "
                f"run `chmod 600 {path}`"
            )
        data = _key_bytes(path)
        known = self._read.get(name)
        if known is not None and known[0] == data:  # the same bytes: the same key
            return known[1]
        signer = read_private_key_document(data, path, name)
        self._read[name] = (data, signer)
        return signer

    def public_key_path(self, name: str) -> Path:
        _check_name(name)
        return self.folder / f"{name}.pub"

    def names(self) -> list[str]:
        if not self.folder.exists():
            return []
        return sorted(p.stem for p in self.folder.glob("*.key"))

    def remove(self, name: str) -> None:
        """Remove a private key file (after rotation). The public file stays."""
        path = self._key_path(name)
        path.unlink(missing_ok=True)
