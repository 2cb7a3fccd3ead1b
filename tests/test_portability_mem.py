"""``.mem`` bundles: interop with portable-memory's reference SDK both ways, tombstones
(no resurrection, trusted keys only), and hostile bundles refused with the ledger home
byte-for-byte unchanged. Every storage test runs on SQLite and PostgreSQL."""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from portable_memory import (
    BundleExporter,
    BundleImporter,
    BundleValidator,
    DerivedRefs,
    InMemoryStore,
    PortableEntity,
    PortableEpisode,
    PortableVerifyingKey,
    Tombstone,
    TombstoneOp,
    canonical_json,
)
from portable_memory.adapters import Mem0Adapter
from portable_memory.signing import PortableSigningKey, sign_tombstone

from keys.keyring import read_public_key_file

from .conftest import RawStore, run_cli, snapshot
from .test_portability_support import (
    KONSHUS_EXAMPLE,
    canon,
    dumps,
    export_doc,
    logs_on_stderr,  # noqa: F401  (autouse fixture)
    open_app,
    writer_pub,
)

S = "user_9f4e..."


def _seeded(home: Path, tmp_path: Path) -> Path:
    """The Konshus seed, plus a private artifact and a provider field, in the ledger."""
    doc = copy.deepcopy(KONSHUS_EXAMPLE)
    doc["artifacts"].append({"artifact_id": "art_144", "kind": "journal", "private": True,
                             "body": "private journal", "captured_at": "2025-11-05T08:00:00Z"})
    doc["atoms"][1]["x-konshus-vault"] = {"slot": 7}
    doc["atoms"][1]["sensitivity"] = "medical"
    src = tmp_path / "seed.json"
    src.write_bytes(dumps(doc))
    r = run_cli("--home", str(home), "import", str(src), "--format", "konshus")
    assert r.code == 0, r.err
    return src


def _export(home: Path, out: Path, *extra: str) -> Path:
    r = run_cli("--home", str(home), "export", "--format", "mem", "--out", str(out), *extra)
    assert r.code == 0, r.err
    return out


def _import(home: Path, bundle: Path, *extra: str) -> Any:
    return run_cli("--home", str(home), "import", str(bundle), "--format", "mem", "--json",
                   *extra)


def reseal(root: Path, add: list[str] = ()) -> None:  # type: ignore[assignment]
    """What an attacker can always do to an unsigned bundle: recompute the manifest's
    file list, counts, CHECKSUMS and bundleDigest after changing files."""
    m = json.loads((root / "manifest.json").read_bytes())
    paths = sorted({f["path"] for f in m["files"]} | set(add)
                   | {p.relative_to(root).as_posix() for p in root.glob("*/*.jsonl")})
    files, counts = [], {}
    for rel in paths:
        data = (root / rel).read_bytes()
        files.append({"path": rel, "sha256": hashlib.sha256(data).hexdigest(),
                      "bytes": len(data)})
        if rel.endswith(".jsonl") and ".." not in rel:
            kind = Path(rel).stem
            counts["tombstone" if kind == "tombstones" else kind] = sum(
                1 for line in data.split(b"\n") if line.strip())
    checksums = ("\n".join(f"{f['sha256']}  {f['path']}" for f in files) + "\n").encode()
    (root / "CHECKSUMS").write_bytes(checksums)
    m.update(files=files, counts=counts, bundleDigest=hashlib.sha256(checksums).hexdigest())
    (root / "manifest.json").write_text(canonical_json(m))
    (root / "manifest.sig").unlink(missing_ok=True)


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


# --- interop with portable-memory --------------------------------------------------------


