"""Issue 19: erasure never reaches past its subject; dry runs check what real runs check.

Identifiers only flag memories of others (word boundaries, NFKC, case-folded); a real
run given the dry run's plan digest refuses when the ledger changed; the Evidence Pack
counts the flags; `ledger review resolve` settles them.

The acts go through the facade as the ``ledger`` command's caller, or through the
command; the identifier matching is tested as the pure unit it is.
"""

from __future__ import annotations

import base64
import json
import uuid
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from governance.identifiers import (
    BROAD_MATCHES,
    MIN_IDENTIFIER_CHARS,
    compile_identifiers,
    first_matches,
)
from governance.pack_verify import verify_pack
from ledger.domain import ERASED
from ledger.errors import ConflictError, EnvironmentProblem, InputError, NotFound
from service.caller import local_operator
from service.facade import MemoryService
from service.models import ArtifactIn, AtomIn, SubjectIn
from service.root import opened_service

from .conftest import RawStore, run_cli, snapshot
from .facade_seed import seed
from .test_governance import (
    AS_WRITER,
    OP,
    _atom,
    _data_keys,
    _forget,
    _in_files,
    _marker,
    _pack,
    _root_key,
)


def _rows_of(raw: RawStore, atom_id: str) -> list[tuple[int, str, int, str, bytes]]:
    want = uuid.UUID(atom_id)
    return [r for r in raw.rows() if uuid.UUID(r[1]) == want]


def _miller_ledger(svc: MemoryService) -> dict[str, str]:
    """user_9f4e is J. Miller; user_7a1c had lunch with him."""
    svc.register_subject(OP, SubjectIn(ref="user_9f4e", display_name="J. Miller"))
    svc.register_subject(OP, SubjectIn(ref="user_7a1c"))
    own, own2, lunch, unrelated = svc.add_atoms(OP, [
        AtomIn(subject="user_9f4e", text="J. Miller prefers green tea"),
        AtomIn(subject="user_9f4e", text="Works in procurement"),
        AtomIn(subject="user_7a1c", text="Had lunch with J. Miller from Acme"),
        AtomIn(subject="user_7a1c", text="Millerton is a town")]).atom_ids
    return {"own": own, "own2": own2, "lunch": lunch, "unrelated": unrelated}


# ----------------------------------------------------------------------------- item 1
def test_identifier_match_in_other_subject_is_flagged_not_erased(
        svc: MemoryService, home: Path, raw: RawStore) -> None:
    ids = _miller_ledger(svc)
    dry = _forget(svc, "user_9f4e", identifiers=["J. Miller"], dry_run=True)
    other_sid = svc.get_subject(OP, "user_7a1c").subject_id
    sid = dry["subject_id"]
    # In the dry run: a flag, not a target.
    assert sorted(dry["targets"]["atoms"]) == sorted([ids["own"], ids["own2"]])
    assert ids["lunch"] not in dry["targets"]["atoms"]
    assert dry["flag_for_review"] == [ids["lunch"]]
    assert dry["flags"] == [{"atom_id": ids["lunch"], "subject_id": other_sid,
                             "why": "identifier",
                             "reason": "identifier #1 of the erasure request matched its "
                                       "text"}]
    assert dry["identifiers"] == [{
        "identifier": 1, "of_subject": 1, "of_others": 1,
        "matched": {sid: {"atoms": 1, "artifacts": 0}, other_sid: {"atoms": 1, "artifacts": 0}}}]
    before_rows = _rows_of(raw, ids["lunch"])
    with capture_logs() as logs:
        res = _forget(svc, "user_9f4e", identifiers=["J. Miller"],
                      expect_plan=dry["plan_digest"])
    assert res["status"] == "completed" and res["flag_for_review"] == [ids["lunch"]]
    # The other subject's memory survives, readable, flagged; its stored events unchanged.
    lunch = _atom(svc, ids["lunch"])
    assert lunch["status"] == "active" and lunch["text"] == "Had lunch with J. Miller from Acme"
    assert lunch["flags"] == ["refers-to-erased"]
    assert _rows_of(raw, ids["lunch"])[:len(before_rows)] == before_rows
    assert _atom(svc, ids["unrelated"])["flags"] == []
    listed = {r.atom_id: r for r in svc.list_memories(OP, "user_7a1c")}
    assert listed[ids["lunch"]].text == "Had lunch with J. Miller from Acme"
    assert not listed[ids["lunch"]].content_erased
    # The subject's own memories are gone; the flag's reason and the logs name no content.
    own = _atom(svc, ids["own"])
    assert own["content_erased"] and own["text"] == ERASED
    assert _in_files(home, "prefers green tea") == []
    flags = json.loads(run_cli("--home", str(home), "review", "list", "--json").out)
    assert [f["atom_id"] for f in flags] == [ids["lunch"]]
    assert "Miller" not in flags[0]["reason"] and "identifier #1" in flags[0]["reason"]
    assert "Miller" not in repr(logs)


