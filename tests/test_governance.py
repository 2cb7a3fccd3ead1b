"""Erasure that reaches every copy, the right-to-be-forgotten flow, and Evidence Packs.

The acts go through the facade as the ``ledger`` command's caller (``ledger ...`` itself
where its words are checked); what an erasure leaves behind is read from the files, the
raw event store, the keystore's count and every route's probe. The offline pack verifier
(what an auditor runs, with public keys only) and the batched probe are the units they
test, and are called as such."""

from __future__ import annotations

import base64
import json
import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from governance.dsse import sign_envelope
from governance.erasure import ErasureIncomplete
from governance.pack_layout import PackInvalid
from governance.pack_verify import verify_pack
from keys.keyring import read_private_key_file, read_public_key_file
from keys.signing import key_id
from ledger.domain import ERASED
from ledger.errors import InputError, NotFound
from service.caller import Caller, local_operator
from service.facade import MemoryService
from service.models import ArtifactIn, AtomIn, Detail, RecallIn, SubjectIn

from .conftest import RawStore, files_under, run_cli

OP = local_operator()
"""The ``ledger`` command's caller, signing with the home's operator key."""
AS_WRITER = local_operator("writer")
"""The command's ``--operator writer``: signing operator acts with a key that is no operator."""


def _marker() -> str:
    return f"zq{uuid.uuid4().hex[:12]}"


def _in_files(home: Path, needle: str) -> list[str]:
    data = needle.encode()
    return [str(p) for p in files_under(home) if data in p.read_bytes()]


def _forget(svc: MemoryService, subject: str, caller: Caller = OP, *,
            reason: str = "GDPR Art. 17", **options: Any) -> dict[str, Any]:
    """`ledger redact-user SUBJECT --reason ...`: the report its ``--json`` prints (a dry
    run's plan, or the request finished or found completed)."""
    return svc.redact_user(caller, subject, reason=reason, **options).report


def _atom(svc: MemoryService, atom: str) -> dict[str, Any]:
    """`ledger atom show ATOM --json`: erased content reads ``ERASED``."""
    return svc.get_atom(OP, atom).model_dump()


def _data_keys(svc: MemoryService) -> int:
    """How many data keys the keystore holds (read for 'nothing changed')."""
    return svc.app.datakeys.count()


def _recalled(svc: MemoryService, query: str, k: int = 5) -> list[str]:
    """`ledger recall QUERY --subject u1 --no-rehearse`: the recalled atoms' ids."""
    got = svc.recall(OP, RecallIn(query=query, subject="u1", k=k, rehearse=False))
    return [item.atom_id for item in got.items]


def _pack(svc: MemoryService, batch_id: str, out: Path, make_zip: bool = False) -> Path:
    """`ledger evidence-pack BATCH --out OUT [--zip]`: the pack's folder."""
    return Path(svc.write_pack(OP, batch_id, out, make_zip=make_zip).pack)


def _root_key(home: Path) -> bytes:
    """The ledger's root public key as an auditor is given it (keys/root.pub)."""
    return read_public_key_file(home / "keys" / "root.pub")


def test_hard_erased_atom_is_reachable_by_no_route(svc: MemoryService, home: Path) -> None:
    marker = _marker()
    svc.register_subject(OP, SubjectIn(ref="u1"))
    text = f"Allergic to penicillin {marker}"
    atom, _ = svc.add_atoms(OP, [
        AtomIn(subject="u1", text=text, gist=f"allergy {marker}",
               details=[Detail(content=f"rash {marker}", brightness=0.9)],
               sensitivity="medical"),
        AtomIn(subject="u1", text="Likes green tea")]).atom_ids
    assert atom in _recalled(svc, marker)  # warms the recall path and caches
    result = svc.redact(OP, atom, "hard", "test").report
    assert all(r["reach"] == "not-reachable" for r in result["reach"]["routes"])
    assert result["reach"]["raw_scan"]["hits"] == []
    # Every read path: recall (keyword + vector), memory list, every route, as-of views.
    assert atom not in _recalled(svc, marker)
    assert atom not in _recalled(svc, text)
    listed = {r.atom_id: r for r in svc.list_memories(OP, "u1")}
    assert listed[atom].text == ERASED and listed[atom].content_erased
    for probe in (svc.probe_reach(OP, atom, text), svc.probe_reach(OP, atom, marker)):
        assert probe.reachable == [], probe
    assert marker not in json.dumps(svc.state(OP, "u1"))
    assert _in_files(home, marker) == []
    hist = run_cli("--home", str(home), "atom", "history", atom, "--json")
    assert "memory-ledger:atom.redacted.v1" in hist.out and marker not in hist.out
    assert run_cli("--home", str(home), "verify").code == 0