def test_our_bundle_passes_portable_memory_and_survives_its_reference_store(
        home: Path, tmp_path: Path) -> None:
    _seeded(home, tmp_path)
    app = open_app(home)
    try:
        app.destroy_data_key(app.reader.get_atom(f"{S}:atom_002").id, "erasure")
        before = export_doc(app, "konshus", S)
    finally:
        app.close()
    bundle = _export(home, tmp_path / "ours.mem", "--sign", "--include-private")
    key = PortableVerifyingKey(read_public_key_file(writer_pub(home)))
    result = BundleValidator().validate(bundle, trusted_keys=[key])
    assert result.ok, result.issues
    store = InMemoryStore()
    report = BundleImporter().import_bundle(store, bundle, trusted_keys=[key])
    assert report.tombstones_applied == 1 and report.applied["episode"] == 3
    assert sorted(store.episodes) == ["art_101", "art_144", "atom_001"]
    assert store.tombstoned_ids == {"atom_002"}
    # through portable-memory's own store and exporter, then back into the ledger
    second = tmp_path / "via-reference-store.mem"
    BundleExporter().export(store, second)
    r = _import(home, second, "--subject", "copy-1", "--trust", str(writer_pub(home)))
    assert r.code == 0, r.err
    rep = json.loads(r.out)
    assert rep["manifest_signature"] == "unsigned"  # the reference store's export
    assert rep["created"] == {"subjects": 1, "artifacts": 2, "atoms": 2}  # + a placeholder
    assert rep["tombstones"]["placeholders"] == 1
    app = open_app(home)
    try:
        after = export_doc(app, "konshus", "copy-1")
        assert app.reader.get_atom("copy-1:atom_002").content_erased  # the tombstone is remembered
    finally:
        app.close()
    after["subject"]["subject_id"] = S
    assert json.loads(canon(after)) == json.loads(canon(before))  # nothing lost


def _foreign_bundle(tmp_path: Path) -> Path:
    """A bundle written by portable-memory itself: mem0 memories, a foreign field, a
    vendor x- field, a tombstone that targets one episode and lists another as derived."""
    store = InMemoryStore(generator="someone-else/1.0")
    mem0 = [{"id": "m-1", "memory": "Likes green tea", "user_id": "alice",
             "created_at": "2026-02-01T10:00:00Z", "categories": ["food"], "score": 0.9},
            {"id": "m-2", "memory": "Lives in Lisbon", "created_at": "2026-02-02T10:00:00Z"},
            {"id": "m-3", "memory": "Was in hospital in May",
             "created_at": "2026-02-03T10:00:00Z"},
            {"id": "m-4", "memory": "Derived from m-3", "created_at": "2026-02-03T11:00:00Z"}]
    for e in Mem0Adapter.parse_episodes(json.dumps(mem0)):
        ext = {"vendorScore": 0.9, "x-vendor": {"rank": 1}} if e.id == "m-1" else None
        store.import_episode(e, canonical_json(ext) if ext else None)
    store.import_episode(PortableEpisode(
        id="m-5", event_time=datetime(2026, 1, 1, tzinfo=UTC),
        mention_time=datetime(2026, 1, 2, tzinfo=UTC),
        ingestion_time=datetime(2026, 1, 3, tzinfo=UTC), source_type="note", actors=["a"],
        summary="Prefers mornings", details="Prefers mornings for calls, says so often",
        sensitivity="high", metadata={"k": "v"}, categories=[], importance=0.2,
        confidence=0.6, lifecycle_state="WARM", extraction_state="pending", access_count=4,
        pinned=True, vault_refs=["v1"], source_id="src-5", context_id="run-9",
        last_accessed=datetime(2026, 1, 9, tzinfo=UTC),
        expiration_date=datetime(2027, 1, 1, tzinfo=UTC), speaker="user"), None)
    store.apply_tombstone(Tombstone(
        id="t-1", op=TombstoneOp.REDACT, target_kind="episode", target_id="m-3",
        deleted_at=datetime(2026, 3, 1, tzinfo=UTC), actor="vendor",
        derived=DerivedRefs(fact_ids=["m-4"])))
    store.import_episode(Mem0Adapter.parse_episodes(json.dumps([mem0[2]]))[0], None)  # stale
    store.import_episode(Mem0Adapter.parse_episodes(json.dumps([mem0[3]]))[0], None)
    out = tmp_path / "foreign.mem"
    BundleExporter().export(store, out)
    return out


