"""``ledger receipt`` and ``ledger audit-tools verify-receipt`` (docs/adr/0023)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import typer


def register(cli: typer.Typer, opened: Callable[[], Any], audit_cli: typer.Typer) -> None:
    return None