def test_identifier_ann_does_not_touch_annual_planning(svc: MemoryService,
                                                       raw: RawStore) -> None:
    svc.register_subject(OP, SubjectIn(ref="user_ann", display_name="Ann"))
    svc.register_subject(OP, SubjectIn(ref="user_bob"))
    own, annual, lunch = svc.add_atoms(OP, [
        AtomIn(subject="user_ann", text="Ann likes sailing"),
        AtomIn(subject="user_bob", text="Annual planning meeting is in March"),
        AtomIn(subject="user_bob", text="Lunch with ANN on Friday.")]).atom_ids
    before = _rows_of(raw, annual)
    dry = _forget(svc, "user_ann", identifiers=["Ann"], dry_run=True)
    assert dry["targets"]["atoms"] == [own]
    assert dry["flag_for_review"] == [lunch]  # a whole word, any case; "Annual" is not
    res = _forget(svc, "user_ann", identifiers=["Ann"])
    assert annual not in res["targets"]["atoms"] and annual not in res["flag_for_review"]
    kept = _atom(svc, annual)
    assert kept["text"] == "Annual planning meeting is in March" and kept["flags"] == []
    assert _rows_of(raw, annual) == before  # not one event added to it
    assert _atom(svc, lunch)["flags"] == ["refers-to-erased"]


def test_subject_own_memories_matching_identifier_are_erased_as_before(
        svc: MemoryService, home: Path) -> None:
    marker = _marker()
    svc.register_subject(OP, SubjectIn(ref="u1"))
    svc.capture_artifact(OP, ArtifactIn(subject="u1", ref="a1", kind="chat",
                                        body=f"Jane Roe wrote {marker}"))
    mine = svc.add_atoms(OP, [AtomIn(subject="u1", text=f"Jane Roe fact {i} {marker}")
                              for i in range(3)]).atom_ids
    res = _forget(svc, "u1", identifiers=["jane roe"])
    assert sorted(res["targets"]["atoms"]) == sorted(mine) and len(res["targets"]["artifacts"]) == 1
    assert res["flag_for_review"] == [] and res["identifiers"][0]["of_subject"] == 4
    assert all(_atom(svc, a)["status"] == "hard-redacted" for a in mine)
    assert _in_files(home, marker) == []


def test_identifier_match_in_other_subjects_artifact_is_listed_not_erased(
        svc: MemoryService) -> None:
    svc.register_subject(OP, SubjectIn(ref="u1"))
    svc.register_subject(OP, SubjectIn(ref="u2"))
    svc.add_atom(OP, AtomIn(subject="u1", text="something of u1", on_similar=None))
    body = "Call with Jane Roe about the offer"
    art = svc.capture_artifact(OP, ArtifactIn(subject="u2", ref="chat-u2", kind="chat",
                                              body=body)).artifact_id
    res = _forget(svc, "u1", identifiers=["Jane Roe"])
    assert res["targets"]["artifacts"] == [] and res["review_artifacts"] == [art]
    assert res["reach"]["flags"] == {"count": 0, "artifacts_for_review": [art]}
    kept = svc.get_artifact(OP, "chat-u2")
    assert kept.body == body and not kept.content_erased
    # The read models still hold it, by id and by its words: nothing of it was purged.
    store = {r["route"]: r for r in svc.probe_reach(OP, art, body).routes}["atom-store"]
    assert {h["by"] for h in store["hits"]} >= {"id", "content"}, store


def test_session_of_another_subject_is_refused_and_others_in_own_session_flagged(
        svc: MemoryService, raw: RawStore) -> None:
    svc.register_subject(OP, SubjectIn(ref="u1"))
    svc.register_subject(OP, SubjectIn(ref="u2"))
    _, theirs, _ = svc.add_atoms(OP, [
        AtomIn(subject="u1", text="u1 in s1", session_id="s1"),
        AtomIn(subject="u2", text="u2 in s1", session_id="s1"),
        AtomIn(subject="u2", text="u2 in s2", session_id="s2")]).atom_ids
    rows = raw.rows()
    with pytest.raises(InputError, match="session 's2' holds no memory of subject"):
        _forget(svc, "u1", reason="x", sessions=["s2"])
    assert raw.rows() == rows
    plan = _forget(svc, "u1", reason="x", sessions=["s1"], dry_run=True)
    assert theirs not in plan["targets"]["atoms"]
    assert [(f["atom_id"], f["why"]) for f in plan["flags"]] == [(theirs, "session")]


