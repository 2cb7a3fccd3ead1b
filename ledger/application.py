"""The ledger application: one ledger opened from its home, with its commands.

:class:`LedgerApp` is the write side: the core (``ledger/write_side.py``: the stores, the
write context, checkpoints), the memory commands (``ledger/memory_commands.py``), the
erasure commands (``ledger/erasure_commands.py``) and, here, the home's creation and the
key roster's commands. Its reads are on :attr:`LedgerApp.reader` (``ledger/reader.py``),
which is what the layers above are handed when they only read (ADR 0071).
"""

from __future__ import annotations

import os
import shutil
import uuid
from datetime import datetime
from pathlib import Path

import structlog

from keys.errors import KeyNotAuthorized, KeyringError
from keys.kek import DEFAULT_SPEC as DEFAULT_KEK_SPEC
from keys.kek import FIRST_EPOCH, KEK_ENV, check_kek_spec, named_kek_spec, without_pin
from keys.keyring import Keyring
from keys.roster import ROLES, ROOT, KeyRoster
from keys.signing import Signer, key_id
from ledger import clock
from ledger.erasure_commands import ErasureCommands
from ledger.errors import ConflictError, InputError
from ledger.home import Config, StorageURL, validate_db_url
from ledger.memory_commands import MemoryCommands
from ledger.write_side import DEFAULT_KEYS

log = structlog.get_logger("ledger")


class LedgerApp(MemoryCommands, ErasureCommands):
    """One ledger, opened from its home."""

    name = "ledger"

    # ------------------------------------------------------------------ bootstrap
    @classmethod
    def initialize(cls, home: Path, db: str | None = None, keystore: str | None = None,
                   kek: str | None = None, controller: str | None = None,
                   contact: str | None = None, locale: str = "en") -> Config:
        """Create a new ledger home: keys, config, stores, the first KEK epoch and the signed
        key roster. ``kek``: where the key-encryption keys live (default ``LEDGER_KEK``,
        else ``file:kek``, a folder of the home that ``ledger backup`` never copies)."""
        if (home / "config.toml").exists():
            raise ConflictError(f"{home} already holds a ledger",
                                hint="use it, or choose another --home")
        if db:
            validate_db_url(db)
        if keystore:
            validate_db_url(keystore)
        kek = kek or os.environ.get(KEK_ENV) or DEFAULT_KEK_SPEC
        try:
            check_kek_spec(kek)
        except ValueError as e:
            raise InputError(str(e)) from None
        created_home = not home.exists()
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            keyring = Keyring(home / "keys")
            root = keyring.create("root")
            signers = {role: keyring.create(name) for role, name in DEFAULT_KEYS.items()}
            ledger_id = str(uuid.uuid4())
            now = clock.now()
            config = Config(
                home=home, ledger_id=ledger_id, origin=f"memory-ledger/{ledger_id}",
                created_at=clock.format_instant(now), root_kid=root.kid, default_actor="writer",
                events=StorageURL(db or "events.sqlite", home),
                keystore=StorageURL(keystore or "keystore.sqlite", home),
                projections=StorageURL(db or "projections.sqlite", home),
                kek=without_pin(named_kek_spec(kek, ledger_id)),
                controller=controller, contact=contact, locale=locale,
            )
            config.write()
            app = cls(config)
            try:
                store = app.datakeys.keks.store(named_kek_spec(kek, ledger_id))
                store.create(FIRST_EPOCH)
                app.datakeys.begin_epoch(FIRST_EPOCH, store.spec, now)
                with app.writing(root, ROOT) as at:
                    roster = KeyRoster.start(app.roster_id, root.public_key, at)
                    for role, signer in signers.items():
                        roster.authorize(signer.public_key, signer.name, role, at, at)
                    app.commit(roster)
            finally:
                app.close()
            home.chmod(0o700)
            for path in home.iterdir():  # SQLite's -wal/-shm files inherit these modes
                if path.is_file():
                    path.chmod(0o600)
        except BaseException:
            if created_home:
                shutil.rmtree(home, ignore_errors=True)
            raise
        log.info("ledger.initialized", ledger_id=ledger_id,
                 backend="postgresql" if config.events.is_postgres else "sqlite")
        return config

    # ------------------------------------------------------------------ keys
    def authorize_key(self, name: str, role: str, public_key: bytes | None = None,
                      valid_from: datetime | None = None) -> str:
        """Authorize a public key for a role; without one, create a key in this home."""
        if role not in ROLES:
            raise InputError(f"unknown role {role!r}", hint=f"roles: {', '.join(ROLES)}")
        root = self.root_signer()
        created: Signer | None = None
        if public_key is None:
            try:
                created = self.keyring.create(name)
            except KeyringError as e:
                raise InputError(str(e)) from e
            public_key = created.public_key
        try:
            with self.writing(root, ROOT) as at:
                roster = self.reader.roster()
                try:
                    roster.authorize(public_key, name, role, valid_from or at, at)
                except KeyNotAuthorized as e:
                    raise ConflictError(str(e)) from e
                self.commit(roster)
        except BaseException:
            if created is not None:
                self.keyring.remove(name)
                self.keyring.public_key_path(name).unlink(missing_ok=True)
            raise
        kid = roster.state.entries[key_id(public_key)].kid
        log.info("key.authorized", kid=kid, role=role)
        return kid

    def revoke_key(self, kid: str, role: str | None = None, revoked_from: datetime | None = None,
                   reason: str | None = None) -> None:
        root = self.root_signer()
        with self.writing(root, ROOT) as at:
            roster = self.reader.roster()
            try:
                roster.revoke(kid, role, revoked_from or at, reason, at)
            except KeyNotAuthorized as e:
                raise InputError(str(e), hint="see `ledger keys list`") from e
            self.commit(roster)
        log.info("key.revoked", kid=kid, role=role)

    def rotate_key(self, name: str, reason: str | None = None) -> tuple[str, str]:
        """Replace the key ``name``: the new key takes its active roles, the old is revoked."""
        old = self.signer(name)
        root = self.root_signer()
        new = Signer.generate(name)
        with self.writing(root, ROOT) as at:
            roster = self.reader.roster()
            entry = roster.state.entries.get(old.kid)
            roles = sorted({g.role for g in entry.grants if g.active_at(at)}) if entry else []
            if not roles:
                raise InputError(f"key {name} ({old.kid}) holds no active role to rotate")
            for role in roles:
                roster.authorize(new.public_key, name, role, at, at)
            roster.revoke(old.kid, None, at, reason or "rotated", at)
            self.commit(roster)
            self.keyring.remove(name)
            self.keyring.install(new)
        log.info("key.rotated", old_kid=old.kid, new_kid=new.kid)
        return old.kid, new.kid


__all__ = ["LedgerApp"]
