"""Small wording helpers for command output."""

from __future__ import annotations

_IRREGULAR = {"memories": "memory", "entries": "entry", "batches": "batch",
              "identities": "identity", "policies": "policy", "children": "child",
              "witnesses": "witness"}


def plural(count: int, noun: str) -> str:
    """``plural(1, "atoms")`` is ``1 atom``, ``plural(2, "atoms")`` is ``2 atoms``: the noun
    is given in the plural, as in the count dictionaries the commands report."""
    if count == 1:
        noun = _IRREGULAR.get(noun, noun[:-1] if noun.endswith("s") else noun)
    return f"{count} {noun}"


def event_lines(event_ids: list[str], verbose: bool | None = None) -> list[str]:
    """Per-event lines with ``-v`` or when there are few; otherwise one count line."""
    if verbose is None:
        from ledger import progress

        verbose = progress.verbose()
    if verbose or len(event_ids) <= 10:
        return list(event_ids)
    return [f"{plural(len(event_ids), 'signed events')} (-v lists them, --json gives them)"]


__all__ = ["event_lines", "plural"]
