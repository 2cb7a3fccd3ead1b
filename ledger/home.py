"""The ledger home: where a ledger lives, and how its storage is configured.

Found like git finds a repository: ``--home``, else ``LEDGER_HOME``, else the
first ``.ledger/`` folder from the working directory upward.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from keys.files import write_private
from ledger.errors import EnvironmentProblem, InputError

HOME_DIRNAME = ".ledger"
CONFIG = "config.toml"
ENV_HOME = "LEDGER_HOME"


def named_or_found(explicit: Path | None, holds: Callable[[Path], bool]) -> Path | None:
    """The home named by ``--home``, else by ``LEDGER_HOME`` (the caller checks it), else
    the first ``.ledger/`` from the working directory upward that ``holds`` accepts, else
    None."""
    if explicit is not None:
        return explicit
    if os.environ.get(ENV_HOME):
        return Path(os.environ[ENV_HOME])
    here = Path.cwd().resolve()
    for folder in (here, *here.parents):
        if holds(folder / HOME_DIRNAME):
            return folder / HOME_DIRNAME
    return None


def find_home(explicit: Path | None = None) -> Path:
    path = named_or_found(explicit, lambda home: (home / CONFIG).is_file())
    if path is None:
        raise EnvironmentProblem(
            "no ledger home found here or in any parent folder",
            hint="run `ledger init`, or pass --home DIR, or set LEDGER_HOME")
    if not (path / CONFIG).is_file():
        raise EnvironmentProblem(
            f"{path} is not a ledger home (no {CONFIG})",
            hint=f"run `ledger init --home {path}` to create one")
    return path


@dataclass(frozen=True)
class StorageURL:
    """One configured store: an SQLite file in the home, or a PostgreSQL schema."""

    raw: str
    home: Path

    @property
    def is_postgres(self) -> bool:
        return self.raw.startswith(("postgresql:", "postgres:", "postgresql+psycopg:"))

    @property
    def sqlite_path(self) -> Path:
        return (self.home / self.raw).resolve()

    @property
    def schema(self) -> str | None:
        if not self.is_postgres:
            return None
        return url_schema(self.raw) or "ledger"

    def sqlalchemy_url(self) -> str:
        if not self.is_postgres:
            return f"sqlite:///{self.sqlite_path}"
        url = make_url(self.raw).set(drivername="postgresql+psycopg")
        url = url.difference_update_query(["schema"])
        return url.render_as_string(hide_password=False)

    def eventsourcing_env(self) -> dict[str, str]:
        if not self.is_postgres:
            return {"PERSISTENCE_MODULE": "eventsourcing.sqlite",
                    "SQLITE_DBNAME": str(self.sqlite_path)}
        url = make_url(self.raw)
        return {
            "PERSISTENCE_MODULE": "eventsourcing.postgres",
            "POSTGRES_DBNAME": url.database or "postgres",
            "POSTGRES_HOST": url.host or "127.0.0.1",
            "POSTGRES_PORT": str(url.port or 5432),
            "POSTGRES_USER": url.username or "postgres",
            "POSTGRES_PASSWORD": url.password or "",
            "POSTGRES_SCHEMA": self.schema or "ledger",
            "POSTGRES_CONNECT_TIMEOUT": "10",
        }


def url_schema(url: str) -> str | None:
    """The schema a PostgreSQL URL names (its ``?schema=``), or None."""
    named = make_url(url).query.get("schema")
    return str(named) if named else None


def url_with_schema(url: str, schema: str) -> str:
    """A PostgreSQL URL naming ``schema`` (its ``?schema=`` set), as config files hold it."""
    return make_url(url).update_query_dict({"schema": schema}).render_as_string(
        hide_password=False)


def validate_db_url(url: str) -> None:
    if url.startswith(("postgresql://", "postgres://", "postgresql+psycopg://")):
        try:
            u = make_url(url)
        except Exception as e:
            raise InputError(f"cannot parse database URL: {e}") from None
        if not u.database:
            raise InputError("the PostgreSQL URL names no database",
                             hint="use postgresql://USER@HOST:5432/DBNAME[?schema=NAME]")
        return
    raise InputError(
        f"unsupported database URL scheme in {url.split(':', 1)[0]!r}",
        hint="omit --db for embedded SQLite, or give postgresql://USER@HOST:5432/DBNAME")


def shared_keystore_file(keystore: StorageURL, *others: StorageURL) -> Path | None:
    """The file, when an SQLite keystore is configured in the same file as another store.

    Refused: the data keys must live apart from what they encrypt, and the keystore is
    opened through another SQLite library than the event store (keys/datakeys.py:
    ``store_sqlite``), which one file must never be.
    """
    if keystore.is_postgres:
        return None
    paths = {o.sqlite_path for o in others if not o.is_postgres}
    return keystore.sqlite_path if keystore.sqlite_path in paths else None


def _toml_value(v: Any) -> str:
    return json.dumps(v)  # TOML basic strings, ints and booleans share JSON's syntax here


@dataclass(frozen=True)
class Config:
    home: Path
    ledger_id: str
    origin: str
    created_at: str
    root_kid: str
    default_actor: str
    events: StorageURL
    keystore: StorageURL
    projections: StorageURL
    witnesses: tuple[tuple[str, str], ...] = ()
    """``(url, vkey)`` of each witness asked to cosign every checkpoint (``[[witnesses]]``)."""
    kek: str | None = None
    """Where the key-encryption keys live (``[keys] kek``: ``file:kek``, a ``pkcs11:`` URI;
    keys/kek.py). None: a ledger made before wrapping, until its first rotation."""
    controller: str | None = None
    """The data controller's name (``[controller] name``): who answers to data subjects and
    auditors in receipts and certificates. None: unset (documents say so)."""
    contact: str | None = None
    """The controller's contact for data-protection matters (``[controller] contact``)."""
    locale: str = "en"
    """The default language of documents for people (``[controller] locale``: en, es), used
    where a subject registered no locale of their own."""

    @classmethod
    def load(cls, home: Path) -> Config:
        try:
            doc = tomllib.loads((home / CONFIG).read_text(encoding="utf-8"))
            led, st = doc["ledger"], doc["storage"]
            return cls(
                home=home, ledger_id=led["id"], origin=led["origin"],
                created_at=led["created_at"], root_kid=led["root_kid"],
                default_actor=led.get("default_actor", "writer"),
                events=StorageURL(st["events"], home), keystore=StorageURL(st["keystore"], home),
                projections=StorageURL(st["projections"], home),
                witnesses=tuple((str(w["url"]), str(w["vkey"]))
                                for w in doc.get("witnesses", [])),
                kek=doc.get("keys", {}).get("kek"),
                controller=doc.get("controller", {}).get("name"),
                contact=doc.get("controller", {}).get("contact"),
                locale=str(doc.get("controller", {}).get("locale") or "en"),
            )
        except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError) as e:
            raise EnvironmentProblem(
                f"cannot read {home / CONFIG}: {e.__class__.__name__}: {e}",
                hint="restore config.toml from a backup; it is written once by `ledger init`",
            ) from e

    def write(self) -> None:
        lines = [
            "# memory-ledger home configuration, written by `ledger init`.",
            "[ledger]",
            f"id = {_toml_value(self.ledger_id)}",
            f"origin = {_toml_value(self.origin)}",
            f"created_at = {_toml_value(self.created_at)}",
            f"root_kid = {_toml_value(self.root_kid)}",
            f"default_actor = {_toml_value(self.default_actor)}",
            "",
            "[storage]",
            "# A plain file name is an SQLite file in this folder; otherwise a PostgreSQL URL.",
            f"events = {_toml_value(self.events.raw)}",
            f"keystore = {_toml_value(self.keystore.raw)}",
            f"projections = {_toml_value(self.projections.raw)}",
            "",
        ]
        if self.kek is not None:
            lines += ["[keys]",
                      "# Where the key-encryption keys live: file:FOLDER (relative to this home)",
                      "# or an RFC 7512 pkcs11: URI. Never back the KEK up with the data",
                      "# (docs/deploy.md).",
                      f"kek = {_toml_value(self.kek)}", ""]
        if self.controller or self.contact or self.locale != "en":
            lines += ["[controller]",
                      "# Who answers for this memory (receipts, certificates of erasure).",
                      *([f"name = {_toml_value(self.controller)}"] if self.controller else []),
                      *([f"contact = {_toml_value(self.contact)}"] if self.contact else []),
                      f"locale = {_toml_value(self.locale)}", ""]
        for url, vkey in self.witnesses:
            lines += ["# A witness asked to cosign every checkpoint (c2sp.org/tlog-witness).",
                      "[[witnesses]]", f"url = {_toml_value(url)}",
                      f"vkey = {_toml_value(vkey)}", ""]
        path = self.home / CONFIG
        kept = _other_tables(path)
        write_private(path, "\n".join(lines) + kept, replace=True)  # renamed whole: never half


MANAGED_TABLES = frozenset({"ledger", "storage", "keys", "controller", "witnesses"})
"""The tables of config.toml that :meth:`Config.write` writes; every other table (such
as ``[projections]``, the embedder's settings) is kept as it was, comments and all."""


def _other_tables(path: Path) -> str:
    """The text of the tables of ``path`` that Config does not manage, as they are."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""
    kept: list[str] = []
    keep = False
    pending: list[str] = []  # comment lines just above a table header belong to it
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("["):
            name = stripped.strip("[]").split(".")[0].strip().strip('"')
            keep = name not in MANAGED_TABLES
            if keep:
                kept += [*pending, line]
            pending = []
        elif stripped.startswith("#") or not stripped:
            pending.append(line)  # goes with what follows: this table's line or the next
        elif keep:
            kept += [*pending, line]
            pending = []
        else:
            pending = []
    return ("\n".join(kept).rstrip() + "\n") if kept else ""
