"""The command line's own words for what the facade reports (issue 32, ADR 0070).

The facade does one thing for every caller and raises typed errors with the facts as
fields (:class:`ledger.errors.NotFound`'s ``kind``, ``ref`` and ``other_kind``); the HTTP
API and MCP answer with the facade's message, and the command line says it as it always
has: a subject, atom or artifact it did not find is named as the application names it, a
batch as the evidence commands do."""

from __future__ import annotations

from ledger.errors import LedgerError, NotFound


def said(e: LedgerError) -> tuple[str, str | None]:
    """The message and hint the CLI prints for ``e``."""
    if not isinstance(e, NotFound) or e.ref is None:
        return str(e), e.hint
    ref = e.ref
    if e.kind == "subject":
        return (f"no subject {ref!r} in this ledger",
                "register it first with `ledger subject add`")
    if e.kind in ("atom", "artifact"):
        if e.other_kind:
            return f"{ref} is not an {e.kind}", None
        return f"no {e.kind} {ref!r} in this ledger", None
    if e.kind == "batch":
        return (f"no redaction batch {ref}",
                "see the batch id printed by `ledger redact-user`")
    return str(e), e.hint


def missing_request(e: NotFound) -> NotFound:
    """``ledger receipt``'s words for an erasure request the facade did not find (the
    request commands keep the facade's)."""
    if e.kind != "erasure request" or e.ref is None:
        return e
    return NotFound(f"no erasure request {e.ref}",
                    hint="see the request id printed by `ledger redact-user`")