def test_identifier_matching_is_normalised_and_on_word_boundaries() -> None:
    (miller,) = compile_identifiers(["J.  Miller"])

    def hit(text: str) -> bool:
        return bool(first_matches([miller], [("text", text)]))

    assert hit("Had lunch with J. Miller from Acme")
    assert hit("had lunch with j. miller.")
    assert hit("\uff2a. \uff2d\uff49\uff4c\uff4c\uff45\uff52 called")  # full-width (NFKC)
    assert hit("J.\nMiller")  # any whitespace between words
    assert not hit("J. Millerton is a town") and not hit("AJ. Miller")
    (strasse,) = compile_identifiers(["Straße"])
    assert first_matches([strasse], [("text", "lives on STRASSE 5")])  # case-folded
    (email,) = compile_identifiers(["jane@example.org"])
    assert first_matches([email], [("gist", "mail Jane@Example.org today")])[0].field == "gist"
    assert not first_matches([email], [("text", "xjane@example.org")])
    for short in ("Al", " . ", "--"):
        with pytest.raises(InputError, match="too short to identify anyone"):
            compile_identifiers(["Jane Miller", short])
    assert MIN_IDENTIFIER_CHARS == 3


def test_identifier_matching_many_memories_of_others_warns(svc: MemoryService) -> None:
    svc.register_subject(OP, SubjectIn(ref="u1"))
    svc.register_subject(OP, SubjectIn(ref="u2"))
    svc.add_atoms(OP, [AtomIn(subject="u1", text="mine"),
                       *(AtomIn(subject="u2", text=f"met Sam at event {i}")
                         for i in range(BROAD_MATCHES + 1))])
    dry = _forget(svc, "u1", reason="x", identifiers=["Sam"], dry_run=True)
    assert len(dry["flag_for_review"]) == BROAD_MATCHES + 1
    assert len(dry["warnings"]) == 1 and "identifier #1 matches 21" in dry["warnings"][0]
    assert "Sam" not in dry["warnings"][0]


def test_real_run_whose_plan_changed_since_the_dry_run_is_refused(
        svc: MemoryService, raw: RawStore) -> None:
    svc.register_subject(OP, SubjectIn(ref="u1"))
    svc.register_subject(OP, SubjectIn(ref="u2"))
    svc.add_atom(OP, AtomIn(subject="u1", text="mine", on_similar=None))
    dry = _forget(svc, "u1", reason="x", identifiers=["Jane Roe"], dry_run=True)
    again = _forget(svc, "u1", reason="x", identifiers=["Jane Roe"], dry_run=True)
    assert dry["plan_digest"] == again["plan_digest"]  # nothing changed: the same plan
    svc.add_atom(OP, AtomIn(subject="u2", text="Jane Roe called",
                            on_similar=None))  # the ledger changes
    rows = raw.rows()
    with pytest.raises(ConflictError, match="the ledger changed since the dry run"):
        _forget(svc, "u1", reason="x", identifiers=["Jane Roe"],
                expect_plan=dry["plan_digest"])
    assert raw.rows() == rows
    new = _forget(svc, "u1", reason="x", identifiers=["Jane Roe"], dry_run=True)
    res = _forget(svc, "u1", reason="x", identifiers=["Jane Roe"],
                  expect_plan=new["plan_digest"])
    assert res["status"] == "completed" and len(res["flag_for_review"]) == 1


