"""The erasure commands through ``ledger`` alone: ``redact``, ``unredact``, ``delete``,
``artifact delete``, ``redact-user``, ``review list|resolve``, ``evidence-pack``,
``requests resume`` and ``repair``. What each prints (``--json``, and the text of
``-q`` checked against it), its verdict line, its exit code, and its refusals in their
exact words, with nothing written (moved here from the retired
tests/test_cli_facade_erasure.py, issue 32)."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest

from ledger.text import plural
from service.root import create_home

from .conftest import CliResult, run_cli, snapshot
from .facade_seed import seed

NOW = "2026-06-01T12:00:00Z"
EVENT_ID = re.compile(r"^[0-9a-f-]{36}/\d+$")
NOT_OPERATOR = ("error: dpo is not an authorized operator: key {kid} (dpo) was never "
                "authorized as operator",
                "hint: an operator key is needed: `ledger keys authorize NAME --role operator`")


class Home:
    """A ledger home and the ``ledger`` command run on it."""

    def __init__(self, tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("LEDGER_NOW", NOW)
        monkeypatch.delenv("LEDGER_HOME", raising=False)
        monkeypatch.delenv("LEDGER_PROGRESS", raising=False)
        self.tmp, self.path = tmp, tmp / "home"
        create_home(self.path)

    def run(self, *args: str) -> CliResult:
        quiet = [a for a in args if a == "-q"]  # a root option: no progress bars
        return run_cli("--home", str(self.path), *quiet, *[a for a in args if a != "-q"])

    def ok(self, *args: str, verdict: str | None = None) -> str:
        r = self.run(*args)
        assert r.code == 0, r.err
        if verdict is not None:
            assert verdicts(r.err) == [verdict]
        return r.out

    def json(self, *args: str, verdict: str | None = None) -> Any:
        return json.loads(self.ok(*args, "--json", verdict=verdict))

    def stored(self) -> dict[str, bytes]:
        """Every file of the home but the read models' (which a refused command may
        bring up to date): the event store, the keystore, keys, journal."""
        return {k: v for k, v in snapshot(self.path).items()
                if not k.startswith("projections")}

    def refused(self, *args: str, code: int = 2, err: tuple[str, ...]) -> None:
        """The command fails with these words and exit code, and writes nothing."""
        before = self.stored()
        r = self.run(*args)
        assert (r.code, verdicts(r.err)) == (code, list(err))
        assert r.out == ""
        assert self.stored() == before

    def key(self, name: str, role: str) -> str:
        return self.ok("keys", "authorize", name, "--role", role).strip()

    def no_key(self, name: str) -> tuple[str, str]:
        return (f"error: no private key named '{name}' in {self.path}/keys; list keys with "
                "`ledger keys list`", "hint: see `ledger keys list`")


@pytest.fixture
def h(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Home:
    return Home(tmp_path, monkeypatch)


def verdicts(err: str) -> list[str]:
    """stderr without log lines (JSON objects)."""
    return [line for line in err.splitlines() if not line.startswith("{")]


def steady(out: str) -> str:
    """An erasure's report without its step timings (the one thing two runs differ in)."""
    return re.sub(r'"seconds": \{[^}]*\}', '"seconds": {}', out)


def _setup(h: Home, n: int = 6) -> None:
    seed(h.path, subjects=["u1", "u2"],
         atoms=[{"subject": "u1", "ref": f"a{i}",
                 "text": f"Number {i} lives near the old harbour of Bergen"}
                for i in range(1, n + 1)])


def _atom_id(h: Home, ref: str) -> str:
    return str(h.json("atom", "show", ref)["atom_id"])


def _event_lines(out: str, n: int) -> None:
    """The text of an erasure command: its signed events' ids, one a line."""
    lines = out.splitlines()
    assert len(lines) == n and all(EVENT_ID.match(line) for line in lines), out


