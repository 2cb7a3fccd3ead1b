"""Read-side commands, mounted on the ``ledger`` CLI by :func:`register`.

``ledger projections status|rebuild``, ``ledger recall``, ``ledger memory list|inspect``
and ``ledger state``. Data goes to stdout, verdicts and progress to stderr; every
command takes ``--json``. Errors are raised as :mod:`ledger.errors` classes and mapped
to exit codes by the ``ledger`` entry point. The opened application comes from the
``open_app`` callable given to :func:`register`; recall's rehearsal events are written
by the ``rehearse`` callable, if one is given (``--no-rehearse`` skips it).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ledger import clock
from ledger.clock import parse_instant
from ledger.errors import EXIT_VERIFY, InputError

if TYPE_CHECKING:  # each command imports what it uses: `ledger --help` stays light
    from ledger.application import LedgerApp
    from projections.service import Projections

__all__ = ["OpenApp", "Rehearse", "memory_cli", "memory_inspect_command",
           "memory_list_command", "projections_cli", "recall_command", "register",
           "state_command"]

OpenApp = Callable[[], AbstractContextManager["LedgerApp"]]
"""Returns a context manager that yields an opened ``LedgerApp`` and closes it."""
Rehearse = Callable[[Any, list[str], str | None], None]
"""``rehearse(app, atom_ids, session_id)``: record that these atoms were recalled."""


@dataclass
class _Context:
    open_app: OpenApp | None = None
    rehearse: Rehearse | None = None


CONTEXT = _Context()

projections_cli = typer.Typer(no_args_is_help=True, add_completion=False,
                              help="Read models: status and rebuild.")
memory_cli = typer.Typer(no_args_is_help=True, add_completion=False,
                         help="List and inspect memories (from the read models).")

JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON on stdout.")]


def register(cli: typer.Typer, open_app: OpenApp, rehearse: Rehearse | None = None,
             memory: typer.Typer | None = None) -> None:
    """Mount the read-side commands on ``cli``.

    ``memory``: an existing ``memory`` command group to add ``list`` and ``inspect`` to
    (default: this module's :data:`memory_cli`, mounted as ``memory``).
    """
    CONTEXT.open_app = open_app
    CONTEXT.rehearse = rehearse
    cli.add_typer(projections_cli, name="projections")
    if memory is None:
        cli.add_typer(memory_cli, name="memory")
    else:
        memory.command("list")(memory_list_command)
        memory.command("inspect")(memory_inspect_command)
    cli.command("recall")(recall_command)
    cli.command("state")(state_command)


@contextmanager
def _projections() -> Iterator[tuple[LedgerApp, Projections]]:
    if CONTEXT.open_app is None:
        raise RuntimeError("cli.reads.register() was not called")
    from projections.service import Projections

    with CONTEXT.open_app() as app:
        proj = Projections(app)
        try:
            yield app, proj
        finally:
            proj.close()


def _out(data: Any, as_json: bool, text: str | None = None) -> None:
    if as_json:
        sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    elif text:
        sys.stdout.write(text + ("" if text.endswith("\n") else "\n"))


def _verdict(message: str) -> None:
    sys.stderr.write(message + "\n")


def _erased(d: dict[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    """The CLI shows erased content as ``[erased]`` (as ``ledger atom show`` does)."""
    if d.get("content_erased"):
        from ledger.domain import ERASED

        return {k: (ERASED if k in fields else v) for k, v in d.items()}
    return d


_ATOM_CONTENT = ("text", "gist", "details", "tags")


# ---------------------------------------------------------------------- projections
@projections_cli.command("status")
def status_command(as_json: JsonOpt = False) -> None:
    """Position, head and lag of every read model.

    Example: ledger projections status --json
    """
    with _projections() as (_app, proj):
        rows = [s.as_json() for s in proj.status()]
    text = "\n".join(f"{r['name']:<9} {r['state']:<8} position {r['position']:>9}  "
                     f"lag {r['lag']:>7}  version {r['version']}" for r in rows)
    _out(rows, as_json, text)
    behind = [r["name"] for r in rows if r["state"] != "current"]
    if behind:
        _verdict(f"note: {len(behind)} read model(s) not current ({', '.join(behind)}); "
                 "they catch up on the next query, or run `ledger projections rebuild`")
    else:
        _verdict(f"OK: {len(rows)} read models at position {rows[0]['head'] if rows else 0}")


@projections_cli.command("probe")
def probe_command(
    item: Annotated[str, typer.Argument(help="Atom, artifact or subject id.")],
    content_file: Annotated[Path | None, typer.Option(
        "--content-file", help="File holding the text to look for ('-': stdin). Not an "
                               "option value, so the text stays out of shell history.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Thorough reach probe of one item on every route: rows keyed by its id, and (with
    --content-file) a substring search of every stored value and near-duplicate vectors.
    Exit 1 when any route still reaches it.

    Example: ledger projections probe 5f0e... --content-file - < text.txt
    """
    text = None
    if content_file is not None:
        try:
            raw = sys.stdin.read() if str(content_file) == "-" else \
                content_file.read_text(encoding="utf-8")
        except OSError as e:
            raise InputError(f"cannot read {content_file}: {e.strerror}",
                             hint="give a readable UTF-8 text file, or - for stdin") from e
        text = raw.strip() or None
    with _projections() as (_app, proj):
        proj.catch_up()
        results = [r.as_json() for r in proj.probe(item, text)]
    reached = [r["route"] for r in results if r["reach"] == "reachable"]
    lines = [f"{r['route']:<15} {r['reach']:<14} "
             + ", ".join(f"{h['where']} by {h['by']} x{h['count']}" for h in r["hits"])
             for r in results]
    _out({"item_id": item, "routes": results, "reachable": reached}, as_json,
         "\n".join(lines))
    if reached:
        _verdict(f"REACHABLE: {item} is still reached by {', '.join(reached)}")
        raise typer.Exit(EXIT_VERIFY)
    _verdict(f"OK: no route reaches {item}")


@projections_cli.command("rebuild")
def rebuild_command(
    name: Annotated[str | None, typer.Argument(
        help="atoms, keyword, vectors, audit or asof (default: all).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Drop read models and replay the whole log into them.

    Example: ledger projections rebuild keyword
    """
    from ledger import progress

    with _projections() as (_app, proj), \
            progress.bar("Rebuilding read models", total=1, json=as_json) as bar:
        report = proj.rebuild(name, bar)
    data = report.as_json()
    rate = report.notifications / report.seconds if report.seconds > 0 else 0.0
    text = "\n".join(f"{n:<9} {m['events']:>9} events  {m['apply_seconds']:.3f}s applying"
                     for n, m in data["models"].items())
    _out(data, as_json, text)
    _verdict(f"OK: rebuilt {len(data['models'])} read model(s) to position {report.head} "
             f"({report.notifications} events in {report.seconds:.2f}s, {rate:.0f} events/s)")


# ---------------------------------------------------------------------- recall
CATCH_UP_BAR = 500
"""Read models this many events behind are caught up under a progress bar before a recall
(fewer take well under a second)."""

def recall_command(
    query: Annotated[str, typer.Argument(help="What to recall, in words.")],
    subject: Annotated[str, typer.Option(help="Subject ref or id.")],
    k: Annotated[int, typer.Option("-k", help="How many memories at most (1-100).")] = 5,
    session: Annotated[str | None, typer.Option(
        help="Session id recorded with the rehearsal events.")] = None,
    no_rehearse: Annotated[bool, typer.Option(
        "--no-rehearse", help="Do not record rehearsal events for what is recalled.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Recall a subject's memories for a query; prints the "What you remember" block.

    Ranks active, unexpired, unerased atoms with salience >= 0.15 by salience, relevance
    (keyword + vector) and recency. Each recalled atom gets a signed rehearsal event
    unless --no-rehearse.

    Example: ledger recall "where does she work" --subject user_9f4e -k 3
    """
    from ledger import progress

    with _projections() as (app, proj):
        behind = proj.runner.head() - min(proj.runner.positions().values(), default=0)
        if behind >= CATCH_UP_BAR:  # the first recall after a large import or erasure
            with progress.bar("Catching up read models", total=behind, json=as_json) as bar:
                proj.catch_up_steps(bar.step)
        result = proj.recall(query, subject, k)
        rehearsed = bool(result.atom_ids) and not no_rehearse and CONTEXT.rehearse is not None
        if rehearsed:
            assert CONTEXT.rehearse is not None
            CONTEXT.rehearse(app, result.atom_ids, session)
    data = [{**item.as_json(), "marker": ", ".join(item.markers), "rehearsed": rehearsed}
            for item in result.items]
    _out(data, as_json, result.prompt)
    if result.items:
        _verdict(f"OK: recalled {len(result.items)} of {result.eligible} matching memories"
                 + ("; rehearsals recorded" if rehearsed else ""))
    else:
        _verdict(f"note: nothing recalled ({result.pool} memories matched the query, "
                 f"{result.eligible} of them recallable now)")


# ---------------------------------------------------------------------- memory
@memory_cli.command("list")
def memory_list_command(
    subject: Annotated[str | None, typer.Option(help="Only this subject (ref or id).")] = None,
    privacy_class: Annotated[str | None, typer.Option(
        help="Only this privacy class, e.g. guest-pii.")] = None,
    min_salience: Annotated[float | None, typer.Option(
        help="Only memories whose current salience is at least this (0-1).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """List memories with current salience and markers.

    Example: ledger memory list --privacy-class guest-pii --min-salience 0.4
    """
    with _projections() as (_app, proj):
        rows = [_erased(r, ("text",)) for r in
                proj.memory_list(subject, privacy_class, min_salience)]
    text = "\n".join(
        f"{r['atom_id']}  {r['status']:<10} {r['salience_now']:.3f} "
        f"{','.join(r['markers']):<12} {r['text']}" for r in rows)
    _out(rows, as_json, text)
    _verdict(f"{len(rows)} memories")


@memory_cli.command("inspect")
def memory_inspect_command(
    atom: Annotated[str, typer.Argument(help="Atom ref or id.")],
    as_json: JsonOpt = False,
) -> None:
    """Show a memory's content, decay status and rehearsal history.

    Example: ledger memory inspect atom_001
    """
    with _projections() as (_app, proj):
        data = proj.memory_inspect(atom)
    if data["content_erased"]:
        data = _erased(data, (*_ATOM_CONTENT, "details_now"))
    lines = [f"{k}: {v}" for k, v in data.items()
             if k not in ("decay", "details_now", "rehearsals", "events")
             and v not in (None, [], {})]
    d = data["decay"]
    lines.append(f"salience now: {d['salience_now']:.3f} ({', '.join(d['markers'])}); "
                 f"baseline {d['baseline']:.3f} from {d['origin']}; "
                 f"below 0.15 from {d['below_retrieval_threshold_from'] or 'never'}")
    if isinstance(data["details_now"], list):
        for det in data["details_now"]:
            lines.append(f"detail: {det['content']} (brightness {det['brightness_now']:.3f}"
                         f"{'' if det['visible'] else ', not rendered'})")
    for r in data["rehearsals"]:
        lines.append(f"rehearsed: {r['timestamp']} seq {r['seq']} by {r['signer']}")
    _out(data, as_json, "\n".join(lines))
    if data["content_erased"]:
        _verdict(f"note: the content of atom {data['atom_id']} was erased "
                 f"(data key destroyed at {data['data_key_destroyed_at']})")


# ---------------------------------------------------------------------- state
def state_command(
    as_of: Annotated[str | None, typer.Option(
        "--as-of", help="Transaction time: what the ledger knew at this date or instant "
                        "(default: now, the ledger's current knowledge).")] = None,
    subject: Annotated[str | None, typer.Option(help="Only this subject (default: all "
                                                     "registered by then).")] = None,
    valid_at: Annotated[str | None, typer.Option("--valid-at", help="Valid time: facts true "
                                                 "at this date (default: --as-of).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """What the ledger knew at a date, and which facts it held true then (or at --valid-at).

    Erased content stays erased in every historical view.

    Example: ledger state --as-of 2026-03-01 --subject user_9f4e --valid-at 2025-12-31;
    ledger state --valid-at 2025-12-31 --subject user_9f4e (as the ledger knows it now)
    """
    t = parse_instant(as_of, "--as-of") if as_of else clock.now()
    v = parse_instant(valid_at, "--valid-at") if valid_at else None
    with _projections() as (_app, proj):
        views = ([proj.state_as_of(subject, t, v)] if subject is not None
                 else proj.state_all(t, v))
    data = []
    for view in views:
        d = view.as_json()
        d["valid"] = [_erased(a, _ATOM_CONTENT) for a in d["valid"]]
        d["not_valid"] = [_erased(a, _ATOM_CONTENT) for a in d["not_valid"]]
        d["artifacts"] = [_erased(a, ("title", "body", "media_url")) for a in d["artifacts"]]
        if d["subject"] is not None:
            d["subject"] = _erased(d["subject"], ("display_name",))
        data.append(d)
    lines: list[str] = []
    for d in data:
        ref = d["subject"]["ref"] if d["subject"] else d["subject_id"]
        lines.append(f"subject {ref} as of {d['as_of']}, valid at {d['valid_at']}:")
        lines.extend(f"  {a['atom_id']}  {a['status']:<10} {a['text']}" for a in d["valid"])
        lines.extend(f"  ({a['atom_id']}  {a['not_valid_because']}: {a['text']})"
                     for a in d["not_valid"])
    _out(data if subject is None else data[0], as_json, "\n".join(lines))
    facts = sum(len(d["valid"]) for d in data)
    _verdict(f"{facts} fact(s) valid at {data[0]['valid_at'] if data else v or t} "
             f"across {len(data)} subject(s)")
