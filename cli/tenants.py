"""``ledger tenants init|create|list|offboard`` and ``ledger tenants tokens
create|list|revoke``: a fleet of ledgers, one per tenant (ADR 0061, service/fleet.py;
its tokens: credentials/fleet.py).

``--home`` names the fleet home (a folder with ``fleet.toml``); ``ledger serve --home
FLEET`` serves every tenant, each request on the ledger of its token's tenant. Data on
stdout, verdicts on stderr, ``--json`` everywhere. This module imports typer only: each
command imports what it uses.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cli.output import JsonOpt, out, verdict

if TYPE_CHECKING:
    from credentials.fleet import FleetWithTokens

tenants_cli = typer.Typer(no_args_is_help=True,
                          help="A fleet of ledgers, one per tenant, served by one `ledger "
                               "serve` (--home names the fleet's folder).")
tokens_cli = typer.Typer(no_args_is_help=True,
                         help="The fleet's bearer tokens: each bound to one tenant's ledger, "
                              "or fleet-wide (operators and auditors).")
tenants_cli.add_typer(tokens_cli, name="tokens")
_home: list[Callable[[], Path | None]] = []


def register(cli: typer.Typer, home_of: Callable[[], Path | None]) -> None:
    """Mount ``tenants`` on ``cli``; ``home_of`` gives ``--home`` (None: LEDGER_HOME or
    ``.ledger/`` upward)."""
    _home[:] = [home_of]
    cli.add_typer(tenants_cli, name="tenants")


@contextmanager
def _fleet() -> Iterator[FleetWithTokens]:
    from credentials.fleet import FleetWithTokens
    from service.fleet import find_fleet

    with FleetWithTokens.open(find_fleet(_home[0]())) as fleet:
        yield fleet


@tenants_cli.command("init")
def tenants_init(
    db: Annotated[str | None, typer.Option(
        help="A PostgreSQL URL: the fleet's tables in its ?schema= (default ledger_fleet), "
             "each tenant in a schema of its own beside it. Default: SQLite files.")]
    = None,
    as_json: JsonOpt = False,
) -> None:
    """Make a fleet home at --home: its tenants and tokens, no tenant yet.

    Example: ledger --home /srv/fleet tenants init --db postgresql://ledger@db/ledger
    """
    from credentials.fleet import FleetWithTokens
    from ledger.errors import InputError

    home = _home[0]()
    if home is None:
        raise InputError("name the fleet's folder with --home", hint="ledger --home "
                         "/srv/fleet tenants init")
    with FleetWithTokens.create(home, db) as fleet:
        doc = {"home": str(home), "fleet_id": fleet.fleet_id,
               "storage": "postgresql" if fleet.db.is_postgres else "sqlite"}
    out(doc, as_json, str(home))
    verdict(f"OK: fleet {doc['fleet_id']} at {home}; add a tenant with `ledger --home "
            f"{home} tenants create NAME`")


@tenants_cli.command("create")
def tenants_create(
    name: Annotated[str, typer.Argument(help="The tenant's name: lower-case letters, digits "
                                             "and _ (it names a folder and a schema).")],
    controller: Annotated[str | None, typer.Option(
        help="The tenant's data controller, named in its receipts and certificates.")]
    = None,
    contact: Annotated[str | None, typer.Option(
        help="The controller's contact for data-protection matters.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Add a tenant: a ledger of its own (log, keys, tree, read models) in the fleet.

    Example: ledger --home /srv/fleet tenants create acme --controller "Acme Ltd"
    """
    with _fleet() as fleet:
        tenant = fleet.create_tenant(name, controller, contact)
        home = fleet.tenant_home(name)
    out(tenant.as_json(), as_json, tenant.name)
    verdict(f"OK: tenant {tenant.name} (ledger {tenant.ledger_id}) at {home}; issue its "
            f"tokens with `ledger tenants tokens create NAME --tenant {tenant.name} "
            "--role ROLE`")


@tenants_cli.command("list")
def tenants_list(
    every: Annotated[bool, typer.Option(
        "--all", help="Offboarded tenants too (their name, dates and pack digest).")]
    = False,
    as_json: JsonOpt = False,
) -> None:
    """The fleet's tenants, with their state and storage.

    Example: ledger --home /srv/fleet tenants list --json
    """
    with _fleet() as fleet:
        rows = [t.as_json() for t in fleet.tenants(every)]
    text = "\n".join(f"{r['name']:<20} {r['state']:<11} {r['storage']:<24} {r['ledger_id']}"
                     + (f"  offboarded {r['offboarded_at']}" if r["offboarded_at"] else "")
                     for r in rows)
    out(rows, as_json, text)
    if not as_json and not rows:
        verdict("note: no tenants yet; add one with `ledger tenants create NAME`")


