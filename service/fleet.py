"""A fleet: one ledger per tenant, behind one set of servers (ADR 0061).

A fleet home is a folder holding ``fleet.toml``, the fleet's own store (``fleet.sqlite``,
or a PostgreSQL schema) and ``tenants/<name>/``, each a complete ledger home made by
``ledger init``: its own event store, read models, keystore, KEKs, key roster, tree,
checkpoints and witnesses. On PostgreSQL each tenant's event store and read models live
in a schema of their own (``<fleet schema>_<name>``); nothing of one tenant is ever in
another tenant's files or tables.

The fleet's store holds two tables and no memory content: the tenants (name, state,
ledger id, dates, the digest of the offboarding pack) and the fleet's bearer tokens. This
module keeps the first, through stores/tenants.py (ADR 0075); the tokens are credentials
(credentials/fleet.py opens the fleet with its token store, ADR 0069): a token's tenant is
bound when it is issued, and a server picks the tenant's ledger from the token
(server/tenants.py).

Offboarding a tenant (:meth:`Fleet.offboard`) shuts it out (its credentials revoked, by
the :class:`TenantAccess` the surface passes in), erases everything it holds in one
signed redaction batch (every data key destroyed, every read model purged and probed),
writes that batch's Evidence Pack and verifies it, destroys the tenant's KEKs, then
removes its folder and its schema.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import time
import tomllib
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, Self

import structlog

from ledger import clock
from ledger.errors import ConflictError, EnvironmentProblem, InputError, NotFound
from ledger.home import StorageURL, named_or_found, url_schema, url_with_schema, validate_db_url
from stores.tenants import TenantStore

log = structlog.get_logger("ledger")

FLEET_FILE = "fleet.toml"
TENANTS_DIR = "tenants"
FLEET_DB = "fleet.sqlite"
DEFAULT_SCHEMA = "ledger_fleet"
_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")
_SCHEMA = re.compile(r"[a-z][a-z0-9_]{0,21}")


def is_fleet(path: Path) -> bool:
    return (path / FLEET_FILE).is_file()


def find_fleet(explicit: Path | None = None) -> Path:
    """The fleet home: ``--home``, else ``LEDGER_HOME``, else the first ``.ledger/`` from
    the working directory upward that holds ``fleet.toml``."""
    path = named_or_found(explicit, is_fleet)
    if path is None:
        raise EnvironmentProblem("no fleet home found here or in any parent folder",
                                 hint="run `ledger tenants init --home DIR`, or pass --home")
    if not is_fleet(path):
        raise EnvironmentProblem(f"{path} is not a ledger home of a fleet (no {FLEET_FILE})",
                                 hint=f"run `ledger tenants init --home {path}` to make one")
    return path


def check_tenant_name(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise InputError(f"tenant name {name!r} is invalid",
                         hint="use 1-40 lower-case letters, digits or _, starting with a "
                              "letter (it names a folder and a database schema), e.g. acme")
    return name


@dataclass(frozen=True)
class Tenant:
    """One tenant of the fleet, as its registry row says (ids and dates, no content)."""

    name: str
    state: str  # active | offboarding | offboarded
    ledger_id: str
    created_at: str
    storage: str  # "sqlite", or the PostgreSQL schema of its event store and read models
    offboarded_at: str | None
    evidence: str | None  # sha256 of the offboarding pack's statement

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "state": self.state, "ledger_id": self.ledger_id,
                "created_at": self.created_at, "storage": self.storage,
                "offboarded_at": self.offboarded_at, "evidence": self.evidence}


class TenantAccess(Protocol):
    """What offboarding asks of the credentials bound to a tenant (the fleet's token
    store, credentials/tokens.py): the use case revokes them without seeing one."""

    @property
    def revocation_bound(self) -> float:
        """Seconds after which every server refuses a credential revoked now."""
        ...

    def revoke_tenant(self, tenant: str) -> list[str]:
        """Revoke every live credential of ``tenant``; their ids."""
        ...


class Fleet:
    """A fleet home, opened: its registry of tenants (the surfaces open it with its
    token store: credentials/fleet.py)."""

    def __init__(self, home: Path, fleet_id: str, db: StorageURL) -> None:
        self.home = home
        self.fleet_id = fleet_id
        self.db = db
        self.store = TenantStore(db)  # stores/tenants.py

    # ------------------------------------------------------------------ the home
    @classmethod
    def create(cls, home: Path, db: str | None = None) -> Self:
        """A new fleet home (``ledger tenants init``); ``db``: a PostgreSQL URL whose
        ``schema`` (default ``ledger_fleet``) holds the fleet's tables, and beside which
        each tenant gets a schema of its own."""
        if is_fleet(home) or (home / "config.toml").exists():
            raise ConflictError(f"{home} already holds a fleet or a ledger",
                                hint="use it, or choose another --home")
        raw = FLEET_DB
        if db is not None:
            validate_db_url(db)
            schema = url_schema(db) or DEFAULT_SCHEMA
            if not _SCHEMA.fullmatch(schema):
                raise InputError(f"schema {schema!r} cannot name a fleet",
                                 hint="use 1-22 lower-case letters, digits or _, e.g. "
                                      "?schema=fleet")
            raw = url_with_schema(db, schema)
        created = not home.exists()
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
        fleet_id = str(uuid.uuid4())
        text = ("# A fleet of ledgers, one per tenant (ledger tenants), written by "
                "`ledger tenants init`.\n[fleet]\n"
                f'id = "{fleet_id}"\ncreated_at = "{clock.format_instant(clock.now())}"\n\n'
                "[storage]\n# The fleet's tenants and tokens: an SQLite file here, or a "
                "PostgreSQL URL.\n" f"db = {_toml_string(raw)}\n")
        try:
            from keys.files import write_private

            (home / TENANTS_DIR).mkdir(mode=0o700, exist_ok=True)
            fleet = cls(home, fleet_id, StorageURL(raw, home))
            write_private(home / FLEET_FILE, text)
        except BaseException:
            if created:
                shutil.rmtree(home, ignore_errors=True)
            raise
        log.info("fleet.created", fleet_id=fleet_id,
                 backend="postgresql" if db is not None else "sqlite")
        return fleet

    @classmethod
    def open(cls, home: Path) -> Self:
        try:
            doc = tomllib.loads((home / FLEET_FILE).read_text(encoding="utf-8"))
            fleet_id, raw = str(doc["fleet"]["id"]), str(doc["storage"]["db"])
        except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError) as e:
            raise EnvironmentProblem(f"cannot read {home / FLEET_FILE}: "
                                     f"{e.__class__.__name__}",
                                     hint="restore fleet.toml from a backup") from e
        return cls(home, fleet_id, StorageURL(raw, home))

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ tenants
    def tenant_home(self, name: str) -> Path:
        return self.home / TENANTS_DIR / check_tenant_name(name)

    def _schema_of(self, name: str) -> str:
        return f"{self.db.schema}_{name}"

    def _tenant_db(self, name: str) -> str | None:
        if not self.db.is_postgres:
            return None
        return url_with_schema(self.db.raw, self._schema_of(name))

    def create_tenant(self, name: str, controller: str | None = None,
                      contact: str | None = None) -> Tenant:
        """A new tenant: a ledger home of its own under ``tenants/`` (its schema on
        PostgreSQL), registered in the fleet. A name is never reused, even offboarded."""
        from service.root import close_service, create_home, open_service

        check_tenant_name(name)
        if self._row(name) is not None:
            raise ConflictError(f"the fleet already has (or had) a tenant named {name!r}",
                                hint="choose another name; an offboarded name is not reused")
        home = self.tenant_home(name)
        if home.exists():
            raise ConflictError(f"{home} already exists", hint="remove it or choose another "
                                                               "name")
        config = create_home(home, db=self._tenant_db(name), controller=controller,
                             contact=contact)
        try:  # its read models' tables made now: servers open it at once without a race
            svc = open_service(home)
            try:
                svc.proj.catch_up()
            finally:
                close_service(svc)
        except BaseException:
            self._remove_storage(name, home)
            raise
        row = Tenant(name=name, state="active", ledger_id=config.ledger_id,
                     created_at=clock.format_instant(clock.now()),
                     storage=self._schema_of(name) if self.db.is_postgres else "sqlite",
                     offboarded_at=None, evidence=None)
        try:
            self.store.add(row.as_json())
        except BaseException:
            self._remove_storage(name, home)
            raise
        log.info("fleet.tenant_created", tenant=name, ledger_id=config.ledger_id)
        return row

    def _row(self, name: str) -> Tenant | None:
        r = self.store.row(name)
        return None if r is None else Tenant(**r)

    def tenants(self, every: bool = False) -> list[Tenant]:
        """The tenants, by name; ``every``: the offboarded ones too."""
        return [Tenant(**r) for r in self.store.rows(every)]

    def tenant(self, name: str) -> Tenant:
        """An active tenant, or :class:`NotFound` (unknown, or offboarded); an
        :class:`EnvironmentProblem` (HTTP 503) when the fleet's database does not answer."""
        found = self._row(name) if _NAME.fullmatch(name) else None
        if found is None or found.state != "active":
            raise NotFound(f"no tenant {name!r} in this fleet",
                           hint="see the tenants with `ledger tenants list`")
        return found

    # ------------------------------------------------------------------ offboarding
    def offboard(self, name: str, reason: str, out: Path, access: TenantAccess, *,
                 grace: float | None = None) -> dict[str, Any]:
        """Crypto-shred and remove everything of tenant ``name``; the Evidence Pack of
        the erasure goes to ``out`` (a new folder, and ``out.zip``), verified before
        anything is removed. ``access``: the credentials of the fleet, the tenant's revoked
        first; ``grace``: seconds to wait after revoking them, so that every server
        refuses them before the erasure starts (default: one more than the credentials'
        ``revocation_bound``). Resumable: a run that stopped is finished by running it
        again."""
        if not reason.strip():
            raise InputError("a reason is required", hint='e.g. --reason "contract ended"')
        found = self._row(name) if _NAME.fullmatch(name) else None
        if found is None or found.state == "offboarded":
            raise NotFound(f"no tenant {name!r} in this fleet",
                           hint="see the tenants with `ledger tenants list`")
        if out.exists() or out.with_name(out.name + ".zip").exists():
            raise InputError(f"{out} already exists", hint="choose a new --out folder")
        if not out.parent.is_dir():
            raise InputError(f"{out.parent} is not a folder", hint="create it first")
        started = time.perf_counter()
        self.store.mark_offboarding(name)
        revoked = access.revoke_tenant(name)
        time.sleep(access.revocation_bound + 1 if grace is None else grace)
        home = self.tenant_home(name)
        erased = _erase_all(home, reason, out, resumed=found.state == "offboarding")
        keks = erased.pop("keks_destroyed")
        self._remove_storage(name, home)
        digest = erased.get("statement_sha256")
        self.store.mark_offboarded(name, clock.format_instant(clock.now()), digest)
        log.info("fleet.tenant_offboarded", tenant=name, ledger_id=found.ledger_id,
                 tokens_revoked=len(revoked), kek_epochs=len(keks))
        return {"tenant": name, "ledger_id": found.ledger_id, "tokens_revoked": revoked,
                **erased, "kek_epochs_destroyed": keks,
                "removed": {"folder": str(home),
                            "schema": found.storage if found.storage != "sqlite" else None},
                "seconds": round(time.perf_counter() - started, 3)}

    def _remove_storage(self, name: str, home: Path) -> None:
        """Remove the tenant's schema (PostgreSQL) and its folder, each file overwritten
        before it is unlinked."""
        if self.db.is_postgres:
            self.store.drop_schema(self._schema_of(name))
        if home.exists():
            for path in sorted(home.rglob("*"), reverse=True):
                if path.is_file() and not path.is_symlink():
                    _overwrite(path)
            shutil.rmtree(home)


