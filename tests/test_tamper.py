"""Attacks on the stored log, each caught by `ledger verify` (exit 1, first bad event named).

The attacker has write access to the event database but not to the private keys.
"""

from __future__ import annotations

import base64
import json
import uuid
from pathlib import Path

import pytest

from keys.signing import Signer
from ledger import clock
from ledger.application import LedgerApp
from ledger.domain import Atom
from ledger.home import Config

from .conftest import RawStore, run_cli


def _populate(home: Path) -> list[str]:
    app = LedgerApp(Config.load(home))
    try:
        app.register_subject({"ref": "u1", "display_name": "Ann"})
        app.capture_artifact({"subject": "u1", "ref": "a1", "kind": "chat", "body": "hello"})
        ids = [str(app.add_atom({"subject": "u1", "text": f"fact {i}", "derivation": "observed",
                                 "artifact_ids": ["a1"]})) for i in range(3)]
        app.rehearse_atom(ids[0])
        return ids
    finally:
        app.close()


def _verify(home: Path) -> tuple[int, dict[str, object], str]:
    r = run_cli("--home", str(home), "verify", "--json")
    return r.code, json.loads(r.out), r.err


def test_untampered_log_verifies(home: Path) -> None:
    _populate(home)
    code, report, err = _verify(home)
    assert code == 0 and report["ok"] is True and report["events"] == 10
    assert err.startswith("OK: 10 events verified")


@pytest.mark.parametrize("where", ["start", "payload", "signature", "end"])
def test_flipped_byte_in_any_stored_event_detected(home: Path, raw: RawStore, where: str) -> None:
    _populate(home)
    rows = raw.rows()
    for pos, _oid, _ver, _topic, state in rows:
        index = {"start": 0, "payload": state.index(b'"payload"') + 12,
                 "signature": state.index(b'"signature"') + 20, "end": len(state) - 1}[where]
        tampered = bytearray(state)
        tampered[index] ^= 0x01
        raw.set_state(pos, bytes(tampered))
        code, report, err = _verify(home)
        assert code == 1, f"flip at {where} of position {pos} went undetected"
        assert report["failure"]["position"] == pos  # type: ignore[index]
        assert f"FAIL: position {pos} " in err
        raw.set_state(pos, state)
    assert _verify(home)[0] == 0


def test_swapped_signature_detected(home: Path, raw: RawStore) -> None:
    _populate(home)
    rows = raw.rows()
    a, b = rows[-2], rows[-1]
    sig_a = json.loads(a[4])["signature"]
    state_b = json.loads(b[4])
    raw.set_state(b[0], b[4].replace(state_b["signature"].encode(), sig_a.encode()))
    code, report, err = _verify(home)
    assert code == 1
    assert report["failure"] == {**report["failure"], "position": b[0], "step": "5"}  # type: ignore[dict-item]
    assert "signature does not verify" in err


def test_reordered_events_detected(home: Path, raw: RawStore) -> None:
    _populate(home)
    rows = raw.rows()
    raw.swap(rows[6][0], rows[7][0])
    code, report, err = _verify(home)
    assert code == 1
    failure = report["failure"]
    assert failure["position"] == rows[6][0] and failure["step"] == "3"  # type: ignore[index]
    assert "removed, inserted or moved" in err


def test_deleted_event_detected(home: Path, raw: RawStore) -> None:
    _populate(home)
    rows = raw.rows()
    raw.delete(rows[5][0])
    code, report, _ = _verify(home)
    assert code == 1
    assert report["failure"]["position"] == rows[6][0]  # type: ignore[index]
    assert report["failure"]["step"] == "3"  # type: ignore[index]


def _forge_rehearsal(home: Path, signer: Signer, atom_id: str, seq: int | None = None) -> None:
    """Append an event signed by ``signer`` without the application's authorization check
    (its envelope's ``seq``: the next one, or ``seq``)."""
    app = LedgerApp(Config.load(home))
    try:
        atom = app.reader.get_atom(atom_id)
        head, _ = app.reader.head()
        atom.trigger_event(Atom.Rehearsed, timestamp=clock.now(), session_id=None, reason=None)
        app.mapper.begin(signer, head + 1 if seq is None else seq)  # type: ignore[attr-defined]
        try:
            app.save(atom)
        finally:
            app.mapper.end()  # type: ignore[attr-defined]
    finally:
        app.close()


