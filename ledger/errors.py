"""One error vocabulary; the CLI maps each class to an exit code in one place.

Exit codes: 0 ok, 1 verification failed, 2 usage (bad input, unknown id),
3 environment (missing home, key, database).
"""

from __future__ import annotations

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
    """An id names nothing in this ledger."""


class ClockError(LedgerError):
    """LEDGER_NOW is malformed or earlier than the newest event."""


class ConflictError(LedgerError):
    """The command conflicts with the ledger's state (already done, superseded, ...)."""


class EnvironmentProblem(LedgerError):
    """The ledger home, a key or a database is missing or unusable."""

    exit_code = EXIT_ENV


class VerificationFailed(LedgerError):
    """A signature, a sequence or a proof did not verify."""

    exit_code = EXIT_VERIFY
