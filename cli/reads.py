"""Read-side commands, mounted on the ``ledger`` CLI by :func:`register`.

``ledger projections status|probe|rebuild``, ``ledger recall``, ``ledger memory
list|inspect`` and ``ledger state``. Data goes to stdout, verdicts and progress to stderr;
every command takes ``--json``. Errors are raised as :mod:`ledger.errors` classes and
mapped to exit codes by the ``ledger`` entry point. Each command calls the facade
(:class:`service.facade.MemoryService`) as the local operator, from the ``served`` opener
given to :func:`register`; recall records rehearsal events unless ``--no-rehearse``.
"""

from __future__ import annotations

import sys
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cli.opener import Served
from cli.output import JsonOpt, out, verdict
from ledger import clock
from ledger.clock import parse_instant
from ledger.errors import EXIT_VERIFY, InputError

if TYPE_CHECKING:  # each command imports what it uses: `ledger --help` stays light
    from service.caller import Caller
    from service.facade import MemoryService

__all__ = ["Served", "memory_cli", "memory_inspect_command", "memory_list_command",
           "projections_cli", "recall_command", "register", "state_command"]


@dataclass
class _Context:
    served: Served | None = None


CONTEXT = _Context()

projections_cli = typer.Typer(no_args_is_help=True, add_completion=False,
                              help="Read models: status and rebuild.")
memory_cli = typer.Typer(no_args_is_help=True, add_completion=False,
                         help="List and inspect memories (from the read models).")


def register(cli: typer.Typer, served: Served, memory: typer.Typer | None = None) -> None:
    """Mount the read-side commands on ``cli``.

    ``memory``: an existing ``memory`` command group to add ``list`` and ``inspect`` to
    (default: this module's :data:`memory_cli`, mounted as ``memory``).
    """
    CONTEXT.served = served
    cli.add_typer(projections_cli, name="projections")
    if memory is None:
        cli.add_typer(memory_cli, name="memory")
    else:
        memory.command("list")(memory_list_command)
        memory.command("inspect")(memory_inspect_command)
    cli.command("recall")(recall_command)
    cli.command("state")(state_command)


def _served() -> AbstractContextManager[tuple[MemoryService, Caller]]:
    if CONTEXT.served is None:
        raise RuntimeError("cli.reads.register() was not called")
    return CONTEXT.served()


