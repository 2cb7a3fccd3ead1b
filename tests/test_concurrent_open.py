"""Processes and threads that open one ledger at the same moment all open it: a server's
writer thread, reader thread and writer process do, and so do the workers of
``ledger serve --workers N``. On PostgreSQL the event store's library replaces its insert
function on every open (``CREATE OR REPLACE FUNCTION``), which two sessions doing at once
refuse with "tuple concurrently updated"; the opens of one ledger take turns there."""

from __future__ import annotations

import threading
from pathlib import Path

from service.facade import MemoryService
from service.root import close_service, open_service

from .conftest import run_cli


def test_eight_threads_opening_one_ledger_at_once_all_open_it(home: Path) -> None:
    """Eight services (the write side and the read models) opened at once, three times:
    the first time the read models are created, then found."""
    assert run_cli("--home", str(home), "subject", "add", "u1").code == 0
    start = threading.Barrier(8)
    failures: list[BaseException] = []
    opened: list[MemoryService] = []

    def open_it() -> None:
        start.wait()
        try:
            opened.append(open_service(home))
        except BaseException as e:  # every failure is the test's finding
            failures.append(e)

    for _ in range(3):
        threads = [threading.Thread(target=open_it) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        while opened:
            close_service(opened.pop())
        start.reset()
    assert failures == []
