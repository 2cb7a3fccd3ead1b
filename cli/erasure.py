"""Governance commands, mounted on the ``ledger`` CLI by :func:`register`.

``ledger redact|unredact|delete``, ``ledger artifact delete``, ``ledger redact-user``,
``ledger review list|resolve``, ``ledger evidence-pack``, ``ledger verify-pack``.
Data on stdout, verdicts on stderr, ``--json`` everywhere; errors are ledger.errors
classes, mapped to exit codes by the ``ledger`` entry point. The commands call the facade
(``service.facade.MemoryService``) as the local operator, through the ``served`` opener
cli/main.py registers; ``verify-pack`` needs no ledger home (governance/pack.py's
offline verifier).
"""

from __future__ import annotations

import sys
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cli.opener import Served
from cli.output import JsonOpt, out, partial_verdict, verdict
from ledger.errors import EXIT_VERIFY, ConflictError, InputError
from ledger.text import event_lines, plural

if TYPE_CHECKING:  # each command imports what it uses: `ledger --help` stays light
    from service.caller import Caller
    from service.facade import MemoryService

ReasonOpt = Annotated[str, typer.Option(help="Why (recorded in the signed events).")]
OperatorOpt = Annotated[str, typer.Option(
    "--operator", "--as", help="Operator key that signs (default: operator).")]


review_cli = typer.Typer(no_args_is_help=True, help="Memories flagged for review.")
_served: list[Served] = []


def register(cli: typer.Typer, served: Served, artifact_cli: typer.Typer) -> None:
    _served[:] = [served]
    cli.command("redact")(redact_command)
    cli.command("unredact")(unredact_command)
    cli.command("delete")(delete_command)
    cli.command("redact-user")(redact_user_command)
    cli.command("evidence-pack")(evidence_pack_command)
    cli.command("verify-pack")(verify_pack_command)
    cli.add_typer(review_cli, name="review")
    artifact_cli.command("delete")(artifact_delete_command)


def _serve(operator: str = "operator") -> AbstractContextManager[tuple[MemoryService, Caller]]:
    return _served[0](operator=operator)


def redact_command(
    atom: Annotated[str, typer.Argument(help="Atom ref or id.")],
    mode: Annotated[str, typer.Option(help="soft (hidden, reversible), archive (kept for "
                                           "audit), hard (destroyed everywhere).")],
    reason: ReasonOpt,
    operator: OperatorOpt = "operator",
    as_json: JsonOpt = False,
) -> None:
    """Redact one atom.  Example: ledger redact atom_001 --mode hard --reason "user request\""""
    with _serve(operator) as (svc, me):
        done = svc.redact(me, atom, mode, reason)
    data = done.report
    out(data, as_json, "\n".join(event_lines(data["event_ids"])))
    partial_verdict(data, f"the hard redaction of atom {done.atom_id}")
    verdict(f"OK: atom {done.atom_id} {mode}-redacted")


def unredact_command(atom: str, reason: ReasonOpt, operator: OperatorOpt = "operator",
                     as_json: JsonOpt = False) -> None:
    """Undo a soft redaction.  Example: ledger unredact atom_001 --reason "mistake\""""
    with _serve(operator) as (svc, me):
        data = svc.unredact(me, atom, reason).report
    out(data, as_json, data["event_ids"][0])
    verdict("OK: visible again")


def delete_command(atom: str, reason: ReasonOpt, operator: OperatorOpt = "operator",
                   as_json: JsonOpt = False) -> None:
    """Delete an atom (same mechanics as hard redaction).  Example: ledger delete atom_001"""
    with _serve(operator) as (svc, me):
        done = svc.erase_atom(me, atom, reason)
    data = done.report
    out(data, as_json, "\n".join(event_lines(data["event_ids"])))
    partial_verdict(data, f"the deletion of atom {done.atom_id}")
    verdict(f"OK: atom {done.atom_id} deleted; batch {data['batch_id']}")


