"""Crash points for tests: the process kills itself (SIGKILL) at a named step.

``LEDGER_FAULT=STEP`` or ``LEDGER_FAULT=STEP:N``: at the step boundary ``STEP`` (the
first time the step has reached ``N`` items, when given) the process sends itself
SIGKILL, so nothing after that point runs: no ``finally``, no ``atexit``, no flush.
Used by the crash-matrix tests of a resumable erasure (ADR 0019); unset, a call costs a
dictionary lookup. The step names are listed in governance/erasure_steps.py (``STEPS``).
"""

from __future__ import annotations

import os
import signal

ENV = "LEDGER_FAULT"


def point(step: str, count: int | None = None) -> None:
    """Kill this process here if ``LEDGER_FAULT`` names ``step`` (and ``count`` has
    reached its ``N``)."""
    spec = os.environ.get(ENV)
    if not spec:
        return
    name, _, at = spec.partition(":")
    if name != step:
        return
    if at and (count is None or count < int(at)):
        return
    os.kill(os.getpid(), signal.SIGKILL)
