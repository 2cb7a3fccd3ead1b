"""The command clock. ``LEDGER_NOW`` (ISO 8601) pins it for backfills and tests."""

from __future__ import annotations

import os
from datetime import UTC, datetime

from ledger.errors import ClockError

ENV = "LEDGER_NOW"


def parse_instant(value: str, what: str = "time") -> datetime:
    """Parse an ISO 8601 instant; a date or a naive time is taken as UTC."""
    try:
        t = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError as e:
        raise ClockError(
            f"{what} {value!r} is not an ISO 8601 date or time",
            hint="use a form like 2026-11-29T12:00:00Z",
        ) from e
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return t.astimezone(UTC)


def now() -> datetime:
    value = os.environ.get(ENV)
    if value:
        return parse_instant(value, ENV)
    return datetime.now(UTC)


def format_instant(t: datetime) -> str:
    """The one timestamp form used in signed envelopes: UTC, microseconds, 'Z'."""
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def for_people(value: str | datetime | None) -> str:
    """``2026-03-04 10:00 UTC``: an instant as a report for people shows it (one form for
    every time on the page, whichever form it was stored in); ``-`` for none, and a value
    that is not a time as it is."""
    if not value:
        return "-"
    try:
        t = parse_instant(value) if isinstance(value, str) else value.astimezone(UTC)
    except ClockError:
        return str(value)
    return t.strftime("%Y-%m-%d %H:%M UTC")