# ---------------------------------------------------------------------- redact, unredact, delete
def test_redact_unredact_and_delete_print_their_events_and_verdicts(h: Home) -> None:
    _setup(h)
    for mode, ref in (("soft", "a1"), ("archive", "a2")):
        aid = _atom_id(h, ref)
        data = h.json("redact", ref, "--mode", mode, "--reason", "asked",
                      verdict=f"OK: atom {aid} {mode}-redacted")
        assert (data["atom_id"], data["mode"]) == (aid, mode)
        assert len(data["event_ids"]) == 1 and EVENT_ID.match(data["event_ids"][0])
        assert h.json("atom", "show", ref)["status"] != "active"
    h.ok("unredact", "a1", "--reason", "mistake", "--json", verdict="OK: visible again")
    h.ok("redact", "a1", "--mode", "soft", "--reason", "again")
    out = h.ok("unredact", "a1", "--reason", "mistake", "-q", verdict="OK: visible again")
    _event_lines(out, 1)
    assert h.json("atom", "show", "a1")["status"] == "active"

    for ref, verb in (("a3", "hard"), ("a5", "delete")):
        aid = _atom_id(h, ref)
        args = (("redact", ref, "--mode", "hard", "--reason", "gone") if verb == "hard"
                else ("delete", ref, "--reason", "asked"))
        r = h.run(*args, "--json")
        data = json.loads(r.out)
        assert data["batch_id"] and data["event_ids"] and r.code == 0
        assert verdicts(r.err) == [f"OK: atom {aid} hard-redacted" if verb == "hard"
                                   else f"OK: atom {aid} deleted; batch {data['batch_id']}"]
        assert h.json("atom", "show", ref)["content_erased"]
    for ref, verb in (("a4", "hard"), ("a6", "delete")):
        aid = _atom_id(h, ref)
        args = (("redact", ref, "--mode", "hard", "--reason", "gone") if verb == "hard"
                else ("delete", ref, "--reason", "asked"))
        r = h.run(*args, "-q")
        assert r.code == 0, r.err
        _event_lines(r.out, len(data["event_ids"]))  # the same steps as the --json run
        verdict = verdicts(r.err)[0]
        assert verdict == f"OK: atom {aid} hard-redacted" if verb == "hard" else \
            re.fullmatch(f"OK: atom {aid} deleted; batch [0-9a-f-]{{36}}", verdict)


def test_redact_and_delete_refuse_in_the_applications_words(h: Home) -> None:
    _setup(h)
    kid = h.key("dpo", "auditor")
    not_operator = tuple(line.format(kid=kid) for line in NOT_OPERATOR)
    no_atom = ("error: no atom 'nobody' in this ledger",)
    for args, code, err in (
            (("redact", "nobody", "--mode", "soft", "--operator", "operator"), 2, no_atom),
            (("redact", "a1", "--mode", "soft", "--operator", "nokey"), 3, h.no_key("nokey")),
            (("redact", "a1", "--mode", "hard", "--operator", "nokey"), 3, h.no_key("nokey")),
            (("redact", "a1", "--mode", "hard", "--operator", "dpo"), 2, not_operator),
            (("redact", "a1", "--mode", "bogus", "--operator", "operator"), 2,
             ("error: unknown mode 'bogus'", "hint: use soft, archive or hard")),
            (("redact", "nobody", "--mode", "bogus", "--operator", "x"), 2, no_atom),
            (("redact", "a1", "--mode", "soft", "--operator", "writer2"), 3,
             h.no_key("writer2"))):
        h.refused(*args, "--reason", "r", code=code, err=err)
    aid = _atom_id(h, "a1")
    h.refused("unredact", "a1", "--reason", "r",  # only a soft redaction is undone
              err=(f"error: atom {aid} is active; only soft redaction is reversible",))
    h.refused("unredact", "nobody", "--reason", "r", "--as", "nokey", err=no_atom)
    for ref, key, err in (("nobody", "operator", no_atom), ("a2", "dpo", not_operator)):
        h.refused("delete", ref, "--reason", "r", "--operator", key, err=err)