def test_redact_user_cli_dry_run_lists_flags_and_real_run_checks_the_plan(home: Path) -> None:
    h = ["--home", str(home)]
    run_cli(*h, "subject", "add", "user_9f4e")
    run_cli(*h, "subject", "add", "user_7a1c")
    run_cli(*h, "atom", "add", "--subject", "user_9f4e", "--text", "Likes tea")
    run_cli(*h, "atom", "add", "--subject", "user_7a1c", "--text",
            "Had lunch with J. Miller from Acme")
    dry = run_cli(*h, "redact-user", "user_9f4e", "--reason", "GDPR Art. 17", "--operator",
                  "operator", "--identifier", "J. Miller", "--dry-run")
    assert dry.code == 0, dry.err
    assert "flag for review, not erased (memories of others): 1" in dry.out
    assert "identifier #1 matched:" in dry.out and "Miller" not in dry.out
    digest = dry.out.strip().splitlines()[-1].split()[-1]
    assert digest.startswith("sha256:") and digest in dry.err
    wrong = run_cli(*h, "redact-user", "user_9f4e", "--reason", "GDPR Art. 17", "--operator",
                    "operator", "--identifier", "J. Miller", "--plan", "sha256:" + "0" * 64)
    assert wrong.code == 2 and "the ledger changed since the dry run" in wrong.err
    real = run_cli(*h, "redact-user", "user_9f4e", "--reason", "GDPR Art. 17", "--operator",
                   "operator", "--identifier", "J. Miller", "--plan", digest)
    assert real.code == 0, real.err
    assert "1 memory of others flagged for review" in real.err
    assert "refers-to-erased" in real.out


def test_pack_counts_flags(svc: MemoryService, home: Path, tmp_path: Path) -> None:
    ids = _miller_ledger(svc)
    res = _forget(svc, "user_9f4e", identifiers=["J. Miller"])
    pack = _pack(svc, res["batch_id"], tmp_path / "pack")
    report = verify_pack(pack, _root_key(home))
    assert report.ok and report.flagged_for_review == 1 and report.artifacts_for_review == 0
    predicate = json.loads(base64.b64decode(
        json.loads((pack / "statement.dsse.json").read_text())["payload"]))["predicate"]
    assert predicate["reach"]["flagged_for_review"] == [ids["lunch"]]
    assert predicate["reach"]["flags"] == {"count": 1, "artifacts_for_review": []}
    html = (pack / "report.html").read_text()
    assert "1 memory of other subjects flagged" in html and ids["lunch"] in html
    assert "Miller" not in html
    r = run_cli("verify-pack", str(pack), "--json")
    assert r.code == 0 and json.loads(r.out)["flagged_for_review"] == 1


def test_review_resolve_settles_identifier_flags(home: Path) -> None:
    with opened_service(home, lazy=True) as svc:
        ids = _miller_ledger(svc)
        extra = svc.add_atom(OP, AtomIn(subject="user_7a1c", text="J. Miller owes me a book",
                                        on_similar=None)).atom_id
        _forget(svc, "user_9f4e", identifiers=["J. Miller"])
    h = ["--home", str(home)]
    r = run_cli(*h, "review", "resolve", ids["lunch"], "--action", "reanonymise",
                "--text", "Had lunch with a contact from Acme", "--json")
    assert r.code == 0, r.err
    new_id = json.loads(r.out)["new_atom_id"]
    r = run_cli(*h, "review", "resolve", extra, "--action", "redact", "--json")
    assert r.code == 0, r.err
    assert json.loads(run_cli(*h, "review", "list", "--json").out) == []
    with opened_service(home, lazy=True) as svc:
        assert _atom(svc, ids["lunch"])["status"] == "superseded"
        assert _atom(svc, new_id)["text"] == "Had lunch with a contact from Acme"
        erased = _atom(svc, extra)
        assert erased["status"] == "hard-redacted" and erased["content_erased"]
        assert erased["text"] == ERASED
    assert _in_files(home, "owes me a book") == []


@pytest.mark.parametrize("action", ["redact", "reanonymise", "dismiss"])
def test_review_resolve_of_a_memory_with_no_open_flag_writes_nothing(
        home: Path, action: str) -> None:
    """Resolving is for flagged memories: one with no open flag is refused before anything
    is signed (a redact of it erased it, a re-anonymise corrected it, and only then did the
    flag's resolution fail)."""
    from .serving import home_digest

    (kept,) = seed(home, subjects=["u1"], atoms=[{"subject": "u1",
                                                  "text": "Keeps bees on the roof"}])
    before = home_digest(home)
    extra = ["--text", "Keeps insects"] if action == "reanonymise" else []
    r = run_cli("--home", str(home), "review", "resolve", kept, "--action", action, *extra)
    assert r.code == 2 and "has no open 'refers-to-erased' flag" in r.err
    assert home_digest(home) == before
    with opened_service(home, lazy=True) as svc:
        still = _atom(svc, kept)
        assert still["status"] == "active" and still["text"] == "Keeps bees on the roof"