def test_bundle_written_by_portable_memory_imports_with_nothing_lost(
        home: Path, tmp_path: Path) -> None:
    foreign = _foreign_bundle(tmp_path)
    r = _import(home, foreign, "--subject", "alice", "--apply-untrusted-tombstones")
    assert r.code == 0, r.err
    rep = json.loads(r.out)
    assert rep["created"]["atoms"] == 4  # m-1, m-2, m-5 and the shredded placeholder of m-3
    assert {x["id"] for x in rep["refusals"]} == {"m-3", "m-4"}  # target and derived id
    assert rep["tombstones"]["unsigned"] == 1
    app = open_app(home)
    try:
        atom = app.reader.get_atom("alice:m-5")
        assert (atom.derivation, atom.extractor, atom.sensitivity) == ("inferred", "unknown",
                                                                      "private")
        assert app.reader.get_atom("alice:m-3").content_erased
    finally:
        app.close()
    ours = _export(home, tmp_path / "ours.mem")
    theirs = {e["id"]: e for e in _lines(foreign / "items" / "episode.jsonl")}
    mine = {e["id"]: e for e in _lines(ours / "items" / "episode.jsonl")}
    for eid, original in theirs.items():
        if eid in ("m-3", "m-4"):
            assert eid not in mine
            continue
        assert {k: mine[eid].get(k) for k in original} == original, eid  # every field kept
    assert _lines(ours / "audit" / "tombstones.jsonl") == \
        _lines(foreign / "audit" / "tombstones.jsonl")  # the tombstone propagates verbatim
    # and our bundle is stable from here on
    again = _import(home, ours, "--subject", "alice-2", "--apply-untrusted-tombstones")
    assert again.code == 0, again.err
    app = open_app(home)
    try:
        third = export_doc(app, "mem", "alice-2", tmp_path / "third.mem")
    finally:
        app.close()
    assert third["atoms"] == 3
    a = _lines(ours / "items" / "episode.jsonl")
    b = _lines(tmp_path / "third.mem" / "items" / "episode.jsonl")
    for x in a + b:
        x["actors"] = ["-"] if x["sourceType"] == "document" else x["actors"]
    assert a == b


def test_entities_are_kept_not_refused(home: Path, tmp_path: Path) -> None:
    """Issue 19 item 2: a kind the ledger has no model for is kept (ADR 0017)."""
    store = InMemoryStore()
    store.import_entity(PortableEntity(id="e1", entity_type="person", canonical_name="R. Kim",
                                       aliases=[], summary="", sensitivity="low",
                                       updated_at=datetime(2026, 1, 1, tzinfo=UTC)))
    store.import_episode(Mem0Adapter.parse_episodes(
        json.dumps([{"id": "m-1", "memory": "Likes tea"}]))[0], None)
    BundleExporter().export(store, tmp_path / "g.mem")
    r = _import(home, tmp_path / "g.mem", "--subject", "u1")
    assert r.code == 0, r.err
    rep = json.loads(r.out)
    assert rep["refused"] == {"artifacts": 0, "atoms": 0, "other": 0}
    assert rep["records"]["by_kind"] == {"entity": 1}


# --- tombstones: no resurrection, trusted keys only ----------------------------------------


def test_stale_bundle_does_not_resurrect_an_erased_atom(home: Path, tmp_path: Path) -> None:
    _seeded(home, tmp_path)
    stale = _export(home, tmp_path / "before-erasure.mem")
    app = open_app(home)
    try:
        atom_id = app.reader.get_atom(f"{S}:atom_002").id
        app.destroy_data_key(atom_id, "erasure")
    finally:
        app.close()
    after = _export(home, tmp_path / "after-erasure.mem")
    # the stale rows with the tombstone after them, in one bundle
    both = tmp_path / "stale-with-tombstone.mem"
    shutil.copytree(stale, both)
    shutil.copy(after / "audit" / "tombstones.jsonl", both / "audit" / "tombstones.jsonl")
    reseal(both)
    trust = ("--trust", str(writer_pub(home)))
    r = _import(home, both, "--subject", "fresh", *trust)
    assert r.code == 0, r.err
    rep = json.loads(r.out)
    assert {"kind": "atom", "id": "atom_002", "reason": "covered by a tombstone"} in \
        rep["refusals"]
    # and later the stale bundle alone, without its tombstone: still not resurrected
    for subject in ("fresh", S):
        r = _import(home, stale, "--subject", subject, *trust)
        assert r.code == 0, r.err
        assert json.loads(r.out)["created"]["atoms"] == 0
    app = open_app(home)
    try:
        for subject in ("fresh", S):
            a = app.reader.get_atom(f"{subject}:atom_002")
            assert a.content_erased and a.text is None
    finally:
        app.close()


