"""The request register: every erasure request, one row each, as a privacy team files it
(ADR 0048). ``ledger requests export --format csv|json`` and the console's download.

Each row is read from the signed log (the request's events, its batch's approval, the
review flags its batch raised, the copies statement) and, for the pack columns, from
Evidence Packs the operator kept (``--packs DIR``), each verified before it is cited;
building a pack appends no event to the log, so the log alone cannot name one. Columns
(:data:`COLUMNS`):

* ``request_id``, ``subject_ref`` (the subject's own reference, as the request holds it:
  the only thing about the person in the register), ``legal_basis`` (the operator's words);
* ``received_at``, ``acknowledged_at``, ``ack_due``, ``complete_due``, ``completed_at``,
  ``partial_at`` (the last run that ended partial; kept once the request completes),
  ``rejected_at``: UTC, to the second, ``2031-01-02T03:04:05Z`` (ISO 8601 / RFC 3339);
* ``status``: ``open``, ``overdue``, ``partial``, ``completed``, ``completed-late``,
  ``rejected`` (governance/requests.py), at the register's clock; ``overdue``: ``yes``
  when not completed nor rejected and the completion deadline has passed, or the
  acknowledgment's did unacknowledged (a partial request can be overdue too);
* ``sla_met``: ``yes`` when acknowledged by ``ack_due`` and decided (completed or
  rejected) by ``complete_due``; ``no`` when either was late, or a deadline passed
  undecided; empty while a request is open and within both;
* ``reasons``: machine-readable tokens separated by ``;`` (governance/partial.py): a
  partial request's ``store-unreachable:ROUTE``, ``legal-hold:HOLD``; a rejected one's
  ``rejected:CODE``; a completed one's follow-ups, ``flagged-for-review:N`` (review
  flags its erasure raised that are still open) and ``copies-pending:UNTIL`` (older copies
  of the keystore decryptable until the KEK rotation due then; ``unscheduled`` when none
  is) or ``copies-unbounded`` (keys destroyed unwrapped);
* ``rejection_reason``: the operator's words (in clear in the log; never personal data);
* ``approver`` and ``approver_key``: the key that approved the erasure (``batch.approved``)
  or rejected the request, by name and key id;
* ``countersigners``: the other keys that signed the request's Evidence Pack (names or key
  ids, ``;`` between), ``batch_id``, ``pack_digest``: ``sha256:`` + hex of the pack's
  signed in-toto statement (the DSSE payload: unchanged by countersignatures), of the
  newest pack found that verifies, for the batch, with the batch's present outcome
  (completed, or partial).

The CSV (RFC 4180: comma, CRLF, double quotes) starts with a UTF-8 byte order mark, so
that a spreadsheet opened by double-click reads a non-ASCII reference as it is (Excel
takes a CSV without one for the machine's legacy code page); tools that read UTF-8 skip
it (Python: ``encoding="utf-8-sig"``). A cell that would start with ``=``, ``+``, ``-``,
``@``, a tab or a carriage return is written with a leading ``'`` so that no spreadsheet
runs it as a formula (a subject reference is the user's own string).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from uuid import UUID

from governance import partial as part
from ledger import clock, envelope
from ledger.errors import InputError

if TYPE_CHECKING:
    from ledger.application import LedgerApp

COLUMNS = ("request_id", "subject_ref", "legal_basis", "received_at", "acknowledged_at",
           "ack_due", "complete_due", "completed_at", "partial_at", "rejected_at", "status",
           "overdue", "sla_met", "reasons", "rejection_reason", "approver", "approver_key",
           "countersigners", "batch_id", "pack_digest")
TIMES = ("received_at", "acknowledged_at", "ack_due", "complete_due", "completed_at",
         "partial_at", "rejected_at")
BOM = "\ufeff"
_FORMULA = ("=", "+", "-", "@", "\t", "\r")


def second(value: str | None) -> str | None:
    """An instant as the register writes it: UTC, to the second, ``Z``."""
    if not value:
        return None
    return clock.parse_instant(value).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def period(date_from: str | None, date_to: str | None
           ) -> tuple[datetime | None, datetime | None]:
    """``--from``/``--to``: a day (``2031-01-31``: the whole day, UTC) or an instant; the
    register holds the requests received in [from, to]. Refused when to is before from."""
    start = clock.parse_instant(date_from, "--from") if date_from else None
    end = None
    if date_to:
        end = clock.parse_instant(date_to, "--to")
        if len(date_to.strip()) == 10:  # a day: up to its end
            end = end + timedelta(days=1) - timedelta(microseconds=1)
    if start is not None and end is not None and end < start:
        raise InputError(f"--to {date_to} is before --from {date_from}",
                         hint="give the first day, then the last")
    return start, end


# ----------------------------------------------------------------------------- packs
@dataclass
class PackSeen:
    batch_id: str
    outcome: str
    generated_at: str
    digest: str
    signers: list[str]
    path: str


@dataclass
class Packs:
    """Evidence Packs found under a folder: those that verify, by batch; the others by
    path with the step that failed (never cited)."""

    by_batch: dict[str, list[PackSeen]] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)

    def best(self, batch_id: str, outcome: str) -> PackSeen | None:
        found = [p for p in self.by_batch.get(batch_id, []) if p.outcome == outcome]
        return max(found, key=lambda p: (p.generated_at, p.digest)) if found else None

    @property
    def read(self) -> int:
        return sum(len(v) for v in self.by_batch.values())


def statement_digest(dsse: Mapping[str, Any]) -> str:
    """``sha256:`` + hex of a pack's DSSE payload (its in-toto statement): what names the
    pack, whatever countersignatures were added to it since."""
    return "sha256:" + hashlib.sha256(base64.b64decode(dsse["payload"])).hexdigest()


def read_packs(folder: Path, root_public_key: bytes | None, ledger_id: str) -> Packs:
    """Every pack folder (holding ``statement.dsse.json``) and ``.zip`` below ``folder``,
    verified offline against the ledger's root key (governance/pack.py); only this
    ledger's packs that verify are kept."""
    from governance.pack_layout import STATEMENT, PackInvalid
    from governance.pack_verify import read_pack, verify_pack_bytes
    from ledger.errors import LedgerError

    if not folder.is_dir():
        raise InputError(f"--packs {folder} is not a folder",
                         hint="the folder where you keep Evidence Packs (folders or .zip)")
    out = Packs()
    candidates = sorted({*(p.parent for p in folder.rglob(STATEMENT)),
                         *(p for p in folder.rglob("*.zip") if p.is_file())})
    for path in candidates:
        name = str(path.relative_to(folder))
        try:
            files = read_pack(path)
            dsse = json.loads(files[STATEMENT])
            statement = json.loads(base64.b64decode(dsse["payload"]))
            predicate = statement["predicate"]
            if predicate["ledger"]["id"] != ledger_id:
                out.refused[name] = "another ledger's pack"
                continue
            verify_pack_bytes(files, root_public_key)
        except PackInvalid as e:
            out.refused[name] = f"step {e.step}"
            continue
        except (LedgerError, KeyError, TypeError, ValueError, OSError) as e:
            out.refused[name] = f"not a pack ({type(e).__name__})"
            continue
        batch = predicate["batch"]
        out.by_batch.setdefault(batch["id"], []).append(PackSeen(
            batch["id"], batch["outcome"], predicate["generated_at"],
            statement_digest(dsse), [s["keyid"] for s in dsse["signatures"]], name))
    return out


