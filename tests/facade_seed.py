"""Arrange steps through the facade: subjects, artifacts and atoms recorded in one open
service as the local operator (the ``ledger`` command's caller), so a test that checks a
command's output sets its ledger up in a fraction of the time one ``ledger atom add`` per
atom takes, and through the same use cases the commands call."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from service.caller import local_operator
from service.models import ArtifactIn, AtomIn, SubjectIn
from service.root import opened_service


def seed(home: Path, *, subjects: Sequence[str | dict[str, Any]] = (),
         artifacts: Sequence[dict[str, Any]] = (),
         atoms: Sequence[dict[str, Any]] = ()) -> list[str]:
    """Register ``subjects`` (refs, or SubjectIn fields), capture ``artifacts`` (ArtifactIn
    fields, ``kind`` chat by default), then add ``atoms`` (AtomIn fields) in one signed
    command; the new atoms' ids, in order."""
    op = local_operator()
    with opened_service(home, lazy=True) as svc:
        for s in subjects:
            svc.register_subject(op, SubjectIn(**({"ref": s} if isinstance(s, str) else s)))
        for a in artifacts:
            svc.capture_artifact(op, ArtifactIn(**{"kind": "chat", **a}))
        if not atoms:
            return []
        return svc.add_atoms(op, [AtomIn(**a) for a in atoms]).atom_ids
