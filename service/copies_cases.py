"""The facade's use cases about copies of a ledger (ADR 0045): a backup of the home, and
the erasure journal that makes a restore re-apply every erasure newer than the backup.
Joined into :class:`service.facade.MemoryService`. A restore makes a new home (no ledger is
open yet), so it is in the composition root beside ``create_home``
(:func:`service.root.restore_home`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ledger.errors import InputError
from service.caller import Caller
from service.core import FacadeCore
from service.models import BackupWritten, JournalExported


class CopiesCases(FacadeCore):
    """Backups and the erasure journal: acts on the whole ledger and on this machine's
    files, so the local operator's alone."""

    def backup(self, caller: Caller, out: Path, *, with_keys: bool = False,
               progress: Callable[[str, int, int], None] | None = None) -> BackupWritten:
        """`ledger backup OUT`: a consistent online backup of the home into the new folder
        ``out``, its manifest signed with the caller's operator key; never the read models,
        and neither a KEK nor a private key unless ``with_keys``."""
        self._require_ledger_operator(caller)
        self._local_files(caller)
        from governance.backup import take_backup

        taken = take_backup(self.app, out, operator=self._signing_key(caller),
                            with_keys=with_keys, progress=progress)
        return BackupWritten(**taken.as_json())

    def export_journal(self, caller: Caller, out: Path | None) -> JournalExported:
        """`ledger journal export OUT`: the home's erasure journal brought up to the log's
        head (against a checkpoint the witnesses are asked to cosign) and written to
        ``out`` whole (``None``: only returned). An existing ``out`` is replaced only when
        it is this ledger's journal (a cron job's copy), never another file."""
        self._require_ledger_operator(caller)
        self._local_files(caller)
        from governance.dsse import DocumentInvalid
        from governance.journal import read_journal, refresh_journal
        from keys.files import write_private

        if out is not None and out.exists():
            try:
                theirs = read_journal(out.read_bytes(), str(out)).document["ledger"]["id"]
            except (OSError, DocumentInvalid):
                theirs = None
            if theirs != self.app.ledger_id:
                raise InputError(f"{out} exists and is not this ledger's erasure journal; "
                                 "nothing was written", hint="give a new file name")
        self.app.checkpoint()  # witnessed; the journal reuses it when nothing came after
        journal = refresh_journal(self.app)
        if out is not None:
            try:
                write_private(out, journal.data, replace=True)
            except OSError as e:
                raise InputError(f"cannot write {out}: {e.strerror}") from None
        s = journal.summary()
        return JournalExported(out=None if out is None else str(out), ledger_id=s["ledger_id"],
                               size=s["size"], head_time=s["head_time"],
                               generated_at=s["generated_at"], keys=s["keys"],
                               tombstones=s["tombstones"], batches=s["batches"],
                               file_bytes=s["bytes"], content=journal.data)
