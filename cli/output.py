"""What every command prints: its data on stdout (JSON when asked, else the human text),
its verdict on stderr (``OK: ...``, ``FAIL: ...``, ``warning: ...``). Errors are printed by
``cli/main.py``, which maps them to exit codes."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer

JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON on stdout.")]


def out(data: Any, as_json: bool, text: str | None = None) -> None:
    """``data`` as JSON (indented, sorted keys) when asked, else ``text``; nothing to list
    prints no blank line."""
    if as_json:
        sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    elif text:
        sys.stdout.write(text + ("" if text.endswith("\n") else "\n"))


def verdict(message: str) -> None:
    sys.stderr.write(message + "\n")


def partial_verdict(data: dict[str, Any], what: str) -> bool:
    """An erasure that ended partial (ADR 0047) is never reported as done: ``PARTIAL:``
    with its reasons and the way to finish it on stderr, and exit 1 (the caller's data has
    been printed). Returns False, doing nothing, for any other outcome."""
    if data.get("status") != "partial":
        return False
    from governance.partial import partial_line

    rid = data.get("request_id")
    verdict(f"PARTIAL: {what} did not finish: {partial_line(data.get('reasons') or [])}; "
            f"batch {data.get('batch_id')} stays open; the keys already destroyed stay "
            "destroyed; finish it with "
            + (f"`ledger requests resume {rid}`" if rid else "the same command")
            + " once that is resolved")
    raise typer.Exit(1)