def test_redact_user_reaches_every_atom_and_spares_others(svc: MemoryService,
                                                          home: Path) -> None:
    m1, m2 = _marker(), _marker()
    svc.register_subject(OP, SubjectIn(ref="u1", display_name=f"Ann {m1}"))
    svc.register_subject(OP, SubjectIn(ref="u2"))
    svc.capture_artifact(OP, ArtifactIn(subject="u1", ref="a1", kind="chat", body=f"chat {m1}"))
    *_, session_atom = svc.add_atoms(OP, [
        *(AtomIn(subject="u1", text=f"fact {i} {m1}", session_id="s-u1") for i in range(250)),
        *(AtomIn(subject="u2", text=f"other {i} {m2}") for i in range(3)),
        AtomIn(subject="u2", text="met someone in the session", session_id="s-u1")]).atom_ids
    rows = RawStore(home).rows()
    dry = _forget(svc, "u1", sessions=["s-u1"], dry_run=True)
    # Only u1's own atoms: u2's memory in u1's session is flagged, never a target (issue 19).
    assert len(dry["targets"]["atoms"]) == 250
    assert dry["gathered_by"] == {"subject": 250}
    assert dry["flag_for_review"] == [session_atom] and dry["flagged_by"] == {"session": 1}
    assert dry["sessions"] == [{"session_id": "s-u1", "atoms_of_subject": 250,
                                "flagged_atoms_of_others": 1}]
    assert RawStore(home).rows() == rows  # a dry run changes nothing
    res = _forget(svc, "u1", sessions=["s-u1"])
    assert res["status"] == "completed" and len(res["targets"]["atoms"]) == 250
    assert _in_files(home, m1) == []
    others = [r for r in svc.list_memories(OP, "u2") if not r.content_erased]
    assert len(others) == 4 and sum(m2 in str(r.text) for r in others) == 3
    assert _atom(svc, session_atom)["flags"] == ["refers-to-erased"]
    # Re-running a completed request is a no-op that says so.
    again = _forget(svc, "u1")
    assert again["status"] == "already-completed" and again["request_id"] == res["request_id"]


def test_unauthorized_operator_refused_with_nothing_changed(svc: MemoryService,
                                                            home: Path) -> None:
    svc.register_subject(OP, SubjectIn(ref="u1"))
    svc.add_atom(OP, AtomIn(subject="u1", text="keep me", on_similar=None))
    svc.catch_up_read_models(OP)
    rows, keys = RawStore(home).rows(), _data_keys(svc)
    with pytest.raises(InputError, match="not an authorized operator"):
        _forget(svc, "u1", AS_WRITER, reason="x")
    assert RawStore(home).rows() == rows and _data_keys(svc) == keys
    with pytest.raises(NotFound, match="nobody"):
        _forget(svc, "nobody", reason="x")


def test_artifact_delete_cascade(svc: MemoryService, home: Path) -> None:
    marker = _marker()
    svc.register_subject(OP, SubjectIn(ref="u1"))
    svc.capture_artifact(OP, ArtifactIn(subject="u1", ref="a1", kind="chat", body=f"b {marker}"))
    a2 = svc.capture_artifact(OP, ArtifactIn(subject="u1", ref="a2", kind="chat",
                                             body="other")).artifact_id
    single, shared = svc.add_atoms(OP, [
        AtomIn(subject="u1", text="only from a1", derivation="observed", artifact_ids=["a1"]),
        AtomIn(subject="u1", text="from both", derivation="inferred", extractor="m",
               artifact_ids=["a1", "a2"])]).atom_ids
    res = svc.erase_artifact(OP, "a1", "user deleted the chat").report
    assert res["cascade"]["deleted_atoms"] == [single]
    assert res["cascade"]["kept_atoms"] == [shared]
    deleted = _atom(svc, single)
    assert deleted["status"] == "deleted" and deleted["content_erased"]
    assert deleted["text"] == ERASED
    kept = _atom(svc, shared)
    assert kept["text"] == "from both" and kept["artifact_ids"] == [a2]
    assert _in_files(home, marker) == []


