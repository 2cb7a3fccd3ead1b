"""memoryPolicy commands, mounted on the ``ledger`` CLI by :func:`register` (ADR 0014).

``ledger sweep``, ``ledger requests list|reject|export``, ``ledger policy check``. Data on
stdout,
verdicts on stderr, ``--json`` everywhere. Exit codes: 0 ok; ``requests list --overdue``
exits 1 (EXIT_VERIFY) when any request is overdue, for monitoring; errors are
ledger.errors classes, mapped to exit codes by the ``ledger`` entry point. The commands
call the facade (:class:`service.facade.MemoryService`) as the local operator, from the
``served`` opener given to :func:`register`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from cli.opener import Served
from cli.output import JsonOpt, out, verdict
from ledger.errors import EXIT_VERIFY
from ledger.text import plural

requests_cli = typer.Typer(no_args_is_help=True,
                           help="Right-to-be-forgotten requests and their deadlines.")
_served: list[Served] = []


def register(cli: typer.Typer, served: Served, policy_cli: typer.Typer) -> None:
    """Mount ``sweep``, ``requests list`` and ``policy check`` (and, from cli/resume.py,
    ``requests resume`` and ``repair``)."""
    _served[:] = [served]
    cli.command("sweep")(sweep_command)
    cli.add_typer(requests_cli, name="requests")
    policy_cli.command("check")(policy_check_command)
    from cli import resume as resume_cli

    resume_cli.register(cli, requests_cli, served)


def sweep_command(
    dry_run: Annotated[bool, typer.Option(help="Show what is due; change nothing.")] = False,
    operator: Annotated[str, typer.Option(
        "--operator", "--as", help="Operator key that signs (default: operator).")]
    = "operator",
    as_json: JsonOpt = False,
) -> None:
    """Apply the policy's retention and decay rules: archive or erase what is due.

    Safe to run from cron: one sweep at a time, and a second run finds nothing due.

    Example: LEDGER_NOW=2026-12-01T00:00:00Z ledger sweep --dry-run --json
    """
    from ledger import progress

    with _served[0](operator=operator) as (svc, me), \
            progress.bar("Sweeping", total=1, json=as_json) as bar:
        data = svc.sweep(me, dry_run=dry_run, progress=bar.step).model_dump()
    lines = [f"{d['action']}  {d['atom_id']}  {d['rule']}  due {d['due_at']}"
             for d in data["due"]]
    if not dry_run and not progress.verbose() and len(lines) > 10:  # a summary (-v: all)
        per: dict[str, int] = {}
        for d in data["due"]:
            per[d["action"]] = per.get(d["action"], 0) + 1
        lines = [f"{action}  {plural(n, 'atoms')}" for action, n in sorted(per.items())]
        lines.append("(-v lists them, --json gives them)")
    out(data, as_json, "\n".join(lines))
    a, e, t = (data["archived"]["count"], data["erased"]["count"],
               data["tombstone_records_dropped"]["count"])
    if data["status"] == "no-policy":
        verdict("note: no memoryPolicy is in force (none set, or enabled: false); "
                 "nothing to sweep")
    elif data["status"] == "nothing-due":
        verdict(f"OK: nothing due at {data['now']}; nothing changed")
    elif dry_run:
        kek = data["kek_rotation"]
        rotate = (f", rotate the KEK of epoch {kek['epoch']} (due {kek['due_at']})"
                  if kek.get("due") else "")
        verdict(f"dry run: would archive {a}, erase {e} and drop {t} tombstone records"
                f"{rotate}; nothing changed")
    else:
        batch = f" (batch {data['erased']['batch_id']})" if e else ""
        rotated = data["kek_rotation"].get("rotated")
        verdict(f"OK: swept at {data['now']}: {a} archived, {e} erased{batch}, {t} "
                 "tombstone records dropped"
                + (f"; KEK rotated to epoch {rotated['epoch']}" if rotated else ""))


@requests_cli.command("list")
def requests_list(
    overdue: Annotated[bool, typer.Option(
        "--overdue", help="Only overdue requests; exit 1 if there is any (for monitoring).")]
    = False,
    as_json: JsonOpt = False,
) -> None:
    """Erasure requests with their deadlines, status and time left (by LEDGER_NOW if set).

    Exit status with --overdue: 0 none overdue, 1 some overdue.

    Example: ledger requests list --overdue --json
    """
    with _served[0]() as (svc, me):
        rows = [r.model_dump() for r in svc.list_requests(me) if r.overdue or not overdue]
    out(rows, as_json, "\n".join(
        f"{r['request_id']}  {r['status']:<14} due {r['complete_due']}  "
        f"left {r['time_left'] or '-'}" + _copies(r) + _why(r) for r in rows))
    late = [r for r in rows if r["overdue"]]
    if late:
        verdict(f"{'FAIL' if overdue else 'WARN'}: {len(late)} erasure request(s) overdue: "
                 + ", ".join(r["request_id"] for r in late[:5]))
        if overdue:
            raise typer.Exit(EXIT_VERIFY)
    else:
        verdict("OK: none overdue" if overdue else f"OK: {len(rows)} request(s), none overdue")


def _why(row: dict[str, Any]) -> str:
    """A partial request's reasons and a rejected one's code (ADR 0047), as tokens."""
    from governance.partial import codes

    if row["status"] == "partial":
        return "  " + " ".join(codes(row.get("partial_reasons") or []))
    if row["status"] == "rejected":
        return f"  rejected:{(row.get('rejection') or {}).get('code')}"
    return ""


@requests_cli.command("reject")
def requests_reject(
    request: Annotated[str, typer.Argument(help="The request id (`ledger requests list`).")],
    reason: Annotated[str, typer.Option(
        help="Why, in words that name no one: kept in clear in the signed log and shown in "
             "the request register.")],
    code: Annotated[str, typer.Option(
        help="identity-not-verified, manifestly-unfounded, excessive, legal-exemption, "
             "withdrawn, duplicate or other.")] = "other",
    operator: Annotated[str, typer.Option(
        "--operator", "--as", help="Operator key that signs (default: operator).")]
    = "operator",
    as_json: JsonOpt = False,
) -> None:
    """Reject an erasure request no erasure has started for: a signed rejection with its
    reason; the request is closed and never executed, and its own key (its sealed reason
    and identifiers) is destroyed.

    Example: ledger requests reject 6093ed56-8cc6-49d9-8f18-e99daa44fcd2 --code \\
    identity-not-verified --reason "identity could not be verified after two requests"
    """
    from pydantic import ValidationError

    from ledger.domain import REJECTION_CODES
    from ledger.errors import InputError
    from service.models import RequestRejectIn

    try:
        data = RequestRejectIn.model_validate({"code": code, "reason": reason})
    except ValidationError:
        raise InputError(f"--code {code!r} is not a rejection code, or --reason is empty or "
                         "longer than 500 characters",
                         hint="codes: " + ", ".join(REJECTION_CODES)) from None
    with _served[0](operator=operator) as (svc, me):
        row = svc.reject_request(me, request, data).model_dump()
    out(row, as_json, row["request_id"])
    verdict(f"OK: request {row['request_id']} rejected ({code}); it is closed and will not "
            "be executed")


@requests_cli.command("export")
def requests_export(
    fmt: Annotated[str, typer.Option("--format", help="csv (a spreadsheet opens it as it "
                                                      "is) or json.")] = "csv",
    date_from: Annotated[str | None, typer.Option(
        "--from", help="First day (or instant) of receipt, UTC: 2031-01-01.")] = None,
    date_to: Annotated[str | None, typer.Option(
        "--to", help="Last day (or instant) of receipt, UTC: 2031-12-31.")] = None,
    out_file: Annotated[Path | None, typer.Option(
        "--out", help="Write to this file (replaced if it exists) instead of stdout.")]
    = None,
    packs: Annotated[Path | None, typer.Option(
        help="A folder of Evidence Packs you kept (folders or .zip): each is verified, and "
             "the newest of a request's batch gives its pack digest and countersigners.")]
    = None,
) -> None:
    """The request register: every erasure request received in the period, one row each,
    with its dates, status, reasons, approver, countersigners, pack digest and whether the
    SLA was met (by LEDGER_NOW if set). Only the subject's reference names the person.

    Example: ledger requests export --format csv --from 2031-01-01 --to 2031-03-31 \\
    --packs packs/ --out register.csv
    """
    import sys

    from governance.register import render_csv, render_json
    from keys.files import write_file
    from ledger.errors import InputError

    if fmt not in ("csv", "json"):
        raise InputError(f"unknown format {fmt!r}", hint="--format csv or --format json")
    with _served[0]() as (svc, me):
        reg = svc.request_register(me, date_from, date_to, packs)
    packs_seen = None if reg.packs_verified is None else {
        "verified": reg.packs_verified, "refused": reg.packs_refused or {}}
    body = (render_csv(reg.rows) if fmt == "csv" else
            render_json(reg.rows, reg.generated_at, date_from, date_to, packs_seen))
    if out_file is None:
        sys.stdout.write(body.decode("utf-8"))
        sys.stdout.flush()
    else:
        write_file(out_file, body)
    for name, why in sorted((reg.packs_refused or {}).items()):
        verdict(f"warning: pack {name} not cited: {why}")
    period = f" received {date_from or 'any time'} to {date_to or 'now'}" \
        if date_from or date_to else ""
    verdict(f"OK: {plural(len(reg.rows), 'requests')}{period}"
            + (f"; {plural(reg.packs_verified or 0, 'packs')} verified"
               if packs is not None else "")
            + (f"; written to {out_file}" if out_file is not None else ""))


def _copies(row: dict[str, Any]) -> str:
    """A completed request whose erasure older copies can still undo: ``  copies pending
    until T3`` (completed for the live stores); nothing once they cannot."""
    from governance.copies import UNRECOVERABLE, copies_line

    copies = row.get("copies")
    if not copies or copies["state"] == UNRECOVERABLE:
        return ""
    return f"  {copies_line(copies)}"


def policy_check_command(as_json: JsonOpt = False) -> None:
    """Check stored memories against the policy (Persona Schema §8); warnings with ids.

    Exit 0 even with warnings (they are fixable, not blockers).

    Example: ledger policy check --json
    """
    with _served[0]() as (svc, me):
        data = svc.check_policy(me).model_dump()
    out(data["warnings"], as_json, "\n".join(
        f"{w['rule']}  {w['id']}  {w['message']}  -> {w['fix']}" for w in data["warnings"]))
    if not data["policy_in_force"]:
        verdict("note: no memoryPolicy is in force; only reference integrity was checked")
    n = len(data["warnings"])
    verdict(f"WARN: {n} warning(s)" if n else "OK: no warnings")