def test_tombstone_from_an_untrusted_key_is_not_applied_silently(home: Path,
                                                                  tmp_path: Path) -> None:
    _seeded(home, tmp_path)
    bundle = _export(home, tmp_path / "b.mem")
    attacker = PortableSigningKey()
    forged = sign_tombstone(Tombstone(
        id="tomb:atom:atom_001", op=TombstoneOp.REDACT, target_kind="episode",
        target_id="atom_001", deleted_at=datetime(2026, 5, 1, tzinfo=UTC), actor="attacker"),
        attacker)
    (bundle / "audit" / "tombstones.jsonl").write_text(canonical_json(
        {k: v for k, v in json.loads(_tomb_line(forged)).items()}) + "\n")
    reseal(bundle, ["audit/tombstones.jsonl"])
    r = _import(home, bundle, "--trust", str(writer_pub(home)))
    assert r.code == 0, r.err
    rep = json.loads(r.out)
    assert rep["manifest_signature"] == "unsigned"  # resealed by the attacker
    assert rep["tombstones"]["not_applied_untrusted"] == ["tomb:atom:atom_001"]
    assert rep["tombstones"]["untrusted"] == 1
    assert "untrusted tombstones not applied" in r.err
    app = open_app(home)
    try:
        assert not app.reader.get_atom(f"{S}:atom_001").content_erased
    finally:
        app.close()


def _tomb_line(t: Tombstone) -> str:
    from portable_memory import to_line

    return to_line(t)


def test_altered_tombstone_signed_by_a_trusted_key_fails_verification(
        home: Path, tmp_path: Path) -> None:
    _seeded(home, tmp_path)
    app = open_app(home)
    try:
        app.destroy_data_key(app.reader.get_atom(f"{S}:atom_002").id, "erasure")
    finally:
        app.close()
    bundle = _export(home, tmp_path / "b.mem")
    path = bundle / "audit" / "tombstones.jsonl"
    t = json.loads(path.read_text())
    t["targetID"] = "atom_001"  # retarget a genuine signature at another atom
    path.write_text(canonical_json(t) + "\n")
    reseal(bundle)
    before = snapshot(home)
    r = _import(home, bundle, "--trust", str(writer_pub(home)))
    assert r.code == 1
    assert "names trusted key" in r.err and "does not verify" in r.err
    assert snapshot(home) == before


# --- hostile input: clear error, exit 2, nothing changed ------------------------------------


def _edit_episode_line(bundle: Path, n: int, change: Any) -> None:
    path = bundle / "items" / "episode.jsonl"
    lines = path.read_text().splitlines()
    lines[n] = change(lines[n])
    path.write_text("\n".join(lines) + "\n")
    reseal(bundle)


def _path_traversal(bundle: Path, tmp_path: Path) -> None:
    (tmp_path / "outside.jsonl").write_text('{"id": "x"}\n')
    reseal(bundle, ["../outside.jsonl"])


