"""Commands that finish what an interrupted process left (ADR 0019), mounted on the
``ledger`` CLI by :func:`register`: ``ledger requests resume REQUEST`` (an erasure request
stopped at any step) and ``ledger repair`` (data keys stored for events that were never
committed). Heavy imports stay inside the command functions; the commands call the facade
as the local operator (cli/main.py's ``served``).
"""

from __future__ import annotations

from typing import Annotated

import typer

from cli.opener import Served
from cli.output import out, partial_verdict, verdict

_served: list[Served] = []


def register(cli: typer.Typer, requests_cli: typer.Typer, served: Served) -> None:
    """``served(operator=KEY)``: cli/main.py's facade over the home and the local operator."""
    _served[:] = [served]
    requests_cli.command("resume")(requests_resume)
    cli.command("repair")(repair_command)


def requests_resume(
    request: Annotated[str, typer.Argument(help="The request id (`ledger requests list`).")],
    operator: Annotated[str, typer.Option(
        "--operator", "--as", help="Operator key that signs (default: operator).")]
    = "operator",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON on stdout.")] = False,
) -> None:
    """Finish an interrupted erasure request, or one that ended partial: the same request
    and batch, from the step where it stopped, to its close. Still partial (the store is
    still unreachable, the legal hold still in the policy): a new partial record, exit 1.

    Example: ledger requests resume 6093ed56-8cc6-49d9-8f18-e99daa44fcd2
    """
    with _served[0](operator=operator) as (svc, me):
        data = svc.resume_request(me, request).report
    out(data, as_json, "\n".join([f"request {data['request_id']}",
                                   f"batch {data.get('batch_id')}",
                                   *data.get("event_ids", [])]))
    if data.get("no_op"):
        verdict(f"OK: nothing to do: request {data['request_id']} was completed at "
                 f"{data['completed_at']}")
        return
    partial_verdict(data, f"the erasure of request {data['request_id']}")
    if data.get("partial_before"):
        verdict(f"OK: request {data['request_id']} completed; batch {data['batch_id']} "
                f"closed; its {len(data['partial_before'])} earlier partial record(s) stay "
                "in the log")
    else:
        verdict(f"OK: request {data['request_id']} completed; batch {data['batch_id']} "
                 "closed")


def repair_command(
    dry_run: Annotated[bool, typer.Option(help="List what would be repaired; change "
                                               "nothing.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON on stdout.")] = False,
) -> None:
    """Discard data keys stored for events that were never committed (a process killed
    between the keystore's commit and the event store's). Commands do it on their own
    when they meet such a key; this finds them all.

    Example: ledger repair --dry-run
    """
    with _served[0]() as (svc, me):
        data = svc.repair(me, dry_run=dry_run).model_dump()
    out(data, as_json, "\n".join(data["orphan_keys"]))
    n = len(data["orphan_keys"])
    if not n:
        verdict("OK: nothing to repair")
    elif dry_run:
        verdict(f"dry run: would discard {n} orphan data key(s); nothing changed")
    else:
        verdict(f"OK: discarded {n} orphan data key(s)")