def test_event_signed_by_unauthorized_key_detected(home: Path, raw: RawStore) -> None:
    ids = _populate(home)
    _forge_rehearsal(home, Signer.generate("rogue"), ids[1])
    code, report, err = _verify(home)
    assert code == 1
    assert report["failure"]["position"] == raw.rows()[-1][0]  # type: ignore[index]
    assert report["failure"]["step"] == "4"  # type: ignore[index]
    assert "not in the roster" in err


def test_event_signed_by_revoked_key_detected(home: Path, raw: RawStore) -> None:
    ids = _populate(home)
    app = LedgerApp(Config.load(home))
    writer = app.signer("writer")
    app.revoke_key(writer.kid, reason="stolen")
    app.close()
    assert _verify(home)[0] == 0  # events signed before the revocation stay valid
    _forge_rehearsal(home, writer, ids[1])
    code, report, err = _verify(home)
    assert code == 1 and report["failure"]["step"] == "4"  # type: ignore[index]
    assert "was revoked as writer" in err


def _forge_at(home: Path, raw: RawStore, signer: Signer, atom_id: str, seq: int,
              after: int, kid: str | None = None) -> int:
    """Insert a forged event (``seq``, signed by ``signer``, its envelope naming ``kid``)
    into the log right after position ``after``; return the position it landed at."""
    _forge_rehearsal(home, signer, atom_id, seq)
    rows = raw.rows()
    forged, tail = rows[-1], [r for r in rows[:-1] if r[0] > after]
    state = forged[4]
    if kid is not None:  # same length: "ed25519:" + 32 hex digits
        old = json.loads(state[len(b'{"envelope":'):-104])["kid"]
        state = state.replace(old.encode(), kid.encode(), 1)
    for r in [forged, *tail]:
        raw.delete(r[0])
    for r in [(*forged[:4], state), *tail]:
        raw.insert(str(uuid.UUID(r[1])), r[2], r[3], r[4])
    return next(r[0] for r in raw.rows() if r[4] == state)


@pytest.mark.parametrize(("case", "step", "says"), [
    ("wrong seq", "3", "where 6 was expected"),
    ("right seq, unknown key", "4", "not in the roster"),
    ("right seq, a writer's key id, no writer's key", "5", "signature does not verify"),
])
def test_inserted_event_detected(home: Path, raw: RawStore, case: str, step: str,
                                 says: str) -> None:
    """Insertion (event-envelope spec, attacks table): an event put between two stored
    events is caught at its own position: step 3 if its seq is not the next one; with the
    right seq, step 4 (its key is not in the roster) or 5 (it names an authorized key id
    but its signature was made without that key)."""
    ids = _populate(home)
    assert _verify(home)[0] == 0
    rows = raw.rows()
    after = rows[4][0]  # between the 5th and the 6th event
    rogue = Signer.generate("rogue")
    opened = LedgerApp(Config.load(home))
    writer_kid = opened.signer("writer").kid
    opened.close()
    seq = len(rows) + 1 if case == "wrong seq" else 6
    position = _forge_at(home, raw, rogue, ids[1], seq, after,
                         kid=writer_kid if step == "5" else None)
    assert [r[0] for r in raw.rows()].index(position) == 5  # it sits in the middle
    code, report, err = _verify(home)
    assert code == 1
    assert report["failure"]["position"] == position  # type: ignore[index]
    assert report["failure"]["step"] == step  # type: ignore[index]
    assert says in err


def test_event_from_another_ledger_detected(home: Path, tmp_path: Path, raw: RawStore) -> None:
    _populate(home)
    other = tmp_path / "other"
    LedgerApp.initialize(other)
    _populate(other)
    foreign = RawStore(other).rows()[-1]
    raw.insert(foreign[1] if "-" in foreign[1] else str(__import__("uuid").UUID(foreign[1])),
               99, foreign[3], foreign[4])
    code, report, _ = _verify(home)
    assert code == 1 and report["failure"]["step"] == "2"  # type: ignore[index]


