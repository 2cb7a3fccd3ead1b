"""``ledger backup``, ``ledger restore`` and ``ledger journal export`` (ADR 0045).

``backup`` and ``journal export`` call the facade as the local operator (the ``served``
opener :func:`register` is given); ``restore`` makes a new home, so like ``ledger init`` it
calls the composition root (``service.root.restore_home``) with the home that
``--home`` names. Heavy imports stay inside the commands (ADR 0026)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from cli.opener import Served
from cli.output import JsonOpt, verdict
from cli.output import out as emit


def register(cli: typer.Typer, served: Served, home_of: Callable[[], Path | None]) -> None:
    @cli.command("backup")
    def backup_command(
        out: Annotated[Path, typer.Argument(
            help="A new folder for the backup (refused if it exists and is not empty).")],
        with_keys: Annotated[bool, typer.Option(
            "--with-keys", help="Also copy the private signing keys and the KEK: the backup "
                                "then stays decryptable after every KEK rotation (guard it "
                                "like a key).")] = False,
        operator: Annotated[str, typer.Option(
            help="The operator key that signs the manifest.")] = "operator",
        as_json: JsonOpt = False,
    ) -> None:
        """Take a consistent online backup of the home into the new folder OUT: the event
        store and the keystore (SQLite's backup API, under the write lock), config.toml,
        the public keys, the erasure journal and a signed manifest (digests, the log's
        checkpoint, the KEK epoch). Never the read models (a restore rebuilds them), never
        a KEK or a private key unless --with-keys. For a PostgreSQL event store, back it
        up with pg_dump first; the manifest says so.

        Example: ledger backup /srv/backups/ledger-$(date +%F)
        """
        from ledger import progress

        with served(operator=operator) as (svc, me), \
                progress.bar("Backing up", total=1, json=as_json) as bar:
            done = svc.backup(me, out, with_keys=with_keys, progress=bar.step)
        data = done.model_dump()
        log = data["log"]
        emit(data, as_json, f"{done.backup}\n"
            f"log: {log['size']} events, last at {log['head_time']}; KEK epoch "
            f"{done.kek['epoch']} ({done.kek['store']}); {len(done.files)} files; journal of "
            f"{done.journal['keys']} key destructions")
        for note in done.notes:
            verdict(f"note: {note}")
        for warning in done.warnings:
            verdict(f"warning: {warning}")
        verdict(f"OK: backup of ledger {done.ledger_id} (log size {log['size']}) written to "
                f"{done.backup}")

    @cli.command("restore")
    def restore_command(
        backup: Annotated[Path, typer.Argument(
            help="A backup folder written by `ledger backup`.")],
        journal: Annotated[list[Path] | None, typer.Option(
            "--journal", help="An erasure journal (`ledger journal export`); repeatable: the "
                              "newest is applied.")] = None,
        accept_rollback: Annotated[bool, typer.Option(
            "--accept-rollback", help="Restore without a journal newer than the backup: "
                                      "the erasures after it come back (the report says "
                                      "which log they are missing from).")] = False,
        kek_from: Annotated[str | None, typer.Option(
            "--kek-from", help="Where the backup's KEK epoch lives (file:FOLDER, relative "
                               "to here, or a pkcs11: URI); default: the source home's "
                               "store as the manifest records it, or the backup's own if "
                               "taken --with-keys.")]
        = None,
        keys_from: Annotated[Path | None, typer.Option(
            "--keys-from", metavar="DIR", help="The folder of the ledger's private signing "
                                               "keys; default: the source home's keys/ (or "
                                               "the backup's, if taken --with-keys).")]
        = None,
        kek: Annotated[str | None, typer.Option(
            "--kek", help="The new home's KEK store (default file:kek in it, or "
                          "LEDGER_KEK); never the source's.")] = None,
        operator: Annotated[str, typer.Option(
            help="The operator key that signs the re-applied erasures.")] = "operator",
        as_json: JsonOpt = False,
    ) -> None:
        """Restore BACKUP into a new home (--home NEW): verify the manifest, apply the
        newest erasure journal before the ledger opens (every key it names destroyed again,
        each missing tombstone re-recorded as a signed "erasure re-applied after restore"
        event), re-wrap every data key under a new KEK epoch of the new home, rebuild the
        read models, verify. Refused without a journal at least as new as the backup
        unless --accept-rollback. Made in a staging folder beside NEW and renamed at the
        end: after a crash, run the same command again (it starts over).

        Example: ledger restore /srv/backups/ledger-2026-12-04 --home /srv/ledger-restored \\
        --journal /mnt/offsite/erasure-journal.json
        """
        from ledger import progress
        from ledger.errors import InputError
        from service.root import restore_home

        home = home_of()
        if home is None:
            raise InputError("give the new home with --home NEW",
                             hint="ledger restore FROM --home NEW --journal FILE")
        with progress.bar("Restoring", total=1, json=as_json) as bar:
            done = restore_home(backup, home, journals=journal or [],
                                accept_rollback=accept_rollback, kek_from=kek_from,
                                keys_from=keys_from, kek=kek, operator=operator,
                                progress=bar.step)
        r = done.report
        emit(r, as_json, _restored_text(r))
        _restored_verdicts(r)

    journal_cli = typer.Typer(no_args_is_help=True, help="The erasure journal: the ids of "
                              "destroyed data keys and their tombstones, signed; what a "
                              "restore needs so that no erasure comes back.")
    cli.add_typer(journal_cli, name="journal")

    @journal_cli.command("export")
    def journal_export(
        out: Annotated[str, typer.Argument(
            help="Where to write the signed journal (replaced whole if it is this ledger's "
                 "journal); - for stdout.")],
        as_json: JsonOpt = False,
    ) -> None:
        """Bring the erasure journal up to the log's head and copy it out: to a second
        disk, object storage, the witness operator. Ids, positions and times only; a few
        hundred bytes per erased item. Run it after every erasure and from cron.

        Example: ledger journal export /mnt/offsite/erasure-journal.json
        """
        from ledger.errors import InputError

        if out == "-" and as_json:
            raise InputError("--json and - both write to stdout: give a file with --json")
        with served() as (svc, me):
            done = svc.export_journal(me, None if out == "-" else Path(out))
        if out == "-":
            sys.stdout.write(done.content.decode("utf-8"))  # canonical JSON text
        else:
            data = done.model_dump(exclude={"content"})
            emit(data, as_json, done.out)
        verdict(f"OK: erasure journal of ledger {done.ledger_id}: log size {done.size}, "
                f"{done.keys} key destructions, {done.tombstones} tombstones, "
                f"{done.file_bytes} bytes")


def _restored_text(r: dict[str, Any]) -> str:
    b, k = r["backup"], r["kek"]
    lines = [r["home"],
             f"backup: {b['folder']} (log of {b['log_size']} events, last at "
             f"{b['head_time']})"]
    j = r.get("journal")
    if j:
        lines.append(f"journal: {j['file']} (log size {j['size']}, {j['head_time']}): "
                     f"{j['keys']} key destructions; {len(r['reapplied'])} erasures "
                     f"re-applied; {r['not_in_backup']} erased items were made after the "
                     "backup (nothing of them restored)")
    else:
        lines.append("journal: none")
    lines.append(f"keys: {k['keys_destroyed']} destroyed again; {k['rewrapped']} re-wrapped "
                 f"under KEK epoch {k['epoch']} ({k['store']}); the source's epochs "
                 f"{', '.join(map(str, k['forgotten'])) or 'none'} forgotten (read from "
                 f"{k['source']}, never written)")
    v = r["verify"]
    lines.append(f"read models rebuilt ({r['read_models']['head']} events); ledger verify: "
                 f"OK ({v['events']} events)")
    return "\n".join(lines)


def _restored_verdicts(r: dict[str, Any]) -> None:
    rb = r.get("rollback")
    if rb:
        verdict(f"warning: ROLLBACK: the restored log ends at seq {rb['restored_size']}; the "
                f"journal's checkpoint is at seq {rb['journal_size']}: {rb['events_lost']} "
                f"events of the log are lost (their erasures are re-applied; the rest is "
                f"not restored). The checkpoint carries {rb['cosignatures']} witness "
                "cosignature(s): a witness will see this home's next checkpoint as a fork")
    for warning in r.get("warnings") or []:
        verdict(f"warning: {warning}")
    if r.get("could_come_back"):
        verdict(f"warning: --accept-rollback: {r['could_come_back']}")
    if r.get("open_batches"):
        verdict(f"note: {len(r['open_batches'])} erasure batch(es) were still open at the "
                "backup's time and closed after it; their keys are destroyed again here; "
                "finish them with `ledger requests resume`: "
                + ", ".join(r["open_batches"][:5]))
    verdict(f"OK: ledger {r['ledger_id']} restored to {r['home']}")