@tenants_cli.command("offboard")
def tenants_offboard(
    name: Annotated[str, typer.Argument(help="The tenant to remove.")],
    reason: Annotated[str, typer.Option(help="Why (recorded in the signed events).")],
    out_dir: Annotated[Path, typer.Option(
        "--out", help="A new folder for the Evidence Pack (a .zip is written beside it).")],
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask for confirmation.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Remove a tenant for good: tokens revoked, every memory erased in one signed batch,
    its Evidence Pack written and verified, its KEKs destroyed, its folder and schema
    removed.

    Waits a few seconds after revoking the tokens, so that every server refuses them
    before the erasure starts. Verify the pack later with `ledger verify-pack OUT`.

    Example: ledger --home /srv/fleet tenants offboard acme --reason "contract" --out acme-pack
    """
    from ledger.errors import InputError, NotFound

    with _fleet() as fleet:  # the fleet and the tenant first: no question about nothing
        if not yes:
            if name not in {t.name for t in fleet.tenants()}:
                raise NotFound(f"no tenant {name!r} in this fleet",
                               hint="see the tenants with `ledger tenants list`")
            if not typer.confirm(f"Destroy every memory and key of tenant {name}?",
                                 err=True):
                raise InputError("not confirmed; nothing was changed",
                                 hint="pass --yes to run without asking")
        done = fleet.offboard(name, reason, out_dir, fleet.tokens)
    out(done, as_json, done["pack"] or "")
    from ledger.text import plural

    t = done["targets"]
    verdict(f"OK: tenant {name} offboarded: {plural(t['atoms'], 'atoms')}, "
            f"{plural(t['artifacts'], 'artifacts')}, {plural(t['subjects'], 'subjects')} "
            f"erased, {plural(len(done['kek_epochs_destroyed']), 'KEK epochs')} destroyed, "
            f"{plural(len(done['tokens_revoked']), 'tokens')} revoked; "
            + (f"Evidence Pack {done['pack']} (verified)" if done["pack"]
               else "nothing to erase, so no Evidence Pack"))


@tokens_cli.command("create")
def tokens_create(
    name: Annotated[str, typer.Argument(help="A label for the token, e.g. acme-assistant.")],
    role: Annotated[str, typer.Option(
        help="assistant, operator, auditor or privacy-agent, as `ledger tokens create`.")],
    tenant: Annotated[str | None, typer.Option(
        help="The tenant whose ledger the token reaches. Without it: a fleet-wide "
             "operator or auditor token, which names the tenant of each request in the "
             "Ledger-Tenant header.")] = None,
    subject: Annotated[list[str] | None, typer.Option(
        "--subject", help="A subject ref of the tenant the token may touch; repeatable. "
                          "Without it: every subject of the tenant.")] = None,
    expires: Annotated[str | None, typer.Option(
        help="Expiry, an ISO 8601 date or time (UTC if no zone); default: never.")] = None,
    key: Annotated[str | None, typer.Option(
        help="Operators only: the tenant's key that signs this token's acts "
             "(default: operator).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Issue a fleet token and print it once; only its hash is stored.

    Example: ledger --home /srv/fleet tenants tokens create asst --tenant acme --role assistant
    """
    from ledger.clock import parse_instant

    expires_at = parse_instant(expires, "--expires") if expires is not None else None
    with _fleet() as fleet:
        issued = fleet.issue_token(name, role, tenant, subject or (), expires_at, key)
    rec = issued.record
    out({**rec.to_json(), "token": issued.token}, as_json, issued.token)
    scope = f"tenant {rec.tenant}" if rec.tenant else "the whole fleet"
    verdict(f"OK: created {rec.token_id} ({rec.role}, {scope}). The token is shown this "
            "once: store it now.")


@tokens_cli.command("list")
def tokens_list(as_json: JsonOpt = False) -> None:
    """Every fleet token, with its tenant and state; never a secret.

    Example: ledger --home /srv/fleet tenants tokens list --json
    """
    from ledger import clock

    with _fleet() as fleet:
        records = fleet.tokens.list()
    now = clock.now()
    rows = [r.to_json(now) for r in records]
    text = "\n".join(
        f"{r['token_id']}  {r['name']:<20} {r['role']:<9} {r['status']:<7} "
        f"tenant {r['tenant'] or '* (fleet)'}"
        + (f"  subjects {','.join(r['subjects'])}" if r["subjects"] else "") for r in rows)
    out(rows, as_json, text)


@tokens_cli.command("revoke")
def tokens_revoke(
    token_id: Annotated[str, typer.Argument(help="The token's id (see `ledger tenants "
                                                 "tokens list`).")],
    as_json: JsonOpt = False,
) -> None:
    """Revoke a fleet token: every server refuses it within 5 seconds.

    Example: ledger --home /srv/fleet tenants tokens revoke tok_3f9a1c2b7d4e5f60
    """
    with _fleet() as fleet:
        rec = fleet.tokens.revoke(token_id)
    out(rec.to_json(), as_json, rec.token_id)
    verdict(f"OK: revoked {rec.token_id} ({rec.name})")