def _erased_batch(svc: MemoryService, marker: str) -> dict[str, Any]:
    svc.register_subject(OP, SubjectIn(ref="u1"))
    svc.add_atoms(OP, [AtomIn(subject="u1", text=f"fact {i} {marker}") for i in range(3)])
    return _forget(svc, "u1")


def test_evidence_pack_verifies_offline_and_with_a_standard_dsse_verifier(
        svc: MemoryService, tmp_path: Path, home: Path) -> None:
    marker = _marker()
    res = _erased_batch(svc, marker)
    pack = _pack(svc, res["batch_id"], tmp_path / "pack", make_zip=True)
    report = verify_pack(pack, _root_key(home))
    assert report.ok and report.targets["atoms"] == 3
    assert verify_pack(pack.with_suffix(".zip"), _root_key(home)).ok
    assert not any(marker.encode() in p.read_bytes() for p in files_under(pack))
    r = run_cli("verify-pack", str(pack), "--root-key", str(home / "keys" / "root.pub"))
    assert r.code == 0 and r.err.startswith("OK: pack verified")

    from securesystemslib.dsse import Envelope
    from securesystemslib.signer import SSlibKey  # type: ignore[attr-defined]  # no __all__

    op = read_public_key_file(home / "keys" / "operator.pub")
    key = SSlibKey(key_id(op), "ed25519", "ed25519", {"public": op.hex()})
    env = Envelope.from_dict(json.loads((pack / "statement.dsse.json").read_text()))
    assert key_id(op) in env.verify([key], 1)


def _flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at % len(data)] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(("victim", "step"), [
    ("events.jsonl", "2"), ("checkpoints/after.checkpoint", "2"), ("consistency.json", "2"),
    ("report.html", "2"), ("keys/root.pub", "2"), ("statement.dsse.json", "1"),
])
def test_any_changed_byte_fails_at_a_named_step(svc: MemoryService, home: Path,
                                                tmp_path: Path, victim: str, step: str) -> None:
    res = _erased_batch(svc, _marker())
    pack = _pack(svc, res["batch_id"], tmp_path / "pack")
    _flip(pack / victim, 57)
    with pytest.raises(PackInvalid) as err:
        verify_pack(pack, _root_key(home))
    assert err.value.step in (step, "4")


def test_dropped_file_and_foreign_proof_fail(svc: MemoryService, home: Path,
                                             tmp_path: Path) -> None:
    res = _erased_batch(svc, _marker())
    pack = _pack(svc, res["batch_id"], tmp_path / "pack")
    dropped = tmp_path / "dropped"
    shutil.copytree(pack, dropped)
    (dropped / "consistency.json").unlink()
    with pytest.raises(PackInvalid, match="step 2: files missing"):
        verify_pack(dropped, _root_key(home))
    # A second batch; swap its consistency proof into the first pack, re-signing nothing.
    svc.register_subject(OP, SubjectIn(ref="u2"))
    svc.add_atom(OP, AtomIn(subject="u2", text="x", on_similar=None))
    res2 = _forget(svc, "u2")
    other = _pack(svc, res2["batch_id"], tmp_path / "other")
    shutil.copy(other / "consistency.json", pack / "consistency.json")
    with pytest.raises(PackInvalid, match="step 2"):
        verify_pack(pack, _root_key(home))
    assert run_cli("verify-pack", str(pack)).code == 1


def test_pack_signed_by_a_non_operator_fails(svc: MemoryService, home: Path,
                                             tmp_path: Path) -> None:
    res = _erased_batch(svc, _marker())
    # The facade signs no pack with a key that is no operator (or auditor), writing nothing...
    with pytest.raises(InputError, match=r"^writer \(.+\) holds neither the operator nor "):
        svc.write_pack(AS_WRITER, res["batch_id"], tmp_path / "refused")
    assert not (tmp_path / "refused").exists()
    # ... and a pack whose statement such a key signed (by hand, with keys/writer.key) fails.
    pack = _pack(svc, res["batch_id"], tmp_path / "p")
    statement = pack / "statement.dsse.json"
    payload = base64.b64decode(json.loads(statement.read_text())["payload"])
    writer = read_private_key_file(home / "keys" / "writer.key", "writer")
    statement.write_text(json.dumps(sign_envelope(payload, writer), indent=2) + "\n")
    with pytest.raises(PackInvalid, match="step 4"):
        verify_pack(pack, _root_key(home))  # the pack needs no home to verify: the root key


