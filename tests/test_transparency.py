"""Transparency log: checkpoints, proofs, and attacks detected against an old checkpoint."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from keys.signing import Signer
from ledger import envelope
from ledger.application import LedgerApp
from ledger.home import Config

from .conftest import RawStore, run_cli


def _h(home: Path, *args: str):  # type: ignore[no-untyped-def]
    return run_cli("--home", str(home), *args)


def _populate(home: Path, n: int = 4, ref: str = "u1") -> list[str]:
    app = LedgerApp(Config.load(home))
    try:
        if not app.reader.exists(app.reader.subject_id(ref)):
            app.register_subject({"ref": ref})
        return [str(app.add_atom({"subject": ref, "text": f"fact {i}"})) for i in range(n)]
    finally:
        app.close()


def _kept_checkpoint(home: Path, tmp_path: Path, name: str = "kept.checkpoint") -> Path:
    path = tmp_path / name
    r = _h(home, "checkpoint", "--out", str(path))
    assert r.code == 0, r.err
    return path


def test_checkpoint_proofs_and_offline_audit_tools(home: Path, tmp_path: Path) -> None:
    ids = _populate(home)
    old = _kept_checkpoint(home, tmp_path, "old.checkpoint")
    assert old.read_text().count("\n") == 5 and old.read_text().startswith("memory-ledger/")
    _populate(home, 3)
    assert _h(home, "checkpoint").code == 0
    log_pub = str(home / "keys" / "log.pub")

    inc = _h(home, "prove", f"{ids[1]}/1", "--json")
    assert inc.code == 0, inc.err
    (tmp_path / "inc.json").write_text(inc.out)
    r = run_cli("audit-tools", "verify-inclusion", str(tmp_path / "inc.json"), "--key", log_pub)
    assert r.code == 0 and r.err.startswith("OK: leaf")

    con = _h(home, "prove", "--consistency", str(old), "--json")
    assert con.code == 0, con.err
    (tmp_path / "con.json").write_text(con.out)
    r = run_cli("audit-tools", "verify-consistency", str(tmp_path / "con.json"), "--key", log_pub,
                "--old", str(old))
    assert r.code == 0, r.err
    v = _h(home, "verify", "--checkpoint", str(old), "--json")
    assert v.code == 0 and [c["size"] for c in json.loads(v.out)["checkpoints"]] == [12, 9]

    # A proof checked against a checkpoint from another log key fails.
    wrong = run_cli("audit-tools", "verify-inclusion", str(tmp_path / "inc.json"), "--key",
                    str(home / "keys" / "writer.pub"))
    assert wrong.code == 1 and "step 2" in wrong.err
    # A consistency proof swapped with an inclusion proof fails.
    doc = json.loads(con.out)
    doc["proof"] = json.loads(inc.out)["proof"]
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    bad = run_cli("audit-tools", "verify-consistency", str(tmp_path / "bad.json"), "--key",
                  log_pub)
    assert bad.code == 1 and "consistency proof step" in bad.err


def test_deleted_event_detected_against_old_checkpoint(home: Path, tmp_path: Path,
                                                       raw: RawStore) -> None:
    _populate(home)
    kept = _kept_checkpoint(home, tmp_path)
    rows = raw.rows()
    raw.delete(rows[6][0])
    r = _h(home, "verify", "--checkpoint", str(kept), "--json")
    assert r.code == 1
    assert json.loads(r.out)["failure"]["position"] == rows[7][0]
    assert "removed, inserted or moved" in r.err


def test_truncated_log_detected_against_old_checkpoint(home: Path, tmp_path: Path,
                                                       raw: RawStore) -> None:
    _populate(home)
    kept = _kept_checkpoint(home, tmp_path)
    rows = raw.rows()
    for row in rows[-3:]:
        raw.delete(row[0])
    with raw._conn() as conn:  # the attacker also removes the recorded checkpoints
        conn.execute(f"DELETE FROM {raw.table.replace('ledger_events', 'tlog_checkpoints')}"
                     if raw.pg else "DELETE FROM tlog_checkpoints")
    assert _h(home, "verify").code == 0  # without a kept checkpoint, truncation is invisible
    r = _h(home, "verify", "--checkpoint", str(kept), "--json")
    assert r.code == 1
    failure = json.loads(r.out)["failure"]
    assert failure["step"] == "8.2" and failure["position"] == len(rows) - 2
    assert f"events {len(rows) - 2}..{len(rows)} were removed" in r.err


def test_reordered_events_detected_against_old_checkpoint(home: Path, tmp_path: Path,
                                                          raw: RawStore) -> None:
    _populate(home)
    kept = _kept_checkpoint(home, tmp_path)
    rows = raw.rows()
    raw.swap(rows[5][0], rows[6][0])
    r = _h(home, "verify", "--checkpoint", str(kept), "--json")
    assert r.code == 1 and json.loads(r.out)["failure"]["position"] == rows[5][0]


def _resign(home: Path, state: bytes, change: dict[str, object]) -> bytes:
    """An insider with the writer key re-signs an event with a changed payload."""
    app = LedgerApp(Config.load(home))
    try:
        writer = app.signer("writer")
    finally:
        app.close()
    env = envelope.open_state(state).envelope
    env["payload"] = {**env["payload"], **change}
    return envelope.seal(env, writer)


def test_replaced_event_detected_against_old_checkpoint(home: Path, tmp_path: Path,
                                                        raw: RawStore) -> None:
    ids = _populate(home)
    app = LedgerApp(Config.load(home))
    app.rehearse_atom(ids[0], session_id="sess:real")
    app.close()
    kept = _kept_checkpoint(home, tmp_path)
    rows = raw.rows()
    target = rows[-1]
    raw.set_state(target[0], _resign(home, target[4], {"session_id": "sess:forged"}))
    assert _h(home, "verify").code == 1  # the recorded checkpoint already catches it
    r = _h(home, "verify", "--checkpoint", str(kept), "--json")
    assert r.code == 1
    failure = json.loads(r.out)["failure"]
    assert failure["step"] == "8.3"
    seq = len(rows)
    assert f"first bad position {seq}" in r.err


def test_forked_log_detected(home: Path, tmp_path: Path, backend: str) -> None:
    """Two checkpoints of the same size with different roots: a split view."""
    _populate(home, 2)
    fork = tmp_path / "fork"
    shutil.copytree(home, fork)
    if backend == "postgres":
        # A copied home shares the PostgreSQL schema, so the fork is made in place: an insider
        # re-signs an event, rebuilds the tree and signs a checkpoint of the same size.
        kept = _kept_checkpoint(home, tmp_path)
        raw = RawStore(home)
        rows = raw.rows()
        raw.set_state(rows[-1][0], _resign(home, rows[-1][4], {"kind": "goal"}))
        with raw._conn() as conn:
            conn.execute(f"DELETE FROM {raw.table.replace('ledger_events', 'tlog_tiles')}")
            conn.execute(f"DELETE FROM {raw.table.replace('ledger_events', 'tlog_checkpoints')}")
        forked_cp = _kept_checkpoint(home, tmp_path, "forked.checkpoint")
    else:
        _populate(home, 2)
        _populate(fork, 2, ref="u1")
        kept = _kept_checkpoint(home, tmp_path)
        forked_cp = _kept_checkpoint(fork, tmp_path, "forked.checkpoint")
    a, b = kept.read_text().split("\n"), forked_cp.read_text().split("\n")
    assert a[1] == b[1] and a[2] != b[2]  # same size, different roots
    r = _h(fork if backend == "sqlite" else home, "verify", "--checkpoint", str(kept), "--json")
    assert r.code == 1
    assert json.loads(r.out)["failure"]["step"] == "8.3"
    assert "rewritten or forked" in r.err


def test_proofs_still_verify_after_crypto_shredding(home: Path, tmp_path: Path) -> None:
    ids = _populate(home)
    old = _kept_checkpoint(home, tmp_path, "old.checkpoint")
    _populate(home, 2)
    _kept_checkpoint(home, tmp_path, "new.checkpoint")
    inc = _h(home, "prove", f"{ids[2]}/1", "--json")
    con = _h(home, "prove", "--consistency", str(old), "--json")
    app = LedgerApp(Config.load(home))
    try:
        app.destroy_data_key(app.reader.resolve("atom", ids[2]), "erasure")
    finally:
        app.close()
    log_pub = str(home / "keys" / "log.pub")
    for name, doc in (("inc.json", inc.out), ("con.json", con.out)):
        (tmp_path / name).write_text(doc)
    assert run_cli("audit-tools", "verify-inclusion", str(tmp_path / "inc.json"),
                   "--key", log_pub).code == 0
    assert run_cli("audit-tools", "verify-consistency", str(tmp_path / "con.json"),
                   "--key", log_pub).code == 0
    again = _h(home, "prove", f"{ids[2]}/1", "--json")
    assert json.loads(again.out)["leaf_hash"] == json.loads(inc.out)["leaf_hash"]
    assert _h(home, "checkpoint").code == 0
    assert _h(home, "verify", "--checkpoint", str(old)).code == 0


def test_verify_since_checks_only_new_events(home: Path, tmp_path: Path, raw: RawStore) -> None:
    _populate(home)
    kept = _kept_checkpoint(home, tmp_path)
    _populate(home, 5)
    r = _h(home, "verify", "--since", str(kept), "--json")
    assert r.code == 0, r.err
    report = json.loads(r.out)
    assert report["events"] == 5 and report["since"] == 9 and report["size"] == 14
    rows = raw.rows()
    tampered = bytearray(rows[-2][4])
    tampered[40] ^= 1
    raw.set_state(rows[-2][0], bytes(tampered))
    bad = _h(home, "verify", "--since", str(kept), "--json")
    assert bad.code == 1 and json.loads(bad.out)["failure"]["position"] == rows[-2][0]


def test_checkpoint_refused_without_an_authorized_log_key(home: Path) -> None:
    app = LedgerApp(Config.load(home))
    try:
        app.revoke_key(app.signer("log").kid, reason="retired")
    finally:
        app.close()
    r = _h(home, "checkpoint")
    assert r.code == 2 and "may not sign checkpoints" in r.err
    assert Signer  # key material never leaves the home in these tests


def test_verify_names_each_checkpoint_once_in_words(home: Path, tmp_path: Path) -> None:
    """`ledger verify --checkpoint`: each distinct checkpoint once, by its name and size
    (it said "extends checkpoint(s) of size 10, 10" for a kept file equal to the latest)."""
    import re

    _populate(home, 3)
    kept = _kept_checkpoint(home, tmp_path)  # the latest recorded checkpoint, too
    size = int(kept.read_text().splitlines()[1])

    def head(n: int) -> str:
        return rf"; head seq {n} at \d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{{6}}Z\n"

    def said(*args: str) -> str:
        r = _h(home, "verify", *args)
        assert r.code == 0, r.err
        return str(r.err)

    assert re.fullmatch(re.escape(
        f"OK: {size} events verified; the log extends {kept} (size {size}, the same as the "
        "latest recorded checkpoint)") + head(size), said("--checkpoint", str(kept)))
    _populate(home, 2)
    assert _h(home, "checkpoint").code == 0
    assert re.fullmatch(re.escape(
        f"OK: {size + 2} events verified; the log extends {kept} (size {size}) and the latest "
        f"recorded checkpoint (size {size + 2})") + head(size + 2),
        said("--checkpoint", str(kept)))
    assert re.fullmatch(re.escape(
        f"OK: {size + 2} events verified; the log extends the latest recorded checkpoint "
        f"(size {size + 2})") + head(size + 2), said())
