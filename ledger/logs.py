"""structlog, configured once: JSON lines when stderr is not a terminal.

Log lines carry stable event names, ids and counts, never memory content. The
level comes from ``LEDGER_LOG_LEVEL`` (default ``warning`` for the CLI, so that
stderr stays readable for verdicts).
"""

from __future__ import annotations

import logging
import os
import sys

_configured = False


class _CurrentStderr:
    """Write to whatever ``sys.stderr`` is at the time of writing (not at configure time)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def _import_structlog() -> None:
    """Import structlog without rich: its console renderer and traceback helpers import
    rich and pygments at import time (about 40 ms of CPU, a tenth of a one-atom
    `ledger atom add`) only to draw exception tracebacks in colour; without rich it draws
    them as plain text. A process that imported rich or structlog before is left as it is,
    and rich stays importable afterwards (typer's help uses it)."""
    if "structlog" in sys.modules or "rich" in sys.modules:
        return
    sys.modules["rich"] = None  # type: ignore[assignment]  # "not installed", for this import
    try:
        import structlog  # noqa: F401
    finally:
        del sys.modules["rich"]


def configure(level: str | None = None) -> None:
    global _configured
    if _configured:
        return
    _import_structlog()
    import structlog  # here, not at the top: `ledger --help` does not pay for it

    name = (level or os.environ.get("LEDGER_LOG_LEVEL") or "warning").upper()
    numeric = logging.getLevelNamesMapping().get(name, logging.WARNING)
    renderer: structlog.typing.Processor
    if sys.stderr.isatty():
        renderer = structlog.dev.ConsoleRenderer(colors=False)
    else:
        renderer = structlog.processors.JSONRenderer(sort_keys=True)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=_CurrentStderr()),  # type: ignore[arg-type]
        cache_logger_on_first_use=False,
    )
    _configured = True
