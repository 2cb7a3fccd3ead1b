"""One error vocabulary; the CLI maps each class to an exit code in one place.

Exit codes: 0 ok, 1 verification failed, 2 usage (bad input, unknown id),
3 environment (missing home, key, database).
"""

from __future__ import annotations

from pathlib import Path

EXIT_OK = 0
EXIT_VERIFY = 1
EXIT_USAGE = 2
EXIT_ENV = 3


class LedgerError(Exception):
    """Base class. ``hint`` says what to do next."""

    exit_code = EXIT_USAGE

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


class InputError(LedgerError):
    """The command's input is invalid; nothing was written."""


class NotFound(LedgerError):
    """An id names nothing in this ledger.

    ``kind`` and ``ref``, when the raiser knows them: what was looked for (``subject``,
    ``atom``, ``artifact``, ``batch``, ``erasure request``) and the reference as the
    caller gave it; ``other_kind``: the reference names an item of another kind. A surface
    words the error from them in its own terms (the CLI: ``cli/words.py``); the message
    is the facade's words, which the HTTP API and MCP answer with."""

    def __init__(self, message: str, hint: str | None = None, *, kind: str | None = None,
                 ref: str | None = None, other_kind: bool = False) -> None:
        super().__init__(message, hint)
        self.kind = kind
        self.ref = ref
        self.other_kind = other_kind


class ClockError(LedgerError):
    """LEDGER_NOW is malformed or earlier than the newest event."""


class ConflictError(LedgerError):
    """The command conflicts with the ledger's state (already done, superseded, ...)."""


class EnvironmentProblem(LedgerError):
    """The ledger home, a key or a database is missing or unusable."""

    exit_code = EXIT_ENV


class CheckpointBlocked(EnvironmentProblem):
    """An open read transaction in another process kept an SQLite file's write-ahead log
    from being checkpointed and emptied for as long as this process waited (the busy
    timeout). ``path`` is the database file; ``consequence`` says what is left unsettled
    (no content: a file name and a number of seconds)."""

    def __init__(self, path: str, seconds: float, consequence: str = "",
                 hint: str | None = None) -> None:
        self.path = path
        self.seconds = seconds
        name = Path(path).name
        self.name = name
        super().__init__(
            f"could not settle {name}: an open read transaction in another process (a "
            f"reader, a backup, an sqlite3 shell) blocked the checkpoint of its write-ahead "
            f"log {name}-wal for the {seconds:g} s this command waited"
            + (f"; {consequence}" if consequence else ""),
            hint=hint or f"end that transaction (or the program holding {name} open), then "
                         "run the command again")


class VerificationFailed(LedgerError):
    """A signature, a sequence or a proof did not verify."""

    exit_code = EXIT_VERIFY