def test_tampered_event_refused_on_read(home: Path, raw: RawStore) -> None:
    ids = _populate(home)
    rows = raw.rows()
    target = next(r for r in rows if r[1].replace("-", "") == ids[2].replace("-", ""))
    doc = json.loads(target[4])
    doc["envelope"]["payload"]["sensitivity"] = "public"
    forged = (b'{"envelope":' + __import__("rfc8785").dumps(doc["envelope"]) +
              b',"signature":"' + doc["signature"].encode() + b'"}')
    raw.set_state(target[0], forged)
    r = run_cli("--home", str(home), "atom", "show", ids[2])
    assert r.code == 1 and "failed verification" in r.err


def test_wrong_root_key_fails(home: Path, tmp_path: Path) -> None:
    _populate(home)
    other = tmp_path / "other"
    LedgerApp.initialize(other)
    r = run_cli("--home", str(home), "verify", "--root-key", str(other / "keys" / "root.pub"))
    assert r.code == 1 and "not the trusted root key" in r.err
    assert base64  # imported for symmetry with other attack tests


def test_timestamp_without_zone_is_a_verdict_not_a_crash(home: Path, raw: RawStore) -> None:
    ids = _populate(home)
    app = LedgerApp(Config.load(home))
    writer = app.signer("writer")
    app.close()
    last = raw.rows()[-1]
    env = json.loads(last[4])["envelope"]
    env["timestamp"] = "2099-11-30T00:00:00"
    from ledger import envelope as env_mod

    raw.set_state(last[0], env_mod.seal(env, writer))
    code, report, err = _verify(home)
    assert code == 1 and report["failure"]["step"] == "1.2"  # type: ignore[index]
    assert "time zone" in err and ids


def test_emptied_log_fails_verification(home: Path, raw: RawStore) -> None:
    for row in raw.rows():
        raw.delete(row[0])
    code, report, err = _verify(home)
    assert code == 1 and report["events"] == 0 and "holds no events" in err


def test_auditor_copy_without_root_pub_verifies_with_root_key(home: Path, tmp_path: Path) -> None:
    _populate(home)
    trusted = tmp_path / "root.pub"
    trusted.write_bytes((home / "keys" / "root.pub").read_bytes())
    (home / "keys" / "root.pub").unlink()
    assert run_cli("--home", str(home), "verify").code == 3
    r = run_cli("--home", str(home), "verify", "--root-key", str(trusted))
    assert r.code == 0, r.err


def test_own_events_read_back_unverified_but_a_changed_byte_is_caught(
        home: Path, raw: RawStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """The process that sealed an event reads it back without an Ed25519 check (it made
    that signature over those bytes); a byte changed in the store since is checked, and
    refused, in that same process."""
    from ledger import envelope
    from ledger.mapper import EventIntegrityError

    app = LedgerApp(Config.load(home))
    try:
        app.register_subject({"ref": "u1"})
        atom = app.add_atom({"subject": "u1", "text": "fact one"})
        checks: list[str] = []
        real_verify = envelope.verify
        monkeypatch.setattr(envelope, "verify",
                            lambda opened, key: (checks.append(opened.kid),
                                                 real_verify(opened, key)))
        stored = app.recorder.select_events(atom)
        app.mapper.to_domain_event(stored[0])  # type: ignore[attr-defined]
        assert checks == []
        target = next(r for r in raw.rows() if r[1].replace("-", "") == atom.hex)
        doc = json.loads(target[4])
        doc["envelope"]["payload"]["sensitivity"] = "public"
        forged = (b'{"envelope":' + __import__("rfc8785").dumps(doc["envelope"]) +
                  b',"signature":"' + doc["signature"].encode() + b'"}')
        raw.set_state(target[0], forged)
        with pytest.raises(EventIntegrityError, match="failed verification"):
            app.mapper.to_domain_event(app.recorder.select_events(atom)[0])  # type: ignore[attr-defined]
        assert len(checks) == 1
    finally:
        app.close()
    other = LedgerApp(Config.load(home))  # another process verifies everything it reads
    try:
        with pytest.raises(EventIntegrityError):
            other.reader.get_atom(atom)
    finally:
        other.close()
