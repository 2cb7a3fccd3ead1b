"""memory-ledger: the write side (events, aggregates, commands, signing mapper, verification)."""

__version__ = "0.1.0"
