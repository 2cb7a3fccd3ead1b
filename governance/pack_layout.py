"""What an Evidence Pack is made of (docs/spec/evidence-pack.md): its files' names, the
event topics its steps look for, the roles that may sign it, and the error of a failed
step. Shared by building and verifying (``governance/pack.py``) and the witnessing steps
(``governance/witnessed.py``)."""

from __future__ import annotations

from ledger.errors import VerificationFailed

STATEMENT = "statement.dsse.json"
EVENTS = "events.jsonl"
BEFORE = "checkpoints/before.checkpoint"
AFTER = "checkpoints/after.checkpoint"
CONSISTENCY = "consistency.json"
ROOT_PUB = "keys/root.pub"
REPORT = "report.html"
PROOFS = "proofs"  # proofs/<seq>.tlog-proof: c2sp.org/tlog-proof of tombstones, key destructions
CHECKING = "Checking inclusion proofs"
"""verify-pack's stage of step 5 (step 3's is :data:`ledger.verification.VERIFYING`)."""
PREDICATE_SCHEMA = "evidence-pack-predicate.v1.json"
"""JSON Schema of the statement's predicate, in the ``schemas`` package (step 1.1)."""

TOMBSTONE_TOPICS = {"memory-ledger:atom.redacted.v1", "memory-ledger:artifact.deleted.v1",
                    "memory-ledger:record.erased.v1"}
SIGNER_ROLES = ("operator", "auditor")
"""Roles whose keys may sign (or countersign) an Evidence Pack's statement (step 4)."""
KEY_TOPICS = {"memory-ledger:atom.data-key-destroyed.v1",
              "memory-ledger:artifact.data-key-destroyed.v1",
              "memory-ledger:subject.data-key-destroyed.v1",
              "memory-ledger:record.data-key-destroyed.v1"}


class PackInvalid(VerificationFailed):
    """A pack failed verification; ``step`` is the docs/spec/evidence-pack.md step."""

    def __init__(self, step: str, message: str) -> None:
        super().__init__(f"step {step}: {message}")
        self.step = step