def artifact_delete_command(
    artifact: str, reason: ReasonOpt, operator: OperatorOpt = "operator",
    flag_unsourced: Annotated[bool, typer.Option(
        help="Flag dependent atoms left without sources instead of deleting them.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Delete an artifact; atoms that depended on it are re-evaluated (Konshus cascade).

    Example: ledger artifact delete art_101 --reason "user removed the chat"
    """
    with _serve(operator) as (svc, me):
        data = svc.erase_artifact(me, artifact, reason, flag_unsourced=flag_unsourced).report
    c = data["cascade"]
    out(data, as_json, "\n".join(event_lines(data["event_ids"])))
    partial_verdict(data, "the artifact's deletion")
    verdict(f"OK: artifact deleted; {plural(len(c['deleted_atoms']), 'atoms')} deleted, "
             f"{len(c['kept_atoms'])} kept with other sources, "
             f"{len(c['flagged_unsourced'])} flagged unsourced")


def redact_user_command(
    subject: Annotated[str, typer.Argument(help="Subject ref or id.")],
    operator: Annotated[str, typer.Option(help="Operator key that approves and signs.")],
    reason: Annotated[str | None, typer.Option(
        help="Why (sealed in the signed request; required unless --resume).")] = None,
    identifier: Annotated[list[str] | None, typer.Option(
        help="A name or e-mail that identifies the person (repeatable). It erases nothing: "
             "memories of other subjects it matches (whole words, any case) are flagged "
             "refers-to-erased for review.")] = None,
    session: Annotated[list[str] | None, typer.Option(
        help="A session id of theirs (repeatable); other subjects' memories in it are "
             "flagged, not erased.")] = None,
    legal_basis: Annotated[str | None, typer.Option(help="e.g. GDPR Art. 17(1)(a).")] = None,
    dry_run: Annotated[bool, typer.Option(help="Show what would be erased and flagged, and "
                                               "the plan's digest; change nothing.")] = False,
    plan: Annotated[str | None, typer.Option(
        help="The dry run's plan digest: refuse, writing nothing, if the plan changed.")]
    = None,
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask for confirmation on a "
                                                    "terminal.")] = False,
    resume: Annotated[bool, typer.Option(
        "--resume", help="Finish the subject's interrupted request (no new one).")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Right to be forgotten: receipt, gather, operator-signed batch, hard erasure of
    every copy, review flags for referring memories, confirmation with event ids.
    An interrupted run is finished by running it again (or with --resume): the same
    request and batch, from the step where it stopped.

    Only the subject's own memories are erased. Run --dry-run first, then the real run
    with --plan DIGEST from it.

    Example: ledger redact-user user_9f4e --reason "GDPR Art. 17" --operator operator \\
    --identifier "jane@example.org" --dry-run
    """
    from ledger import progress

    with _serve(operator) as (svc, me):
        common: dict[str, Any] = dict(
            reason=reason or "", identifiers=identifier or [], sessions=session or [],
            legal_basis=legal_basis)
        if not dry_run and not resume and plan is None and not yes and sys.stdin.isatty():
            with progress.bar("Planning", total=1, json=as_json) as bar:
                preview = svc.redact_user(me, subject, dry_run=True, progress=bar.step,
                                          **common).report
            sys.stderr.write(_plan_text(preview) + "\n")
            if not typer.confirm("erase these memories for good?", err=True):
                raise InputError("not confirmed; nothing was written")
            plan = preview["plan_digest"]
        with progress.bar("Erasing", total=1, json=as_json) as bar:
            data = svc.redact_user(me, subject, dry_run=dry_run, expect_plan=plan,
                                   resume=resume, progress=bar.step, **common).report
    for warning in data.get("warnings", []):
        verdict(f"warning: {warning}")
    t = data["targets"]
    counts = f"{plural(len(t['atoms']), 'atoms')}, {plural(len(t['artifacts']), 'artifacts')}"
    flagged = len(data["flag_for_review"])
    review = len(data.get("review_artifacts", []))
    if dry_run:
        out(data, as_json, _plan_text(data))
        verdict(f"dry run: would erase {counts} of the subject and flag "
                 f"{plural(flagged, 'memories')} of others for review "
                 f"({plural(review, 'artifacts')} of others listed); nothing changed; plan "
                 f"{data['plan_digest']}")
        return
    if data.get("no_op"):
        out(data, as_json, data["request_id"])
        verdict(f"OK: nothing to do: request {data['request_id']} was completed at "
                 f"{data['completed_at']}")
        return
    out(data, as_json, "\n".join([f"request {data['request_id']}",
                                   f"batch {data['batch_id']}",
                                   *event_lines(data["event_ids"]),
                                   *(f"flagged {a} refers-to-erased"
                                     for a in data["flag_for_review"]),
                                   *(f"review artifact {a}" for a in
                                     data.get("review_artifacts", []))]))
    partial_verdict(data, f"the erasure of request {data['request_id']}")
    again = "; resumed an interrupted run" if data.get("resumed") else ""
    plan_note = f"; plan {data['plan_digest']}" if data.get("plan_digest") else ""
    verdict(f"OK: erased {counts}; {plural(flagged, 'memories')} of others flagged for "
             f"review (`ledger review list`); {plural(review, 'artifacts')} of others to "
             f"review; batch {data['batch_id']}{plan_note}{again}")


def _plan_text(data: dict[str, Any]) -> str:
    """A dry run for people: ids, counts and identifier positions, never content."""
    t = data["targets"]
    refs = data.get("subject_refs", {})

    def who(sid: str) -> str:
        return f"{refs[sid]} ({sid})" if sid in refs else sid

    lines = [f"erase (subject {who(data['subject_id'])}): {plural(len(t['atoms']), 'atoms')}, "
             f"{plural(len(t['artifacts']), 'artifacts')}, "
             f"{plural(len(t['subjects']), 'subject records')}"]
    lines += [f"  atom {a}" for a in t["atoms"]] + [f"  artifact {a}" for a in t["artifacts"]]
    lines.append(f"flag for review, not erased (memories of others): "
                 f"{len(data['flag_for_review'])}")
    lines += [f"  atom {f['atom_id']}  subject {who(f['subject_id'])}: {f['reason']}"
              for f in data.get("flags", [])]
    if data.get("review_artifacts"):
        lines.append(f"artifacts of others to review, not erased: "
                     f"{len(data['review_artifacts'])}")
        lines += [f"  artifact {a}" for a in data["review_artifacts"]]
    for ident in data.get("identifiers", []):
        per = ", ".join(f"{who(sid)}{', this subject' if sid == data['subject_id'] else ''}: "
                        f"{plural(c['atoms'], 'atoms')}, {plural(c['artifacts'], 'artifacts')}"
                        for sid, c in ident["matched"].items()) or "nothing"
        lines.append(f"identifier #{ident['identifier']} matched: {per}")
    for s in data.get("sessions", []):
        lines.append(f"session {s['session_id']}: {s['atoms_of_subject']} atoms of the "
                     f"subject, {s['flagged_atoms_of_others']} of others flagged")
    for h in data.get("held", []):  # ADR 0047: approved, kept while the hold lasts
        lines.append(f"kept under legal hold {h['hold']} ({h['reason']}): "
                     f"{plural(len(h['atoms']), 'atoms')}, "
                     f"{plural(len(h['artifacts']), 'artifacts')}, "
                     f"{plural(len(h['subjects']), 'subject records')}")
    lines.append(f"plan {data['plan_digest']}")
    return "\n".join(lines)


@review_cli.command("list")
def review_list(as_json: JsonOpt = False) -> None:
    """Memories flagged for review (unsourced, refers to erased memory).

    Example: ledger review list --json
    """
    with _serve() as (svc, me):
        rows = [f.model_dump(exclude={"subject_id"}) for f in svc.list_flags(me)]
    out(rows, as_json, "\n".join(f"{r['atom_id']}  {r['flag']}  {r['reason']}" for r in rows))


@review_cli.command("resolve")
def review_resolve(
    atom: str,
    action: Annotated[str, typer.Option(help="reanonymise (needs --text), redact, dismiss.")],
    flag: Annotated[str, typer.Option(help="Which flag.")] = "refers-to-erased",
    text: Annotated[str | None, typer.Option(help="The re-anonymised sentence.")] = None,
    operator: OperatorOpt = "operator",
    as_json: JsonOpt = False,
) -> None:
    """Resolve a review flag: re-anonymise by correction, redact, or dismiss.

    Example: ledger review resolve 3f2a... --action reanonymise --text "A guest liked it"
    """
    with _serve(operator) as (svc, me):  # the correction is signed by the writer key
        done = svc.resolve_review(me, atom, action, flag=flag, text=text)
    data = done.report
    out(data, as_json, "\n".join(event_lines(data["event_ids"])))
    verdict(f"OK: {flag} on {done.atom_id} resolved ({action})")


def evidence_pack_command(
    target: Annotated[str, typer.Argument(help="BATCH id, or 'sign' to countersign DIR.")],
    folder: Annotated[Path | None, typer.Argument(help="With 'sign': the pack folder.")]
    = None,
    out_dir: Annotated[Path | None, typer.Option(
        "--out", help="Folder to write the pack to.")] = None,
    make_zip: Annotated[bool, typer.Option("--zip", help="Also write DIR.zip.")] = False,
    signer: Annotated[str, typer.Option("--as", help="Key that signs.")] = "operator",
    as_json: JsonOpt = False,
) -> None:
    """Build the Evidence Pack of a batch, or countersign one (`evidence-pack sign DIR`).

    Example: ledger evidence-pack 3f2a... --out pack --zip; ledger evidence-pack sign pack --as dpo
    """
    from uuid import UUID

    from ledger import progress

    with _serve(signer) as (svc, me):
        svc.pack_signer(me)  # refused before anything else: a key verify-pack would refuse
        if target == "sign":
            if folder is None:
                raise InputError("usage: ledger evidence-pack sign DIR --as KEY")
            signed = svc.countersign_pack(me, folder)
            out(signed.model_dump(), as_json, signed.pack)
            verdict(f"OK: {folder} countersigned by {signer}")
            return
        if out_dir is None:
            raise InputError("--out DIR is required", hint="ledger evidence-pack BATCH --out pack")
        try:
            UUID(target)
        except ValueError:
            raise InputError(f"{target!r} is not a batch id") from None
        with progress.bar("Building the pack", total=1, json=as_json) as bar:
            written = svc.write_pack(me, target, out_dir, make_zip=make_zip, progress=bar.step)
    out(written.model_dump(), as_json,
        written.pack + (f"\n{written.zip}" if written.zip else ""))
    verdict(f"OK: evidence pack written to {written.pack}"
            + (f" and {written.zip}" if written.zip else ""))


def verify_pack_command(
    pack: Annotated[Path, typer.Argument(help="Pack folder or .zip.")],
    root_key: Annotated[Path | None, typer.Option(
        help="Trusted root public key (default: the pack's own keys/root.pub).")] = None,
    policy: Annotated[Path | None, typer.Option(
        help="A witness policy (c2sp.org/tlog-policy): witness keys, groups, quorum; the "
             "pack fails at step 7.3 when its checkpoints do not meet it.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Verify an Evidence Pack offline, with public keys only.

    Example: ledger verify-pack pack.zip --root-key root.pub --policy witnesses.policy
    """
    from governance.copies import copies_line
    from governance.pack_layout import PackInvalid
    from governance.pack_verify import verify_pack
    from governance.witnessed import summary
    from keys.keyring import read_public_key_file
    from ledger import progress
    from ledger.witness.policy import parse_policy

    root = read_public_key_file(root_key) if root_key else None
    witness_policy = None
    if policy is not None:
        try:
            witness_policy = parse_policy(policy.read_bytes())
        except OSError as e:
            raise InputError(f"cannot read policy file {policy}: {e}") from e
    try:
        with progress.bar("Verifying the pack", json=as_json) as bar:
            report = verify_pack(pack, root, witness_policy, bar.step)
    except PackInvalid as e:
        out({"ok": False, "step": e.step, "reason": str(e)}, as_json)
        verdict(f"FAIL: {e}")
        raise typer.Exit(EXIT_VERIFY) from None
    out(report.as_json(), as_json)
    trust = "the trusted root key" if root_key else "the pack's own root key (pin one with " \
                                                    "--root-key)"
    copies = copies_line(report.copies)
    if report.outcome == "partial":  # authentic evidence of an erasure that did not finish
        from governance.partial import partial_line

        verdict(f"PARTIAL: pack verified against {trust}: {report.events} signed events, "
                f"signers {', '.join(report.signers)}; it proves a PARTIAL erasure, not a "
                f"complete one: {partial_line(report.partial_reasons)}")
        raise typer.Exit(EXIT_VERIFY)
    verdict(f"OK: pack verified against {trust}: {report.events} signed events, signers "
             f"{', '.join(report.signers)}{summary(report.witnesses)}; "
             f"{plural(report.flagged_for_review, 'memories')} of others flagged for review"
             + (f"; {copies}" if copies else ""))


__all__ = ["ConflictError", "register"]
