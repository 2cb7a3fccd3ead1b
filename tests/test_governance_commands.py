"""Signed governance commands of the write side (orchestration is tested with governance/)."""

from __future__ import annotations

import pytest

from ledger.application import LedgerApp
from ledger.errors import ConflictError, InputError

from .conftest import RawStore


def _atoms(app: LedgerApp, n: int = 2) -> list:  # type: ignore[type-arg]
    app.register_subject({"ref": "u1"})
    return app.add_atoms([{"subject": "u1", "text": f"fact {i}"} for i in range(n)])


def test_soft_redaction_is_reversible_archive_is_not(app: LedgerApp) -> None:
    a, b = _atoms(app)
    app.redact(a, "soft", "user asked to hide it")
    hidden = app.reader.get_atom(a)
    assert hidden.status == "soft-redacted" and hidden.text == "fact 0"
    app.unredact(a, "user changed their mind")
    assert app.reader.get_atom(a).status == "active"
    app.redact(b, "archive", "retention")
    with pytest.raises(ConflictError, match="only soft redaction is reversible"):
        app.unredact(b, "no")
    with pytest.raises(InputError, match="not soft or archive"):
        app.redact(a, "hard", "x")


def test_shred_and_tombstone_are_idempotent(app: LedgerApp) -> None:
    a, b = _atoms(app)
    first = app.shred([a, b], "erasure")
    assert len(first) == 2 and app.shred([a, b], "again") == []
    t = app.tombstone([a, b], [], "hard", "erasure", reached=["atom_store"])
    assert len(t) == 2 and app.tombstone([a, b], [], "hard", "erasure", reached=[]) == []
    atom = app.reader.get_atom(a)
    assert atom.status == "hard-redacted" and atom.content_erased and atom.text is None


def test_request_and_batch_need_an_operator_key(app: LedgerApp) -> None:
    _atoms(app, 1)
    rows = RawStore(app.config.home).rows()
    with pytest.raises(InputError, match="may not sign"):
        app.receive_request("u1", "gdpr art. 17", operator="writer", ack_hours=24,
                            complete_hours=720)
    assert RawStore(app.config.home).rows() == rows
    req = app.receive_request("u1", "gdpr art. 17", operator="operator", ack_hours=24,
                              complete_hours=720, identifiers=["ann@example.org"])
    batch = app.open_batch("operator", req, "hard", "gdpr art. 17", {"atoms": []})
    app.finish_batch("operator", batch, [], {"routes": []}, request_id=req)
    request = app.reader.aggregate(req)
    assert request.completed_at is not None and request.content_erased  # identifiers shredded
    assert request.identifiers is None
