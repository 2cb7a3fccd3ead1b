"""Erasing one of two memories that hold the same words (ADR 0041): the same fact
recorded twice, the same chat captured twice. The other memory's words are its own: they
stay, the erasure completes and says how many values others hold, and everything else of
the erased memory is still looked for. On SQLite and PostgreSQL.

Each test failed before ADR 0041: the probes found the other memory's copy and the
erasure stopped with its keys destroyed and its batch open."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rawfiles.bytescan import ByteMatcher
from tests.conftest import run_cli

SAME = "Prefers green tea over coffee in the mornings"


@pytest.fixture
def cli_home(home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LEDGER_HOME", str(home))
    return home


def ok(*args: str) -> str:
    r = run_cli(*args)
    assert r.code == 0, (args, r.code, r.err[-1500:])
    return r.out


def files_with(home: Path, text: str) -> list[str]:
    m = ByteMatcher(sorted({f.encode() for f in (text, text.lower(),
                                                 json.dumps(text)[1:-1])}))
    return [str(p.relative_to(home)) for p in sorted(home.rglob("*"))
            if p.is_file() and m.file_found(p)]


def test_atom_whose_text_another_memory_holds_is_erased_and_the_other_kept(
        cli_home: Path, tmp_path: Path) -> None:
    ok("subject", "add", "u1")
    ok("subject", "add", "u2")
    ok("atom", "add", "--subject", "u1", "--ref", "keep", "--text", SAME)
    ok("atom", "add", "--subject", "u2", "--ref", "theirs", "--text", SAME)
    own = "Gist only the erased memory has, about Harbour Road"
    ok("atom", "add", "--subject", "u1", "--ref", "gone", "--text", SAME, "--gist", own)
    r = run_cli("redact", "gone", "--mode", "hard", "--reason", "asked",
                "--operator", "operator", "--json")
    assert r.code == 0, r.err[-1500:]
    data = json.loads(r.out)
    # the exact text is held by two other memories (one of another subject); counted only
    assert data["reach"]["held_by_others"] == {"values": 1, "items": 2}
    keep, theirs = (json.loads(ok("atom", "show", r, "--json"))["atom_id"]
                    for r in ("keep", "theirs"))
    assert data["reach"]["flagged_for_review"] == sorted([keep, theirs])  # never erased
    assert SAME not in r.out
    assert all(route["reach"] == "not-reachable" for route in data["reach"]["routes"])
    # the erased memory's own content is still looked for, and gone
    assert files_with(cli_home, own) == []
    for ref in ("keep", "theirs"):
        assert json.loads(ok("atom", "show", ref, "--json"))["text"] == SAME
    assert run_cli("atom", "show", "gone", "--json").code != 0 or \
        json.loads(ok("atom", "show", "gone", "--json"))["content_erased"]
    assert run_cli("verify").code == 0
    pack = tmp_path / "pack"
    ok("evidence-pack", data["batch_id"], "--out", str(pack))
    assert run_cli("verify-pack", str(pack)).code == 0  # the schema knows the field


def test_both_copies_erased_together_are_both_looked_for(cli_home: Path) -> None:
    ok("subject", "add", "u1")
    ok("atom", "add", "--subject", "u1", "--ref", "a", "--text", SAME)
    ok("atom", "add", "--subject", "u1", "--ref", "b", "--text", SAME)
    r = run_cli("redact-user", "u1", "--reason", "GDPR Art. 17", "--operator", "operator",
                "--yes", "--json")
    assert r.code == 0, r.err[-1500:]
    assert "held_by_others" not in json.loads(r.out).get("reach", {})
    assert files_with(cli_home, SAME) == []


def test_artifact_captured_twice_one_copy_deleted(cli_home: Path, tmp_path: Path) -> None:
    ok("subject", "add", "u1")
    body = tmp_path / "chat.txt"
    body.write_text("Q4 board prep: she wants blunt notes, in writing, by Friday.")
    ok("artifact", "add", "--subject", "u1", "--kind", "chat", "--ref", "a1",
       "--body-file", str(body))
    ok("artifact", "add", "--subject", "u1", "--kind", "chat", "--ref", "a2",
       "--body-file", str(body))
    r = run_cli("artifact", "delete", "a2", "--reason", "captured twice", "--json")
    assert r.code == 0, r.err[-1500:]
    a1 = json.loads(ok("artifact", "show", "a1", "--json"))["artifact_id"]
    reach = json.loads(r.out)["reach"]
    assert reach["held_by_others"] == {"values": 1, "items": 1}
    assert reach["flags"]["artifacts_for_review"] == [a1]
    shown = json.loads(ok("artifact", "show", "a1", "--json"))
    assert shown["body"] == body.read_text()
    assert run_cli("verify").code == 0


def test_words_another_memory_holds_inside_a_longer_text_are_kept_and_flagged(
        cli_home: Path, tmp_path: Path) -> None:
    """Erased "Prefers green tea ...", kept "Prefers green tea ..., before nine": the
    other memory's longer text holds the words. The erasure completes, the other memory
    is flagged, and the erased memory's own other content is still looked for."""
    ok("subject", "add", "u1")
    longer = SAME + ", always before nine"
    ok("atom", "add", "--subject", "u1", "--ref", "longer", "--text", longer)
    own = "A detail only the erased memory holds: Quarry Lane"
    ok("atom", "add", "--subject", "u1", "--ref", "gone", "--text", SAME, "--detail",
       f"{own}=0.5")
    r = run_cli("delete", "gone", "--reason", "asked", "--json")
    assert r.code == 0, r.err[-1500:]
    reach = json.loads(r.out)["reach"]
    kept = json.loads(ok("atom", "show", "longer", "--json"))
    assert kept["text"] == longer
    assert reach["flagged_for_review"] == [kept["atom_id"]]
    assert reach["held_by_others"] == {"values": 1, "items": 1}
    assert files_with(cli_home, own) == []
    assert run_cli("verify").code == 0


