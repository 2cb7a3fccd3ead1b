"""The audit report's period, and where it lies in the log.

Event times are inside the signed envelopes (the notification table has no time
column), but along the log they never decrease: every command takes the write lock and
refuses a clock earlier than the newest event, and verification step 6 checks it. So
the first and last positions of a period are found by binary search over notification
ids (:func:`bound`, about 2 log2(n) one-row reads), and only the period's rows are read
(:func:`rows`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from ledger import clock, envelope
from ledger.errors import ClockError, InputError

if TYPE_CHECKING:
    from ledger.application import LedgerApp

__all__ = ["Period", "bound", "event_time", "format_time", "parse_period", "rows"]

_DATE_ONLY = re.compile(r"^\s*\d{4}-\d{2}-\d{2}\s*$")


@dataclass(frozen=True)
class Period:
    """``start <= t`` and ``t < end`` (``t <= end`` when ``end_inclusive``); UTC."""

    start: datetime | None
    end: datetime
    end_inclusive: bool

    @property
    def start_text(self) -> str | None:
        return None if self.start is None else clock.format_instant(self.start)

    @property
    def end_text(self) -> str:
        return clock.format_instant(self.end)

    def contains(self, ts: str) -> bool:
        """Is an envelope timestamp (fixed-width UTC text, sorts as time) in the period?"""
        start = self.start_text
        if start is not None and ts < start:
            return False
        return ts <= self.end_text if self.end_inclusive else ts < self.end_text

    def after_end(self, ts: str) -> bool:
        return ts > self.end_text if self.end_inclusive else ts >= self.end_text


def _parse_date(value: str, option: str) -> tuple[datetime, bool]:
    """(instant, was a bare date). Bad input is an InputError with a hint."""
    try:
        return clock.parse_instant(value, option), bool(_DATE_ONLY.match(value))
    except ClockError as e:
        raise InputError(f"{option} {value!r} is not a date or time",
                         hint="use a date like 2026-01-31 or a UTC time like "
                              "2026-01-31T12:00:00Z") from e


def parse_period(from_: str | None, to: str | None, now: datetime) -> Period:
    """``--from`` is inclusive; ``--to DATE`` includes that whole day (UTC), ``--to TIME`` is
    exclusive; without ``--to`` the period ends now (inclusive)."""
    start = _parse_date(from_, "--from")[0] if from_ is not None else None
    if to is None:
        end, inclusive = now, True
    else:
        end, bare = _parse_date(to, "--to")
        if bare:
            end += timedelta(days=1)
        inclusive = False
    if start is not None and (end < start or (end == start and not inclusive)):
        raise InputError(f"the period is empty: --from {clock.format_instant(start)} is not "
                         f"before the end {clock.format_instant(end)}",
                         hint="give --from earlier than --to")
    return Period(start, end, inclusive)


def event_time(ts: str) -> datetime:
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).astimezone(UTC)


def format_time(ts: str | None) -> str | None:
    return None if ts is None else clock.format_instant(event_time(ts))


def bound(app: LedgerApp, max_id: int, past: Callable[[str], bool]) -> int:
    """Smallest ``s`` such that the first event at a position >= ``s`` is ``past`` (or there
    is none). Event times never decrease along the log, so ``past`` flips once."""
    lo, hi = 1, max_id + 1
    while lo < hi:
        mid = (lo + hi) // 2
        found = app.reader.notifications(start=mid, limit=1)
        if not found or past(envelope.open_state(found[0].state).envelope["timestamp"]):
            hi = mid
        else:
            lo = min(int(found[0].id) + 1, hi)
    return lo


def rows(app: LedgerApp, start: int, stop: int, batch: int = 5000) -> Iterator[Any]:
    pos = start
    while pos <= stop:
        found = app.reader.notifications(start=pos, limit=batch, stop=stop)
        if not found:
            return
        yield from found
        pos = int(found[-1].id) + 1
