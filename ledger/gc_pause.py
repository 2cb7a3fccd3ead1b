"""Garbage-collector tuning for bulk commands (ADR 0008).

Everything a command allocates (inputs, events, stored rows) lives until it commits, so
the cyclic collector would promote it all and then rescan the whole heap in a full
collection about once per 1,000-atom command, for objects that reference counting frees
right after. Nothing in a command relies on the cycle collector.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["MIN_ITEMS", "paused"]

MIN_ITEMS = 64
"""Commands of at least this many items run with the collector paused."""


@contextlib.contextmanager
def paused(pause: bool) -> Iterator[None]:
    """Hold off the cyclic garbage collector during one bulk command (when ``pause``);
    a collector the host process disabled stays disabled."""
    if not pause or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
