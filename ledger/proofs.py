"""Proofs a ledger hands out, and the offline checks of them (``ledger prove``,
``ledger audit-tools verify-*``).

:func:`prove_inclusion` and :func:`prove_consistency` read the ledger (the I/O), build
a proof against the latest recorded checkpoint and check it before handing it out.
:func:`checkpoint_under_key`, :func:`check_inclusion_document` and
:func:`check_consistency_document` are pure: a proof document, checkpoint notes and a
verifier key in, a verified value out (or :class:`VerificationFailed`,
:class:`InputError` for a malformed document). The CLI commands parse, read files and
print; the steps are here (docs/spec/leaf.md, c2sp.org/tlog-checkpoint).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ledger.errors import InputError, VerificationFailed

if TYPE_CHECKING:
    from ledger.application import LedgerApp
    from ledger.checkpoint import Checkpoint

__all__ = ["check_consistency_document", "check_inclusion_document", "checkpoint_under_key",
           "prove_consistency", "prove_inclusion"]


# ----------------------------------------------------------------------------- building
def prove_consistency(app: LedgerApp, old_note: str) -> dict[str, Any]:
    """A consistency proof from a kept checkpoint (signed by a log key of the roster) to
    the latest recorded one, checked before it is returned."""
    from ledger.merkle import verify_consistency
    from ledger.transparency import b64, verify_with_roster

    latest = app.tlog.latest()
    old = verify_with_roster(old_note, app.config.origin, app.reader.roster().state)
    proof = app.reader.consistency_proof(old.size, latest.size)
    verify_consistency(old.size, latest.size, old.root, latest.root, proof)
    return {"old_size": old.size, "old_root": b64(old.root), "new_size": latest.size,
            "new_root": b64(latest.root), "proof": [b64(p) for p in proof],
            "old_checkpoint": old.note, "new_checkpoint": latest.note}


def prove_inclusion(app: LedgerApp, event_id: str) -> dict[str, Any]:
    """An inclusion proof of event ``<uuid>/<version>`` (its leaf, docs/spec/leaf.md) in
    the tree of the latest recorded checkpoint, checked before it is returned."""
    from ledger import envelope
    from ledger.leaf import leaf_of
    from ledger.merkle import leaf_hash, verify_inclusion
    from ledger.transparency import b64

    latest = app.tlog.latest()
    seq = app.reader.seq_of(event_id)
    if seq > latest.size:
        raise InputError(
            f"event {event_id} (seq {seq}) is newer than the latest checkpoint "
            f"(size {latest.size})", hint="run `ledger checkpoint` first")
    stored = app.reader.notifications(start=app.tlog.store.last_notification_id_of(seq - 1),
                               limit=1)[0]
    leaf = leaf_of(stored, envelope.open_state(stored.state))
    proof = app.reader.inclusion_proof(seq - 1, latest.size)
    verify_inclusion(leaf_hash(leaf), seq - 1, latest.size, proof, latest.root)
    return {"event_id": event_id, "seq": seq, "leaf_index": seq - 1,
            "tree_size": latest.size, "leaf": b64(leaf), "leaf_hash": b64(leaf_hash(leaf)),
            "proof": [b64(p) for p in proof], "checkpoint": latest.note}


# ----------------------------------------------------------------------------- checking
def checkpoint_under_key(note: str, key_text: str, origin: str | None,
                         public_key_file: bytes | None = None) -> Checkpoint:
    """Verify a checkpoint note under a C2SP vkey (``key_text``; its name need not be the
    origin), or under the ledger's ``.pub`` key (``public_key_file``, whose checkpoints
    use the origin as key name)."""
    from ledger.checkpoint import parse_vkey, verify_checkpoint

    text = key_text.strip()
    if "+" in text and not text.startswith("{"):
        try:
            name, public_key = parse_vkey(text)
        except ValueError as e:
            raise InputError(f"--key: {e}", hint="give a vkey as printed by `ledger checkpoint "
                                                 "--vkey`, or the log's .pub file") from e
        return verify_checkpoint(note, name, public_key, expected_origin=origin)
    assert public_key_file is not None
    body_origin = note.split("\n", 1)[0]
    return verify_checkpoint(note, origin or body_origin, public_key_file,
                             expected_origin=origin)


def _proof_list(doc: dict[str, Any], name: str) -> list[bytes]:
    from ledger.transparency import unb64

    try:
        return [unb64(p) for p in doc["proof"]]
    except (KeyError, TypeError, ValueError) as e:
        raise InputError(f"{name}: 'proof' must be a list of base64 hashes") from e


def check_inclusion_document(doc: dict[str, Any], cp: Checkpoint, name: str
                             ) -> tuple[int, int]:
    """A ``ledger prove EVENT_ID --json`` document against a verified checkpoint: its leaf
    is included in the checkpoint's tree. Returns (leaf index, tree size)."""
    from ledger.merkle import leaf_hash, verify_inclusion
    from ledger.transparency import unb64

    try:
        leaf = unb64(doc["leaf"])
        index, size = int(doc["leaf_index"]), int(doc["tree_size"])
    except (KeyError, TypeError, ValueError) as e:
        raise InputError(f"{name}: needs leaf, leaf_index and tree_size") from e
    if size != cp.size:
        raise VerificationFailed(f"the proof is for tree size {size}, the checkpoint has size "
                                 f"{cp.size}", hint="ask for a proof against this checkpoint")
    verify_inclusion(leaf_hash(leaf), index, size, _proof_list(doc, name), cp.root)
    return index, size


def check_consistency_document(doc: dict[str, Any], old: Checkpoint, new: Checkpoint,
                               name: str) -> None:
    """A ``ledger prove --consistency OLD --json`` document: the new checkpoint's tree
    extends the old one's (both verified, of the same log)."""
    from ledger.merkle import verify_consistency

    if old.origin != new.origin:
        raise VerificationFailed(f"the checkpoints are of different logs: {old.origin} and "
                                 f"{new.origin}")
    verify_consistency(old.size, new.size, old.root, new.root, _proof_list(doc, name))