# ----------------------------------------------------------------------------- rows
def _approval(app: LedgerApp, batch_id: str) -> tuple[str | None, str | None]:
    """(name, key id) of the key that signed the batch's ``batch.approved``."""
    from ledger.domain import RedactionBatch

    for row in app.reader.stored_events(UUID(batch_id)):
        opened = envelope.open_state(row.state)
        if opened.envelope["topic"] == RedactionBatch.Approved.TOPIC:
            return opened.envelope["payload"].get("operator"), opened.kid
    return None, None


def _rejection_key(app: LedgerApp, request_id: str) -> str | None:
    from ledger.domain import ErasureRequest

    for row in app.reader.stored_events(UUID(request_id)):
        opened = envelope.open_state(row.state)
        if opened.envelope["topic"] == ErasureRequest.Rejected.TOPIC:
            return str(opened.kid)
    return None


def _open_flags_by_batch(app: LedgerApp) -> dict[str, int]:
    """Open ``refers-to-erased`` flags per batch that raised them (the flag's reason names
    its batch: governance/erasure.py)."""
    from governance.review import open_flags

    out: dict[str, int] = {}
    for f in open_flags(app):
        reason = str(f.get("reason") or "")
        if f["flag"] == "refers-to-erased" and "erased by batch " in reason:
            batch = reason.rsplit("erased by batch ", 1)[1].strip()
            out[batch] = out.get(batch, 0) + 1
    return out


def _sla(row: Mapping[str, Any], now: datetime) -> bool | None:
    def t(key: str) -> datetime | None:
        v = row.get(key)
        return clock.parse_instant(v) if v else None

    ack, ack_due, due = t("acknowledged_at"), t("ack_due"), t("complete_due")
    decided = t("completed_at") or t("rejected_at")
    assert ack_due is not None and due is not None
    if (ack is not None and ack > ack_due) or (ack is None and now >= ack_due):
        return False
    if decided is not None:
        return decided <= due
    return False if now >= due else None


