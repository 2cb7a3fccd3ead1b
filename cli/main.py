"""The ``ledger`` command (typer): the composition root.

Data goes to stdout, verdicts and progress to stderr. Every reporting command
takes ``--json``. Exit codes: 0 ok, 1 verification failed, 2 usage, 3
environment. All errors are mapped to exit codes here, in :func:`main`.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

# Start-up is part of the interface: `ledger --help` and `ledger --version` import typer and
# these light modules only; every command imports what it uses inside its body (issue 15,
# ADR 0026). tests/test_startup.py fails when a heavy module comes back up here.
from cli import values
from cli.audit import register as register_audit
from cli.backup import register as register_backup
from cli.certificate import register as register_certificate
from cli.erasure import register as register_governance
from cli.extract import register as register_extract
from cli.output import JsonOpt, out, verdict
from cli.policy import register as register_policy
from cli.portability import register as register_portability
from cli.reads import register as register_projections
from cli.receipt import register as register_receipt
from cli.serve import register as register_server
from cli.tenants import register as register_tenants
from cli.tokens import register as register_tokens
from cli.webhooks import register as register_webhooks
from cli.witness import register as register_witness
from keys.errors import (
    DataKeyUnavailable,
    KeyError_,
    KeyNotAuthorized,
    KeyringError,
    KeystoreError,
    PublicKeyFileError,
)
from ledger.clock import parse_instant
from ledger.errors import (
    EXIT_ENV,
    EXIT_OK,
    EXIT_USAGE,
    EXIT_VERIFY,
    EnvironmentProblem,
    InputError,
    LedgerError,
)

if TYPE_CHECKING:
    from datetime import datetime

    from ledger.checkpoint import Checkpoint
    from ledger.progress import Steps
    from service.caller import Caller
    from service.facade import MemoryService

cli = typer.Typer(
    name="ledger", no_args_is_help=True, add_completion=True,
    pretty_exceptions_enable=False, rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
    help="memory-ledger: signed, event-sourced memory for AI assistants, with proofs of erasure.",
)
subject_cli = typer.Typer(no_args_is_help=True, help="Register and show subjects.")
artifact_cli = typer.Typer(no_args_is_help=True, help="Capture and show artifacts.")
atom_cli = typer.Typer(no_args_is_help=True, help="Record, show, correct and rehearse atoms.")
keys_cli = typer.Typer(no_args_is_help=True, help="The key roster: who may sign what, since when.")
cli.add_typer(subject_cli, name="subject")
cli.add_typer(artifact_cli, name="artifact")
cli.add_typer(atom_cli, name="atom")
cli.add_typer(keys_cli, name="keys")

ActorOpt = Annotated[str | None, typer.Option("--as", help="Name of the key that signs "
                                                           "(default: the home's writer key).")]
ReasonOpt = Annotated[str | None, typer.Option(help="Why (recorded in the signed event).")]


class State:
    home: Path | None = None


STATE = State()


HOME_HELP = "Ledger home folder (default: LEDGER_HOME, or .ledger/ found upward)."


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        sys.stdout.write(f"ledger (memory-ledger) {version('memory-ledger')}\n")
        raise typer.Exit()


@cli.callback()
def _root(
    home: Annotated[Path | None, typer.Option("--home", metavar="DIR", help=HOME_HELP)] = None,
    quiet: Annotated[bool, typer.Option(
        "-q", "--quiet", help="No progress bars; verdicts and data only.")] = False,
    verbose: Annotated[bool, typer.Option(
        "-v", "--verbose", help="Per-event lines instead of summaries; info log lines.")]
    = False,
    version: Annotated[bool, typer.Option(
        "--version", callback=_version, is_eager=True, help="Print the version and exit.")]
    = False,
) -> None:
    from ledger import progress

    progress.configure(quiet=quiet, verbose=verbose)
    STATE.home = home


@contextmanager
def served(writer: str | None = None, operator: str = "operator"
           ) -> Iterator[tuple[MemoryService, Caller]]:
    """The facade over the home (``service.root``, read models opened only if a use case
    needs them) and the CLI's caller: the local operator (ADR 0027), its memory writes
    signed by ``writer`` (``--as``; default: the home's writer key), its operator acts by
    ``operator`` (ADR 0040)."""
    from service.caller import local_operator
    from service.root import opened_service

    with opened_service(STATE.home, lazy=True) as svc:
        yield svc, local_operator(signing_key=operator, writer_key=writer)


def _when(value: str | None, what: str) -> str | None:
    return None if value is None else parse_instant(value, what).isoformat()


# ---------------------------------------------------------------------- init
@cli.command()
def init(
    db: Annotated[str | None, typer.Option(
        help="PostgreSQL URL for the event store and read models, "
             "e.g. postgresql://postgres@127.0.0.1:5432/test?schema=ledger "
             "(default: SQLite files in the home).")] = None,
    keystore: Annotated[str | None, typer.Option(
        help="Where data keys live (default: an SQLite file in the home, where secure "
             "deletion is guaranteed; see docs/adr/0003).")] = None,
    kek: Annotated[str | None, typer.Option(
        help="Where the key-encryption keys live: file:FOLDER (relative to the home; "
             "default file:kek, or LEDGER_KEK) or an RFC 7512 URI "
             "'pkcs11:token=T;object=O?module-path=/usr/lib/softhsm/libsofthsm2.so"
             "&pin-source=file:/etc/ledger/pin' (docs/deploy.md).")] = None,
    controller: Annotated[str | None, typer.Option(
        help="The data controller's name, shown on receipts and certificates "
             "(config.toml [controller]).")] = None,
    contact: Annotated[str | None, typer.Option(
        help="The controller's contact for data-protection matters.")] = None,
    locale: Annotated[str, typer.Option(
        help="Default language of documents for people (en, es: governance/locale/).")]
    = "en",
    as_json: JsonOpt = False,
) -> None:
    """Create a ledger home: keys, config, event store, keystore, signed key roster.

    Example: ledger --home /tmp/demo init
    """
    from ledger.home import HOME_DIRNAME
    from service.root import create_home

    home = STATE.home or Path.cwd() / HOME_DIRNAME
    from governance.i18n import languages

    if locale not in languages():  # a catalogue per language (governance/locale/)
        raise InputError(f"--locale {locale!r} is not a language of this ledger's documents",
                         hint=f"use one of: {', '.join(languages())}")
    cfg = create_home(home, db=db, keystore=keystore, kek=kek, controller=controller,
                      contact=contact, locale=locale)
    out({"home": str(home), "ledger_id": cfg.ledger_id, "origin": cfg.origin,
         "root_kid": cfg.root_kid, "backend": "postgresql" if cfg.events.is_postgres else "sqlite"},
        as_json, str(home))
    verdict(f"OK: ledger {cfg.ledger_id} created in {home}")


# ---------------------------------------------------------------------- subjects
@subject_cli.command("add")
def subject_add(
    ref: Annotated[str, typer.Argument(help="The subject's opaque id (not an email or name).")],
    name: Annotated[str | None, typer.Option("--name", help="Display name (encrypted).")] = None,
    locale: Annotated[str | None, typer.Option(help="Locale, e.g. en-US.")] = None,
    actor: ActorOpt = None, as_json: JsonOpt = False,
) -> None:
    """Register a subject.

    Example: ledger subject add user_9f4e --name "J. Miller"
    """
    from service.models import SubjectIn

    with served(actor) as (svc, me):
        s = svc.register_subject(me, SubjectIn.unchecked(ref=ref, display_name=name,
                                                         locale=locale))
    out({"subject_id": s.subject_id, "ref": ref}, as_json, s.subject_id)


@subject_cli.command("show")
def subject_show(ref: str, as_json: JsonOpt = False) -> None:
    """Show a subject.  Example: ledger subject show user_9f4e"""
    with served() as (svc, me):
        data = svc.get_subject(me, ref).model_dump()
    out(data, as_json, "\n".join(f"{k}: {v}" for k, v in data.items()))


# ---------------------------------------------------------------------- artifacts
@artifact_cli.command("add")
def artifact_add(
    subject: Annotated[str, typer.Option(help="Subject ref or id.")],
    kind: Annotated[str, typer.Option(help="chat, document, journal, voice, message, email, "
                                           "calendar.")],
    ref: Annotated[str | None, typer.Option(help="Your id for it, e.g. art_101.")] = None,
    title: Annotated[str | None, typer.Option(help="A title (encrypted with the body).")]
    = None,
    body: Annotated[str | None, typer.Option(help="Text of the artifact (encrypted).")] = None,
    body_file: Annotated[Path | None, typer.Option(help="Read the body from a file.")] = None,
    source: Annotated[str | None, typer.Option(help="e.g. chatgpt-export, manual.")] = None,
    private: Annotated[bool, typer.Option(help="Never export for training or sharing.")] = False,
    captured_at: Annotated[str | None, typer.Option(
        help="When it was captured, an ISO 8601 date or instant (default: now).")] = None,
    actor: ActorOpt = None, as_json: JsonOpt = False,
) -> None:
    """Capture an artifact (a chat, document, note) that atoms can cite.

    Example: ledger artifact add --subject user_9f4e --kind chat --ref art_101 --body-file chat.txt
    """
    if body is not None and body_file is not None:
        raise InputError("give --body or --body-file, not both")
    if body_file is not None:
        try:
            body = body_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise InputError(f"cannot read {body_file}: {e}") from e
    from service.models import ArtifactIn

    data = ArtifactIn.unchecked(
        subject=subject, ref=ref, kind=kind, title=title, body=body, source=source,
        private=private, captured_at=_when(captured_at, "--captured-at"))
    with served(actor) as (svc, me):
        aid = svc.capture_artifact(me, data).artifact_id
    out({"artifact_id": aid}, as_json, aid)


@artifact_cli.command("show")
def artifact_show(artifact: str, as_json: JsonOpt = False) -> None:
    """Show an artifact.  Example: ledger artifact show art_101"""
    with served() as (svc, me):
        a = svc.get_artifact(me, artifact)
    # the facade's `subject` is left out; an erased artifact's source is unreadable (it
    # is sealed with the title and body), shown as None where the facade says ERASED
    data = {"artifact_id": a.artifact_id, "ref": a.ref, "subject_id": a.subject_id,
            "kind": a.kind, "captured_at": a.captured_at,
            "source": None if a.content_erased else a.source,
            "private": a.private, "content_erased": a.content_erased,
            "title": a.title, "body": a.body}
    out(data, as_json, "\n".join(f"{k}: {v}" for k, v in data.items()))


# ---------------------------------------------------------------------- atoms
def _details(values: list[str]) -> list[dict[str, Any]]:
    details = []
    for v in values:
        content, sep, bright = v.rpartition("=")
        if not sep:
            raise InputError(f"--detail {v!r} must look like 'TEXT=BRIGHTNESS', e.g. 'rain=0.2'")
        try:
            details.append({"content": content, "brightness": float(bright)})
        except ValueError:
            raise InputError(f"--detail {v!r}: brightness {bright!r} is not a number") from None
    return details


@atom_cli.command("add")
def atom_add(
    subject: Annotated[str, typer.Option(help="Subject ref or id.")],
    text: Annotated[str, typer.Option(help="One short sentence a person can review "
                                           "(encrypted).")],
    kind: Annotated[str, typer.Option(help="fact, preference, relationship, belief, goal, skill, "
                                           "episodic, semantic, procedural.")] = "fact",
    ref: Annotated[str | None, typer.Option(help="Your id for it, e.g. atom_001.")] = None,
    gist: Annotated[str | None, typer.Option(
        help="A shorter form of the text, kept when details fade.")] = None,
    detail: Annotated[list[str] | None, typer.Option(
        help="A detail with brightness, 'TEXT=0.4' (repeatable).")] = None,
    tag: Annotated[list[str] | None, typer.Option(help="A tag (repeatable).")] = None,
    confidence: Annotated[float | None, typer.Option(
        help="How sure the source is, 0 to 1.")] = None,
    sensitivity: Annotated[str, typer.Option(
        help="public, private, medical, financial, legal.")] = "private",
    valid_from: Annotated[str | None, typer.Option(
        help="When it became true (ISO 8601); recall's --since/--until read it.")] = None,
    valid_to: Annotated[str | None, typer.Option(
        help="When it stops being true (ISO 8601).")] = None,
    derivation: Annotated[str, typer.Option(help="stated, inferred or observed.")] = "stated",
    artifact: Annotated[list[str] | None, typer.Option(
        help="Artifact ref or id it was drawn from (repeatable).")] = None,
    extractor: Annotated[str | None, typer.Option(help="Model or person that extracted it.")]
    = None,
    human_reviewed: Annotated[bool, typer.Option(
        help="A person checked it (an inferred memory, say).")] = False,
    salience: Annotated[float, typer.Option(help="How much it matters, 0 to 1.")] = 0.5,
    valence: Annotated[float, typer.Option(help="Emotional valence, -1 to 1.")] = 0.0,
    privacy_class: Annotated[str | None, typer.Option(
        help="The memory policy's privacy class (e.g. sensitive-pii).")] = None,
    consent_basis: Annotated[str | None, typer.Option(
        help="The lawful basis the policy asks for (e.g. explicit-consent).")] = None,
    session: Annotated[str | None, typer.Option(help="Session id.")] = None,
    min_sources: Annotated[int, typer.Option(
        help="Artifacts it needs to stay sourced; below, deleting one flags or deletes it.")]
    = 1,
    on_similar: Annotated[str, typer.Option(
        help="The subject's memories that say the same are looked for, and: add (add "
             "anyway, name them; the default), rehearse (rehearse the most similar "
             "instead), supersede (this one supersedes it) or refuse (write nothing, exit "
             "2); none adds without looking (a quick add for scripts).")] = "add",
    actor: ActorOpt = None, as_json: JsonOpt = False,
) -> None:
    """Record an atom; prints its id (the rehearsed atom's with --on-similar rehearse).

    Example: ledger atom add --subject user_9f4e --text "Prefers direct feedback" \\
    --derivation inferred --artifact art_101 --extractor claude-opus-4 --on-similar rehearse
    """
    from service.models import AtomIn, Detail

    data = AtomIn.unchecked(
        subject=subject, text=text, kind=kind, ref=ref, gist=gist,
        details=[Detail.model_construct(**d) for d in _details(detail or [])], tags=tag or [],
        confidence=confidence, sensitivity=sensitivity,
        valid_from=_when(valid_from, "--valid-from"), valid_to=_when(valid_to, "--valid-to"),
        derivation=derivation, artifact_ids=artifact or [], extractor=extractor,
        human_reviewed=human_reviewed, salience=salience, emotional_valence=valence,
        privacy_class=privacy_class, consent_basis=consent_basis, session_id=session,
        min_sources=min_sources, on_similar=None if on_similar == "none" else on_similar)
    with served(actor) as (svc, me):
        added = svc.add_atom(me, data)
    aid, archived = added.atom_id, added.archived
    similar = [s.model_dump() for s in added.similar]
    out({"atom_id": aid, "archived": {"atoms": len(archived), "ids": archived},
         "outcome": added.outcome, "supersedes": added.supersedes, "similar": similar},
        as_json, str(aid))
    if added.outcome == "rehearsed":
        verdict(f"OK: rehearsed atom {aid}, which says the same; no atom was added "
                "(--on-similar rehearse)")
    elif added.outcome == "superseded":
        verdict(f"OK: added atom {aid}, superseding atom {added.supersedes} "
                "(--on-similar supersede)")
    elif similar:
        verdict(f"note: {len(similar)} memory(ies) of the subject say the same: "
                + ", ".join(s["atom_id"] for s in similar)
                + " (--on-similar rehearse, supersede or refuse decides)")
    if archived:
        verdict(f"note: {len(archived)} atom(s) archived by the policy (maxAtoms): "
                + ", ".join(archived[:5]))


def _atom_text(d: dict[str, Any]) -> str:
    lines = []
    for k, v in d.items():
        if v is None or v == [] or v == {}:
            continue
        lines.append(f"{k}: {v}")
    return "\n".join(lines)


@atom_cli.command("show")
def atom_show(atom: str, as_json: JsonOpt = False) -> None:
    """Show an atom's current state.  Example: ledger atom show atom_001"""
    from ledger.domain import ATOM_VIEW

    with served() as (svc, me):
        shown = svc.get_atom(me, atom).model_dump()
    data = {k: shown[k] for k in ATOM_VIEW}  # in the atom's order, less the facade's `subject`
    out(data, as_json, _atom_text(data))
    if data["content_erased"]:
        verdict(f"note: the content of atom {data['atom_id']} was erased "
                f"(data key destroyed at {data['data_key_destroyed_at']})")


@atom_cli.command("history")
def atom_history(atom: str, as_json: JsonOpt = False) -> None:
    """Every signed event of an atom and its corrections, in log order.

    Example: ledger atom history atom_001
    """
    with served() as (svc, me):
        rows = [r.model_dump() for r in svc.history(me, atom)]
    text = "\n".join(
        f"{r['seq']:>8}  {r['timestamp']}  {r['topic'].split(':', 1)[1]:<28} {r['event_id']}  "
        f"by {r['signer']}" for r in rows)
    out(rows, as_json, text)


@atom_cli.command("correct")
def atom_correct(
    atom: str,
    text: Annotated[str, typer.Option(help="The corrected sentence.")],
    reason: ReasonOpt = None,
    confidence: Annotated[float | None, typer.Option(
        help="How sure the correction is, 0 to 1.")] = None,
    valid_from: Annotated[str | None, typer.Option(
        help="When the corrected fact became true (default: now).")] = None,
    actor: ActorOpt = None, as_json: JsonOpt = False,
) -> None:
    """Supersede an atom with a corrected one; the old atom gets valid_to, nothing is overwritten.

    Example: ledger atom correct atom_001 --text "Works at Beta" --reason "job change"
    """
    from service.models import AtomCorrectionIn

    data = AtomCorrectionIn.unchecked(text=text, gist=None, confidence=confidence,
                                      reason=reason)
    since = _when(valid_from, "--valid-from")
    with served(actor) as (svc, me):
        new = svc.correct_atom(me, atom, data, valid_from=since).new_atom_id
    out({"atom_id": new, "supersedes": atom}, as_json, new)


@atom_cli.command("rehearse")
def atom_rehearse(atom: str,
                  session: Annotated[str | None, typer.Option(help="Session id.")] = None,
                  reason: ReasonOpt = None, actor: ActorOpt = None,
                  as_json: JsonOpt = False) -> None:
    """Record that an atom was recalled (a signed rehearsal event).

    Example: ledger atom rehearse atom_001 --session sess:42
    """
    with served(actor) as (svc, me):
        count = svc.rehearse_atom(me, atom, session, reason).rehearsal_count
    out({"atom_id": atom, "rehearsal_count": count}, as_json, str(count))


@atom_cli.command("expire")
def atom_expire(atom: str, reason: ReasonOpt = None,
                actor: ActorOpt = None, as_json: JsonOpt = False) -> None:
    """Mark an atom no longer valid from now.  Example: ledger atom expire atom_001"""
    with served(actor) as (svc, me):
        svc.expire_atom(me, atom, reason)
    out({"atom_id": atom, "status": "expired"}, as_json, "expired")


# ---------------------------------------------------------------------- keys
@keys_cli.command("list")
def keys_list(as_json: JsonOpt = False) -> None:
    """The key roster: key ids, names, roles and validity.  Example: ledger keys list"""
    with served() as (svc, me):
        rows = [r.model_dump() for r in svc.roster(me)]  # with the vkey of log keys
        local = set(svc.held_keys(me))
    for r in rows:
        r["private_key_here"] = r["name"] in local
    text = "\n".join(
        f"{r['kid']}  {r['name']:<12} {r['role']:<9} from {r['valid_from'] or '-'}"
        + (f"  REVOKED from {r['revoked_from']}" if r["revoked_from"] else "")
        + (f"\n    vkey {r['vkey']}" if r.get("vkey") else "") for r in rows)
    out(rows, as_json, text)


@keys_cli.command("authorize")
def keys_authorize(
    name: Annotated[str, typer.Argument(help="Key name, e.g. dpo or writer2.")],
    role: Annotated[str, typer.Option(help="writer, operator, log or auditor.")],
    public_key: Annotated[Path | None, typer.Option(
        help="A .pub file of a key held elsewhere; without it a new key is made here.")] = None,
    valid_from: Annotated[str | None, typer.Option("--from", help="Valid from (default now).")]
    = None,
    as_json: JsonOpt = False,
) -> None:
    """Authorize a key for a role (signed by the root key).

    Example: ledger keys authorize dpo --role operator
    """
    from keys.keyring import read_public_key_file

    pub = read_public_key_file(public_key) if public_key else None
    start = parse_instant(valid_from, "--from") if valid_from else None
    with served() as (svc, me):
        kid = svc.authorize_key(me, name, role, pub, start).kid
    out({"kid": kid, "name": name, "role": role}, as_json, kid)


@keys_cli.command("revoke")
def keys_revoke(
    kid: Annotated[str, typer.Argument(help="Key id (see `ledger keys list`).")],
    role: Annotated[str | None, typer.Option(help="Only this role (default: all).")] = None,
    at: Annotated[str | None, typer.Option(help="Revoked from (default now).")] = None,
    reason: ReasonOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Revoke a key; events it signs after that time fail verification.

    Example: ledger keys revoke ed25519:0a1b... --reason "laptop lost"
    """
    when = parse_instant(at, "--at") if at else None
    with served() as (svc, me):
        svc.revoke_key(me, kid, role, when, reason)
    out({"kid": kid, "revoked": True}, as_json, "revoked")


@keys_cli.command("rotate")
def keys_rotate(name: str, reason: ReasonOpt = None,
                as_json: JsonOpt = False) -> None:
    """Replace a key with a new one holding the same roles; the old one is revoked.

    Example: ledger keys rotate writer
    """
    with served() as (svc, me):
        rotated = svc.rotate_key(me, name, reason)
    out({"name": name, "old_kid": rotated.old_kid, "new_kid": rotated.new_kid}, as_json,
        rotated.new_kid)


@keys_cli.command("rotate-kek")
def keys_rotate_kek(
    to: Annotated[str | None, typer.Option(
        "--to", help="Make the new epoch's KEK in this store and keep it there: a pkcs11: "
                     "URI (moves the ledger onto a token) or file:FOLDER.")] = None,
    operator: Annotated[str, typer.Option(help="The operator key that signs.")] = "operator",
    as_json: JsonOpt = False,
) -> None:
    """Start a new KEK epoch: re-wrap every data key under it, then destroy the old KEK.

    Every copy made before (backups, WAL segments, replicas, dumps) is then beyond use,
    so the erasures recorded before it reach every copy. Run again after a crash: it
    resumes. `ledger sweep` runs it when the policy's kekRotationDays say it is due.

    Example: ledger keys rotate-kek
    """
    from ledger import progress
    from ledger.text import plural

    with served(operator=operator) as (svc, me), \
            progress.bar("Rotating the KEK", total=1, json=as_json) as bar:
        done = svc.rotate_kek(me, to, progress=bar.step)
    destroyed = ", ".join(str(e) for e in done.destroyed) or "none"
    out(done.model_dump(), as_json,
        f"epoch {done.epoch} ({done.store}): {plural(done.rewrapped, 'data keys')} "
        f"re-wrapped; KEK of epoch(s) {destroyed} destroyed")
    verdict(f"OK: KEK epoch {done.epoch} in force"
            + (" (an interrupted rotation finished)" if done.resumed else ""))


@keys_cli.command("epochs")
def keys_epochs(as_json: JsonOpt = False) -> None:
    """The KEK epochs: store, state, when started and destroyed, keys wrapped.

    Example: ledger keys epochs
    """
    from ledger.text import plural

    with served() as (svc, me):
        rows = [e.model_dump() for e in svc.kek_epochs(me)]
    text = "\n".join(
        f"epoch {r['epoch']:<4} {r['state']:<10} {r['store']:<30} started {r['started_at']}"
        + (f"  destroyed {r['destroyed_at']}" if r["destroyed_at"] else "")
        + f"  {plural(r['keys'], 'keys')}" for r in rows) or "no KEK epoch: keys are not wrapped"
    out(rows, as_json, text)


# ---------------------------------------------------------------------- policy
policy_cli = typer.Typer(no_args_is_help=True, help="The memoryPolicy in force (signed).")
cli.add_typer(policy_cli, name="policy")


@policy_cli.command("set")
def policy_set(file: Path, actor: Annotated[str, typer.Option(
        "--as", help="Operator key that signs.")] = "operator", as_json: JsonOpt = False) -> None:
    """Record a memoryPolicy (JSON, validated against schemas/memory-policy.json).

    Example: ledger policy set policy.json
    """
    try:
        document = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise InputError(f"cannot read policy file {file}: {e}") from e
    with served(operator=actor) as (svc, me):
        event_id = svc.set_policy(me, document).event_id
    out({"event_id": event_id}, as_json, event_id)
    verdict("OK: policy recorded")


@policy_cli.command("show")
def policy_show(as_json: JsonOpt = False) -> None:
    """Show the memoryPolicy in force.  Example: ledger policy show --json"""
    with served() as (svc, me):
        data = svc.policy(me)
    if data is None:
        verdict("note: no policy has been set; see `ledger policy set`")
        out(None, as_json)
        return
    out(data, as_json, json.dumps(data, indent=2))


# ---------------------------------------------------------------------- verify
def _read_note(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read checkpoint file {path}: {e}") from e


@cli.command()
def verify(
    root_key: Annotated[Path | None, typer.Option(
        help="Trusted root public key (.pub). Default: the home's keys/root.pub.")] = None,
    checkpoint: Annotated[Path | None, typer.Option(
        help="An older checkpoint you kept: prove the current log extends it.")] = None,
    since: Annotated[Path | None, typer.Option(
        help="Verify only events after this trusted checkpoint (fast, incremental).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Verify every event (form, sequence, signer's role at that time, signature) and the
    Merkle tree against signed checkpoints. Exit 1 names the first bad position.

    Example: ledger verify --root-key root.pub --checkpoint old.checkpoint
    """
    from keys.keyring import read_public_key_file
    from ledger import progress

    with served() as (svc, me):
        root = read_public_key_file(root_key) if root_key else None
        kept = [] if checkpoint is None else [(str(checkpoint), _read_note(checkpoint))]
        note = None if since is None else _read_note(since)
        with progress.bar("Verifying events", json=as_json) as bar:
            found = svc.verify_log(me, root, since=note, checkpoints=kept,
                                   progress=bar.step)
    report, result = found.report, found.as_json()
    out(result, as_json)
    if report.failure is not None:
        verdict(f"FAIL: {report.failure.describe()}")
        raise typer.Exit(EXIT_VERIFY)
    extra_text = ""
    if since is not None:
        extra_text = f" after checkpoint size {result['since']}; log extends it to size " \
                     f"{result['size']}"
    elif result.get("checkpoints"):
        from ledger.text import extends_words

        extra_text = "; the log extends " + extends_words(result["checkpoints"])
    from ledger.text import plural

    verdict(f"OK: {plural(report.events, 'events')} verified{extra_text}; head seq "
            f"{report.head_seq} "
            f"at {report.head_time}")


# ---------------------------------------------------------------------- transparency log
@cli.command("checkpoint")
def checkpoint_cmd(
    out_file: Annotated[Path | None, typer.Option("--out", help="Also write the note here.")]
    = None,
    witness: Annotated[list[str] | None, typer.Option(
        "--witness", help="A witness URL to ask for a cosignature (repeatable; default: the "
                          "[[witnesses]] of config.toml).")] = None,
    witness_key: Annotated[list[str] | None, typer.Option(
        "--witness-key", help="The vkey of each --witness not in config.toml, in order.")]
    = None,
    vkey: Annotated[bool, typer.Option(
        "--vkey", help="Print the log's verifier key (C2SP vkey) and sign nothing.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Sign the current tree head (C2SP checkpoint) with the log key, have the witnesses
    cosign it, record and print it.

    Example: ledger checkpoint --out today.checkpoint --witness http://127.0.0.1:8411
    """
    with served() as (svc, me):
        if vkey:
            key = svc.log_vkey(me)
            out({"origin": key.origin, "vkey": key.vkey}, as_json, key.vkey)
            return
        cp = svc.sign_checkpoint(me, witness or (), witness_key or ())
    results = cp.witnesses
    if out_file is not None:
        try:
            from keys.files import write_file

            write_file(out_file, cp.note)  # 0o644 whatever the umask
        except OSError as e:
            raise InputError(f"cannot write {out_file}: {e}") from e
    out({"origin": cp.origin, "size": cp.size, "root": cp.root_hash,
         "note": cp.note, "witnesses": results}, as_json, cp.note)
    for r in results:
        verdict(f"{'OK' if r['status'] == 'cosigned' else 'WARN'}: witness {r['url']}: "
                f"{r['status']}{' - ' + str(r['detail']) if r['detail'] else ''}")
    verdict(f"OK: checkpoint of size {cp.size} signed"
            + (f"; {sum(r['status'] == 'cosigned' for r in results)} of {len(results)} "
               "witnesses cosigned" if results else ""))


@cli.command()
def prove(
    event_id: Annotated[str | None, typer.Argument(
        help="Event id <uuid>/<version> (see `ledger atom history`).")] = None,
    consistency: Annotated[Path | None, typer.Option(
        help="An older checkpoint: prove the latest checkpoint extends it.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Inclusion proof of an event, or consistency proof from an older checkpoint, against
    the latest checkpoint.

    Example: ledger prove 3f2a...-.../1 --json > proof.json
    """
    if (event_id is None) == (consistency is None):
        raise InputError("give an EVENT_ID or --consistency OLD_CHECKPOINT (one of them)")
    with served() as (svc, me):
        if consistency is not None:
            data = svc.prove_consistency(me, _read_note(consistency))
            text = f"consistency {data['old_size']} -> {data['new_size']}: "
        else:
            assert event_id is not None
            data = svc.prove_inclusion(me, event_id)
            text = f"leaf {data['leaf_index']} in tree of size {data['tree_size']}: "
    text += " ".join(data["proof"])
    out(data, as_json, text)
    verdict("OK: proof generated and checked against the latest checkpoint")


# ---------------------------------------------------------------------- audit tools
audit_cli = typer.Typer(no_args_is_help=True, help="Offline checks from files and public keys "
                                                   "alone; no ledger home needed.")
cli.add_typer(audit_cli, name="audit-tools")


def _load_json(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise InputError(f"cannot read proof file {path}: {e}") from e
    if not isinstance(doc, dict):
        raise InputError(f"{path} is not a proof object")
    return doc


def _checkpoint_from(note: str, key: str, origin: str | None) -> Checkpoint:
    """Verify under ``key``: a C2SP vkey (its name need not be the origin), a file holding
    one, or the ledger's ``.pub`` file (whose checkpoints use the origin as key name)."""
    from keys.keyring import read_public_key_file
    from ledger.proofs import checkpoint_under_key

    text = key.strip()
    if not text.startswith("{") and "+" not in text and Path(key).is_file():
        try:
            text = Path(key).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as e:
            raise InputError(f"cannot read key file {key}: {e}") from e
    vkey = "+" in text and not text.startswith("{")
    return checkpoint_under_key(note, text, origin,
                                None if vkey else read_public_key_file(Path(key)))


KeyOpt = Annotated[str, typer.Option("--key", help="The log's verifier key: C2SP vkey text "
                                                   "(or a file holding it), or its .pub file.")]
OriginOpt = Annotated[str | None, typer.Option(help="Expected origin line (log name).")]


@audit_cli.command("verify-checkpoint")
def audit_verify_checkpoint(note_file: Path, key: KeyOpt, origin: OriginOpt = None,
                            as_json: JsonOpt = False) -> None:
    """Check a checkpoint's signature.

    Example: ledger audit-tools verify-checkpoint kept.checkpoint --key log.pub
    """
    from ledger.transparency import b64

    cp = _checkpoint_from(_read_note(note_file), key, origin)
    out({"ok": True, "origin": cp.origin, "size": cp.size, "root": b64(cp.root),
         "extensions": list(cp.extensions)}, as_json)
    verdict(f"OK: checkpoint {cp.origin} size {cp.size} root {b64(cp.root)}")


@audit_cli.command("verify-inclusion")
def audit_verify_inclusion(
    proof_file: Path, key: KeyOpt, origin: OriginOpt = None,
    checkpoint: Annotated[Path | None, typer.Option(
        help="A checkpoint you trust; default: the one inside the proof file.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Check an inclusion proof from `ledger prove EVENT_ID --json`.

    Example: ledger audit-tools verify-inclusion proof.json --key log.pub
    """
    from ledger.proofs import check_inclusion_document

    doc = _load_json(proof_file)
    note = _read_note(checkpoint) if checkpoint else str(doc.get("checkpoint", ""))
    cp = _checkpoint_from(note, key, origin)
    index, size = check_inclusion_document(doc, cp, str(proof_file))
    out({"ok": True, "leaf_index": index, "tree_size": size}, as_json)
    verdict(f"OK: leaf {index} is included in the tree of size {size}")


@audit_cli.command("verify-consistency")
def audit_verify_consistency(
    proof_file: Path, key: KeyOpt, origin: OriginOpt = None,
    old: Annotated[Path | None, typer.Option(help="The old checkpoint you kept.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Check a consistency proof from `ledger prove --consistency OLD --json`.

    Example: ledger audit-tools verify-consistency proof.json --key log.pub --old kept.checkpoint
    """
    from ledger.proofs import check_consistency_document

    doc = _load_json(proof_file)
    old_cp = _checkpoint_from(_read_note(old) if old else str(doc.get("old_checkpoint", "")),
                              key, origin)
    new_cp = _checkpoint_from(str(doc.get("new_checkpoint", "")), key, origin)
    check_consistency_document(doc, old_cp, new_cp, str(proof_file))
    out({"ok": True, "old_size": old_cp.size, "new_size": new_cp.size}, as_json)
    verdict(f"OK: the log of size {new_cp.size} extends the checkpoint of size {old_cp.size}")


# ---------------------------------------------------------------------- read side, governance
register_projections(cli, served)
register_governance(cli, served, artifact_cli)
register_policy(cli, served, policy_cli)
def _audit_report(from_: str | None, to: str | None, *, subject: str | None, verify: str,
                  now: datetime, progress: Steps) -> dict[str, Any]:
    with served() as (svc, me):
        return svc.audit_report(me, from_, to, subject=subject, verify=verify, now=now,
                                progress=progress)


register_audit(cli, _audit_report)
register_portability(cli, served)
register_witness(cli, served)
register_receipt(cli, served, audit_cli)
register_certificate(cli, served, audit_cli)
register_server(cli, lambda: STATE.home)
register_tenants(cli, lambda: STATE.home)
register_backup(cli, served, lambda: STATE.home)
register_extract(cli, served)


def _find_home() -> Path:
    from ledger.home import find_home

    return find_home(STATE.home)


register_tokens(cli, _find_home)
register_webhooks(cli, _find_home)


# ---------------------------------------------------------------------- entry point
def _set_home(ctx: Any, param: Any, value: Path | None) -> None:
    if value is not None:
        STATE.home = value


def _set_quiet(ctx: Any, param: Any, value: bool) -> None:
    if value:
        from ledger import progress

        progress.configure(quiet=True, verbose=progress.verbose())


def _set_verbose(ctx: Any, param: Any, value: bool) -> None:
    if value:
        from ledger import progress

        progress.configure(quiet=progress.quiet(), verbose=True)


_GLOBAL_AFTER: dict[str, Callable[[Any, Any, Any], None]] = {
    "--home": _set_home, "--quiet": _set_quiet, "--verbose": _set_verbose}
"""The root's options every command also takes after its name, and what each sets."""


def _leaves(group: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    for name, sub in getattr(group, "commands", {}).items():
        if getattr(sub, "commands", None) is not None:
            yield from _leaves(sub, (*path, name))
        else:
            yield (*path, name), sub


_COMMAND: dict[str | None, Any] = {}


# Commands that can run for long without a count to show: `LABEL ... N s` on a terminal
# (ledger/progress.py). verify, verify-pack, audit, import, export, redact-user,
# evidence-pack, sweep, projections rebuild and a recall's catch-up draw bars with counts
# instead.
ACTIVITY = {("redact",): "Redacting", ("delete",): "Erasing",
            ("artifact", "delete"): "Erasing",
            ("recall",): "Recalling",
            ("policy", "check"): "Checking", ("review", "resolve"): "Resolving",
            ("checkpoint",): "Signing the checkpoint", ("state",): "Reading the log"}


def _wrapped(callback: Any, path: tuple[str, ...]) -> Any:
    """structlog is configured when a command runs, not to show help; a long command shows
    that it is working."""
    import functools

    label = ACTIVITY.get(path)

    @functools.wraps(callback)
    def run(*args: Any, **kwargs: Any) -> Any:
        from ledger import logs, progress

        logs.configure("info" if progress.verbose() and not os.environ.get("LEDGER_LOG_LEVEL")
                       else None)
        if label is None:
            return callback(*args, **kwargs)
        quiet = bool(kwargs.get("as_json")) or kwargs.get("fmt") == "json"
        with progress.activity(label, json=quiet):
            return callback(*args, **kwargs)

    return run
_PLACEHOLDERS = {"Path": "PATH", "int": "N", "float": "NUMBER", "str": "TEXT"}


def _placeholder(param: Any) -> str | None:
    """A readable placeholder (``--tag TEXT``, ``--salience NUMBER``) instead of the Python
    type typer shows (``<list[str]>``); repeatable options say so in their help."""
    import typing

    if param.metavar is not None or getattr(param, "is_flag", False):
        return None
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    while typing.get_args(annotation):
        annotation = next((a for a in typing.get_args(annotation) if a is not type(None)),
                          None)
    return _PLACEHOLDERS.get(getattr(annotation, "__name__", ""), "VALUE")


def _named(argv: list[str]) -> str | None:
    """The command the line names first (``atom`` in ``ledger --home X atom add ...``), if it
    is one of the root's; ``""`` for a bare ``ledger --version``."""
    if argv == ["--version"]:
        return ""
    words = iter(argv)
    for word in words:
        if word == "--home":
            next(words, None)
        elif not word.startswith("-"):
            return word if word in _root_names() else None
    return None


def _root_names() -> set[str]:
    return {c.name or typer.main.get_command_name(c.callback.__name__)
            for c in cli.registered_commands if c.callback is not None} | \
        {str(g.name) for g in cli.registered_groups}


def _branch(name: str | None) -> typer.Typer:
    """``cli`` with only the command ``name`` (none for ``""``; all for ``None``)."""
    if name is None:
        return cli
    import copy

    pruned = copy.copy(cli)
    pruned.registered_commands = [
        c for c in cli.registered_commands if c.callback is not None
        and (c.name or typer.main.get_command_name(c.callback.__name__)) == name]
    pruned.registered_groups = [g for g in cli.registered_groups if g.name == name]
    return pruned


def _nothing() -> None:
    """Stands in for a command's function in the listing of `ledger --help`."""


def _listing() -> typer.Typer:
    """``cli`` with every command and group reduced to its name and help: all that the
    listing of `ledger --help` shows, without building the parameters of every command
    (two thirds of its CPU otherwise; ADR 0060)."""
    import copy
    import inspect

    light = copy.copy(cli)
    light.registered_commands = []
    for c in cli.registered_commands:
        if c.callback is None:
            continue
        stub = copy.copy(c)
        stub.name = c.name or typer.main.get_command_name(c.callback.__name__)
        stub.help = c.help if c.help is not None else inspect.getdoc(c.callback)
        stub.callback = _nothing
        light.registered_commands.append(stub)
    light.registered_groups = []
    for g in cli.registered_groups:
        group = copy.copy(g)
        if g.typer_instance is not None:
            group.typer_instance = copy.copy(g.typer_instance)
            group.typer_instance.registered_commands = []
            group.typer_instance.registered_groups = []
        light.registered_groups.append(group)
    return light


_HELP_ONLY = (["--help"], ["-h"])


def command(argv: list[str] | None = None) -> Any:
    """The click command tree, built once; every command also takes ``--home``, ``-q`` and
    ``-v`` after its name (``ledger verify --home X -q`` and ``ledger --home X -q verify``
    mean the same), unless it has an option of that name of its own.

    Given the command line, only the branch of the command it names is built (building
    every command's parameters is 30 ms of a one-atom `atom add`'s 0.4 s of CPU); help,
    completion and a name that is no command get the whole tree."""
    key = "--help" if argv in _HELP_ONLY else _named(argv) if argv else None
    if key not in _COMMAND:
        import copy

        root = typer.main.get_command(_listing() if key == "--help" else _branch(key))
        shared = [(p, _GLOBAL_AFTER[o]) for p in root.params for o in p.opts
                  if o in _GLOBAL_AFTER]
        for path, leaf in _leaves(root):
            taken = {o for p in leaf.params for o in (*p.opts, *p.secondary_opts)}
            for param, callback in shared:
                if taken.isdisjoint(param.opts):
                    option = copy.copy(param)  # the root's own, not passed to the command
                    option.expose_value, option.callback = False, callback
                    leaf.params.append(option)
            leaf.callback = _wrapped(leaf.callback, path)
            for param in leaf.params:
                if not param.opts[0].startswith("-"):  # usage "ATOM", not "{ATOM} <str>"
                    name = str(param.name).upper()
                    shown = name if param.required else f"[{name}]"
                    param._usage_display_name = lambda shown=shown: shown
                    param.display_type_rich = lambda ctx: None
                    param.metavar = name
                else:
                    param.metavar = _placeholder(param) or param.metavar
        values.install_all(root)
        _COMMAND[key] = root
    return _COMMAND[key]


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; map every error to its exit code in this one place."""
    try:  # standalone: usage errors exit 2 by themselves
        command(sys.argv[1:] if argv is None else argv).main(args=argv, prog_name="ledger")
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            return int(e.code or 0)
        verdict(str(e.code))
        return EXIT_USAGE
    except LedgerError as e:
        from cli.words import said

        message, hint = said(e)
        verdict(f"error: {message}")
        if hint:
            verdict(f"hint: {hint}")
        return e.exit_code
    except PublicKeyFileError as e:  # a file named on the command line: usage
        verdict(f"error: {e}")
        return EXIT_USAGE
    except (KeyringError, KeystoreError) as e:
        verdict(f"error: {e}")
        return EXIT_ENV
    except (DataKeyUnavailable, KeyNotAuthorized) as e:
        verdict(f"error: {e}")
        return EXIT_USAGE
    except KeyError_ as e:
        verdict(f"error: {e}")
        return EXIT_VERIFY
    return EXIT_OK


def entry() -> None:
    sys.exit(main())


__all__ = ["EnvironmentProblem", "entry", "main"]