def test_delete_of_a_subject_id_is_refused_before_anything_is_erased(h: Home) -> None:
    _setup(h, 1)
    subject = h.json("subject", "show", "u1")["subject_id"]
    h.refused("delete", subject, "--reason", "r", "--operator", "operator",
              err=(f"error: {subject} is not an atom",))


# ---------------------------------------------------------------------- artifact delete
def test_artifact_delete_prints_its_cascade(h: Home) -> None:
    atoms = seed(h.path, subjects=["u1"],
                 artifacts=[{"subject": "u1", "ref": ref,
                             "body": f"we talked about the harbour ({ref})"}
                            for ref in ("art_1", "art_2", "art_3")],
                 atoms=[{"subject": "u1", "text": text, "derivation": "inferred",
                         "extractor": "m1", "artifact_ids": sources}
                        for text, sources in (("Likes harbours", ["art_1"]),
                                              ("Likes boats", ["art_2", "art_3"]),
                                              ("Likes fjords", ["art_3"]))])

    def verdict(deleted: int, kept: int, flagged: int) -> str:
        return (f"OK: artifact deleted; {plural(deleted, 'atoms')} deleted, {kept} kept with "
                f"other sources, {flagged} flagged unsourced")

    data = h.json("artifact", "delete", "art_1", "--reason", "removed",
                  verdict=verdict(1, 0, 0))
    assert data["cascade"]["deleted_atoms"] == [atoms[0]]
    out = h.ok("artifact", "delete", "art_2", "--reason", "removed", verdict=verdict(0, 1, 0))
    assert out.splitlines() and all(EVENT_ID.match(line) for line in out.splitlines())
    data = h.json("artifact", "delete", "art_3", "--reason", "removed", "--flag-unsourced",
                  verdict=verdict(0, 0, 2))
    assert sorted(data["cascade"]["flagged_unsourced"]) == sorted(atoms[1:])
    assert {row["atom_id"] for row in h.json("review", "list")} == set(atoms[1:])
    h.refused("artifact", "delete", "nothing", "--reason", "r",
              err=("error: no artifact 'nothing' in this ledger",))


# ---------------------------------------------------------------------- redact-user
def _people(h: Home) -> None:
    seed(h.path, subjects=["jane", "bob"],
         artifacts=[{"subject": "bob", "body": "a chat with jane@example.org"}],
         atoms=[*({"subject": "jane", "text": f"Jane's fact number {n} here",
                   "session_id": "s1"} for n in range(3)),
                *({"subject": "bob", "text": text, "ref": ref}
                  for ref, text in (("b1", "Bob met jane@example.org at lunch"),
                                    ("b2", "Bob said jane@example.org is away"),
                                    ("b3", "Bob heard jane@example.org sing")))])


ERASE_JANE = ("redact-user", "jane", "--reason", "GDPR Art. 17", "--operator", "operator",
              "--identifier", "jane@example.org", "--session", "s1")


def _erased_verdict(data: dict[str, Any]) -> str:
    t = data["targets"]
    return (f"OK: erased {plural(len(t['atoms']), 'atoms')}, "
            f"{plural(len(t['artifacts']), 'artifacts')}; "
            f"{plural(len(data['flag_for_review']), 'memories')} of others flagged for review "
            f"(`ledger review list`); {plural(len(data['review_artifacts']), 'artifacts')} of "
            f"others to review; batch {data['batch_id']}; plan {data['plan_digest']}")


