"""The writer process of a KEK rotation on an SQLite keystore (ADR 0044).

A rotation reads a batch of wrapped data keys, re-wraps it and writes it back. In one
process the two halves take turns: sqlite3 binds every row's parameters under the GIL and
AES-GCM holds it, so a writer *thread* only slowed the rotation down. This process writes
batch N on the second core while its parent re-wraps batch N+1. It does no cryptography
and holds no key: it receives rows of ``(wrapped key, epoch, rowid, key id, old epoch)``
and runs one UPDATE transaction per batch on its own connection, answering each with the
number of rows written. It is a new interpreter (``python -m keys.rewrap_writer``; never a
``fork``, a server process has threads, nor multiprocessing's ``spawn``, which runs the
parent's main script again) speaking pickled batches on its standard input and output,
and it imports nothing of the ledger but this module.
"""

from __future__ import annotations

import importlib
import pickle
import sys
from typing import IO, Any

UPDATE = ("UPDATE data_keys SET key_material = ?, epoch = ? "
          "WHERE rowid = ? AND key_id = ? AND epoch = ?")


def serve(path: str, module: str, busy_ms: int, inp: IO[bytes], out: IO[bytes]) -> None:
    """Write the batches ``inp`` brings into the keystore at ``path`` until it brings None
    or ends (the parent was killed: the open transaction is rolled back)."""
    dbapi: Any = importlib.import_module(module)
    db = dbapi.connect(path, isolation_level=None)

    def answer(message: tuple[str, Any]) -> None:
        pickle.dump(message, out, protocol=pickle.HIGHEST_PROTOCOL)
        out.flush()

    try:
        db.execute(f"PRAGMA busy_timeout={int(busy_ms)}")
        db.execute("PRAGMA secure_delete=ON")
        db.execute("PRAGMA cache_size=-65536")  # 64 MiB: the table's inner pages stay in it
        while True:
            try:
                rows = pickle.load(inp)  # noqa: S301 (our own parent, over a private pipe)
            except EOFError:
                return
            if rows is None:
                return
            try:
                db.execute("BEGIN IMMEDIATE")
                db.executemany(UPDATE, rows)
                db.execute("COMMIT")
            except Exception as e:  # reported to the parent, which raises
                if db.in_transaction:
                    db.execute("ROLLBACK")
                answer(("error", f"{e.__class__.__name__}: {e}"))
                return
            answer(("ok", len(rows)))
    finally:
        db.close()


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.stdin.buffer, sys.stdout.buffer)
