"""``ledger import`` and ``ledger export``: typer commands, mounted by :func:`register`.

Data (the report) on stdout, verdicts on stderr; errors are raised as
:mod:`ledger.errors` classes and mapped to exit codes by ``cli.main.main``.
The input is checked completely before the ledger is opened for writing; a refused
input leaves the ledger home byte-for-byte unchanged. Both commands call the facade
(:class:`service.facade.MemoryService`) as the local operator, from the ``served`` opener
given to :func:`register`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from cli.opener import Served
from cli.output import out, verdict

FormatOpt = Annotated[str, typer.Option(
    "--format", help="konshus, mem or persona; for import also chatgpt (conversations.json), "
                     "claude (memory files), mem0 (JSON) or text (pasted memory text).")]
SubjectOpt = Annotated[str | None, typer.Option(
    "--subject", help="Subject ref: import under this id (the subject controls it), or "
                      "export this subject (default: the only one).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the report as JSON on stdout.")]
ActorOpt = Annotated[str | None, typer.Option("--as", help="Name of the key that signs "
                                                           "(default: the home's writer key).")]


def _format(value: str, ingest: bool = False) -> str:
    from portability import formats

    return formats.get(value, "read" if ingest else "write").name


def _counts(d: dict[str, int]) -> str:
    from ledger.text import plural

    return ", ".join(plural(v, k) for k, v in d.items())


def make_import(served: Served) -> Callable[..., None]:
    def import_(
        file: Annotated[Path, typer.Argument(help="A Konshus or Persona JSON file, or a "
                                                  ".mem bundle directory.")],
        fmt: FormatOpt,
        subject: SubjectOpt = None,
        trust: Annotated[list[Path] | None, typer.Option(
            "--trust", help="Public key (.pub, or 64 hex) whose tombstone and manifest "
                            "signatures are trusted (repeatable).")] = None,
        dry_run: Annotated[bool, typer.Option(
            "--dry-run", help="Check and report; write nothing.")] = False,
        apply_untrusted: Annotated[bool, typer.Option(
            "--apply-untrusted-tombstones",
            help="Let unsigned or untrusted tombstones erase existing items too.")] = False,
        skip_unsupported: Annotated[bool, typer.Option(
            "--skip-unsupported",
            help="Import what fits and report records the ledger cannot keep as refused "
                 "(default: refuse the whole input).")] = False,
        max_bytes: Annotated[int | None, typer.Option(
            "--max-bytes", help="Largest JSON document or bundle record read (default "
                                "32 MiB document, 8 MiB record).")] = None,
        actor: ActorOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Import memory from a standard format: all or nothing, and a second import of
        the same file changes nothing. Reports created, skipped and refused counts.

        Example: ledger import export.json --format konshus --json
        """
        from ledger import progress
        from portability import service

        fmt = _format(fmt, ingest=True)
        trusted = [service.read_trusted_key(p) for p in trust or []]
        reading = f"Reading and checking {file.name}"
        with served(actor) as (svc, me), progress.bar(reading, total=1, json=as_json) as bar:
            report = svc.import_file(
                me, file, fmt, subject=subject, trusted=trusted, max_bytes=max_bytes,
                skip_unsupported=skip_unsupported, dry_run=dry_run,
                apply_untrusted=apply_untrusted, progress=bar.step).model_dump()
        verb = "would create" if dry_run else "created"
        out(report, as_json, f"{verb}: {_counts(report['created'])}\n"
                              f"skipped: {_counts(report['skipped'])}\n"
                              f"refused: {_counts(report['refused'])}\n"
                              f"archived by policy: {report['archived']['atoms']} atoms")
        for w in report["warnings"]:
            verdict(f"warning: {w}")
        archived = report.get("archived", {}).get("atoms", 0)
        if archived:
            verdict(f"note: {archived} atom{'s' if archived > 1 else ''} archived by the "
                     "policy (maxAtoms): kept for audit, out of recall and exports; ids in "
                     "--json")
        if report.get("statuses_restored"):
            verdict(f"note: {report['statuses_restored']} correction or expiry statuses "
                     "restored from the source")
        if report["tombstones"].get("not_applied_untrusted"):
            verdict("warning: untrusted tombstones not applied to existing items: "
                     + ", ".join(report["tombstones"]["not_applied_untrusted"][:5]))
        verdict(f"OK: {'checked (dry run)' if dry_run else 'imported'} {file} as {fmt} "
                 f"for subject {report['subject']}")

    return import_


def make_export(served: Served) -> Callable[..., None]:
    def export_(
        fmt: FormatOpt,
        out_path: Annotated[Path, typer.Option("--out", help="File (konshus, persona) or new "
                                                        "bundle directory (mem) to write.")],
        subject: SubjectOpt = None,
        sign: Annotated[bool, typer.Option(
            "--sign", help="Sign it: manifest.sig for mem, a DSSE envelope beside the file "
                           "otherwise.")] = False,
        include_private: Annotated[bool, typer.Option(
            "--include-private", help="Include the title and body of artifacts marked "
                                      "private (default: private artifacts travel as stubs, "
                                      "for exports meant for sharing or training).")] = False,
        actor: ActorOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Export one subject's memory to a standard format. Erased content never leaves;
        sensitivity, provenance and validity travel unchanged.

        Example: ledger export --format mem --subject user_9f4e --out user.mem --sign
        """
        from ledger import progress

        fmt = _format(fmt)
        with served(actor) as (svc, me), \
                progress.bar("Reading the log", total=1, json=as_json) as bar:
            exported = svc.export_file(me, fmt, out_path, subject, sign=sign,
                                       include_private=include_private, progress=bar.step)
        stats, written = exported.counts, exported.written
        report = exported.model_dump()
        out(report, as_json, "\n".join(written))
        if stats.get("records_not_carried"):
            verdict(f"warning: {stats['records_not_carried']} portable records (entities, "
                     f"edges, ...) have no place in {fmt} and were not exported; use "
                     "--format mem")
        verdict(f"OK: exported subject {exported.subject} as {fmt} ({_counts(stats)})")

    return export_


def register(cli: typer.Typer, served: Served) -> None:
    """Mount ``import`` and ``export`` on the ``ledger`` command."""
    cli.command("import")(make_import(served))
    cli.command("export")(make_export(served))