def test_redact_user_dry_run_plan_run_and_resume(h: Home,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from cli.erasure import _plan_text

    _people(h)
    before = h.stored()
    plan = h.json(*ERASE_JANE, "--dry-run")
    t, digest = plan["targets"], plan["plan_digest"]
    dry = (f"dry run: would erase {plural(len(t['atoms']), 'atoms')}, "
           f"{plural(len(t['artifacts']), 'artifacts')} of the subject and flag "
           f"{plural(len(plan['flag_for_review']), 'memories')} of others for review "
           f"({plural(len(plan['review_artifacts']), 'artifacts')} of others listed); "
           f"nothing changed; plan {digest}")
    assert len(t["atoms"]) == 3 and len(plan["flag_for_review"]) == 3
    assert len(plan["review_artifacts"]) == 1
    r = h.run(*ERASE_JANE, "--dry-run", "-q")
    assert (r.code, r.out, verdicts(r.err)) == (0, _plan_text(plan) + "\n", [dry])
    assert h.stored() == before
    # a plan that changed: refused, nothing written
    h.refused(*ERASE_JANE, "--plan", "0" * 64, err=(
        f"error: the ledger changed since the dry run: its plan was {'0' * 64}, the plan now "
        f"is {digest} (3 atoms, 0 artifacts to erase, 3 memories of others to flag); nothing "
        "was written", "hint: run the dry run again, review it, and pass its new --plan"))
    # the real run, with progress drawn (the facade hears each step)
    monkeypatch.setenv("LEDGER_PROGRESS", "always")
    r = h.run(*ERASE_JANE, "--plan", digest)
    assert r.code == 0, r.err
    assert "Erasing" in r.err and "Destroying data keys" in r.err
    lines = r.out.splitlines()
    assert lines[0].startswith("request ") and lines[1].startswith("batch ")
    assert [line.split()[1] for line in lines if line.startswith("flagged ")] == \
        [f["atom_id"] for f in plan["flags"]]
    assert f"review artifact {plan['review_artifacts'][0]}" in lines
    data = {**plan, "batch_id": lines[1].split()[1]}
    assert verdicts(r.err)[-1].endswith(_erased_verdict(data))
    monkeypatch.delenv("LEDGER_PROGRESS")
    # the request is complete: --resume finds nothing to do
    rid = lines[0].split()[1]
    again = h.json("redact-user", "jane", "--operator", "operator", "--resume")
    assert again["no_op"] and again["request_id"] == rid
    done = (f"OK: nothing to do: request {rid} was completed at {again['completed_at']}")
    assert h.ok("redact-user", "jane", "--operator", "operator", "--resume", "-q",
                verdict=done) == f"{rid}\n"
    # refusals: an unknown subject, a key that is not an operator's, no reason
    kid = h.key("dpo", "auditor")
    for subject, key, reason, code, err in (
            ("nobody", "operator", "r", 2, ("error: no subject 'nobody' in this ledger",
                                            "hint: check the subject's id with "
                                            "`ledger subject show`")),
            ("bob", "dpo", "r", 2, tuple(line.format(kid=kid) for line in NOT_OPERATOR)),
            ("bob", "nokey", "r", 3, h.no_key("nokey")),
            ("bob", "operator", " ", 2, ("error: a reason is required",
                                         'hint: e.g. --reason "GDPR Art. 17 request"'))):
        h.refused("redact-user", subject, "--operator", key, "--reason", reason, code=code,
                  err=err)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_redact_user_asks_on_a_terminal_after_showing_the_plan(
        h: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    from cli.erasure import _plan_text

    _people(h)
    plan = h.json(*ERASE_JANE, "--dry-run")
    before = h.stored()
    monkeypatch.setattr("sys.stdin", _Terminal("n\n"))
    r = h.run(*ERASE_JANE)
    assert r.code == 2 and r.out.strip() == ""  # click's prompt leaves its space there
    assert _plan_text(plan) + "\n" in r.err
    assert verdicts(r.err)[-1] == \
        "erase these memories for good? [y/N]:error: not confirmed; nothing was written"
    assert h.stored() == before

    monkeypatch.setattr("sys.stdin", _Terminal("y\n"))
    r = h.run(*ERASE_JANE, "--json")
    assert r.code == 0, r.err
    assert _plan_text(plan) + "\n" in r.err
    assert r.out.startswith(" {")
    data = json.loads(r.out)
    assert data["plan_digest"] == plan["plan_digest"] and data["targets"] == plan["targets"]
    assert "erase these memories for good? [y/N]:" in r.err
    assert verdicts(r.err)[-1] == _erased_verdict(data)


# ---------------------------------------------------------------------- review queue
def test_review_list_and_resolve(h: Home) -> None:
    _people(h)
    h.ok("redact-user", "jane", "--reason", "GDPR", "--operator", "operator",
         "--identifier", "jane@example.org", "--yes")
    rows = h.json("review", "list")
    assert len(rows) == 3 and {x["flag"] for x in rows} == {"refers-to-erased"}
    assert h.ok("review", "list", "-q") == \
        "".join(f"{x['atom_id']}  {x['flag']}  {x['reason']}\n" for x in rows)
    ids = {ref: _atom_id(h, ref) for ref in ("b1", "b2", "b3")}

    def resolved(ref: str, action: str) -> str:
        return f"OK: refers-to-erased on {ids[ref]} resolved ({action})"

    data = h.json("review", "resolve", "b1", "--action", "reanonymise", "--text",
                  "Bob met a friend", verdict=resolved("b1", "reanonymise"))
    assert data["atom_id"] == ids["b1"] and data["new_atom_id"] != ids["b1"]
    assert h.json("atom", "show", data["new_atom_id"])["text"] == "Bob met a friend"
    out = h.ok("review", "resolve", "b2", "--action", "dismiss",
               verdict=resolved("b2", "dismiss"))
    _event_lines(out, 1)
    data = h.json("review", "resolve", "b3", "--action", "redact",
                  verdict=resolved("b3", "redact"))
    assert data["batch_id"] and h.json("atom", "show", "b3")["content_erased"]
    assert h.ok("review", "list", verdict=None) == "" and h.json("review", "list") == []
    for args, code, err in (
            (("b1", "--action", "dismiss"), 2, None),
            (("b2", "--action", "reanonymise"), 2, None),
            (("b2", "--action", "bogus"), 2, None),
            (("nobody", "--action", "dismiss"), 2, ("error: no atom 'nobody' in this ledger",)),
            (("b2", "--action", "dismiss", "--operator", "nokey"), 3, h.no_key("nokey"))):
        r = h.run("review", "resolve", *args)
        assert r.code == code and r.out == "", (args, r.err)
        if err is not None:
            assert verdicts(r.err) == list(err)
        else:
            assert verdicts(r.err)[0].startswith("error: ")


# ---------------------------------------------------------------------- evidence packs
def test_evidence_pack_and_countersign(h: Home) -> None:
    _setup(h)
    batch = h.json("delete", "a1", "--reason", "asked")["batch_id"]
    h.key("dpo", "auditor")
    h.key("dpo2", "operator")
    out = h.tmp / "pack0"
    data = h.json("evidence-pack", batch, "--out", str(out), "--zip",
                  verdict=f"OK: evidence pack written to {out} and {out.with_suffix('.zip')}")
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert data == {"pack": str(out), "files": files, "zip": str(out.with_suffix(".zip"))}
    assert "statement.dsse.json" in files and out.with_suffix(".zip").exists()
    pack = h.tmp / "pack1"
    assert h.ok("evidence-pack", batch, "--out", str(pack),
                verdict=f"OK: evidence pack written to {pack}") == f"{pack}\n"
    assert sorted(str(p.relative_to(pack)) for p in pack.rglob("*") if p.is_file()) == files
    statement = (pack / "statement.dsse.json").read_bytes()
    assert h.json("evidence-pack", "sign", str(pack), "--as", "dpo",
                  verdict=f"OK: {pack} countersigned by dpo") == \
        {"pack": str(pack), "signed_by": "dpo"}
    assert h.ok("evidence-pack", "sign", str(pack), "--as", "dpo2", "-q",
                verdict=f"OK: {pack} countersigned by dpo2") == f"{pack}\n"
    signed = json.loads((pack / "statement.dsse.json").read_bytes())
    assert len(signed["signatures"]) == len(json.loads(statement)["signatures"]) + 2
    assert h.run("verify-pack", str(pack)).code == 0


def test_evidence_pack_refuses_in_the_words_it_had(h: Home) -> None:
    _setup(h)
    batch = h.json("delete", "a1", "--reason", "asked")["batch_id"]
    kid = h.key("w2", "writer")
    not_a_signer = (f"error: w2 ({kid}) holds neither the operator nor the auditor role; an "
                    "Evidence Pack signed by it would not verify",
                    "hint: sign with an operator or auditor key: --as operator")
    p = str(h.tmp / "p")
    for args, code, err in (
            (("evidence-pack", batch, "--out", p, "--as", "w2"), 2, not_a_signer),
            (("evidence-pack", "sign", "--as", "w2"), 2, not_a_signer),
            (("evidence-pack", "sign"), 2,
             ("error: usage: ledger evidence-pack sign DIR --as KEY",)),
            (("evidence-pack", batch), 2, ("error: --out DIR is required",
                                           "hint: ledger evidence-pack BATCH --out pack")),
            (("evidence-pack", "nope", "--out", p), 2, ("error: 'nope' is not a batch id",)),
            (("evidence-pack", batch, "--out", p, "--as", "nokey"), 3, h.no_key("nokey"))):
        h.refused(*args, code=code, err=err)
    other = "00000000-0000-4000-8000-000000000007"
    r = h.run("evidence-pack", other, "--out", p)
    assert r.code == 2 and verdicts(r.err)[0].startswith("error: ") and other in r.err
    assert not (h.tmp / "p").exists()


# ---------------------------------------------------------------------- resume, repair
def test_requests_resume_and_repair(h: Home) -> None:
    import uuid

    from ledger import clock
    from ledger.application import LedgerApp
    from ledger.home import Config
    from service.caller import local_operator
    from service.models import ErasureRequestIn
    from service.root import opened_service

    _people(h)
    # arrange: a request received, its run stopped before the batch (ADR 0019), and a
    # data key stored for an event that was never written (a crash's residue; only the
    # keystore can make one)
    with opened_service(h.path, lazy=True) as svc:
        rid = svc.file_request(local_operator(),
                               ErasureRequestIn(subject="jane", reason="GDPR")).request_id
    app = LedgerApp(Config.load(h.path))
    try:
        app.datakeys.store({str(uuid.UUID(int=99, version=4)): b"k" * 32}, clock.now())
    finally:
        app.close()

    r = h.run("requests", "resume", rid)
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert lines[:2] == [f"request {rid}", lines[1]] and lines[1].startswith("batch ")
    assert all(EVENT_ID.match(line) for line in lines[2:]) and lines[2:]
    assert verdicts(r.err) == [f"OK: request {rid} completed; {lines[1]} closed"]
    data = h.json("requests", "resume", rid)
    done = f"OK: nothing to do: request {rid} was completed at {data['completed_at']}"
    assert data["request_id"] == rid
    assert h.ok("requests", "resume", rid, "-q", verdict=done).startswith(f"request {rid}\n")
    for request, key, code in (("nope", "operator", 2), (rid, "nokey", 3),
                               (str(uuid.UUID(int=5)), "x", 2)):
        r = h.run("requests", "resume", request, "--as", key)
        assert r.code == code and r.out == "" and verdicts(r.err)[0].startswith("error: ")
    assert verdicts(h.run("requests", "resume", rid, "--as", "nokey").err) == \
        list(h.no_key("nokey"))

    dry = "dry run: would discard 1 orphan data key(s); nothing changed"
    data = h.json("repair", "--dry-run", verdict=dry)
    assert data["orphan_keys"] == [str(uuid.UUID(int=99, version=4))]
    assert h.ok("repair", "--dry-run", verdict=dry) == f"{data['orphan_keys'][0]}\n"
    assert h.json("repair", verdict="OK: discarded 1 orphan data key(s)")["orphan_keys"] == \
        data["orphan_keys"]
    assert h.ok("repair", verdict="OK: nothing to repair") == ""
    assert h.json("repair", verdict="OK: nothing to repair")["orphan_keys"] == []
