"""``ledger audit``: the memory audit report (Persona Schema §9), mounted by :func:`register`.

The report goes to stdout, or atomically to ``--out FILE``; verdicts go to stderr.
Exit 0 when the report was produced and the log verified, 1 when verification failed
(the report is still written, with the failure in it), 2 for bad input (dates,
format, unknown subject). Errors are ledger.errors classes, mapped to exit codes by
the ``ledger`` entry point.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Protocol

import typer

from ledger import clock
from ledger.errors import EXIT_VERIFY, InputError

if TYPE_CHECKING:
    from datetime import datetime

    from ledger.progress import Steps


class AuditReport(Protocol):
    """How the command gets its report: the command (``cli/main.py``) wires
    the facade's ``MemoryService.audit_report`` for the local operator."""

    def __call__(self, from_: str | None, to: str | None, *, subject: str | None,
                 verify: str, now: datetime, progress: Steps) -> dict[str, Any]: ...


_report: list[AuditReport] = []

__all__ = ["AuditReport", "audit_command", "register"]


def register(cli: typer.Typer, report: AuditReport) -> None:
    """Mount ``ledger audit`` on ``cli``; ``report`` builds the report."""
    _report[:] = [report]
    cli.command("audit")(audit_command)


def audit_command(
    from_: Annotated[str | None, typer.Option(
        "--from", help="Start of the period (inclusive): a date (UTC midnight) or a time, "
                       "e.g. 2026-01-01.")] = None,
    to: Annotated[str | None, typer.Option(
        "--to", help="End of the period: a date includes that whole day (UTC), a time is "
                     "exclusive. Default: now.")] = None,
    subject: Annotated[str | None, typer.Option(
        help="Only this subject's memories (ref or id) in the per-subject sections.")] = None,
    fmt: Annotated[str, typer.Option(
        "--format", help="text (tables), json (stable keys) or html (one self-contained "
                         "page with charts).")] = "text",
    out: Annotated[Path | None, typer.Option(
        "--out", help="Write the report to this file (atomically) instead of stdout.")] = None,
    verify: Annotated[str, typer.Option(
        help="full: every event of the log and every recorded checkpoint; since: the events "
             "after the last checkpoint before the period; none: skip.")] = "full",
    as_json: Annotated[bool, typer.Option("--json", help="Same as --format json.")] = False,
) -> None:
    """Memory audit report for a period: events by type and actor, creations, retrievals,
    rehearsals, redactions and batches, erasure requests (overdue ones flagged), sweeps,
    policy and key changes, and the log's verification status. Ids and counts only.

    Example: ledger audit --from 2026-01-01 --to 2026-01-31 --format html --out jan.html
    """
    from governance.audit import VERIFY_SCOPES, parse_period
    from governance.audit_render import FORMATS, render, write_atomic
    from ledger import progress

    if as_json:
        if fmt not in ("text", "json"):
            raise InputError(f"--json conflicts with --format {fmt}",
                             hint="give one of them")
        fmt = "json"
    if fmt not in FORMATS:
        raise InputError(f"unknown format {fmt!r}", hint=f"use one of: {', '.join(FORMATS)}")
    if verify not in VERIFY_SCOPES:
        raise InputError(f"unknown --verify {verify!r}",
                         hint=f"use one of: {', '.join(VERIFY_SCOPES)}")
    now = clock.now()
    parse_period(from_, to, now)  # bad dates are usage errors, before the ledger is opened
    with progress.bar("Building the report", total=1, json=fmt == "json") as bar:
        report = _report[0](from_, to, subject=subject, verify=verify, now=now,
                            progress=bar.step)
    text = render(report, fmt)
    if out is not None:
        write_atomic(out, text)
    else:
        sys.stdout.write(text)
    v = report["verification"]
    a = report["activity"]
    where = f" written to {out}" if out is not None else ""
    overdue = report["erasure_requests"]["overdue"]
    if overdue:
        sys.stderr.write(f"WARNING: {overdue} erasure request(s) overdue: "
                         f"{', '.join(report['erasure_requests']['overdue_ids'])}\n")
    if v["ok"] is False:
        sys.stderr.write(f"FAIL: audit report{where}, but the log did not verify: "
                         f"{v['failure']['reason']}\n")
        raise typer.Exit(EXIT_VERIFY)
    state = "verification skipped" if v["ok"] is None else \
        f"{v['events_verified']} events verified ({v['scope']})"
    sys.stderr.write(f"OK: audit report{where}: {a['events']} events in the period; "
                     f"{state}\n")