def _symlink(bundle: Path, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.jsonl"
    shutil.copy(bundle / "items" / "episode.jsonl", target)
    (bundle / "items" / "episode.jsonl").unlink()
    (bundle / "items" / "episode.jsonl").symlink_to(target)


def _checksum(bundle: Path, tmp_path: Path) -> None:
    path = bundle / "items" / "episode.jsonl"
    data = bytearray(path.read_bytes())
    data[data.index(b"Q4 board")] = ord("X")  # same size, different bytes
    path.write_bytes(bytes(data))


def _huge_field(bundle: Path, tmp_path: Path) -> None:
    def grow(line: str) -> str:
        d = json.loads(line)
        d["details"] = "x" * (50 * 1024 * 1024)
        return json.dumps(d)

    _edit_episode_line(bundle, 0, grow)


def _bad_time(bundle: Path, tmp_path: Path) -> None:
    path = bundle / "items" / "episode.jsonl"
    text = path.read_text()
    assert '"eventTime":"2025-11-04T00:00:00Z"' in text
    path.write_text(text.replace('"eventTime":"2025-11-04T00:00:00Z"',
                                 '"eventTime":"2025-13-04T00:00:00Z"'))
    reseal(bundle)


def _bad_json(bundle: Path, tmp_path: Path) -> None:
    _edit_episode_line(bundle, 1, lambda s: s[:-30])


def _unlisted(bundle: Path, tmp_path: Path) -> None:
    (bundle / "items" / "injected.jsonl").write_text('{"id": "x"}\n')


@pytest.mark.parametrize(("attack", "message"), [
    (_path_traversal, "'../outside.jsonl' is not a safe relative path (step 4: path traversal)"),
    (_symlink, "items/episode.jsonl goes through a symlink (step 4: path traversal)"),
    (_checksum, "checksum mismatch for items/episode.jsonl"),
    (_huge_field, "items/episode.jsonl line 1 is 52429"),
    (_bad_time, "eventTime: '2025-13-04T00:00:00Z' is not an RFC 3339 date-time"),
    (_bad_json, "items/episode.jsonl line 2 (step 8) is not valid JSON"),
    (_unlisted, "unlisted file items/injected.jsonl in the bundle (step 7"),
], ids=["path-traversal", "symlink", "checksum-mismatch", "50MB-field", "invalid-timestamp",
        "malformed-json", "smuggled-file"])
def test_hostile_bundle_is_refused_and_changes_nothing(
        home: Path, tmp_path: Path, attack: Any, message: str) -> None:
    _seeded(home, tmp_path)
    bundle = _export(home, tmp_path / "b.mem", "--include-private")
    attack(bundle, tmp_path)
    raw = RawStore(home)
    before, rows = snapshot(home), len(raw.rows())
    r = _import(home, bundle, "--subject", "victim")
    assert r.code == 2, r.err
    assert message in r.err
    assert r.out == ""
    assert snapshot(home) == before and len(raw.rows()) == rows


@pytest.mark.parametrize(("content", "message"), [
    (b"x", "is 52428800 bytes, over the 33554432 byte limit; it was not read"),
    (b'{"export_version": "0.1.0", "atoms": [', "is not valid JSON: Expecting value at line 1"),
    (b'{"a": 1, "a": 2}', "is not valid JSON: duplicate key 'a'"),
])
def test_hostile_document_is_refused_and_changes_nothing(
        home: Path, tmp_path: Path, content: bytes, message: str) -> None:
    src = tmp_path / "doc.json"
    if content == b"x":  # a 50 MB text field: refused by its size, before parsing
        with src.open("wb") as f:
            f.write(b'{"atoms": [{"text": "')
            f.write(b"x" * (50 * 1024 * 1024 - 25))
            f.write(b'"}]}')
        assert src.stat().st_size == 50 * 1024 * 1024
    else:
        src.write_bytes(content)
    before = snapshot(home)
    for fmt in ("konshus", "persona"):
        r = run_cli("--home", str(home), "import", str(src), "--format", fmt)
        assert r.code == 2
        assert message in r.err
    assert snapshot(home) == before


def test_signed_bundle_reports_its_manifest_signature(home: Path, tmp_path: Path) -> None:
    _seeded(home, tmp_path)
    bundle = _export(home, tmp_path / "b.mem", "--sign")
    trusted = _import(home, bundle, "--subject", "s2", "--trust", str(writer_pub(home)),
                      "--dry-run")
    assert json.loads(trusted.out)["manifest_signature"] == "trusted"
    unknown = _import(home, bundle, "--subject", "s2", "--dry-run")
    assert json.loads(unknown.out)["manifest_signature"] == "untrusted"
    assert "its origin is not" in unknown.err