def _reasons(row: Mapping[str, Any], flags: Mapping[str, int]) -> list[str]:
    status = row["status"]
    if status == "partial":
        return part.codes(row.get("partial_reasons") or [])
    if status == "rejected":
        return [f"{part.REJECTED}:{(row.get('rejection') or {}).get('code', 'other')}"]
    out: list[str] = []
    if status in ("completed", "completed-late"):
        n = flags.get(str(row.get("batch_id")), 0)
        if n:
            out.append(f"{part.FLAGGED_FOR_REVIEW}:{n}")
        copies = row.get("copies") or {}
        if copies.get("state") == "pending":
            until = second(copies.get("until")) or "unscheduled"
            out.append(f"{part.COPIES_PENDING}:{until}")
        elif copies.get("state") == "unbounded":
            out.append("copies-unbounded")
    return out


def register_rows(app: LedgerApp, requests: Sequence[Mapping[str, Any]], now: datetime,
                  date_from: str | None = None, date_to: str | None = None,
                  packs: Packs | None = None) -> list[dict[str, Any]]:
    """One row per request of ``requests`` (governance/requests.py rows, as the caller may
    see them) received in the period, oldest first: the :data:`COLUMNS`, typed (None for
    an empty cell, booleans for ``overdue``; ``reasons`` and ``countersigners`` lists)."""
    start, end = period(date_from, date_to)
    flags = _open_flags_by_batch(app)
    names = {kid: e.name for kid, e in app.reader.roster().state.entries.items()}

    def who(kid: str) -> str:
        return names.get(kid) or kid

    out = []
    for r in requests:
        received = clock.parse_instant(r["received_at"])
        if (start is not None and received < start) or (end is not None and received > end):
            continue
        status = r["status"]
        approver = approver_key = None
        if status == "rejected":
            approver = (r.get("rejection") or {}).get("operator")
            approver_key = _rejection_key(app, r["request_id"])
        elif r.get("batch_id"):
            approver, approver_key = _approval(app, r["batch_id"])
        pack = None
        if packs is not None and r.get("batch_id") and status != "rejected":
            pack = packs.best(r["batch_id"], "partial" if status == "partial"
                              else "completed")
        sla = _sla(r, now)
        req = app.reader.aggregate(UUID(r["request_id"]))
        row: dict[str, Any] = {
            "request_id": r["request_id"], "subject_ref": r.get("subject_ref"),
            "legal_basis": getattr(req, "legal_basis", None),
            **{k: second(r.get(k)) for k in TIMES},
            "status": status, "overdue": bool(r.get("overdue")),
            "sla_met": sla, "reasons": _reasons(r, flags),
            "rejection_reason": (r.get("rejection") or {}).get("reason"),
            "approver": approver, "approver_key": approver_key,
            "countersigners": [who(k) for k in pack.signers[1:]] if pack else [],
            "batch_id": r.get("batch_id"), "pack_digest": pack.digest if pack else None,
        }
        out.append(row)
    return out


# ----------------------------------------------------------------------------- formats
def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        text = ";".join(str(v) for v in value)
    else:
        text = str(value)
    return "'" + text if text.startswith(_FORMULA) else text


def render_csv(rows: Iterable[Mapping[str, Any]]) -> bytes:
    """The register as a CSV a spreadsheet opens as it is (module docstring)."""
    buf = io.StringIO(newline="")
    w = csv.writer(buf, dialect="excel", lineterminator="\r\n")
    w.writerow(COLUMNS)
    for row in rows:
        w.writerow([_cell(row.get(c)) for c in COLUMNS])
    return (BOM + buf.getvalue()).encode("utf-8")


def render_json(rows: Sequence[Mapping[str, Any]], generated_at: str,
                date_from: str | None, date_to: str | None,
                packs: Mapping[str, Any] | None = None) -> bytes:
    """The register as JSON: when, for which period, the columns and the typed rows; and,
    when a packs folder was read, what it held (``{"verified": n, "refused": {path:
    why}}``)."""
    doc: dict[str, Any] = {"generated_at": generated_at, "from": date_from, "to": date_to,
                           "columns": list(COLUMNS), "rows": [dict(r) for r in rows]}
    if packs is not None:
        doc["packs"] = dict(packs)
    return (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


__all__ = ["BOM", "COLUMNS", "Packs", "read_packs", "register_rows", "render_csv",
           "render_json", "statement_digest"]
