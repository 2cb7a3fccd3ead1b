"""Verify and decrypt batches of stored events in worker processes (ADR 0058).

A large catch-up (a rebuild, a new projections store) spends about as much CPU on
verifying signatures and decrypting personal fields as on writing the read models, and
one Python process uses one core. :class:`ParallelDecoder` hands chunks of a batch to a
pool of worker processes, each of which runs the same :func:`projections.entries.decode`
with the ledger's own :class:`ledger.mapper.SigningMapper` (so the checks are the same
code, step for step), while the runner's process applies the batch before.

A worker gets only what its chunk needs: the ledger id, the public keys an event of the
log may be signed with, the data keys of the chunk's sealed events (held in the worker's
memory for that chunk only; a destroyed key is absent, so that event's content reads as
erased exactly as in the runner's own process) and the stored rows. It opens no
database and writes nothing. A chunk that fails verification comes back as the same
:class:`ledger.mapper.EventIntegrityError`, and the runner applies nothing of that batch.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TYPE_CHECKING, Any, cast

from projections.entries import SEALED_TOPICS, LogEntry, decode

if TYPE_CHECKING:
    from ledger.mapper import SigningMapper
    from ledger.reader import LedgerReader

__all__ = ["CHUNK", "ParallelDecoder", "default_workers"]

CHUNK = 2_000
"""Events per task handed to a worker (large enough that pickling the task and its
answer costs little against verifying it)."""

WORKERS_ENV = "LEDGER_DECODE_WORKERS"
"""Worker processes for a large catch-up: a number, or ``0`` (or ``off``) for none."""


def _start_worker() -> None:
    """Pool initializer: freeze what the fork inherited (see :class:`ParallelDecoder`).

    Workers run at the runner's priority: a lower one was tried, and on a busy machine it
    left them behind every other process, so the writer waited for them."""
    gc.freeze()


def default_workers() -> int:
    """``LEDGER_DECODE_WORKERS`` if set, else one per core besides the runner's own (at
    least one, at most 8)."""
    raw = os.environ.get(WORKERS_ENV, "").strip().lower()
    if raw in ("off", "no", "false"):
        return 0
    if raw:
        try:
            return max(0, int(raw))
        except ValueError:
            return 0
    return min(8, max(1, (os.cpu_count() or 1) - 1))


class _HandedKeys:
    """The data keys handed to a worker for one chunk, behind the one method of the
    keystore that :class:`ledger.mapper.SigningMapper` calls when it opens an event."""

    def __init__(self, keys: Mapping[str, bytes]) -> None:
        self.keys = keys

    def get(self, key_id: str) -> bytes:
        from keys.errors import DataKeyUnavailable

        key = self.keys.get(key_id)
        if key is None:
            raise DataKeyUnavailable(f"data key {key_id} is destroyed or unknown")
        return key


class _WorkerOpener:
    """What :func:`decode` needs, in a worker: the ledger's mapper over handed keys."""

    def __init__(self, mapper: SigningMapper) -> None:
        self.mapper = mapper

    def prefetch_data_keys(self, key_ids: Iterable[str]) -> None:
        """The keys came with the chunk."""

    def open_events(self, stored: Iterable[Any]) -> list[Any]:
        return [self.mapper.to_domain_event(s) for s in stored]


def _mapper(ledger_id: str, public_keys: Mapping[str, bytes],
            data_keys: Mapping[str, bytes]) -> SigningMapper:
    from eventsourcing.persistence import JSONTranscoder

    from keys.errors import KeyNotAuthorized
    from ledger.mapper import SigningMapper

    def resolve(kid: str) -> bytes:
        key = public_keys.get(kid)
        if key is None:
            raise KeyNotAuthorized(f"key {kid} is not in the roster")
        return key

    mapper = SigningMapper(transcoder=JSONTranscoder())  # never used: it seals itself
    mapper.configure(ledger_id, cast("Any", _HandedKeys(data_keys)), resolve)
    return mapper


def decode_chunk(ledger_id: str, public_keys: Mapping[str, bytes],
                 data_keys: Mapping[str, bytes], notifications: Sequence[Any]
                 ) -> list[LogEntry] | tuple[str, str | None]:
    """The worker's task: :func:`decode` of one chunk. A verification failure is returned
    as ``(message, hint)`` (an exception with a hint does not survive pickling), for the
    runner's process to raise."""
    from ledger.mapper import EventIntegrityError

    opener = _WorkerOpener(_mapper(ledger_id, public_keys, data_keys))
    try:
        return decode(opener, notifications)
    except EventIntegrityError as e:
        return (str(e), e.hint)


class ParallelDecoder:
    """A pool of worker processes that decode chunks of batches, in log order."""

    def __init__(self, reader: LedgerReader, workers: int, chunk: int = CHUNK) -> None:
        self.reader = reader
        self.chunk = chunk
        self.public_keys = reader.verification_keys()
        # fork where there is one: no second import of everything, and no re-run of the
        # caller's main module (spawn runs it again). The child touches none of the
        # database connections it inherits, and freezes the objects it inherits so that
        # no garbage collection in it finalises one of them (a PostgreSQL connection
        # closed by a child would say goodbye on the parent's socket).
        method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
        self.pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context(method),
                                        initializer=_start_worker)

    def submit(self, notifications: Sequence[Any]) -> list[Future[Any]]:
        """Start decoding one batch (in order); :meth:`result` gives its entries."""
        sealed = {str(n.originator_id) for n in notifications if n.topic in SEALED_TOPICS}
        keys = self.reader.data_keys(sealed) if sealed else {}
        futures = []
        for i in range(0, len(notifications), self.chunk):
            part = notifications[i:i + self.chunk]
            mine = {str(n.originator_id) for n in part if n.topic in SEALED_TOPICS}
            try:
                futures.append(self.pool.submit(
                    decode_chunk, self.reader.ledger_id, self.public_keys,
                    {k: keys[k] for k in mine if k in keys}, part))
            except BrokenProcessPool as e:  # a worker died before this batch was handed out
                raise _worker_died() from e
        return futures

    @staticmethod
    def result(futures: Sequence[Future[Any]]) -> list[LogEntry]:
        """The entries of a submitted batch; raises the first chunk's verification
        failure (the runner then applies nothing of the batch)."""
        from ledger.mapper import EventIntegrityError

        out: list[LogEntry] = []
        for future in futures:
            try:
                got = future.result()
            except BrokenProcessPool as e:
                raise _worker_died() from e
            if isinstance(got, tuple):
                message, hint = got
                raise EventIntegrityError(message, hint=hint)
            out.extend(got)
        return out

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


def _worker_died() -> Exception:
    """What the rebuild says when a worker process ended abruptly: when its batch was
    handed out or when its result was awaited, the same words."""
    from ledger.errors import EnvironmentProblem

    return EnvironmentProblem(
        "a worker process that verifies events ended abruptly (out of memory?)",
        hint=f"run it again, or with {WORKERS_ENV}=0 to verify in this process")