def test_recall_cache_is_a_route_that_erasure_purges(svc: MemoryService) -> None:
    marker = _marker()
    svc.register_subject(OP, SubjectIn(ref="u1"))
    atom = svc.add_atom(OP, AtomIn(subject="u1", text=f"Speaks Basque fluently {marker}",
                                   on_similar=None)).atom_id
    assert "recall-cache" in svc.erasure_routes(OP)
    assert atom in _recalled(svc, "Basque", 3)
    for _ in range(2):  # a second try when the clock crossed a minute, which the cache is
        with capture_logs() as logs:  # keyed by (seen once in CI)
            again = _recalled(svc, "Basque", 3)
        if any(e["event"] == "projections.recall_cached" for e in logs):
            break
    else:
        pytest.fail("the same recall again was not served from the cache")
    assert atom in again
    cached = {r["route"]: r for r in svc.probe_reach(OP, atom, marker).routes}["recall-cache"]
    assert cached["reach"] == "reachable"
    assert {h["by"] for h in cached["hits"]} == {"id", "content"}, cached
    result = svc.redact(OP, atom, "hard", "t").report
    assert "recall-cache" in [r["route"] for r in result["reach"]["routes"]]
    assert svc.probe_reach(OP, atom, marker).reachable == []
    assert atom not in _recalled(svc, "Basque", 3)


def test_erasure_keeps_and_flags_another_memory_with_the_same_words(
        svc: MemoryService, home: Path) -> None:
    """The same text kept by another subject's memory (ADR 0041): that memory's own
    words, not a residue of the erased one. The erasure completes (its own rows are gone
    on every route), keeps the other memory, flags it for review, counts the shared value
    without naming it; erasing the other memory too then leaves the words in no file.
    (Before ADR 0041 the erasure stopped here, keys destroyed, batch open for good.)"""
    marker = _marker()
    text = f"Lives at 12 Orchard Lane {marker}"
    svc.register_subject(OP, SubjectIn(ref="u1"))
    svc.register_subject(OP, SubjectIn(ref="u2"))
    mine, copy = svc.add_atoms(OP, [AtomIn(subject="u1", text=text),
                                    AtomIn(subject="u2", text=text)]).atom_ids
    done = svc.redact(OP, mine, "hard", "test").report
    assert all(r["reach"] == "not-reachable" for r in done["reach"]["routes"])
    assert done["reach"]["held_by_others"] == {"values": 1, "items": 1}
    assert done["reach"]["flagged_for_review"] == [copy]
    assert marker not in json.dumps(done["reach"])
    own = svc.probe_reach(OP, mine)
    assert own.reachable == [], own
    kept = _atom(svc, copy)
    assert kept["text"] == text and kept["flags"] == ["refers-to-erased"]
    svc.redact(OP, copy, "hard", "the copy too")
    assert _in_files(home, marker) == []
    assert run_cli("--home", str(home), "verify").code == 0


def test_batched_probes_see_live_items_by_id_and_by_content(svc: MemoryService) -> None:
    svc.register_subject(OP, SubjectIn(ref="u1"))
    text = f"Plays the cello on Sundays {_marker()}"
    atom = svc.add_atom(OP, AtomIn(subject="u1", text=text, tags=["music"],
                                   on_similar=None)).atom_id
    svc.catch_up_read_models(OP)
    registry = svc.proj.registry  # the unit: the batched probe every erasure runs
    found = {p.route: p for p in registry.probe_many({atom: [text]})}
    for route in ("atom-store", "keyword-index", "vector-index"):
        assert {h.by for h in found[route].hits} >= {"id"}, found[route]
    assert any(h.by == "content" for h in found["atom-store"].hits)
    assert any(h.by == "content" for h in found["keyword-index"].hits)
    other = str(uuid.uuid4())
    unrelated = {p.route: p for p in registry.probe_many({other: ["nothing like it"]})}
    assert all(p.reach.value == "not-reachable" for p in unrelated.values()), unrelated


