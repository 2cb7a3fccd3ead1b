"""``ledger tokens create|list|revoke``: the server's bearer tokens (ADR 0028).

Mounted on the ``ledger`` CLI by :func:`register`. Data on stdout (the new token alone on
its line, so ``TOKEN=$(ledger tokens create ...)`` works), verdicts on stderr, ``--json``
everywhere. Errors are ledger.errors classes, mapped to exit codes by ``ledger``'s entry
point. This module imports typer only: each command imports what it uses.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from cli.output import JsonOpt, out, verdict

tokens_cli = typer.Typer(no_args_is_help=True,
                         help="Bearer tokens for `ledger serve`: issued once, stored hashed.")
_home: list[Callable[[], Path]] = []


def register(cli: typer.Typer, find_home: Callable[[], Path]) -> None:
    """Mount ``tokens`` on ``cli``; ``find_home`` resolves the ledger home (``--home``,
    ``LEDGER_HOME`` or ``.ledger/`` upward) when a command runs."""
    _home[:] = [find_home]
    cli.add_typer(tokens_cli, name="tokens")


@tokens_cli.command("create")
def tokens_create(
    name: Annotated[str, typer.Argument(help="A label for the token, e.g. claude-desktop.")],
    role: Annotated[str, typer.Option(
        help="assistant (its subjects' memories), operator (erasures, packs, keys), "
             "auditor (read and verify only) or privacy-agent (the Data Rights Protocol "
             "endpoints only; NAME is the agent's DRP agent-id).")],
    subject: Annotated[list[str] | None, typer.Option(
        "--subject", help="A subject ref the token may touch; repeatable. Without it: every "
                          "subject (of its tenant).")] = None,
    tenant: Annotated[str | None, typer.Option(
        help="Confine the token to one tenant's subjects (refs stored as TENANT:REF).")]
    = None,
    expires: Annotated[str | None, typer.Option(
        help="Expiry, an ISO 8601 date or time (UTC if no zone); default: never.")] = None,
    key: Annotated[str | None, typer.Option(
        help="Operators only: the home's key that signs this token's acts "
             "(default: operator).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Issue a bearer token and print it once; only its hash is stored.

    Example: ledger tokens create claude-desktop --role assistant --subject user_9f4e
    """
    from credentials.tokens import TokenStore, validate_new_token
    from ledger.clock import parse_instant
    from ledger.errors import InputError
    from ledger.home import Config

    home = _home[0]()
    config = Config.load(home)
    expires_at = parse_instant(expires, "--expires") if expires is not None else None
    # every check before the database is opened: a refused command writes nothing
    validate_new_token(name, role, subject or (), tenant, expires_at, key)
    if key is not None and not (home / "keys" / f"{key}.key").is_file():
        raise InputError(f"no private key named {key!r} in {home / 'keys'}",
                         hint="the operator's acts are signed here: create it with "
                              f"`ledger keys authorize {key} --role operator`")
    with TokenStore.open(config) as store:
        issued = store.create(name, role, subject or (), tenant, expires_at, key)
    rec = issued.record
    out({**rec.to_json(), "token": issued.token}, as_json, issued.token)
    scope = (f"subjects {', '.join(rec.subjects)}" if rec.subjects else "every subject") \
        + (f" of tenant {rec.tenant}" if rec.tenant else "")
    until = f", expires {rec.to_json()['expires_at']}" if rec.expires_at else ""
    verdict(f"OK: created {rec.token_id} ({rec.role}, {scope}{until}). The token is shown "
             "this once: store it now.")


@tokens_cli.command("list")
def tokens_list(as_json: JsonOpt = False) -> None:
    """Every token issued here, with its state; never a secret.

    Example: ledger tokens list --json
    """
    from credentials.tokens import TokenStore
    from ledger import clock
    from ledger.home import Config

    config = Config.load(_home[0]())
    with TokenStore.open(config) as store:
        records = store.list()
    now = clock.now()
    rows = [r.to_json(now) for r in records]
    text = "\n".join(
        f"{r['token_id']}  {r['name']:<20} {r['role']:<9} {r['status']:<7} "
        f"subjects {','.join(r['subjects']) if r['subjects'] else '*'}"
        + (f"  tenant {r['tenant']}" if r["tenant"] else "")
        + (f"  expires {r['expires_at']}" if r["expires_at"] else "")
        + (f"  revoked {r['revoked_at']}" if r["revoked_at"] else "") for r in rows)
    out(rows, as_json, text)
    if not as_json and not rows:
        verdict("note: no tokens yet; create one with `ledger tokens create NAME --role ROLE`")


@tokens_cli.command("revoke")
def tokens_revoke(
    token_id: Annotated[str, typer.Argument(help="The token's id (see `ledger tokens list`).")],
    as_json: JsonOpt = False,
) -> None:
    """Revoke a token: every server refuses it within 5 seconds.

    Example: ledger tokens revoke tok_3f9a1c2b7d4e5f60
    """
    from credentials.tokens import DEFAULT_TTL, TokenStore
    from ledger.home import Config

    config = Config.load(_home[0]())
    with TokenStore.open(config) as store:
        rec = store.revoke(token_id)
    out(rec.to_json(), as_json, rec.token_id)
    verdict(f"OK: revoked {rec.token_id} ({rec.name}); running servers refuse it within "
             f"{DEFAULT_TTL:g} s")
