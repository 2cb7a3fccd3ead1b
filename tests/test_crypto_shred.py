"""Crypto-shredding: after the data key is destroyed, the content is unrecoverable
from every file the ledger owns, the log still verifies, and reads say 'erased'."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from ledger.application import LedgerApp
from ledger.home import Config

from .conftest import RawStore, files_under, pg_connect, run_cli


def _bytes_in_files(folder: Path, needle: bytes) -> list[str]:
    return [str(p) for p in files_under(folder) if needle in p.read_bytes()]


def test_destroyed_key_leaves_no_marker_and_log_verifies(home: Path) -> None:
    marker = f"MARKER-{uuid.uuid4().hex}"
    app = LedgerApp(Config.load(home))
    try:
        app.register_subject({"ref": "u1"})
        atom_id = app.add_atom({"subject": "u1", "text": f"Has a rare condition {marker}",
                                "gist": f"gist {marker}", "tags": [marker],
                                "details": [{"content": marker, "brightness": 0.9}],
                                "sensitivity": "medical"})
        assert app.reader.get_atom(atom_id).text.endswith(marker)  # readable before
        key = app.datakeys.get(str(atom_id))
        event_id = app.destroy_data_key(atom_id, reason="right to be forgotten")
        assert event_id == f"{atom_id}/2"
        assert app.destroy_data_key(atom_id, reason="again") is None  # idempotent
    finally:
        app.close()

    # 1. No file under the home holds the marker or the destroyed key (event store,
    #    its WAL, keystore and its WAL, keys, config).
    assert _bytes_in_files(home, marker.encode()) == []
    assert _bytes_in_files(home, key) == []
    raw = RawStore(home)
    assert all(marker.encode() not in r[4] for r in raw.rows())
    if raw.pg:
        with pg_connect() as conn:
            hits = conn.execute(f"SELECT count(*) FROM {raw.table} WHERE position(%s in state) > 0",
                                (marker.encode(),)).fetchone()
        assert hits == (0,)

    # 2. The whole log still verifies, including the erased atom's signed events.
    v = run_cli("--home", str(home), "verify", "--json")
    assert v.code == 0, v.err
    assert json.loads(v.out)["ok"] is True

    # 3. Reads report the content as erased.
    shown = run_cli("--home", str(home), "atom", "show", str(atom_id), "--json")
    assert shown.code == 0, shown.err
    data = json.loads(shown.out)
    assert data["content_erased"] is True and data["text"] == "[erased]"
    assert data["sensitivity"] == "medical"  # non-personal fields survive
    assert "erased" in shown.err
    history = run_cli("--home", str(home), "atom", "history", str(atom_id), "--json")
    topics = [r["topic"] for r in json.loads(history.out)]
    assert topics[-1] == "memory-ledger:atom.data-key-destroyed.v1"


def test_other_atoms_survive_a_shred(app: LedgerApp) -> None:
    app.register_subject({"ref": "u1"})
    a = app.add_atom({"subject": "u1", "text": "shred me"})
    b = app.add_atom({"subject": "u1", "text": "keep me"})
    app.destroy_data_key(a, "test")
    assert app.reader.get_atom(b).text == "keep me"
    assert app.reader.get_atom(a).content_erased and app.reader.get_atom(a).text is None


def test_subject_and_artifact_can_be_shredded(app: LedgerApp) -> None:
    sid = app.register_subject({"ref": "u1", "display_name": "Ann Example"})
    aid = app.capture_artifact({"subject": "u1", "kind": "email", "body": "secret body"})
    app.destroy_data_key(sid, "erasure")
    app.destroy_data_key(aid, "erasure")
    assert app.reader.get_subject("u1").display_name is None
    artifact = app.reader.get_artifact(str(aid))
    assert artifact.body is None and artifact.content_erased
