"""The writer process of a server (ADR 0062): the child that commits the atom adds, grouped
and bulk, on its own service, and the server's end of its pipe.

This module is all the child imports besides the facade: not the web framework, the
metrics or the rest of ``server/``, so a writer process starts in about the time it takes
to open the ledger. The server process's writer thread (``server/backend.py``) hands it a
group of adds and waits for the answer, which comes back encoded once, as the JSON the
HTTP API sends; an exception crosses the pipe by class, arguments and attributes."""

from __future__ import annotations

import os
import pickle
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn

from ledger.errors import EnvironmentProblem
from service.root import close_service, open_service, read_models_kept_open

if TYPE_CHECKING:
    from service.caller import Caller
    from service.facade import MemoryService
    from service.models import AtomAdded, AtomIn


class Added(NamedTuple):
    """An add's answer, encoded once: the JSON body the API sends, and what it did."""

    json: bytes
    outcome: str  # AtomAdded.outcome: added, rehearsed, superseded
    atom_id: str

    @classmethod
    def of(cls, added: AtomAdded) -> Added:
        return cls(added.model_dump_json().encode(), added.outcome, added.atom_id)


def _portable(e: BaseException) -> BaseException:
    """``e`` as it can cross to the server process: class, arguments and attributes,
    rebuilt there without calling its ``__init__`` (whose signature may differ from its
    ``args``); an exception that cannot is replaced by one that names its class only."""
    try:
        pickle.loads(pickle.dumps(_Carried(e)))  # noqa: S301  # our own bytes, just made
    except Exception:
        return EnvironmentProblem(f"the writer process failed ({type(e).__name__})",
                                  hint="retry; the server's log names the error")
    return e


class _Carried:
    """Pickles an exception by class, ``args`` and ``__dict__`` (see :func:`_portable`)."""

    def __init__(self, e: BaseException) -> None:
        self.e = e

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuilt, (type(self.e), self.e.args, dict(vars(self.e))))


def _rebuilt(cls: type[BaseException], args: tuple[Any, ...], state: dict[str, Any]
             ) -> BaseException:
    e = cls.__new__(cls)
    BaseException.__init__(e, *args)
    e.__dict__.update(state)
    return e


def _outcome(result: AtomAdded | BaseException) -> Added | BaseException:
    return result if isinstance(result, BaseException) else Added.of(result)


def adds(svc: MemoryService, items: Sequence[tuple[Caller, AtomIn]]
          ) -> list[Added | BaseException]:
    """One group commit; a failure of the whole call (the database gone, say) is every
    item's answer, and nothing of it was acknowledged."""
    try:
        return [_outcome(r) for r in svc.add_atoms_grouped(items)]
    except Exception as e:
        return [e] * len(items)


def bulk(svc: MemoryService, caller: Caller, items: list[AtomIn]) -> bytes:
    return svc.add_atoms(caller, items).model_dump_json().encode()


def _writer_main(home: str, conn: Any, log_level: str | None) -> None:
    """The writer process (ADR 0062): opens the home's service, then answers each
    ``("adds", [(caller, AtomIn)])`` or ``("bulk", (caller, [AtomIn]))`` from the server
    process in order, until ``None`` or the end of the pipe. Signals are the server's
    business: it stops this process by closing the pipe once every queued write ran."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    from ledger import logs

    logs.configure(log_level)
    try:
        svc = open_service(Path(home))
    except BaseException as e:
        conn.send(("failed", _Carried(_portable(e))))
        return
    conn.send(("ready", None))
    try:
        # the read models' SQLite file stays open between groups: no close of this
        # process's is the last one, which would checkpoint the WAL (ADR 0078)
        with read_models_kept_open(svc):
            _answer(svc, conn)
    finally:
        close_service(svc)


def _answer(svc: MemoryService, conn: Any) -> None:
    """Answer the server process's writes in order until ``None`` or the pipe's end."""
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        kind, payload = msg
        out: Any
        if kind == "adds":
            out = [r if not isinstance(r, BaseException) else _Carried(_portable(r))
                   for r in adds(svc, payload)]
        else:
            try:
                out = bulk(svc, *payload)
            except Exception as e:
                out = _Carried(_portable(e))
        conn.send(out)


_early: dict[Path, WriterProcess] = {}  # started by `ledger serve` before its app is built


def start_early(home: Path) -> None:
    """Start the writer process of ``home`` now, so that its start-up (the interpreter,
    the imports, opening the ledger) overlaps the server process's own; the server's
    writer thread takes it over (:meth:`WriterProcess.for_home`). ``ledger serve`` calls
    this for one worker process serving one ledger, then :func:`stop_unclaimed` when
    it stops."""
    _early[home] = WriterProcess(home)


def stop_unclaimed() -> None:
    """Stop an early writer process that no server took over (the app failed to build):
    it would otherwise wait on its pipe, and the interpreter for it, at exit."""
    while _early:
        _early.popitem()[1].close()


class WriterProcess:
    """The server process's end of the writer process: one call at a time, from the
    writer thread only."""

    @classmethod
    def for_home(cls, home: Path) -> WriterProcess:
        """The process :func:`start_early` started for ``home``, else a new one."""
        early = _early.pop(home, None)
        return early if early is not None else cls(home)

    def __init__(self, home: Path) -> None:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")  # never fork a process with threads
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_writer_main, name="ledger-writer-process",
                                args=(str(home), child, os.environ.get("LEDGER_LOG_LEVEL")),
                                # not daemonic: a large catch-up of the read models for the
                                # similar search starts worker processes of its own; it ends
                                # when the pipe closes (the server stopped, or died)
                                daemon=False)
        self.proc.start()
        child.close()
        self.broken = False  # the pipe failed: the process is replaced before its next use

    def wait_ready(self) -> None:
        status, error = self._recv()
        if status != "ready":
            self.proc.join(10)
            raise error

    def call(self, kind: str, payload: Any) -> Any:
        try:
            self.conn.send((kind, payload))
        except OSError:
            self._stopped()
        return self._recv()

    def _recv(self) -> Any:
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            self._stopped()

    def _stopped(self) -> NoReturn:
        self.broken = True
        raise EnvironmentProblem(
            "the server's writer process stopped; this write's outcome is unknown",
            hint="check the server's log, then list the memories before sending it "
                 "again") from None

    def close(self) -> None:
        try:
            self.conn.send(None)
        except OSError:
            pass
        self.proc.join(60)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
        self.conn.close()
