"""The review queue: memories flagged for an operator (unsourced, refers to erased memory)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ledger.application import LedgerApp


def open_flags(app: LedgerApp) -> list[dict[str, Any]]:
    """The review flags still open, oldest first: each atom's latest ``atom.flagged`` per
    flag, unless an ``atom.flag_resolved`` followed it."""
    from ledger import envelope
    from ledger.domain import Atom

    flags: dict[tuple[str, str], dict[str, Any]] = {}
    for n in app.reader.notifications(
            start=1, limit=10**9, topics=[Atom.Flagged.TOPIC, Atom.FlagResolved.TOPIC]):
        env = envelope.open_state(n.state).envelope
        key = (str(n.originator_id), env["payload"]["flag"])
        if n.topic == Atom.Flagged.TOPIC:
            flags[key] = {"atom_id": key[0], "flag": key[1],
                          "reason": env["payload"].get("reason"),
                          "flagged_at": env["timestamp"]}
        else:
            flags.pop(key, None)
    return sorted(flags.values(), key=lambda r: r["flagged_at"])