def _erase_all(home: Path, reason: str, out: Path, resumed: bool) -> dict[str, Any]:
    """Every item of the ledger at ``home`` hard-erased in one batch, its pack written to
    ``out`` and verified, then every KEK epoch of the ledger destroyed. ``resumed``: an
    earlier run stopped; when it had erased everything, its batch is the one proved."""
    from governance.erasure import Targets, hard_erase, plan_user_erasure
    from governance.pack import build_pack
    from governance.pack_layout import STATEMENT
    from governance.pack_verify import verify_pack
    from service.root import close_service, open_service

    svc = open_service(home)
    try:
        app, proj = svc.app, svc.proj
        proj.catch_up()
        with proj.atoms.reading() as reads:
            sids = reads.subject_ids()
        targets = Targets()
        for sid in sids:
            t = plan_user_erasure(app, proj, sid, catch_up=False).targets
            targets.atoms += t.atoms
            targets.artifacts += t.artifacts
            targets.subjects += t.subjects
            targets.records += t.records
        report: dict[str, Any] = {"subjects": len(sids), "targets": {
            "atoms": len(targets.atoms), "artifacts": len(targets.artifacts),
            "subjects": len(targets.subjects), "records": len(targets.records)}}
        if targets.count:
            done = hard_erase(app, proj, targets, mode="hard", reason=reason,
                              operator="operator")
            if done.get("status") == "partial":
                raise ConflictError(
                    f"the tenant's erasure ended {done.get('status')}: "
                    f"{done.get('reasons') or 'see the batch'}; nothing was removed",
                    hint="lift the legal hold or bring the store back, then run the "
                         "offboarding again (it continues the same batch)")
            batch_id: str | None = str(done["batch_id"])
        elif resumed:  # an earlier run erased everything, then stopped: its batch
            from ledger.domain import RedactionBatch

            opened = app.reader.notifications(start=1, limit=10**9,
                                       topics=[RedactionBatch.Created.TOPIC])
            batch_id = str(opened[-1].originator_id) if opened else None
        else:
            batch_id = None  # nothing to erase (an empty tenant): no batch, no pack
        if batch_id is None:
            report.update(batch_id=None, pack=None, statement_sha256=None)
        else:
            build_pack(app, batch_id, out, make_zip=True)
            verify_pack(out, app.root_public_key)
            report.update(batch_id=batch_id, pack=str(out),
                          statement_sha256="sha256:" + hashlib.sha256(
                              (out / STATEMENT).read_bytes()).hexdigest())
        report["keks_destroyed"] = app.destroy_keks()
        return report
    finally:
        close_service(svc)


def _overwrite(path: Path) -> None:
    left = path.stat().st_size
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        while left > 0:
            left -= os.write(fd, b"\x00" * min(left, 1 << 20))
        os.fsync(fd)
    finally:
        os.close(fd)


def _toml_string(value: str) -> str:
    import json

    return json.dumps(value)
