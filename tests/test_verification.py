"""One verification orchestration (ledger/verification.py, issue 14): the pure checks take
bytes and keys, the I/O that gathers them is apart; ``verify-pack`` verifies a pack's
bytes alone; ``verify-pack`` and ``audit`` count their work on a terminal only."""

from __future__ import annotations

import dataclasses
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from governance.erasure import redact_user
from governance.pack import build_pack
from governance.pack_layout import PackInvalid
from governance.pack_verify import read_pack, read_pack_zip, verify_pack, verify_pack_bytes
from ledger.application import LedgerApp
from ledger.home import Config
from ledger.verification import (
    check_chain,
    check_notes,
    gather_since,
    verify_after,
    verify_ledger,
)
from ledger.verify import verify_log
from projections.service import Projections

from .conftest import run_cli
from .test_progress import on_pipe, on_terminal


@dataclasses.dataclass(frozen=True)
class Rec:
    """A stored record held in memory: bytes, no database behind it."""

    id: int
    originator_id: str
    originator_version: int
    topic: str
    state: bytes


@pytest.fixture
def local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LedgerApp]:
    """An SQLite ledger with a few events and a recorded checkpoint (one backend: what is
    tested here is the orchestration, not the store)."""
    monkeypatch.delenv("LEDGER_NOW", raising=False)
    home = tmp_path / "home"
    LedgerApp.initialize(home)
    app = LedgerApp(Config.load(home))
    app.register_subject({"ref": "u1"})
    app.add_atoms([{"subject": "u1", "text": f"fact {i}"} for i in range(4)])
    app.checkpoint([])
    yield app
    app.close()


def _in_memory(app: LedgerApp) -> list[Rec]:
    return [Rec(int(r.id), str(r.originator_id), int(r.originator_version), str(r.topic),
                bytes(r.state)) for r in app.reader.stored_records()]


def test_the_pure_checks_verify_bytes_held_in_memory(local: LedgerApp) -> None:
    """Steps 1-8 on records and a checkpoint note copied out of the ledger: no store is
    read by the checks, and a changed byte in the copy is caught."""
    records, root = _in_memory(local), local.root_public_key
    assert root is not None
    note = local.latest_checkpoint().note
    local.close()  # nothing below may read the ledger
    leaves: list[bytes] = []
    report = verify_log(records, ledger_id=local.ledger_id, root_public_key=root,
                        leaves=leaves)
    assert report.ok and report.events == len(records) == len(leaves)
    checked, failure = check_notes([("kept", note)], origin=local.config.origin,
                                   roster=report.roster, leaves=leaves)
    assert failure is None and checked[0]["size"] == len(records)
    # A leaf that is not the one the checkpoint covers: 8.3, located without a stored tree.
    forged = [*leaves[:2], bytes(32), *leaves[3:]]
    _, failure = check_notes([("kept", note)], origin=local.config.origin,
                             roster=report.roster, leaves=forged)
    assert failure is not None and failure.step == "8.3"
    # A note of another origin: 8.1, labelled.
    _, failure = check_notes([("kept", note.replace(local.config.origin, "other", 1))],
                             origin=local.config.origin, roster=report.roster, leaves=leaves)
    assert failure is not None and failure.step == "8.1" and failure.reason.startswith("kept:")


def test_check_chain_fails_on_a_proof_that_does_not_join_the_checkpoints(
        local: LedgerApp) -> None:
    old = local.latest_checkpoint()
    local.add_atom({"subject": "u1", "text": "later"})
    new = local.checkpoint([])
    assert check_chain([old, new], local.reader.consistency_proof) is None
    failure = check_chain([old, new], lambda a, b: [bytes(32)])
    assert failure is not None and failure.step == "8.3"
    assert f"size {new.size} does not extend the one of size {old.size}" in failure.reason


def test_since_gathers_then_verifies_what_was_gathered(local: LedgerApp) -> None:
    """``verify --since``: the I/O half reads the ledger; the pure half sees only what it
    was given, so a record changed in what was gathered fails there."""
    root = local.root_public_key
    assert root is not None
    cp = local.latest_checkpoint()
    kept, m = cp.note, cp.size
    local.add_atoms([{"subject": "u1", "text": f"new {i}"} for i in range(3)])
    seen: list[tuple[str, int, int]] = []
    inputs = gather_since(local.reader, kept, lambda *step: seen.append(step))
    report, extra = verify_after(inputs, root)
    assert report.ok and report.events == 3 and extra["since"] == m and extra["size"] == m + 3
    assert seen[0] == ("Verifying events", 0, 3) and seen[-1] == ("Verifying events", 3, 3)
    after = list(gather_since(local.reader, kept).after)
    bad = after[1]
    changed = Rec(int(bad.id), str(bad.originator_id), int(bad.originator_version),
                  str(bad.topic), bad.state.replace(b'"seq":%d' % (m + 2), b'"seq":%d' % (m + 3)))
    assert changed.state != bad.state
    tampered = dataclasses.replace(gather_since(local.reader, kept), after=[after[0], changed])
    report, _ = verify_after(tampered, root)
    assert not report.ok and report.failure is not None
    assert report.failure.position == int(bad.id)
    # The entry used by `ledger verify` agrees with the two halves.
    assert verify_ledger(local.reader, root, since=kept).as_json()["size"] == m + 3


