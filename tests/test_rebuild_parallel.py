"""The parallel decode of a large catch-up (ADR 0058), on SQLite and PostgreSQL.

The threshold is set to one event and the chunks to a few events, so that these small
ledgers go through the worker processes, several chunks a batch, several batches ahead:

* a rebuild, and a catch-up from zero, with the parallel path give the views of
  incremental application (which decodes in the runner's own process);
* a tampered event is caught by a worker and nothing of its batch is applied: the
  models stop before it, whichever way it was tampered with;
* a destroyed data key, absent from what the workers are handed, reads as erased.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from ledger.application import LedgerApp
from ledger.errors import EnvironmentProblem, VerificationFailed
from projections import parallel
from projections.service import Projections

from .conftest import RawStore
from .test_projections_contract import MODELS, Clock, seed


@contextmanager
def parallel_projections(app: LedgerApp, calls: list[int] | None = None,
                         monkeypatch: pytest.MonkeyPatch | None = None,
                         **kw: Any) -> Iterator[Projections]:
    """Projections whose runner decodes every catch-up in two worker processes, three
    events a chunk, batches of ``rebuild_batch_size`` (default 4); ``calls`` counts the
    chunks handed to the workers."""
    p = Projections(app, **kw)
    p.runner.workers, p.runner.parallel_min, p.runner.decode_chunk = 2, 1, 3
    p.runner.rebuild_batch_size = 4
    if calls is not None and monkeypatch is not None:
        real = parallel.ParallelDecoder.submit

        def counting(self: parallel.ParallelDecoder, notes: Any) -> Any:
            futures = real(self, notes)
            calls.append(len(futures))
            return futures

        monkeypatch.setattr(parallel.ParallelDecoder, "submit", counting)
    try:
        yield p
    finally:
        p.close()


def more(app: LedgerApp, clock: Clock, atoms: list[Any]) -> None:
    """Soft and archive redactions, an unredaction and a hard erasure on top of
    :func:`seed`: events that take atoms out of retrieval and purge content."""
    clock.tick(hours=1)
    app.redact(str(atoms[4]), "soft", "asked")
    app.redact(str(atoms[5]), "archive", "asked")
    clock.tick(hours=1)
    app.unredact(str(atoms[4]), "undo")
    app.shred([atoms[0]], "erasure")  # keys first, then the tombstone, as governance does
    app.tombstone([atoms[0]], [], "hard", "erasure", ["test"])


def test_parallel_rebuild_equals_incremental(app: LedgerApp,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock(monkeypatch)
    atoms = seed(app, clock)
    more(app, clock, atoms)
    with Projections(app, batch_size=3) as serial:
        serial.runner.workers = 0
        serial.catch_up()
        incremental = serial.dump()
        assert {s.state for s in serial.status()} == {"current"}
    calls: list[int] = []
    with parallel_projections(app, calls, monkeypatch) as p:
        report = p.rebuild()
        assert p.dump() == incremental
        head = p.runner.head()
        assert report.notifications == head
        # every batch went to the workers, in chunks of three
        assert sum(calls) == sum(-(-min(4, head - i) // 3) for i in range(0, head, 4))
        assert len(calls) == -(-head // 4)
        assert [s.position for s in p.status()] == [head] * len(MODELS)


def test_parallel_catch_up_from_zero_then_incremental(app: LedgerApp, home: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock(monkeypatch)
    atoms = seed(app, clock)
    calls: list[int] = []
    with parallel_projections(app, calls, monkeypatch) as p:
        p.catch_up()  # a new store: far behind, through the workers
        assert calls
        more(app, clock, atoms)
        p.runner.parallel_min = 10**9  # a few new events: decoded in this process
        before = len(calls)
        p.catch_up()
        assert len(calls) == before
        dump = p.dump()
    with Projections(app) as fresh:
        fresh.runner.workers = 0
        fresh.rebuild()
        assert fresh.dump() == dump


def _tamper_topic(state: bytes) -> bytes:
    return state.replace(b"memory-ledger:atom.created.v1", b"memory-ledger:atom.created.v1 ")


@pytest.mark.parametrize("how", ["changed byte", "swapped signature"])
def test_tampered_event_caught_by_parallel_rebuild(app: LedgerApp, home: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   how: str) -> None:
    clock = Clock(monkeypatch)
    seed(app, clock, n=10)
    with parallel_projections(app) as p:
        p.rebuild()
        good = p.dump()
    raw = RawStore(home)
    rows = raw.rows()
    created = [r for r in rows if r[3] == "memory-ledger:atom.created.v1"]
    position, *_rest, state = created[-1]
    if how == "changed byte":
        tampered = _tamper_topic(state)
    else:
        other = json.loads(created[-2][4])["signature"].encode()
        tampered = state.replace(json.loads(state)["signature"].encode(), other)
    assert tampered != state
    raw.set_state(position, tampered)
    with parallel_projections(app) as p:
        with pytest.raises(VerificationFailed, match="failed verification"):
            p.rebuild()
        # the batch holding the tampered event was applied to no model
        first_of_batch = (position - 1) // 4 * 4
        assert [s.position for s in p.status()] == [first_of_batch] * len(MODELS)
        audit = p.dump()["audit"]["proj_audit"]
        assert [r[0] for r in audit] == list(range(1, first_of_batch + 1))
    raw.set_state(position, state)  # the original bytes verify again
    with parallel_projections(app) as p:
        p.rebuild()
        assert p.dump() == good


@pytest.mark.parametrize("how", ["deleted", "moved"])
def test_removed_or_moved_event_caught_by_rebuild(app: LedgerApp, home: Path,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  how: str) -> None:
    """Every event still verifies by its signature; the sequence does not (step 3)."""
    clock = Clock(monkeypatch)
    atoms = seed(app, clock, n=10)
    more(app, clock, atoms)
    raw = RawStore(home)
    rows = raw.rows()
    # the soft redaction of atoms[4]: without it, a rebuild would put the atom back
    # into retrieval
    victim = next(r for r in rows if r[3] == "memory-ledger:atom.redacted.v1")
    if how == "deleted":
        raw.delete(victim[0])
    else:  # swap two events' bytes and ids: each row still verifies by itself
        other = rows[rows.index(victim) - 1]
        raw.swap(victim[0], other[0])
    for parallel_on in (True, False):
        with parallel_projections(app) as p:
            if not parallel_on:
                p.runner.workers = 0
            with pytest.raises(VerificationFailed, match="step 3: seq"):
                p.rebuild()
            assert max(s.position for s in p.status()) < victim[0]


def die(*_args: Any) -> None:
    """A worker task that ends its process (as the kernel's OOM killer would)."""
    os._exit(3)


def test_worker_that_dies_is_an_environment_problem(app: LedgerApp,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    seed(app, Clock(monkeypatch))
    monkeypatch.setattr(parallel, "decode_chunk", die)
    with parallel_projections(app) as p:
        with pytest.raises(EnvironmentProblem, match="ended abruptly") as e:
            p.rebuild()
        assert "LEDGER_DECODE_WORKERS=0" in str(e.value.hint)
        assert {s.position for s in p.status()} == {0}
