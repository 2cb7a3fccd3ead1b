"""The erasure commands on the facade (issue 14): ``ledger redact|unredact|delete``,
``artifact delete``, ``redact-user``, ``review list|resolve``, ``evidence-pack``,
``requests resume`` and ``repair`` call ``MemoryService`` as the local operator.

Each check runs a command on a ledger home and, on a copy of that home taken just before,
the direct calls the command made when it opened the application itself; the clock is
pinned and new ids are made in the same order in both, so what is printed must be the
same: stdout byte for byte (an erasure's step timings, ``seconds``, aside), the verdict,
the exit code, and an error's words. The output checks pass on the code before the move
too (run against it, only the last test, on the modules' source, fails).
"""

from __future__ import annotations

import io
import json
import re
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ledger.application import LedgerApp
from ledger.errors import LedgerError
from ledger.home import Config
from ledger.text import event_lines, plural
from projections.service import Projections

from .conftest import CliResult, opened_layers, run_cli

NOW = "2026-06-01T12:00:00Z"
Direct = Callable[[LedgerApp, Projections], Any]


class Twins:
    """A ledger home, copies of it, and new ids made in the same order in each."""

    def __init__(self, tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("LEDGER_NOW", NOW)
        monkeypatch.delenv("LEDGER_HOME", raising=False)
        monkeypatch.delenv("LEDGER_PROGRESS", raising=False)
        monkeypatch.setattr(uuid, "uuid4", self._uuid4)
        self.tmp, self.n, self.base, self.copies = tmp, 0, 0, 0
        self.copy = tmp
        self.home = tmp / "home"
        LedgerApp.initialize(self.home)

    def _uuid4(self) -> uuid.UUID:
        self.n += 1
        return uuid.UUID(int=self.n, version=4)

    def ok(self, *args: str) -> str:
        r = run_cli("--home", str(self.home), *args)
        assert r.code == 0, r.err
        return r.out

    def both(self, args: list[str], direct: Direct) -> tuple[CliResult, Any, Path]:
        """``ledger ARGS`` on the home, ``direct(app, proj)`` on a copy made just before
        (its result, or the LedgerError it raised), and the copy."""
        self.copies += 1
        copy = self.copy = self.tmp / f"copy{self.copies}"
        shutil.copytree(self.home, copy)
        self.base += 100_000
        self.n = self.base
        quiet = [a for a in args if a == "-q"]  # a root option: no progress bars
        r = run_cli("--home", str(self.home), *quiet, *[a for a in args if a != "-q"])
        self.n = self.base
        with opened_layers(copy) as (app, proj):
            try:
                result = direct(app, proj)
            except LedgerError as e:
                result = e
        return r, result, copy


@pytest.fixture
def tw(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Twins:
    return Twins(tmp_path, monkeypatch)


def printed(data: Any, as_json: bool, text: str | None = None) -> str:
    """What the commands wrote on stdout (cli/erasure.py ``_out``)."""
    if as_json:
        return json.dumps(data, indent=2, sort_keys=True, default=str) + "\n"
    return text + "\n" if text else ""


def steady(out: str) -> str:
    """An erasure's report without its step timings (the one thing two runs differ in)."""
    return re.sub(r'"seconds": \{[^}]*\}', '"seconds": {}', out)


def verdicts(err: str) -> list[str]:
    """stderr without log lines (JSON objects)."""
    return [line for line in err.splitlines() if not line.startswith("{")]


def same(r: CliResult, out: str, *verdict: str) -> None:
    assert r.code == 0, r.err
    assert steady(r.out) == steady(out)
    assert verdicts(r.err) == list(verdict)


def refused(r: CliResult, e: Any, tw: Twins | None = None) -> None:
    """The command failed as the direct calls did: exit code and words (a path in the
    copy named as the same path in the home)."""
    assert isinstance(e, LedgerError), e
    expected = [f"error: {e}"] + ([f"hint: {e.hint}"] if e.hint else [])
    if tw is not None:
        expected = [line.replace(str(tw.copy), str(tw.home)) for line in expected]
    assert (r.code, verdicts(r.err)) == (e.exit_code, expected)


def _setup(tw: Twins) -> None:
    tw.ok("subject", "add", "u1")
    tw.ok("subject", "add", "u2")
    for n in range(1, 7):
        tw.ok("atom", "add", "--subject", "u1", "--ref", f"a{n}",
              "--text", f"Number {n} lives near the old harbour of Bergen")


# ---------------------------------------------------------------------- redact, unredact, delete
def test_redact_unredact_and_delete_print_what_the_direct_calls_gave(tw: Twins) -> None:
    from governance.erasure import Targets, hard_erase

    _setup(tw)

    def soft(mode: str, ref: str) -> Direct:
        def run(app: LedgerApp, proj: Projections) -> Any:
            aid = app.resolve("atom", ref)
            return aid, {"atom_id": str(aid), "mode": mode,
                         "event_ids": [app.redact(aid, mode, "asked", actor="operator")]}
        return run

    for mode, ref, flag in (("soft", "a1", "--json"), ("archive", "a2", "-q")):
        r, (aid, data), _ = tw.both(["redact", ref, "--mode", mode, "--reason", "asked", flag],
                                    soft(mode, ref))
        same(r, printed(data, flag == "--json", "\n".join(event_lines(data["event_ids"]))),
             f"OK: atom {aid} {mode}-redacted")

    def unredact(app: LedgerApp, proj: Projections) -> Any:
        return app.unredact(app.resolve("atom", "a1"), "mistake", actor="operator")

    for flag in ("--json", "-q"):
        if flag == "-q":
            tw.ok("redact", "a1", "--mode", "soft", "--reason", "again")
        r, event, _ = tw.both(["unredact", "a1", "--reason", "mistake", flag], unredact)
        same(r, printed({"atom_id": "a1", "event_ids": [event]}, flag == "--json", event),
             "OK: visible again")

    def hard(ref: str, mode: str, reason: str) -> Direct:
        def run(app: LedgerApp, proj: Projections) -> Any:
            aid = app.resolve("atom", ref)
            return aid, hard_erase(app, proj, Targets(atoms=[str(aid)]), mode=mode,
                                   reason=reason, operator="operator")
        return run

    for ref, flag in (("a3", "--json"), ("a4", "-q")):
        r, (aid, data), _ = tw.both(["redact", ref, "--mode", "hard", "--reason", "gone", flag],
                                    hard(ref, "hard", "gone"))
        same(r, printed(data, flag == "--json", "\n".join(event_lines(data["event_ids"]))),
             f"OK: atom {aid} hard-redacted")
    for ref, flag in (("a5", "--json"), ("a6", "-q")):
        r, (aid, data), _ = tw.both(["delete", ref, "--reason", "asked", flag],
                                    hard(ref, "delete", "asked"))
        assert data["batch_id"]
        same(r, printed(data, flag == "--json", "\n".join(event_lines(data["event_ids"]))),
             f"OK: atom {aid} deleted; batch {data['batch_id']}")


def test_redact_and_delete_refuse_in_the_applications_words(tw: Twins) -> None:
    from governance.erasure import Targets, hard_erase

    _setup(tw)
    tw.ok("keys", "authorize", "dpo", "--role", "auditor")

    def redact(ref: str, mode: str, key: str) -> Direct:
        def run(app: LedgerApp, proj: Projections) -> Any:
            aid = app.resolve("atom", ref)
            if mode in ("soft", "archive"):
                return app.redact(aid, mode, "r", actor=key)
            if mode == "hard":
                return hard_erase(app, proj, Targets(atoms=[str(aid)]), mode="hard",
                                  reason="r", operator=key)
            from ledger.errors import InputError

            raise InputError(f"unknown mode {mode!r}", hint="use soft, archive or hard")
        return run

    cases = [("nobody", "soft", "operator"), ("a1", "soft", "nokey"), ("a1", "hard", "nokey"),
             ("a1", "hard", "dpo"), ("a1", "bogus", "operator"), ("nobody", "bogus", "x"),
             ("a1", "soft", "writer2")]
    for ref, mode, key in cases:
        r, e, _ = tw.both(["redact", ref, "--mode", mode, "--reason", "r", "--operator", key],
                          redact(ref, mode, key))
        refused(r, e, tw)
    r, e, _ = tw.both(["unredact", "a1", "--reason", "r"],
                      lambda app, proj: app.unredact(app.resolve("atom", "a1"), "r",
                                                     actor="operator"))
    refused(r, e, tw)  # only a soft redaction is undone
    r, e, _ = tw.both(["unredact", "nobody", "--reason", "r", "--as", "nokey"],
                      lambda app, proj: app.unredact(app.resolve("atom", "nobody"), "r",
                                                     actor="nokey"))
    refused(r, e, tw)
    subject = json.loads(tw.ok("subject", "show", "u1", "--json"))["subject_id"]
    for ref, key in (("nobody", "operator"), ("a2", "dpo"), (subject, "operator")):
        r, e, _ = tw.both(
            ["delete", ref, "--reason", "r", "--operator", key],
            lambda app, proj, ref=ref, key=key: hard_erase(  # type: ignore[misc]
                app, proj, Targets(atoms=[str(app.resolve("atom", ref))]), mode="delete",
                reason="r", operator=key))
        refused(r, e, tw)


# ---------------------------------------------------------------------- artifact delete
def test_artifact_delete_prints_what_the_direct_calls_gave(tw: Twins) -> None:
    from governance.erasure import delete_artifact

    tw.ok("subject", "add", "u1")
    for ref in ("art_1", "art_2", "art_3"):
        tw.ok("artifact", "add", "--subject", "u1", "--kind", "chat", "--ref", ref,
              "--body", f"we talked about the harbour ({ref})")
    tw.ok("atom", "add", "--subject", "u1", "--text", "Likes harbours", "--derivation",
          "inferred", "--extractor", "m1", "--artifact", "art_1")
    tw.ok("atom", "add", "--subject", "u1", "--text", "Likes boats", "--derivation",
          "inferred", "--extractor", "m1", "--artifact", "art_2", "--artifact", "art_3")
    tw.ok("atom", "add", "--subject", "u1", "--text", "Likes fjords", "--derivation",
          "inferred", "--extractor", "m1", "--artifact", "art_3")

    def run(ref: str, flag_unsourced: bool) -> Direct:
        return lambda app, proj: delete_artifact(app, proj, ref, reason="removed",
                                                 operator="operator",
                                                 flag_unsourced=flag_unsourced)

    for ref, flags in (("art_1", ["--json"]), ("art_2", []),
                       ("art_3", ["--flag-unsourced", "--json"])):
        r, data, _ = tw.both(["artifact", "delete", ref, "--reason", "removed", *flags],
                             run(ref, "--flag-unsourced" in flags))
        c = data["cascade"]
        same(r, printed(data, "--json" in flags, "\n".join(event_lines(data["event_ids"]))),
             f"OK: artifact deleted; {plural(len(c['deleted_atoms']), 'atoms')} deleted, "
             f"{len(c['kept_atoms'])} kept with other sources, "
             f"{len(c['flagged_unsourced'])} flagged unsourced")
    assert any(json.loads(tw.ok("review", "list", "--json")))
    r, e, _ = tw.both(["artifact", "delete", "nothing", "--reason", "r"], run("nothing", False))
    refused(r, e, tw)


# ---------------------------------------------------------------------- redact-user
def _people(tw: Twins) -> None:
    tw.ok("subject", "add", "jane")
    tw.ok("subject", "add", "bob")
    for n in range(3):
        tw.ok("atom", "add", "--subject", "jane", "--text", f"Jane's fact number {n} here",
              "--session", "s1")
    tw.ok("atom", "add", "--subject", "bob", "--text", "Bob met jane@example.org at lunch",
          "--ref", "b1")
    tw.ok("atom", "add", "--subject", "bob", "--text", "Bob said jane@example.org is away",
          "--ref", "b2")
    tw.ok("atom", "add", "--subject", "bob", "--text", "Bob heard jane@example.org sing",
          "--ref", "b3")
    tw.ok("artifact", "add", "--subject", "bob", "--kind", "chat",
          "--body", "a chat with jane@example.org")


def _redact_user(**kw: Any) -> Direct:
    from governance.erasure import redact_user
    from governance.requests import sla_hours

    def run(app: LedgerApp, proj: Projections) -> Any:
        ack, complete = sla_hours(app.policy())
        args: dict[str, Any] = dict(reason="GDPR Art. 17", operator="operator",
                                    identifiers=["jane@example.org"], sessions=["s1"],
                                    legal_basis=None, ack_hours=ack, completion_hours=complete)
        args.update(kw)
        return redact_user(app, proj, args.pop("subject", "jane"), **args)
    return run


def _erased_text(data: dict[str, Any]) -> str:
    return "\n".join([f"request {data['request_id']}", f"batch {data['batch_id']}",
                      *event_lines(data["event_ids"]),
                      *(f"flagged {a} refers-to-erased" for a in data["flag_for_review"]),
                      *(f"review artifact {a}" for a in data.get("review_artifacts", []))])


def _erased_verdict(data: dict[str, Any]) -> str:
    t = data["targets"]
    counts = f"{plural(len(t['atoms']), 'atoms')}, {plural(len(t['artifacts']), 'artifacts')}"
    review = len(data.get("review_artifacts", []))
    again = "; resumed an interrupted run" if data.get("resumed") else ""
    plan_note = f"; plan {data['plan_digest']}" if data.get("plan_digest") else ""
    return (f"OK: erased {counts}; {plural(len(data['flag_for_review']), 'memories')} of "
            f"others flagged for review (`ledger review list`); "
            f"{plural(review, 'artifacts')} of others to review; batch "
            f"{data['batch_id']}{plan_note}{again}")


def test_redact_user_dry_run_plan_run_and_resume_print_what_the_direct_calls_gave(
        tw: Twins, monkeypatch: pytest.MonkeyPatch) -> None:
    from cli.erasure import _plan_text

    _people(tw)
    args = ["redact-user", "jane", "--reason", "GDPR Art. 17", "--operator", "operator",
            "--identifier", "jane@example.org", "--session", "s1"]
    digest = ""
    for flag in ("--json", "-q"):
        r, data, _ = tw.both([*args, "--dry-run", flag], _redact_user(dry_run=True))
        t, digest = data["targets"], data["plan_digest"]
        same(r, printed(data, flag == "--json", _plan_text(data)),
             f"dry run: would erase {plural(len(t['atoms']), 'atoms')}, "
             f"{plural(len(t['artifacts']), 'artifacts')} of the subject and flag "
             f"{plural(len(data['flag_for_review']), 'memories')} of others for review "
             f"({plural(len(data['review_artifacts']), 'artifacts')} of others listed); "
             f"nothing changed; plan {digest}")
        assert len(t["atoms"]) == 3 and len(data["flag_for_review"]) == 3
    # a plan that changed: refused, nothing written
    r, e, _ = tw.both([*args, "--plan", "0" * 64], _redact_user(expect_plan="0" * 64))
    refused(r, e, tw)
    # the real run, with progress drawn (the facade hears each step)
    monkeypatch.setenv("LEDGER_PROGRESS", "always")
    r, data, _ = tw.both([*args, "--plan", digest], _redact_user(expect_plan=digest))
    assert "Erasing" in r.err and "Destroying data keys" in r.err
    assert steady(r.out) == steady(printed(data, False, _erased_text(data)))
    assert verdicts(r.err)[-1].endswith(_erased_verdict(data))
    monkeypatch.delenv("LEDGER_PROGRESS")
    # the request is complete: --resume finds nothing to do
    for flag in ("--json", "-q"):
        r, data, _ = tw.both(["redact-user", "jane", "--operator", "operator", "--resume",
                              flag], _redact_user(reason="", identifiers=[], sessions=[],
                                                  resume=True))
        assert data["no_op"]
        same(r, printed(data, flag == "--json", data["request_id"]),
             f"OK: nothing to do: request {data['request_id']} was completed at "
             f"{data['completed_at']}")
    # refusals: an unknown subject, a key that is not an operator's, no reason
    tw.ok("keys", "authorize", "dpo", "--role", "auditor")
    for subject, key, reason in (("nobody", "operator", "r"), ("bob", "dpo", "r"),
                                 ("bob", "nokey", "r"), ("bob", "operator", " ")):
        r, e, _ = tw.both(["redact-user", subject, "--operator", key, "--reason", reason],
                          _redact_user(subject=subject, reason=reason, operator=key,
                                       identifiers=[], sessions=[]))
        refused(r, e, tw)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_redact_user_asks_on_a_terminal_after_showing_the_plan(
        tw: Twins, monkeypatch: pytest.MonkeyPatch) -> None:
    from cli.erasure import _plan_text

    _people(tw)
    args = ["redact-user", "jane", "--reason", "GDPR Art. 17", "--operator", "operator",
            "--identifier", "jane@example.org", "--session", "s1"]
    monkeypatch.setattr("sys.stdin", _Terminal("n\n"))
    r, preview, _ = tw.both(args, _redact_user(dry_run=True))
    assert r.code == 2 and r.out.strip() == ""  # click's prompt leaves its space there
    assert _plan_text(preview) + "\n" in r.err
    assert verdicts(r.err)[-1] == \
        "erase these memories for good? [y/N]:error: not confirmed; nothing was written"

    def confirmed(app: LedgerApp, proj: Projections) -> Any:
        plan = _redact_user(dry_run=True)(app, proj)
        return plan, _redact_user(expect_plan=plan["plan_digest"])(app, proj)

    monkeypatch.setattr("sys.stdin", _Terminal("y\n"))
    r, (preview, data), _ = tw.both([*args, "--json"], confirmed)
    assert r.code == 0, r.err
    assert _plan_text(preview) + "\n" in r.err
    assert steady(r.out) == " " + steady(printed(data, True))
    assert "erase these memories for good? [y/N]:" in r.err
    assert verdicts(r.err)[-1] == _erased_verdict(data)


# ---------------------------------------------------------------------- review queue
def test_review_list_and_resolve_print_what_the_direct_calls_gave(tw: Twins) -> None:
    from governance.erasure import Targets, hard_erase
    from governance.review import open_flags

    _people(tw)
    tw.ok("redact-user", "jane", "--reason", "GDPR", "--operator", "operator",
          "--identifier", "jane@example.org", "--yes")
    for flag in ("--json", "-q"):
        r, rows, _ = tw.both(["review", "list", flag], lambda app, proj: open_flags(app))
        assert len(rows) == 3
        same(r, printed(rows, flag == "--json",
                        "\n".join(f"{x['atom_id']}  {x['flag']}  {x['reason']}" for x in rows)))

    def resolve(ref: str, action: str, text: str | None = None,
                flag: str = "refers-to-erased", key: str = "operator") -> Direct:
        def run(app: LedgerApp, proj: Projections) -> Any:
            from ledger.errors import InputError

            aid = app.resolve("atom", ref)
            if action == "reanonymise":
                if not text:
                    raise InputError("--action reanonymise needs --text with the new wording")
                new = app.correct_atom(str(aid), {"text": text, "reason": "re-anonymised"})
                return aid, {"atom_id": str(aid), "new_atom_id": str(new),
                             "event_ids": [app.resolve_flag(aid, flag, "re-anonymised",
                                                            actor=key)]}
            if action == "redact":
                data = hard_erase(app, proj, Targets(atoms=[str(aid)]), mode="hard",
                                  reason="review: redacted", operator=key)
                data["event_ids"].append(app.resolve_flag(aid, flag, "redacted", actor=key))
                return aid, data
            if action == "dismiss":
                return aid, {"atom_id": str(aid), "event_ids": [
                    app.resolve_flag(aid, flag, "dismissed", actor=key)]}
            raise InputError(f"unknown action {action!r}",
                             hint="use reanonymise, redact or dismiss")
        return run

    for ref, action, extra in (("b1", "reanonymise", ["--text", "Bob met a friend", "--json"]),
                               ("b2", "dismiss", []), ("b3", "redact", ["--json"])):
        text = extra[1] if extra[:1] == ["--text"] else None
        r, (aid, data), _ = tw.both(["review", "resolve", ref, "--action", action, *extra],
                                    resolve(ref, action, text))
        same(r, printed(data, "--json" in extra, "\n".join(event_lines(data["event_ids"]))),
             f"OK: refers-to-erased on {aid} resolved ({action})")
    r, rows, _ = tw.both(["review", "list"], lambda app, proj: open_flags(app))
    same(r, "")
    assert rows == []
    for ref, action, extra in (("b1", "dismiss", []), ("b2", "reanonymise", []),
                               ("b2", "bogus", []), ("nobody", "dismiss", []),
                               ("b2", "dismiss", ["--operator", "nokey"])):
        key = extra[1] if extra else "operator"
        r, e, _ = tw.both(["review", "resolve", ref, "--action", action, *extra],
                          resolve(ref, action, key=key))
        refused(r, e, tw)


# ---------------------------------------------------------------------- evidence packs
def test_evidence_pack_and_countersign_print_what_the_direct_calls_gave(tw: Twins) -> None:
    from governance.pack import build_pack, countersign

    _setup(tw)
    batch = json.loads(tw.ok("delete", "a1", "--reason", "asked", "--json"))["batch_id"]
    tw.ok("keys", "authorize", "dpo", "--role", "auditor")
    tw.ok("keys", "authorize", "dpo2", "--role", "operator")
    for n, flags in enumerate((["--json", "--zip"], [])):
        out = tw.tmp / f"pack{n}"

        def build(app: LedgerApp, proj: Projections, out: Path = out,
                  flags: list[str] = flags) -> Any:
            return build_pack(app, batch, out.with_name(out.name + "-copy"),
                              make_zip="--zip" in flags, operator="operator")

        r, path, _ = tw.both(["evidence-pack", batch, "--out", str(out), *flags], build)
        files = sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file())
        shown = str(path).replace("-copy", "")
        zipped = str(out.with_suffix(".zip")) if "--zip" in flags else None
        same(r, printed({"pack": shown, "files": files, "zip": zipped}, "--json" in flags,
                        shown), f"OK: evidence pack written to {shown}"
             + (f" and {zipped}" if zipped else ""))
        for name in files:  # the same pack, byte for byte
            assert (out / name).read_bytes() == (path / name).read_bytes(), name
    pack = tw.tmp / "pack1"
    for flag in ("--json", "-q"):
        key = "dpo" if flag == "--json" else "dpo2"

        def sign(app: LedgerApp, proj: Projections, key: str = key) -> Any:
            countersign(tw.tmp / "pack1-copy", app.signer(key))
            return {"pack": str(pack), "signed_by": key}

        r, data, _ = tw.both(["evidence-pack", "sign", str(pack), "--as", key, flag], sign)
        same(r, printed(data, flag == "--json", str(pack)),
             f"OK: {pack} countersigned by {key}")
    assert (pack / "statement.dsse.json").read_bytes() == \
        (tw.tmp / "pack1-copy" / "statement.dsse.json").read_bytes()


def test_evidence_pack_refuses_in_the_words_it_had(tw: Twins) -> None:
    from ledger.errors import InputError

    _setup(tw)
    batch = json.loads(tw.ok("delete", "a1", "--reason", "asked", "--json"))["batch_id"]
    kid = tw.ok("keys", "authorize", "w2", "--role", "writer").strip()
    not_a_signer = InputError(
        f"w2 ({kid}) holds neither the operator nor the auditor role; an Evidence Pack "
        "signed by it would not verify", hint="sign with an operator or auditor key: --as "
                                              "operator")
    cases: list[tuple[list[str], Any]] = [
        (["evidence-pack", batch, "--out", str(tw.tmp / "p"), "--as", "w2"], not_a_signer),
        (["evidence-pack", "sign", "--as", "w2"], not_a_signer),
        (["evidence-pack", "sign"], InputError("usage: ledger evidence-pack sign DIR --as KEY")),
        (["evidence-pack", batch], InputError("--out DIR is required",
                                              hint="ledger evidence-pack BATCH --out pack")),
        (["evidence-pack", "nope", "--out", str(tw.tmp / "p")],
         InputError("'nope' is not a batch id")),
    ]
    for args, e in cases:
        refused(run_cli("--home", str(tw.home), *args), e)
    r, e, _ = tw.both(["evidence-pack", batch, "--out", str(tw.tmp / "p"), "--as", "nokey"],
                      lambda app, proj: app.signer("nokey"))
    refused(r, e, tw)
    other = str(uuid.UUID(int=7, version=4))
    from governance.pack import build_pack

    r, e, _ = tw.both(["evidence-pack", other, "--out", str(tw.tmp / "p")],
                      lambda app, proj: build_pack(app, other, tw.tmp / "q"))
    refused(r, e, tw)
    assert not (tw.tmp / "p").exists()


# ---------------------------------------------------------------------- resume, repair
def test_requests_resume_and_repair_print_what_the_direct_calls_gave(tw: Twins) -> None:
    from governance.erasure import resume_request

    _people(tw)
    app = LedgerApp(Config.load(tw.home))
    try:  # a request received, its run stopped before the batch (ADR 0019)
        rid = str(app.receive_request(str(app.resolve_subject("jane")), "GDPR", "operator",
                                      24.0, 720.0))
        from ledger import clock

        app.datakeys.store({str(uuid.UUID(int=99, version=4)): b"k" * 32}, clock.now())
    finally:
        app.close()

    def resume(app: LedgerApp, proj: Projections) -> Any:
        return resume_request(app, proj, rid, "operator")

    def text(data: dict[str, Any]) -> str:
        return "\n".join([f"request {data['request_id']}", f"batch {data.get('batch_id')}",
                          *data.get("event_ids", [])])

    r, data, _ = tw.both(["requests", "resume", rid], resume)
    same(r, printed(data, False, text(data)),
         f"OK: request {rid} completed; batch {data['batch_id']} closed")
    for flag in ("--json", "-q"):
        r, data, _ = tw.both(["requests", "resume", rid, flag], resume)
        same(r, printed(data, flag == "--json", text(data)),
             f"OK: nothing to do: request {rid} was completed at {data['completed_at']}")
    for request, key in (("nope", "operator"), (rid, "nokey"), (str(uuid.UUID(int=5)), "x")):
        r, e, _ = tw.both(
            ["requests", "resume", request, "--as", key],
            lambda app, proj, q=request, k=key: resume_request(app, proj, q, k))  # type: ignore[misc]
        refused(r, e, tw)

    dry = "dry run: would discard 1 orphan data key(s); nothing changed"
    for args, verdict in ((["--dry-run", "--json"], dry), (["--dry-run"], dry),
                          (["--json"], "OK: discarded 1 orphan data key(s)"),
                          ([], "OK: nothing to repair"), (["--json"], "OK: nothing to repair")):
        dry_run = "--dry-run" in args
        r, data, _ = tw.both(["repair", *args],
                             lambda app, proj, d=dry_run: app.repair(dry_run=d))  # type: ignore[misc]
        same(r, printed(data, "--json" in args, "\n".join(data["orphan_keys"])), verdict)


# ---------------------------------------------------------------------- the modules
def test_the_erasure_commands_open_neither_the_application_nor_the_read_models() -> None:
    """No function of cli/erasure.py or cli/resume.py names the application or the read
    models."""
    import ast

    root = Path(__file__).resolve().parents[1]
    for name in ("cli/erasure.py", "cli/resume.py"):
        source = (root / name).read_text()
        for node in ast.parse(source).body:
            if isinstance(node, ast.FunctionDef):
                body = ast.get_source_segment(source, node) or ""
                assert not re.search(r"\bapp\.|\bproj\.|Projections|LedgerApp", body), \
                    (name, node.name)
