"""The typed facade every surface calls (ADR 0027).

One :class:`MemoryService` per open ledger: it holds the write side
(:class:`ledger.application.LedgerApp`) and the read models
(:class:`projections.service.Projections`), and offers every use case as a method that
takes the :class:`service.caller.Caller` first and returns a value of
:mod:`service.models`. Surfaces (the CLI, the HTTP API, the MCP server, the console)
parse, authenticate, call these methods and render; they hold no domain logic.

Scope is enforced here, once for every surface:
* the caller's role decides the use case (assistants read and write memory of their
  subjects; auditors read and verify; operators also erase, build packs and sweep);
* a subject, atom, artifact, request or batch outside the caller's subjects or tenant
  answers :class:`~ledger.errors.NotFound` with the same wording as an unknown id;
* operator acts are signed with the caller's ``signing_key`` exactly as the CLI's
  ``--operator`` signs them.

Threads: a ``MemoryService`` is not thread-safe (the write side signs under a
per-command mapper state, the read models keep connections). A server gives each worker
thread its own service, or serialises calls (``server/``).
"""

from __future__ import annotations

from service.certificate_cases import CertificateCases
from service.copies_cases import CopiesCases
from service.core import ATOM_CONTENT, FacadeCore, Forbidden
from service.drp import DrpCases
from service.erasure_cases import ErasureCases
from service.ledger_cases import LedgerCases
from service.memory_cases import MemoryCases
from service.oversight_cases import OversightCases


class MemoryService(MemoryCases, ErasureCases, LedgerCases, CopiesCases, CertificateCases,
                    DrpCases, OversightCases):
    """Every use case of one ledger, scoped by the caller (module docstring): the memory
    use cases (``service/memory_cases.py``), erasure and its proof
    (``service/erasure_cases.py``), the ledger-wide ones (``service/ledger_cases.py``),
    backups and the erasure journal (``service/copies_cases.py``) and the certificate of
    erasure (``service/certificate_cases.py``), the Data Rights Protocol
    (``service/drp.py``) and what the console shows (``service/oversight_cases.py``), on
    the scope and plumbing of :class:`service.core.FacadeCore`."""


__all__ = ["ATOM_CONTENT", "FacadeCore", "Forbidden", "MemoryService"]
