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
``LEDGER_PROGRESS=never`` never draws it (for terminals that do not redraw well). Work
without a count shows ``LABEL ... N s`` (:func:`activity`) once it has run
``LEDGER_PROGRESS_DELAY`` seconds (default 0.8).
Only typer is imported here, so that calling the helper costs nothing at start-up.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

_settings = {"quiet": False, "verbose": False}

Steps = Callable[[str, int, int], None]
"""What long work loops take to report: ``steps(stage, done, total)``, e.g.
``steps("Destroying data keys", 2000, 20000)``. :meth:`Bar.step` draws it; ``None`` (the
default everywhere) reports nothing. Call it at the start of a stage (``done`` 0) and
every few hundred items, not per item."""


def report(steps: Steps | None, stage: str, done: int, total: int) -> None:
    """``steps(stage, done, total)`` when there is a ``steps``."""
    if steps is not None:
        steps(stage, done, total)


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
        self.stages: list[str] = []  # the stages :meth:`step` went through, in order

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

    def step(self, stage: str, done: int, total: int) -> None:
        """Work in stages (:data:`Steps`): a new ``stage`` relabels the bar and restarts
        its count at 0 of ``total``; the same stage moves it to ``done``. A stage of
        nothing (``total`` 0) is not shown."""
        if total <= 0:
            return
        if not self.stages or self.stages[-1] != stage:
            self.stages.append(stage)
            self.done, self.total = 0, total
            impl = self._impl
            if impl is not None:
                import time

                impl.label, impl.length, impl.pos = stage, max(total, 1), 0
                impl.avg, impl.eta_known, impl.finished = [], False, False
                impl.start = impl.last_eta = time.time()
                impl.render_progress()
        self.update(done, total)


@contextmanager
def bar(label: str, total: int | None = None, *, json: bool = False) -> Iterator[Bar]:
    """A progress bar on stderr for the block; see the module's docstring for when."""
    if not enabled(json=json):
        yield Bar(None, total)
        return
    import typer

    for line in _ACTIVE:  # a bar with a count replaces the activity line
        line.stop()
    impl = typer.progressbar(length=max(total or 1, 1), label=label, file=sys.stderr,
                             show_eta=True, show_percent=True, show_pos=True)
    impl._is_atty = True  # decided above (LEDGER_PROGRESS=always draws on a non-terminal)
    with impl:
        yield Bar(impl, total)


class _Clearing:
    """A stream that wipes the activity line before anything else is written to the
    terminal, so that verdicts and data never share a line with it."""

    def __init__(self, stream: Any, line: _Activity) -> None:
        self._stream, self._line = stream, line

    def write(self, text: str) -> int:
        with self._line.lock:
            self._line.wipe()
            return int(self._stream.write(text))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class _Activity:
    """``LABEL ... 12 s`` redrawn every half second on stderr by a daemon thread."""

    def __init__(self, label: str, stream: Any) -> None:
        import threading

        self.label, self.stream = label, stream
        self.lock = threading.Lock()
        self.shown = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ledger-activity",
                                        daemon=True)

    def wipe(self) -> None:
        if self.shown:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self.shown = False

    def _run(self) -> None:
        import time

        start, frames, i = time.monotonic(), "|/-\\", 0
        first = float(os.environ.get("LEDGER_PROGRESS_DELAY", "0.8"))  # quick: nothing
        while not self._stop.wait(0.5 if i else first):
            with self.lock:
                elapsed = int(time.monotonic() - start)
                self.stream.write(f"\r{frames[i % 4]} {self.label} ... {elapsed} s\033[K")
                self.stream.flush()
                self.shown = True
            i += 1

    def __enter__(self) -> _Activity:
        _ACTIVE.append(self)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        with self.lock:
            self.wipe()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        _ACTIVE.remove(self)


_ACTIVE: list[_Activity] = []


@contextmanager
def activity(label: str, *, json: bool = False) -> Iterator[None]:
    """For work without a count: ``LABEL ... N s`` on a terminal while the block runs (after
    the first 0.8 s), wiped before anything else is printed; nothing elsewhere."""
    if not enabled(json=json):
        yield
        return
    out, err = sys.stdout, sys.stderr
    with _Activity(label, err) as line:
        sys.stderr = _Clearing(err, line)
        if out.isatty():
            sys.stdout = _Clearing(out, line)
        try:
            yield
        finally:
            sys.stdout, sys.stderr = out, err


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


__all__ = ["Bar", "Steps", "activity", "bar", "configure", "enabled", "quiet", "report", "steps",
           "tracked", "verbose"]