# ---------------------------------------------------------------------- projections
@projections_cli.command("status")
def status_command(as_json: JsonOpt = False) -> None:
    """Position, head and lag of every read model.

    Example: ledger projections status --json
    """
    with _served() as (svc, me):
        rows = [s.model_dump() for s in svc.read_models_status(me)]
    text = "\n".join(f"{r['name']:<9} {r['state']:<8} position {r['position']:>9}  "
                     f"lag {r['lag']:>7}  version {r['version']}" for r in rows)
    out(rows, as_json, text)
    behind = [r["name"] for r in rows if r["state"] != "current"]
    if behind:
        verdict(f"note: {len(behind)} read model(s) not current ({', '.join(behind)}); "
                 "they catch up on the next query, or run `ledger projections rebuild`")
    else:
        verdict(f"OK: {len(rows)} read models at position {rows[0]['head'] if rows else 0}")


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
    with _served() as (svc, me):
        probe = svc.probe_reach(me, item, text)
    reached = probe.reachable
    lines = [f"{r['route']:<15} {r['reach']:<14} "
             + ", ".join(f"{h['where']} by {h['by']} x{h['count']}" for h in r["hits"])
             for r in probe.routes]
    out(probe.model_dump(), as_json, "\n".join(lines))
    if reached:
        verdict(f"REACHABLE: {item} is still reached by {', '.join(reached)}")
        raise typer.Exit(EXIT_VERIFY)
    verdict(f"OK: no route reaches {item}")


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

    with _served() as (svc, me), \
            progress.bar("Rebuilding read models", total=1, json=as_json) as bar:
        report = svc.rebuild_read_models(me, name, bar)
    data = report.report
    rate = report.notifications / report.seconds if report.seconds > 0 else 0.0
    text = "\n".join(f"{n:<9} {m['events']:>9} events  {m['apply_seconds']:.3f}s applying"
                     for n, m in data["models"].items())
    out(data, as_json, text)
    verdict(f"OK: rebuilt {len(data['models'])} read model(s) to position {report.head} "
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
    since: Annotated[str | None, typer.Option(
        help="Only memories true or said from this date or instant on.")] = None,
    until: Annotated[str | None, typer.Option(
        help="Only memories true or said up to this date (its whole day) or instant.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Recall a subject's memories for a query; prints the "What you remember" block.

    Ranks active, unexpired, unarchived, unerased atoms by salience, relevance (keyword
    + vector) and recency (from when each was true or said: an import's own times). The
    first n of -k N are the same for every N >= n. With --json: the items, and for the
    matched memories left out, why (ADR 0051). Each recalled atom gets a signed
    rehearsal event unless --no-rehearse.

    Example: ledger recall "where did we go last summer" --subject user_9f4e -k 3
    --since 2025-06-01 --until 2025-08-31
    """
    from ledger import progress
    from service.models import RecallIn

    with _served() as (svc, me):
        behind = svc.read_models_behind(me)
        if behind >= CATCH_UP_BAR:  # the first recall after a large import or erasure
            with progress.bar("Catching up read models", total=behind, json=as_json) as bar:
                svc.catch_up_read_models(me, bar.step)
        result = svc.recall(me, RecallIn.unchecked(
            query=query, subject=subject, k=k, session_id=session, rehearse=not no_rehearse,
            since=since, until=until))
    rehearsed = any(item.rehearsed for item in result.items)
    out(result.model_dump(), as_json, result.prompt)  # --json: the HTTP API's answer
    if result.items:
        verdict(f"OK: recalled {len(result.items)} of {result.eligible} matching memories"
                 + ("; rehearsals recorded" if rehearsed else ""))
    else:
        left = ", ".join(f"{n} {why}" for why, n in result.omitted_counts.items())
        verdict(f"note: nothing recalled ({result.pool} memories matched the query, "
                 f"{result.eligible} of them recallable now"
                 + (f"; left out: {left}" if left else "") + ")")


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
    with _served() as (svc, me):
        rows = [r.model_dump() for r in
                svc.list_memories(me, subject, privacy_class, min_salience)]
    text = "\n".join(
        f"{r['atom_id']}  {r['status']:<10} {r['salience_now']:.3f} "
        f"{','.join(r['markers']):<12} {r['text']}" for r in rows)
    out(rows, as_json, text)
    verdict(f"{len(rows)} memories")


@memory_cli.command("inspect")
def memory_inspect_command(
    atom: Annotated[str, typer.Argument(help="Atom ref or id.")],
    as_json: JsonOpt = False,
) -> None:
    """Show a memory's content, decay status and rehearsal history.

    Example: ledger memory inspect atom_001
    """
    with _served() as (svc, me):
        data = svc.inspect_memory(me, atom)
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
    out(data, as_json, "\n".join(lines))
    if data["content_erased"]:
        verdict(f"note: the content of atom {data['atom_id']} was erased "
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
    with _served() as (svc, me):
        data = svc.state_views(me, subject, t, v)
    lines: list[str] = []
    for d in data:
        ref = d["subject"]["ref"] if d["subject"] else d["subject_id"]
        lines.append(f"subject {ref} as of {d['as_of']}, valid at {d['valid_at']}:")
        lines.extend(f"  {a['atom_id']}  {a['status']:<10} {a['text']}" for a in d["valid"])
        lines.extend(f"  ({a['atom_id']}  {a['not_valid_because']}: {a['text']})"
                     for a in d["not_valid"])
    facts = sum(len(d["valid"]) for d in data)
    summary = (f"{facts} fact(s) valid at {data[0]['valid_at'] if data else v or t} "
               f"across {len(data)} subject(s)")
    # The summary ends the listing, once, on its own line (issue 28: on stderr it ran
    # into the listing's last line wherever both streams were shown together); with
    # --json stdout is the JSON alone and the summary goes to stderr.
    out(data if subject is None else data[0], as_json, "\n".join([*lines, summary]))
    if as_json:
        verdict(summary)
