"""Raw files: what the stores leave on disk, read and repaired byte by byte.

Generic helpers with no knowledge of keys, events or memory content: `heldfiles` reads
files SQLite may hold open without ever closing a descriptor to them, `sqlitepages`
zeroes the unused bytes of single SQLite pages and reads WAL frames, `bytescan` finds
many byte strings in a file at once. The keystore (destroyed keys), the projections
(erased content) and governance's raw scan use them. The bottom layer: this package
imports nothing from the rest of memory-ledger (ADR 0038).
"""