def test_artifact_body_inside_another_artifact_is_kept_and_listed(
        cli_home: Path, tmp_path: Path) -> None:
    ok("subject", "add", "u1")
    short, long = tmp_path / "short.txt", tmp_path / "long.txt"
    short.write_text("Board prep: she wants blunt notes, in writing")
    long.write_text("Board prep: she wants blunt notes, in writing. Bring the Q4 deck.")
    a1 = json.loads(ok("artifact", "add", "--subject", "u1", "--kind", "chat", "--ref", "a1",
                       "--body-file", str(long), "--json"))["artifact_id"]
    ok("artifact", "add", "--subject", "u1", "--kind", "chat", "--ref", "a2",
       "--body-file", str(short))
    r = run_cli("artifact", "delete", "a2", "--reason", "a shorter copy", "--json")
    assert r.code == 0, r.err[-1500:]
    # listed where the erasure noticed the words (SQLite: its file scan finds them in the
    # projections file; PostgreSQL's rows are not in the home's files: nothing to explain)
    flags = json.loads(r.out)["reach"].get("flags")
    assert flags is None or flags["artifacts_for_review"] == [a1]
    assert json.loads(ok("artifact", "show", "a1", "--json"))["body"] == long.read_text()


def test_the_dry_run_lists_the_memories_flagged_for_holding_the_same_words(
        cli_home: Path) -> None:
    """The plan the operator approves names what the run will flag for holding a target's
    words (ADR 0041), by id and reason, and its digest covers them: the real run with that
    digest flags exactly those, erases only the subject's own."""
    ok("subject", "add", "u1")
    ok("subject", "add", "u2")
    ok("atom", "add", "--subject", "u1", "--ref", "mine", "--text", SAME)
    ok("atom", "add", "--subject", "u2", "--ref", "theirs", "--text", SAME)
    ok("artifact", "add", "--subject", "u1", "--ref", "chat1", "--kind", "chat", "--body",
       "A chat about green tea, captured twice by the assistant")
    ok("artifact", "add", "--subject", "u2", "--ref", "chat2", "--kind", "chat", "--body",
       "A chat about green tea, captured twice by the assistant")
    theirs = json.loads(ok("atom", "show", "theirs", "--json"))["atom_id"]
    chat2 = json.loads(ok("artifact", "show", "chat2", "--json"))["artifact_id"]
    dry = run_cli("redact-user", "u1", "--reason", "GDPR Art. 17", "--operator", "operator",
                  "--dry-run", "--json")
    assert dry.code == 0, dry.err[-1500:]
    plan = json.loads(dry.out)
    assert plan["flag_for_review"] == [theirs]
    assert plan["flags"][0]["why"] == "same-words"
    assert plan["flags"][0]["reason"] == "holds an erased memory's words word for word"
    assert plan["review_artifacts"] == [chat2]
    text = run_cli("redact-user", "u1", "--reason", "GDPR Art. 17", "--operator",
                   "operator", "--dry-run")
    assert f"atom {theirs}" in text.out and f"artifact {chat2}" in text.out
    assert SAME not in text.out + text.err and "green tea" not in text.out + text.err
    r = run_cli("redact-user", "u1", "--reason", "GDPR Art. 17", "--operator", "operator",
                "--plan", plan["plan_digest"], "--json")
    assert r.code == 0, r.err[-1500:]
    done = json.loads(r.out)
    assert done["flag_for_review"] == [theirs]
    assert done["review_artifacts"] == [chat2]
    assert json.loads(ok("atom", "show", "theirs", "--json"))["text"] == SAME
