"""What an Evidence Pack is made of (docs/spec/evidence-pack.md): its files' names, the
event topics its steps look for, the roles that may sign it, the schema of its predicate,
and the error of a failed step. Shared by building (``governance/pack.py``), rendering
(``governance/pack_render.py``), verifying (``governance/pack_verify.py``) and the
witnessing steps (``governance/witnessed.py``)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from ledger import envelope, json_schemas
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


PARTIAL = "partial"
BATCH_PARTIAL = "memory-ledger:batch.ended-partial.v1"


def sha256_hex(data: bytes) -> str:
    """A file's digest as the statement's subjects name it."""
    return hashlib.sha256(data).hexdigest()


def predicate_problems(predicate: Any) -> list[str]:
    """Where ``predicate`` departs from schemas/evidence-pack-predicate.v1.json (empty: valid)."""
    errors = sorted(json_schemas.validator(PREDICATE_SCHEMA).iter_errors(predicate),
                    key=lambda e: (e.json_path, e.validator))
    return [f"{e.json_path}: {e.message[:160]}" for e in errors]


def partial_outcomes(envelopes: Mapping[tuple[str, int], tuple[str, Mapping[str, Any]]],
                     batch_id: str) -> list[dict[str, Any]]:
    """The batch's ``batch.ended-partial`` events, in version order: event id, time and
    the signed reasons (what ``partial_outcomes`` must say)."""
    rows = sorted((k, env) for k, (topic, env) in envelopes.items()
                  if k[0] == batch_id and topic == BATCH_PARTIAL)
    return [{"event_id": envelope.event_id(k[0], k[1]), "at": env["timestamp"],
             "reasons": env["payload"]["reasons"]} for k, env in rows]