# ----------------------------------------------------------------------------- item 5
def test_dry_run_by_a_non_operator_is_refused_like_the_real_run(
        home: Path, raw: RawStore) -> None:
    with opened_service(home, lazy=True) as svc:
        svc.register_subject(OP, SubjectIn(ref="u1"))
        svc.add_atom(OP, AtomIn(subject="u1", text="keep me", on_similar=None))
        svc.catch_up_read_models(OP)
        rows, keys = raw.rows(), _data_keys(svc)
        with pytest.raises(InputError, match="not an authorized operator"):
            _forget(svc, "u1", AS_WRITER, reason="x", dry_run=True)
        with pytest.raises(EnvironmentProblem):
            _forget(svc, "u1", local_operator("mallory"), reason="x", dry_run=True)
        with pytest.raises(NotFound, match="no subject 'nobody'"):
            _forget(svc, "nobody", reason="x", dry_run=True)
        with pytest.raises(InputError, match="a reason is required"):
            _forget(svc, "u1", reason=" ", dry_run=True)
        with pytest.raises(InputError, match="not an authorized operator"):
            svc.sweep(AS_WRITER, dry_run=True)
        assert raw.rows() == rows and _data_keys(svc) == keys
    h = ["--home", str(home)]
    assert run_cli(*h, "redact-user", "u1", "--reason", "x", "--operator", "operator",
                   "--dry-run").code == 0
    before = snapshot(home)  # as the CLI leaves the home
    r = run_cli(*h, "redact-user", "u1", "--reason", "x", "--operator", "mallory", "--dry-run")
    assert r.code == 3 and "mallory" in r.err
    r = run_cli(*h, "redact-user", "u1", "--reason", "x", "--operator", "writer", "--dry-run")
    assert r.code == 2 and "not an authorized operator" in r.err
    assert snapshot(home) == before


# ----------------------------------------------------------------------------- item 9
def test_state_valid_at_without_as_of_means_as_of_now(home: Path) -> None:
    h = ["--home", str(home)]
    run_cli(*h, "subject", "add", "u1")
    r = run_cli(*h, "atom", "add", "--subject", "u1", "--text", "Works at Acme",
                "--valid-from", "2025-01-01T00:00:00Z", "--json")
    assert r.code == 0, r.err
    r = run_cli(*h, "state", "--valid-at", "2025-06-01", "--subject", "u1", "--json")
    assert r.code == 0, r.err
    data = json.loads(r.out)
    assert [a["text"] for a in data["valid"]] == ["Works at Acme"]
    assert data["valid_at"].startswith("2025-06-01") and data["as_of"] > "2026"
    r = run_cli(*h, "state", "--valid-at", "2024-06-01", "--subject", "u1", "--json")
    assert json.loads(r.out)["valid"] == []


def test_redact_user_on_a_terminal_asks_and_a_refusal_writes_nothing(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    import typer

    h = ["--home", str(home)]
    run_cli(*h, "subject", "add", "u1")
    run_cli(*h, "atom", "add", "--subject", "u1", "--text", "Likes tea")
    assert run_cli(*h, "redact-user", "u1", "--reason", "x", "--operator", "operator",
                   "--dry-run").code == 0
    before = snapshot(home)
    terminal = io.StringIO()
    terminal.isatty = lambda: True  # type: ignore[method-assign]
    monkeypatch.setattr("sys.stdin", terminal)
    asked: list[str] = []

    def refuse(text: str, **_: object) -> bool:
        asked.append(text)
        return False

    monkeypatch.setattr(typer, "confirm", refuse)
    r = run_cli(*h, "redact-user", "u1", "--reason", "x", "--operator", "operator")
    assert r.code == 2 and "not confirmed; nothing was written" in r.err
    assert asked and "erase (subject" in r.err and "plan sha256:" in r.err

    def ledger_files(snap: dict[str, bytes]) -> dict[str, bytes]:
        # The preview's catch-up takes the projections' SQLite lock (a counter row in
        # proj_lock); every other file, the event store and keystore included, is unchanged.
        return {k: v for k, v in snap.items() if not k.startswith("projections.sqlite")}

    assert ledger_files(snapshot(home)) == ledger_files(before)
    monkeypatch.setattr(typer, "confirm", lambda text, **_: True)
    r = run_cli(*h, "redact-user", "u1", "--reason", "x", "--operator", "operator")
    assert r.code == 0 and r.err.splitlines()[-1].startswith("OK: erased 1 atom,")
