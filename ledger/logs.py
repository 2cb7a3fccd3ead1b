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


def configure(level: str | None = None) -> None:
    global _configured
    if _configured:
        return
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
