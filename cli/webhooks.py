"""``ledger webhooks add|list|remove|retry|deliver``: signed webhooks from the log (ADR 0055).

Mounted on the ``ledger`` CLI by :func:`register`. Data on stdout (the new secret alone on
its line, so ``SECRET=$(ledger webhooks add URL)`` works), verdicts on stderr, ``--json``
everywhere. ``ledger serve`` delivers on its own; ``deliver --once`` is one pass of the
same sender, for cron or a test. This module imports typer only: each command imports
what it uses.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from cli.output import JsonOpt, out, verdict

webhooks_cli = typer.Typer(no_args_is_help=True,
                           help="Signed webhooks (Standard Webhooks) of the log's events: "
                                "ids and digests, never memory content.")
_home: list[Callable[[], Path]] = []


def register(cli: typer.Typer, find_home: Callable[[], Path]) -> None:
    """Mount ``webhooks`` on ``cli``; ``find_home`` resolves the ledger home when a
    command runs."""
    _home[:] = [find_home]
    cli.add_typer(webhooks_cli, name="webhooks")


@webhooks_cli.command("add")
def webhooks_add(
    url: Annotated[str, typer.Argument(help="The endpoint (http or https) that receives the "
                                            "POSTs.")],
    event: Annotated[list[str] | None, typer.Option(
        "--event", help="An event type to send (repeatable); default: every type.")] = None,
    tenant: Annotated[str | None, typer.Option(
        help="Only events about this tenant's subjects (refs stored as TENANT:REF).")] = None,
    allow_private: Annotated[bool, typer.Option(
        "--allow-private", help="Allow a loopback, private or link-local target (refused "
                                "otherwise: SSRF).")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Register an endpoint and print its signing secret once (whsec_...); it hears of
    events from now on.

    Example: ledger webhooks add https://hooks.example.com/ledger --event erasure.completed
    """
    from service.webhooks import WebhookService, validate_subscription

    home = _home[0]()
    # every check before the ledger is opened: a refused command writes nothing
    validate_subscription(url, event or (), tenant, allow_private)
    with WebhookService.open(home) as hooks:
        added = hooks.add(url, event or (), tenant, allow_private)
    sub = added.subscription
    out({**sub.to_json(), "secret": added.secret}, as_json, added.secret)
    what = ", ".join(sub.types) if sub.types else "every event type"
    scope = f" of tenant {sub.tenant}" if sub.tenant else ""
    verdict(f"OK: added {sub.sub_id} ({what}{scope}) for {sub.url}. The secret is shown this "
            "once: give it to the receiver now.")


@webhooks_cli.command("list")
def webhooks_list(
    dead: Annotated[bool, typer.Option(
        "--dead", help="The dead-letter list: deliveries that failed every attempt.")] = False,
    subscription: Annotated[str | None, typer.Option(
        help="With --dead: only this subscription's.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """The subscriptions with their delivery counts, or (--dead) the dead deliveries.

    Example: ledger webhooks list --dead --json
    """
    from service.webhooks import WebhookService

    with WebhookService.open(_home[0]()) as hooks:
        if dead:
            rows = hooks.dead(subscription)
            out(rows, as_json, "\n".join(
                f"{r['webhook_id']}  {r['type']:<22} attempts {r['attempts']}  "
                f"last {r['last_error'] or r['last_status']}" for r in rows))
            if not as_json:
                verdict(f"OK: {len(rows)} dead deliver{'y' if len(rows) == 1 else 'ies'}"
                        + ("; queue them again with `ledger webhooks retry`" if rows else ""))
            return
        subs = [s.to_json() for s in hooks.subscriptions()]
    out(subs, as_json, "\n".join(
        f"{s['subscription_id']}  {s['url']}  "
        f"{','.join(s['events']) if s['events'] else '*'}"
        + (f"  tenant {s['tenant']}" if s["tenant"] else "")
        + f"  pending {s['pending']} delivered {s['delivered']} dead {s['dead']}"
        for s in subs))
    if not as_json and not subs:
        verdict("note: no webhooks yet; add one with `ledger webhooks add URL`")


@webhooks_cli.command("remove")
def webhooks_remove(
    subscription: Annotated[str, typer.Argument(help="The subscription's id (whk_...).")],
    as_json: JsonOpt = False,
) -> None:
    """Remove a subscription: its pending and dead deliveries go, its secret is destroyed.

    Example: ledger webhooks remove whk_3f9a1c2b7d4e5f60
    """
    from service.webhooks import WebhookService

    with WebhookService.open(_home[0]()) as hooks:
        sub = hooks.remove(subscription)
    out(sub.to_json(), as_json, sub.sub_id)
    verdict(f"OK: removed {sub.sub_id} ({sub.url}); its secret is destroyed")


@webhooks_cli.command("retry")
def webhooks_retry(
    webhook_id: Annotated[list[str] | None, typer.Argument(
        help="Dead deliveries to queue again (msg_...); none: every dead one.")] = None,
    subscription: Annotated[str | None, typer.Option(
        help="Only this subscription's dead deliveries.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Queue dead deliveries again, with a fresh count of attempts.

    Example: ledger webhooks retry --subscription whk_3f9a1c2b7d4e5f60
    """
    from service.webhooks import WebhookService

    with WebhookService.open(_home[0]()) as hooks:
        n = hooks.retry(webhook_id or (), subscription)
    out({"queued": n}, as_json, str(n))
    verdict(f"OK: {n} deliver{'y' if n == 1 else 'ies'} queued again; `ledger serve` (or "
            "`ledger webhooks deliver --once`) sends them")


@webhooks_cli.command("deliver")
def webhooks_deliver(
    once: Annotated[bool, typer.Option(
        "--once", help="One pass (catch up, queue, attempt what is due), then exit.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Send due deliveries, as `ledger serve` does in the background; exit 1 if any
    attempt failed.

    Example: ledger webhooks deliver --once
    """
    from ledger.errors import InputError
    from service.webhooks import DeliveryPolicy, WebhookService

    home = _home[0]()
    if not once:
        raise InputError("only --once is supported: `ledger serve` delivers continuously",
                         hint="ledger webhooks deliver --once (e.g. from cron)")
    with WebhookService.open(home, DeliveryPolicy.from_env()) as hooks:
        report = hooks.pump()
    data = report.as_json()
    out(data, as_json, " ".join(f"{k} {v}" for k, v in data.items()))
    if report.failed:
        verdict(f"FAIL: {report.failed} of {report.attempted} attempts failed "
                f"({', '.join(f'{k}: {v}' for k, v in sorted(report.errors.items()))}); "
                f"{report.pending} pending, {report.dead} dead now")
        raise typer.Exit(1)
    verdict(f"OK: {report.delivered} delivered, {report.fanned_out} queued, "
            f"{report.pending} pending")