def _pack(tmp_path: Path, zipped: bool = False) -> tuple[Path, bytes]:
    home = tmp_path / "packhome"
    LedgerApp.initialize(home)
    app = LedgerApp(Config.load(home))
    proj = Projections(app)
    try:
        app.register_subject({"ref": "u1"})
        app.add_atoms([{"subject": "u1", "text": f"fact {i}"} for i in range(3)])
        res = redact_user(app, proj, "u1", reason="GDPR Art. 17", operator="operator")
        pack = build_pack(app, res["batch_id"], tmp_path / "pack", make_zip=zipped)
        root = app.root_public_key
        assert root is not None
        return pack, root
    finally:
        proj.close()
        app.close()


def test_verify_pack_verifies_bytes_alone(tmp_path: Path) -> None:
    """The pure half takes the pack's bytes; the folder and the zip read the same bytes;
    a changed byte in memory fails as it would on disk."""
    pack, root = _pack(tmp_path, zipped=True)
    files = read_pack(pack)
    assert read_pack(pack.with_suffix(".zip")) == files
    assert read_pack_zip(pack.with_suffix(".zip").read_bytes()) == files
    counts: list[tuple[str, int, int]] = []
    report = verify_pack_bytes(files, root, None, lambda *step: counts.append(step))
    assert report.ok and report.events > 0
    n = report.events
    assert counts == [("Verifying events", 0, n), ("Verifying events", n, n),  # step 3
                      ("Checking inclusion proofs", 0, n),
                      ("Checking inclusion proofs", n, n)]  # step 5
    assert files == read_pack(pack)  # the caller's bytes are not consumed
    changed = dict(files)
    changed["events.jsonl"] = changed["events.jsonl"].replace(b"seq", b"Seq", 1)
    with pytest.raises(PackInvalid) as err:
        verify_pack_bytes(changed, root)
    assert err.value.step == "2"
    escaping = tmp_path / "escaping.zip"
    with zipfile.ZipFile(escaping, "w") as zf:
        zf.writestr("../outside", b"x")
    with pytest.raises(PackInvalid, match="escapes the pack"):
        read_pack(escaping)
    with pytest.raises(PackInvalid, match="escapes the pack"):
        read_pack_zip(escaping.read_bytes())
    assert verify_pack(pack, root).as_json() == report.as_json()


def test_audit_report_counts_what_it_reads_and_verifies(local: LedgerApp) -> None:
    from governance.audit import build_report, parse_period
    from ledger import clock

    counts: list[tuple[str, int, int]] = []
    period = parse_period(None, None, clock.now())
    report: dict[str, Any] = build_report(local, period,
                                          progress=lambda *step: counts.append(step))
    events = report["activity"]["events"]
    assert report["verification"]["ok"] is True
    assert counts[0] == ("Reading the period's events", 0, events)
    assert ("Reading the period's events", events, events) in counts
    assert counts[-1] == ("Verifying events", events, events)  # then verified
    again = build_report(local, period)
    again["generated_at"] = report["generated_at"]
    assert again == report  # counting changes nothing in the report


@pytest.mark.slow
def test_verify_pack_and_audit_draw_a_counted_bar_on_a_terminal_only(tmp_path: Path) -> None:
    pack, _ = _pack(tmp_path)
    home = tmp_path / "packhome"
    code, screen = on_terminal("verify-pack", str(pack))
    assert code == 0, screen
    assert "Verifying the pack" in screen and "100%" in screen and "OK: pack verified" in screen
    code, screen = on_terminal("verify-pack", str(pack), "--json")
    assert code == 0 and "%" not in screen, screen
    r = on_pipe("verify-pack", str(pack))
    assert r.returncode == 0 and "\r" not in r.stderr and "%" not in r.stderr
    code, screen = on_terminal("--home", str(home), "audit")
    assert code == 0, screen
    assert "Building the report" in screen and "100%" in screen
    code, screen = on_terminal("--home", str(home), "audit", "--json")
    # no bar: its label and percentage (the JSON itself may say "Building a pack ...")
    assert code == 0 and "100%" not in screen and "Building the report" not in screen
    assert run_cli("--home", str(home), "audit", "--format", "html").code == 0


def test_proofs_are_built_by_the_ledger_and_checked_from_documents_alone(
        local: LedgerApp) -> None:
    """``ledger prove`` builds (ledger/proofs.py), ``audit-tools verify-*`` check a proof
    document against a checkpoint verified under the log's vkey: no ledger needed."""
    from ledger.errors import VerificationFailed
    from ledger.proofs import (
        check_consistency_document,
        check_inclusion_document,
        checkpoint_under_key,
        prove_consistency,
        prove_inclusion,
    )

    kept = local.latest_checkpoint().note
    first = next(iter(local.reader.stored_records()))
    eid = f"{first.originator_id}/{first.originator_version}"
    local.add_atom({"subject": "u1", "text": "later"})
    local.checkpoint([])
    vkey = local.log_vkey()
    inclusion, consistency = prove_inclusion(local, eid), prove_consistency(local, kept)
    local.close()
    cp = checkpoint_under_key(inclusion["checkpoint"], vkey, None)
    assert check_inclusion_document(inclusion, cp, "p.json") == (0, cp.size)
    with pytest.raises(VerificationFailed):
        check_inclusion_document({**inclusion, "leaf_index": 1}, cp, "p.json")
    old = checkpoint_under_key(consistency["old_checkpoint"], vkey, None)
    new = checkpoint_under_key(consistency["new_checkpoint"], vkey, None)
    check_consistency_document(consistency, old, new, "c.json")
    with pytest.raises(VerificationFailed):
        check_consistency_document({**consistency, "proof": []}, old, new, "c.json")