def test_projections_probe_command_reports_reach_before_and_after_erasure(
        svc: MemoryService, home: Path, tmp_path: Path) -> None:
    marker = _marker()
    text = f"Keeps a spare key under the blue pot {marker}"
    svc.register_subject(OP, SubjectIn(ref="u1"))
    atom = svc.add_atom(OP, AtomIn(subject="u1", text=text, on_similar=None)).atom_id
    content = tmp_path / "content.txt"
    content.write_text(text)
    h = ("--home", str(home))
    before = run_cli(*h, "projections", "probe", atom, "--content-file", str(content),
                     "--json")
    assert before.code == 1 and "REACHABLE" in before.err
    data = json.loads(before.out)
    assert {"atom-store", "keyword-index", "vector-index"} <= set(data["reachable"])
    assert marker not in before.out + before.err  # ids and counts, never the content
    erased = run_cli(*h, "redact", atom, "--mode", "hard", "--reason", "test")
    assert erased.code == 0, erased.err
    after = run_cli(*h, "projections", "probe", atom, "--content-file", str(content))
    assert after.code == 0 and after.err.startswith("OK: no route reaches"), after.err
    missing = run_cli(*h, "projections", "probe", atom, "--content-file",
                      str(tmp_path / "nope.txt"))
    assert missing.code == 2 and "cannot read" in missing.err


def test_residue_only_in_the_projections_file_is_repaired_by_vacuum_and_rescanned(
        svc: MemoryService, backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """SQLite can leave an old copy of a cell in a page's free space; the raw scan sees it.
    Then (and only for the projections file) the file is rebuilt and scanned again."""
    import governance.erasure_reach as erasure

    real_scan = erasure.scan_files
    calls = {"scan": 0, "vacuum": 0}

    def residue_once(folder: Path, needles: Any, started: Any = None) -> dict[str, Any]:
        calls["scan"] += 1
        result = real_scan(folder, needles, started)
        if calls["scan"] == 1:  # as if a page kept an old copy of a purged row
            result["hits"] = [{"file": "projections.sqlite", "count": 1}]
        return result

    store = svc.proj.store
    real_vacuum = store.vacuum

    def counted_vacuum() -> None:
        calls["vacuum"] += 1
        real_vacuum()

    monkeypatch.setattr(erasure, "scan_files", residue_once)
    monkeypatch.setattr(store, "vacuum", counted_vacuum)
    svc.register_subject(OP, SubjectIn(ref="u1"))
    atom = svc.add_atom(OP, AtomIn(subject="u1", text=f"Sleeps badly in winter {_marker()}",
                                   on_similar=None)).atom_id
    if backend == "sqlite":
        done = svc.redact(OP, atom, "hard", "test").report
        assert calls == {"scan": 2, "vacuum": 1}
        repaired = done["reach"]["raw_scan"]["repaired"]
        assert repaired["action"] == "vacuum" and repaired["files"] == ["projections.sqlite"]
        assert done["reach"]["raw_scan"]["hits"] == []
    else:  # the projections live in PostgreSQL: a hit in a home file is not theirs
        with pytest.raises(ErasureIncomplete, match=r"projections\.sqlite"):
            svc.redact(OP, atom, "hard", "test")
        assert calls == {"scan": 1, "vacuum": 0}


def test_erased_bytes_in_the_event_store_are_a_failure_never_repaired(
        svc: MemoryService, monkeypatch: pytest.MonkeyPatch) -> None:
    import governance.erasure_reach as erasure

    real_scan = erasure.scan_files

    def leaked(folder: Path, needles: Any, started: Any = None) -> dict[str, Any]:
        result = real_scan(folder, needles, started)
        result["hits"] = [{"file": "events.sqlite", "count": 1},
                          {"file": "projections.sqlite", "count": 1}]
        return result

    vacuumed: list[bool] = []
    monkeypatch.setattr(erasure, "scan_files", leaked)
    monkeypatch.setattr(svc.proj.store, "vacuum", lambda: vacuumed.append(True))
    svc.register_subject(OP, SubjectIn(ref="u1"))
    atom = svc.add_atom(OP, AtomIn(subject="u1", text=f"Owes money to Sam {_marker()}",
                                   on_similar=None)).atom_id
    with pytest.raises(ErasureIncomplete, match=r"events\.sqlite"):
        svc.redact(OP, atom, "hard", "test")
    assert vacuumed == []
