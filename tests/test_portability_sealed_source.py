"""Imports put no personal data where erasure does not reach (issue 20 item 6): what an
importer carries from the source (mem0's ``user_id``, ``metadata`` and unknown keys,
Konshus ``x-`` fields, ``.mem`` foreign fields) is sealed under the atom's data key, and
no ref is a plain hash of a memory (pasted text). SQLite and PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from portable_memory.adapters import TransferTextAdapter

from portability.adapters import EPOCH

from .conftest import RawStore, files_under, run_cli
from .test_portability_support import KONSHUS_EXAMPLE, dumps, logs_on_stderr, open_app  # noqa: F401

EMAIL = "Quinn.Harlow+mem0@Example.org"
META = "clinic-night-shift-7c41"
UNKNOWN = "vendor-secret-ranking-93ad"
MEM0 = [{"id": "m-1", "memory": "Takes the late train home", "user_id": EMAIL,
         "created_at": "2026-02-01T10:00:00Z", "metadata": {"workplace": META},
         "vendor_rank": UNKNOWN},
        {"id": "m-2", "memory": "Allergic to peanuts", "user_id": EMAIL,
         "created_at": "2026-02-02T10:00:00Z"}]


def _forms(marker: str) -> set[bytes]:
    return {marker.encode(), marker.lower().encode(), marker.encode("utf-16-le"),
            marker.encode("utf-16-be"), marker.lower().encode("utf-16-le"),
            json.dumps(marker).encode()[1:-1], json.dumps(marker.lower()).encode()[1:-1],
            json.dumps(marker, ensure_ascii=True).encode()[1:-1]}


def _found(home: Path, markers: list[str]) -> list[str]:
    """Where any form of a marker is: files of the home, and every event's stored state
    read from the event store itself (on PostgreSQL the files hold no event)."""
    hits = []
    for p in files_under(home):
        data = p.read_bytes()
        for m in markers:
            if any(f in data for f in _forms(m)):
                hits.append(f"{m!r} in {p.relative_to(home)}")
    for pos, _oid, _version, topic, state in RawStore(home).rows():
        for m in markers:
            if any(f in state for f in _forms(m)):
                hits.append(f"{m!r} in event {pos} ({topic})")
    return hits


def _import(home: Path, fmt: str, path: Path, subject: str = "quinn") -> dict[str, Any]:
    r = run_cli("--home", str(home), "import", str(path), "--format", fmt, "--subject",
                subject, "--json")
    assert r.code == 0, r.err
    out: dict[str, Any] = json.loads(r.out)
    return out


def _redact_user(home: Path, subject: str) -> None:
    r = run_cli("--home", str(home), "redact-user", subject, "--reason", "GDPR Art. 17",
                "--operator", "operator", "--json")
    assert r.code == 0, r.err


def test_item6_mem0_user_id_metadata_and_unknown_keys_gone_after_redact_user(
        home: Path, tmp_path: Path) -> None:
    src = tmp_path / "mem0.json"
    src.write_text(json.dumps(MEM0))
    _import(home, "mem0", src)
    app = open_app(home)
    try:
        atom = app.reader.get_atom("quinn:m-1")
        # nothing the source carried is in the plaintext extensions
        assert EMAIL not in json.dumps(atom.extensions) and META not in json.dumps(
            atom.extensions)
        assert EMAIL in json.dumps(atom.source_data)  # sealed with the atom instead
    finally:
        app.close()
    _redact_user(home, "quinn")
    assert _found(home, [EMAIL, META, UNKNOWN, "Takes the late train home"]) == []
    # and it still exports what is left: tombstones, no source data
    out = tmp_path / "after.mem"
    r = run_cli("--home", str(home), "export", "--format", "mem", "--subject", "quinn",
                "--out", str(out))
    assert r.code == 0, r.err
    assert not any(EMAIL.encode() in p.read_bytes() for p in files_under(out))


def test_item6_konshus_x_fields_are_sealed_and_erased_with_the_subject(
        home: Path, tmp_path: Path) -> None:
    doc = json.loads(json.dumps(KONSHUS_EXAMPLE))
    doc["atoms"][0]["x-crm-contact"] = {"email": EMAIL, "note": META}
    src = tmp_path / "k.json"
    src.write_bytes(dumps(doc))
    rep = _import(home, "konshus", src, subject=doc["subject"]["subject_id"])
    assert rep["created"]["atoms"] >= 1
    # exported again unchanged while the atom lives
    out = tmp_path / "k-out.json"
    r = run_cli("--home", str(home), "export", "--format", "konshus", "--subject",
                doc["subject"]["subject_id"], "--out", str(out))
    assert r.code == 0, r.err
    back = json.loads(out.read_text())
    assert back["atoms"][0]["x-crm-contact"] == {"email": EMAIL, "note": META}
    _redact_user(home, doc["subject"]["subject_id"])
    assert _found(home, [EMAIL, META]) == []


def test_item6_pasted_text_ref_is_not_a_plain_hash_of_the_memory(
        home: Path, tmp_path: Path) -> None:
    text = "Keeps a spare key under the blue flowerpot"
    src = tmp_path / "paste.txt"
    src.write_text(f"[2026-01-15] - {text}\n")
    first = _import(home, "text", src)
    assert first["created"]["atoms"] == 1
    # the package's id: tx_ + SHA-256(date + text); it must not be recomputable from
    # anything signed in the clear
    package_id = TransferTextAdapter.parse_episodes(src.read_text(), source="pasted",
                                                    now=EPOCH)[0].id
    assert package_id.startswith("tx_")
    assert _found(home, [package_id, package_id[3:]]) == []
    again = _import(home, "text", src)  # pasted twice: merged, not duplicated
    assert again["created"]["atoms"] == 0 and again["skipped"]["atoms"] == 1
    # the package's id is kept (sealed) and exported again
    out = tmp_path / "p.mem"
    r = run_cli("--home", str(home), "export", "--format", "mem", "--subject", "quinn",
                "--out", str(out))
    assert r.code == 0, r.err
    ids = [json.loads(x)["id"] for x in (out / "items" / "episode.jsonl").read_text()
           .splitlines()]
    assert package_id in ids
