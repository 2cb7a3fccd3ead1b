"""memoryPolicy commands, mounted on the ``ledger`` CLI by :func:`register` (ADR 0014).

``ledger sweep``, ``ledger requests list``, ``ledger policy check``. Data on stdout,
verdicts on stderr, ``--json`` everywhere. Exit codes: 0 ok; ``requests list --overdue``
exits 1 (EXIT_VERIFY) when any request is overdue, for monitoring; errors are
ledger.errors classes, mapped to exit codes by the ``ledger`` entry point. The commands
call the facade (:class:`service.facade.MemoryService`) as the local operator, from the
``served`` opener given to :func:`register`.
"""

from __future__ import annotations

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
        f"left {r['time_left'] or '-'}" + _copies(r) for r in rows))
    late = [r for r in rows if r["overdue"]]
    if late:
        verdict(f"{'FAIL' if overdue else 'WARN'}: {len(late)} erasure request(s) overdue: "
                 + ", ".join(r["request_id"] for r in late[:5]))
        if overdue:
            raise typer.Exit(EXIT_VERIFY)
    else:
        verdict("OK: none overdue" if overdue else f"OK: {len(rows)} request(s), none overdue")


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
