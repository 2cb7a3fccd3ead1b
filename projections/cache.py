"""The in-process recall cache, registered as a route like every store of content.

A recall result is reused only while the log has not moved (same last notification
id) and for the same query, subject, k, threshold, weights and clock minute; any new
event invalidates it. Because the cache holds memory content, it is a
:class:`~projections.routes.Route`: erasure purges it and its probe looks in it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence
from typing import Any

from sqlalchemy.engine import Connection

from projections.routes import ProbeHit, ProbeResult


class RecallCache:
    name = "recall-cache"
    model = "recall-cache"
    in_process = True

    def __init__(self, maxsize: int = 256) -> None:
        self.maxsize = maxsize
        self._entries: OrderedDict[Hashable, tuple[int, Any]] = OrderedDict()

    def get(self, key: Hashable, position: int) -> Any | None:
        entry = self._entries.get(key)
        if entry is None or entry[0] != position:
            return None
        self._entries.move_to_end(key)
        return entry[1]

    def put(self, key: Hashable, position: int, result: Any) -> None:
        self._entries[key] = (position, result)
        self._entries.move_to_end(key)
        while len(self._entries) > self.maxsize:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)

    # ------------------------------------------------------------------ route
    def purge(self, conn: Connection | None, item_id: str) -> int:
        doomed = [k for k, (_, r) in self._entries.items() if item_id in r.atom_ids]
        for k in doomed:
            del self._entries[k]
        return len(doomed)

    def compact(self, conn: Connection | None) -> None:
        return None

    def content_tables(self) -> Sequence[str]:
        return ()

    def probe(self, item_id: str, content: str | None) -> ProbeResult:
        by_id = sum(1 for _, r in self._entries.values() if item_id in r.atom_ids)
        hits = [ProbeHit("recall-cache", "id", by_id)] if by_id else []
        if content:
            found = 0
            for _, r in self._entries.values():
                texts = [r.prompt, *(t for i in r.items for t in (i.text, i.gist) if t),
                         *(d.content for i in r.items for d in i.details)]
                found += sum(1 for t in texts if content in t)
            if found:
                hits.append(ProbeHit("recall-cache", "content", found))
        return ProbeResult(self.name, item_id, ("recall-cache",), tuple(hits))
