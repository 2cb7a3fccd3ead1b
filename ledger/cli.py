"""The ``ledger`` command (typer): the composition root.

Data goes to stdout, verdicts and progress to stderr. Every reporting command
takes ``--json``. Exit codes: 0 ok, 1 verification failed, 2 usage, 3
environment. All errors are mapped to exit codes here, in :func:`main`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from keys.errors import KeyError_, KeyringError
from keys.keyring import read_public_key_file
from ledger import logs
from ledger.application import LedgerApp
from ledger.clock import parse_instant
from ledger.domain import ERASED
from ledger.errors import (
    EXIT_ENV,
    EXIT_OK,
    EXIT_USAGE,
    EXIT_VERIFY,
    EnvironmentProblem,
    InputError,
    LedgerError,
)
from ledger.home import HOME_DIRNAME, Config, find_home
from ledger.verify import verify_log

cli = typer.Typer(
    name="ledger", no_args_is_help=True, add_completion=False,
    pretty_exceptions_enable=False, rich_markup_mode=None,
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

JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON on stdout.")]
ActorOpt = Annotated[str | None, typer.Option("--as", help="Name of the key that signs "
                                                           "(default: the home's writer key).")]


class State:
    home: Path | None = None


STATE = State()


@cli.callback()
def _root(home: Annotated[Path | None, typer.Option(
        "--home", help="Ledger home folder (default: LEDGER_HOME, or .ledger/ found upward).",
        envvar=None)] = None) -> None:
    STATE.home = home


@contextmanager
def opened() -> Iterator[LedgerApp]:
    app = LedgerApp(Config.load(find_home(STATE.home)))
    try:
        yield app
    finally:
        app.close()


def out(data: Any, as_json: bool, text: str | None = None) -> None:
    """Data on stdout: JSON when asked, else the human text."""
    if as_json:
        sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    elif text is not None:
        sys.stdout.write(text + ("" if text.endswith("\n") else "\n"))


def verdict(message: str) -> None:
    sys.stderr.write(message + "\n")


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
    as_json: JsonOpt = False,
) -> None:
    """Create a ledger home: keys, config, event store, keystore, signed key roster.

    Example: ledger --home /tmp/demo init
    """
    home = STATE.home or Path.cwd() / HOME_DIRNAME
    cfg = LedgerApp.initialize(home, db=db, keystore=keystore)
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
    with opened() as app:
        sid = app.register_subject({"ref": ref, "display_name": name, "locale": locale}, actor)
    out({"subject_id": str(sid), "ref": ref}, as_json, str(sid))


@subject_cli.command("show")
def subject_show(ref: str, as_json: JsonOpt = False) -> None:
    """Show a subject.  Example: ledger subject show user_9f4e"""
    with opened() as app:
        s = app.get_subject(ref)
        data = {"subject_id": str(s.id), "ref": s.ref,
                "display_name": ERASED if s.content_erased else s.display_name,
                "locale": s.locale, "content_erased": s.content_erased}
    out(data, as_json, "\n".join(f"{k}: {v}" for k, v in data.items()))


# ---------------------------------------------------------------------- artifacts
@artifact_cli.command("add")
def artifact_add(
    subject: Annotated[str, typer.Option(help="Subject ref or id.")],
    kind: Annotated[str, typer.Option(help="chat, document, journal, voice, message, email, "
                                           "calendar.")],
    ref: Annotated[str | None, typer.Option(help="Your id for it, e.g. art_101.")] = None,
    title: str | None = None,
    body: Annotated[str | None, typer.Option(help="Text of the artifact (encrypted).")] = None,
    body_file: Annotated[Path | None, typer.Option(help="Read the body from a file.")] = None,
    source: Annotated[str | None, typer.Option(help="e.g. chatgpt-export, manual.")] = None,
    private: Annotated[bool, typer.Option(help="Never export for training or sharing.")] = False,
    captured_at: str | None = None,
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
    with opened() as app:
        aid = app.capture_artifact({
            "subject": subject, "ref": ref, "kind": kind, "title": title, "body": body,
            "source": source, "private": private,
            "captured_at": _when(captured_at, "--captured-at")}, actor)
    out({"artifact_id": str(aid)}, as_json, str(aid))


@artifact_cli.command("show")
def artifact_show(artifact: str, as_json: JsonOpt = False) -> None:
    """Show an artifact.  Example: ledger artifact show art_101"""
    with opened() as app:
        a = app.get_artifact(artifact)
        data = {"artifact_id": str(a.id), "ref": a.ref, "subject_id": a.subject_id,
                "kind": a.kind, "captured_at": a.captured_at, "source": a.source,
                "private": a.private, "content_erased": a.content_erased,
                "title": ERASED if a.content_erased else a.title,
                "body": ERASED if a.content_erased else a.body}
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
    gist: str | None = None,
    detail: Annotated[list[str] | None, typer.Option(
        help="A detail with brightness, 'TEXT=0.4' (repeatable).")] = None,
    tag: Annotated[list[str] | None, typer.Option(help="A tag (repeatable).")] = None,
    confidence: float | None = None,
    sensitivity: Annotated[str, typer.Option(
        help="public, private, medical, financial, legal.")] = "private",
    valid_from: str | None = None,
    valid_to: str | None = None,
    derivation: Annotated[str, typer.Option(help="stated, inferred or observed.")] = "stated",
    artifact: Annotated[list[str] | None, typer.Option(
        help="Artifact ref or id it was drawn from (repeatable).")] = None,
    extractor: Annotated[str | None, typer.Option(help="Model or person that extracted it.")]
    = None,
    human_reviewed: bool = False,
    salience: float = 0.5,
    valence: Annotated[float, typer.Option(help="Emotional valence, -1 to 1.")] = 0.0,
    privacy_class: str | None = None,
    consent_basis: str | None = None,
    session: Annotated[str | None, typer.Option(help="Session id.")] = None,
    min_sources: int = 1,
    actor: ActorOpt = None, as_json: JsonOpt = False,
) -> None:
    """Record an atom; prints its id.

    Example: ledger atom add --subject user_9f4e --text "Prefers direct feedback" \\
    --derivation inferred --artifact art_101 --extractor claude-opus-4
    """
    data = {
        "subject": subject, "text": text, "kind": kind, "ref": ref, "gist": gist,
        "details": _details(detail or []), "tags": tag or [], "confidence": confidence,
        "sensitivity": sensitivity, "valid_from": _when(valid_from, "--valid-from"),
        "valid_to": _when(valid_to, "--valid-to"), "derivation": derivation,
        "artifact_ids": artifact or [], "extractor": extractor,
        "human_reviewed": human_reviewed, "salience": salience, "emotional_valence": valence,
        "privacy_class": privacy_class, "consent_basis": consent_basis, "session_id": session,
        "min_sources": min_sources,
    }
    with opened() as app:
        aid = app.add_atom(data, actor)
    out({"atom_id": str(aid)}, as_json, str(aid))


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
    with opened() as app:
        data = app.get_atom(atom).as_dict()
    if data["content_erased"]:
        for k in ("text", "gist", "details", "tags"):
            data[k] = ERASED
    out(data, as_json, _atom_text(data))
    if data["content_erased"]:
        verdict(f"note: the content of atom {data['atom_id']} was erased "
                f"(data key destroyed at {data['data_key_destroyed_at']})")


@atom_cli.command("history")
def atom_history(atom: str, as_json: JsonOpt = False) -> None:
    """Every signed event of an atom and its corrections, in log order.

    Example: ledger atom history atom_001
    """
    with opened() as app:
        rows = app.history(atom)
    text = "\n".join(
        f"{r['seq']:>8}  {r['timestamp']}  {r['topic'].split(':', 1)[1]:<28} {r['event_id']}  "
        f"by {r['signer']}" for r in rows)
    out(rows, as_json, text)


@atom_cli.command("correct")
def atom_correct(
    atom: str,
    text: Annotated[str, typer.Option(help="The corrected sentence.")],
    reason: str | None = None,
    confidence: float | None = None,
    valid_from: Annotated[str | None, typer.Option(
        help="When the corrected fact became true (default: now).")] = None,
    actor: ActorOpt = None, as_json: JsonOpt = False,
) -> None:
    """Supersede an atom with a corrected one; the old atom gets valid_to, nothing is overwritten.

    Example: ledger atom correct atom_001 --text "Works at Beta" --reason "job change"
    """
    data: dict[str, Any] = {"text": text, "reason": reason}
    if confidence is not None:
        data["confidence"] = confidence
    if valid_from is not None:
        data["valid_from"] = _when(valid_from, "--valid-from")
    with opened() as app:
        new = app.correct_atom(atom, data, actor)
    out({"atom_id": str(new), "supersedes": atom}, as_json, str(new))


@atom_cli.command("rehearse")
def atom_rehearse(atom: str, session: str | None = None, reason: str | None = None,
                  actor: ActorOpt = None, as_json: JsonOpt = False) -> None:
    """Record that an atom was recalled (a signed rehearsal event).

    Example: ledger atom rehearse atom_001 --session sess:42
    """
    with opened() as app:
        count = app.rehearse_atom(atom, session, reason, actor)
    out({"atom_id": atom, "rehearsal_count": count}, as_json, str(count))


@atom_cli.command("expire")
def atom_expire(atom: str, reason: str | None = None, actor: ActorOpt = None,
                as_json: JsonOpt = False) -> None:
    """Mark an atom no longer valid from now.  Example: ledger atom expire atom_001"""
    with opened() as app:
        app.expire_atom(atom, reason, actor)
    out({"atom_id": atom, "status": "expired"}, as_json, "expired")


# ---------------------------------------------------------------------- keys
@keys_cli.command("list")
def keys_list(as_json: JsonOpt = False) -> None:
    """The key roster: key ids, names, roles and validity.  Example: ledger keys list"""
    with opened() as app:
        rows = app.roster().state.rows()
        local = set(app.keyring.names())
    for r in rows:
        r["private_key_here"] = r["name"] in local
    text = "\n".join(
        f"{r['kid']}  {r['name']:<12} {r['role']:<9} from {r['valid_from'] or '-'}"
        + (f"  REVOKED from {r['revoked_from']}" if r["revoked_from"] else "") for r in rows)
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
    pub = read_public_key_file(public_key) if public_key else None
    start = parse_instant(valid_from, "--from") if valid_from else None
    with opened() as app:
        kid = app.authorize_key(name, role, pub, start)
    out({"kid": kid, "name": name, "role": role}, as_json, kid)


@keys_cli.command("revoke")
def keys_revoke(
    kid: Annotated[str, typer.Argument(help="Key id (see `ledger keys list`).")],
    role: Annotated[str | None, typer.Option(help="Only this role (default: all).")] = None,
    at: Annotated[str | None, typer.Option(help="Revoked from (default now).")] = None,
    reason: str | None = None,
    as_json: JsonOpt = False,
) -> None:
    """Revoke a key; events it signs after that time fail verification.

    Example: ledger keys revoke ed25519:0a1b... --reason "laptop lost"
    """
    when = parse_instant(at, "--at") if at else None
    with opened() as app:
        app.revoke_key(kid, role, when, reason)
    out({"kid": kid, "revoked": True}, as_json, "revoked")


@keys_cli.command("rotate")
def keys_rotate(name: str, reason: str | None = None, as_json: JsonOpt = False) -> None:
    """Replace a key with a new one holding the same roles; the old one is revoked.

    Example: ledger keys rotate writer
    """
    with opened() as app:
        old, new = app.rotate_key(name, reason)
    out({"name": name, "old_kid": old, "new_kid": new}, as_json, new)


# ---------------------------------------------------------------------- verify
@cli.command()
def verify(
    root_key: Annotated[Path | None, typer.Option(
        help="Trusted root public key (.pub). Default: the home's keys/root.pub.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Verify every event: canonical form, sequence, signer's role at that time, signature.

    Exit 1 names the first bad event.  Example: ledger verify --root-key root.pub
    """
    with opened() as app:
        root = read_public_key_file(root_key) if root_key else app.root_public_key
        report = verify_log(app.stored_records(), ledger_id=app.ledger_id, root_public_key=root)
    out(report.as_json(), as_json)
    if report.failure is not None:
        verdict(f"FAIL: {report.failure.describe()}")
        raise typer.Exit(EXIT_VERIFY)
    verdict(f"OK: {report.events} events verified; head seq {report.head_seq} "
            f"at {report.head_time}")


# ---------------------------------------------------------------------- entry point
def main(argv: list[str] | None = None) -> int:
    """Run the CLI; map every error to its exit code in this one place."""
    logs.configure()
    try:
        cli(args=argv, prog_name="ledger")  # standalone: usage errors exit 2 by themselves
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            return int(e.code or 0)
        verdict(str(e.code))
        return EXIT_USAGE
    except LedgerError as e:
        verdict(f"error: {e}")
        if e.hint:
            verdict(f"hint: {e.hint}")
        return e.exit_code
    except KeyringError as e:
        verdict(f"error: {e}")
        return EXIT_ENV
    except KeyError_ as e:
        verdict(f"error: {e}")
        return EXIT_VERIFY
    return EXIT_OK


def entry() -> None:
    sys.exit(main())


__all__ = ["EnvironmentProblem", "entry", "main"]
