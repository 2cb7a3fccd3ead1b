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


LATEST_RECORDED = "latest recorded checkpoint"
"""The label ``ledger verify`` gives the ledger's own latest checkpoint (ledger/verification)."""


def extends_words(checkpoints: list[dict[str, object]]) -> str:
    """``ledger verify``'s checkpoints in words, each distinct one (size and root) once:
    ``kept.checkpoint (size 15) and the latest recorded checkpoint (size 34)``, or
    ``kept.checkpoint (size 34, the same as the latest recorded checkpoint)``. The
    checkpoints are ``{"checkpoint": label, "size": n, "root": ...}``."""
    groups: dict[tuple[object, object], list[str]] = {}
    for c in checkpoints:
        label = str(c["checkpoint"])
        name = f"the {label}" if label == LATEST_RECORDED else label
        names = groups.setdefault((c["size"], c.get("root")), [])
        if name not in names:
            names.append(name)
    parts = []
    for (size, _root), names in sorted(groups.items(), key=lambda g: int(str(g[0][0]))):
        names.sort(key=lambda n: n == f"the {LATEST_RECORDED}")  # the files named first
        same = f", the same as {' and '.join(names[1:])}" if len(names) > 1 else ""
        parts.append(f"{names[0]} (size {size}{same})")
    if len(parts) < 2:
        return "".join(parts)
    return ", ".join(parts[:-1]) + " and " + parts[-1]
