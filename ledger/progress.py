"""Progress on stderr for long commands: a bar on a terminal, nothing anywhere else.

One helper for every command (issue 15)::

    from ledger import progress

    with progress.bar("Importing atoms", total=len(records), json=as_json) as bar:
        for r in records:
            ...
            bar.advance()

A bar is drawn only when stderr is a terminal and neither ``-q`` nor ``--json`` asked
for silence; on a pipe, in a file, under ``--json`` or ``-q`` it draws nothing at all
(not even the label), so scripts and logs see only data and verdicts. ``bar`` is also a
``(done, total)`` callable, the shape :class:`projections.runner.Progress` callbacks have.

``LEDGER_PROGRESS=always`` draws the bar even when stderr is not a terminal and
``LEDGER_PROGRESS=never`` never draws it (for terminals that do not redraw well).
Only typer is imported here, so that calling the helper costs nothing at start-up.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

_settings = {"quiet": False, "verbose": False}


def configure(*, quiet: bool = False, verbose: bool = False) -> None:
    """Set by the ``ledger`` root options ``-q`` / ``-v`` before a command runs."""
    _settings["quiet"], _settings["verbose"] = quiet, verbose


def quiet() -> bool:
    return _settings["quiet"]


def verbose() -> bool:
    """``-v``: commands print per-event lines instead of a summary."""
    return _settings["verbose"]


def enabled(*, json: bool = False) -> bool:
    """Whether a bar is drawn now: a terminal on stderr, and neither ``-q`` nor ``--json``."""
    mode = os.environ.get("LEDGER_PROGRESS", "auto").lower()
    if mode == "never" or json or _settings["quiet"]:
        return False
    if mode == "always":
        return True
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stderr
        return False


class Bar:
    """What a command updates; does nothing when the bar is not drawn."""

    def __init__(self, impl: Any | None, total: int | None) -> None:
        self._impl = impl
        self.total = total
        self.done = 0

    @property
    def drawn(self) -> bool:
        return self._impl is not None

    def advance(self, n: int = 1) -> None:
        self.update(self.done + n)

    def update(self, done: int, total: int | None = None) -> None:
        """Absolute position ``done`` (of ``total``, when it became known)."""
        if total is not None and total != self.total:
            self.total = total
            if self._impl is not None:
                self._impl.length = max(total, 1)
        step = max(0, done - self.done)
        self.done = max(done, self.done)
        if self._impl is not None and step:
            self._impl.update(step)

    def label(self, text: str) -> None:
        if self._impl is not None:
            self._impl.label = text
            self._impl.render_progress()

    def __call__(self, done: int, total: int) -> None:
        self.update(done, total)


@contextmanager
def bar(label: str, total: int | None = None, *, json: bool = False) -> Iterator[Bar]:
    """A progress bar on stderr for the block; see the module's docstring for when."""
    if not enabled(json=json):
        yield Bar(None, total)
        return
    import typer

    impl = typer.progressbar(length=max(total or 1, 1), label=label, file=sys.stderr,
                             show_eta=True, show_percent=True, show_pos=True)
    impl._is_atty = True  # decided above (LEDGER_PROGRESS=always draws on a non-terminal)
    with impl:
        yield Bar(impl, total)


def tracked(items: Iterable[Any], bar: Bar, *, every: int = 256) -> Iterator[Any]:
    """Yield ``items`` unchanged, moving ``bar`` to the count every ``every`` items."""
    done = bar.done
    for item in items:
        yield item
        done += 1
        if done % every == 0:
            bar.update(done)
    bar.update(done)


def steps(label: str, items: list[Any], *, json: bool = False) -> Iterator[Any]:
    """Iterate ``items`` with a bar advancing one per item."""
    with bar(label, total=len(items), json=json) as b:
        for item in items:
            yield item
            b.advance()


__all__ = ["Bar", "bar", "configure", "enabled", "quiet", "steps", "tracked", "verbose"]
