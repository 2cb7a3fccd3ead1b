"""The audit report's renderings: text (tables), JSON (stable keys) and one
self-contained HTML page with inline SVG charts (no script, nothing fetched), and the
atomic write of ``--out FILE``. The report itself is built by
:func:`governance.audit.build_report` (docs/adr/0013-audit-report.md).
"""

from __future__ import annotations

import html
import json
import os
import re
import tempfile
from collections.abc import Iterable, Sequence
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

from governance.audit import CATEGORIES
from governance.audit_period import event_time as _time
from ledger.clock import for_people
from ledger.errors import InputError
from ledger.text import plural

__all__ = ["FORMATS", "render", "render_html", "render_html_body", "render_json",
           "render_text", "write_atomic"]

FORMATS = ("text", "json", "html")

def write_atomic(path: Path, data: str) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same folder and a rename."""
    folder = path.parent if str(path.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    except OSError as e:
        raise InputError(f"cannot write {path}: {e}", hint="check that the folder exists "
                                                           "and is writable") from e
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise InputError(f"cannot write {path}: {e}") from e
        raise


def render(report: dict[str, Any], fmt: str) -> str:
    if fmt == "json":
        return render_json(report)
    if fmt == "html":
        return render_html(report)
    if fmt == "text":
        return render_text(report)
    raise InputError(f"unknown format {fmt!r}", hint=f"use one of: {', '.join(FORMATS)}")


def render_json(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


# -- text
def _table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    cells = [[("-" if v is None else str(v)) for v in r] for r in rows]
    if not cells:
        return ["  (none)"]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    line = "  " + "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    out = [line.rstrip(), "  " + "  ".join("-" * w for w in widths)]
    for r in cells:
        out.append(("  " + "  ".join(c.rjust(w) if c.lstrip("-").isdigit() else c.ljust(w)
                                     for c, w in zip(r, widths, strict=True))).rstrip())
    return out


def _period_label(r: dict[str, Any]) -> str:
    p = r["period"]
    end = "]" if p["to_inclusive"] else ")"
    return f"[{p['from'] or 'start of the log'}, {p['to']}{end}"


def _period_words(r: dict[str, Any]) -> str:
    """The period as people read it: ``from the start of the log to 2026-03-05 10:00 UTC``."""
    p = r["period"]
    start = for_people(p["from"]) if p["from"] else "the start of the log"
    end = for_people(p["to"]) + ("" if p["to_inclusive"] else " (excluded)")
    return f"from {start} to {end}"


def render_text(r: dict[str, Any]) -> str:
    lines = [*_text_head(r), *_text_findings(r), *_text_verification(r), *_text_activity(r),
             *_text_kinds(r), *_text_batches(r), *_text_requests(r), *_text_sweeps(r),
             *_text_policy(r), *_text_key_roster(r)]
    return "\n".join(lines) + "\n"


def _text_head(r: dict[str, Any]) -> list[str]:
    return [f"Memory audit report — ledger {r['ledger_id']}",
            f"period {_period_label(r)}; generated {r['generated_at']}",
            f"scope: {r['scope_note']}"
            + (f" (subject {r['subject']['subject_id']})" if r["subject"] else ""), ""]


def _text_findings(r: dict[str, Any]) -> list[str]:
    if not r["findings"]:
        return []
    return ["FINDINGS", *(f"  ! {f}" for f in r["findings"]), ""]


def _text_verification(r: dict[str, Any]) -> list[str]:
    v = r["verification"]
    lines = ["VERIFICATION"]
    if v["scope"] == "none":
        lines.append(f"  {v['note']}")
    else:
        lines.append(f"  status {v['status']} (scope {v['scope']}): {v['events_verified']} "
                     f"events verified, head seq {v['head_seq']} at {v['head_time']}")
        c = v["checkpoints"]
        lines.append(f"  checkpoints: {c['recorded']} recorded, {c['checked']} checked "
                     f"(signature and consistency), {c['in_period']} signed in the period")
        if v.get("note"):
            lines.append(f"  {v['note']}")
        if v["failure"]:
            f = v["failure"]
            lines.append(f"  FAIL at position {f['position']} (seq {f['seq']}): step "
                         f"{f['step']}: {f['reason']}")
    lines.append("")
    return lines


def _text_activity(r: dict[str, Any]) -> list[str]:
    a = r["activity"]
    return [
        f"ACTIVITY: {a['events']} events in the period, {a['reported']} reported"
        + (f", {a['not_reported']} not reported (auditPolicy)" if a["not_reported"] else ""),
        "",
        "By category", *_table(["category", "events"], a["by_category"].items()), "",
        "By type (topic)", *_table(["topic", "events"], a["by_topic"].items()), "",
        "By actor (signer)",
        *_table(["key id", "name", "roles", "events"],
                [(x["kid"], x["name"], ",".join(x["roles"]), x["events"])
                 for x in a["by_actor"]]), "",
        "Per day (UTC)",
        *_table(["day", *CATEGORIES, "total"],
                [(d, *(c[k] for k in CATEGORIES), sum(c.values()))
                 for d, c in a["per_day"].items()]), "",
    ]


def _text_kinds(r: dict[str, Any]) -> list[str]:
    lines = []
    for key, title, fields in (
            ("creations", "CREATIONS", ("atoms", "artifacts", "subjects", "total")),
            ("retrievals", "RETRIEVALS (recall rehearsals)", ("events", "atoms", "sessions")),
            ("rehearsals", "REHEARSALS (other than recall)", ("events", "atoms"))):
        s = r[key]
        if s["reported"]:
            lines.append(f"{title}: " + ", ".join(f"{f} {s[f]}" for f in fields))
        else:
            lines.append(f"{title}: {s['note']}")
    s = r["redactions"]
    if s["reported"]:
        lines.append("REDACTIONS: " + ", ".join(f"{m} {n}" for m, n in s["by_mode"].items())
                     + f"; unredactions {s['unredactions']}; artifact deletions "
                       f"{s['artifact_deletions']}; data keys destroyed "
                     + ", ".join(f"{k} {n}" for k, n in s["data_keys_destroyed"].items()))
    else:
        lines.append(f"REDACTIONS: {s['note']}")
    lines.append("")
    return lines


def _text_batches(r: dict[str, Any]) -> list[str]:
    b = r["batches"]
    return [f"REDACTION BATCHES: {b['count']} ({b['closed']} closed)",
            *_table(["batch", "mode", "request", "opened", "approved by", "closed", "atoms",
                     "artifacts", "subjects", "status"],
                    [(x["batch_id"], x["mode"], x["request_id"], x["opened_at"],
                      x["approved_by_name"] or x["approved_by"], x["closed_at"],
                      x["targets"]["atoms"], x["targets"]["artifacts"],
                      x["targets"]["subjects"], x["status"]) for x in b["items"]]),
            ""]


def _text_requests(r: dict[str, Any]) -> list[str]:
    e = r["erasure_requests"]
    return [f"ERASURE REQUESTS: {e['count']} ({e['completed']} completed, "
            f"{e['completed_late']} completed late, {e['open']} open, "
            f"{e['overdue']} OVERDUE)",
            *_table(["request", "subject", "subject id", "received", "ack due",
                     "complete due", "completed", "hours", "deadline h", "status"],
                    [(x["request_id"], x.get("subject_ref"), x["subject_id"],
                      x["received_at"], x["ack_due"], x["complete_due"], x["completed_at"],
                      x["hours_taken"] if x["hours_taken"] is not None else x["hours_open"],
                      x["deadline_hours"], x["status"].upper() if x["overdue"]
                      else x["status"]) for x in e["items"]]),
            ""]


def _text_sweeps(r: dict[str, Any]) -> list[str]:
    """Evidence packs, sweeps and policy archiving."""
    ep, sw, pa = r["evidence_packs"], r["sweeps"], r["policy_archiving"]
    return [f"EVIDENCE PACKS: {ep['events']} recorded" if ep["recorded"]
            else f"EVIDENCE PACKS: {ep['note']}",
            f"SWEEPS (expiry / archive): {sw['events']} events",
            *(_table(["topic", "events"], sw["by_topic"].items()) if sw["by_topic"] else []),
            "",
            f"POLICY ARCHIVING (atoms archived by memoryPolicy rules at creation): "
            f"{pa['events']} events",
            *(_table(["rule", "events"], pa["by_rule"].items()) if pa["by_rule"] else []),
            ""]


def _text_policy(r: dict[str, Any]) -> list[str]:
    pol = r["policy"]
    inf = pol["in_force"]
    return ["POLICY in force at the end of the period: " + (
            f"{inf['event_id']} set {inf['set_at']} by {inf['signer_name'] or inf['signer']}"
            if inf else "none"),
            "  audit flags: " + ", ".join(f"{k}={str(v).lower()}"
                                          for k, v in pol["audit_flags"].items())
            + f" ({pol['audit_flags_source']})",
            f"  changes in the period: {len(pol['changes'])}",
            *(_table(["event", "set at", "signer"],
                     [(c["event_id"], c["set_at"], c["signer_name"] or c["signer"])
                      for c in pol["changes"]]) if pol["changes"] else [])]


def _text_key_roster(r: dict[str, Any]) -> list[str]:
    k = r["key_roster"]
    return [f"KEY ROSTER changes in the period: {k['changes']}",
            *(_table(["at", "change", "key id", "name", "role"],
                     [(x["at"], x["change"], x["kid"], x["name"], x["role"])
                      for x in k["items"]]) if k["items"] else [])]


# -- html
_COLORS = {"created": "#2b6cb0", "recalled": "#38a169", "rehearsed": "#9ae6b4",
           "lifecycle": "#a0aec0", "redacted": "#e53e3e", "governance": "#805ad5",
           "keys": "#d69e2e"}
_STATUS_COLORS = {"completed": "#38a169", "completed-late": "#dd6b20", "open": "#718096",
                  "overdue": "#e53e3e"}
_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:2rem auto;
max-width:1100px;color:#1a202c;padding:0 1rem}
h1{font-size:1.5rem;margin-bottom:.2rem}h2{font-size:1.15rem;margin-top:2rem;
border-bottom:1px solid #e2e8f0;padding-bottom:.3rem}
.muted{color:#4a5568;font-size:.9rem}
.tiles{display:flex;flex-wrap:wrap;gap:.8rem;margin:1rem 0}
.tile{border:1px solid #e2e8f0;border-radius:8px;padding:.6rem 1rem;min-width:8rem}
.tile .n{font-size:1.6rem;font-weight:600}.tile .l{font-size:.8rem;color:#4a5568}
.tile.bad{border-color:#e53e3e;background:#fff5f5}.tile.good{border-color:#38a169}
table{border-collapse:collapse;margin:.5rem 0;font-size:.85rem}
th,td{border-bottom:1px solid #edf2f7;padding:.25rem .6rem;text-align:left}
td.n{text-align:right;font-variant-numeric:tabular-nums}
.finding{background:#fff5f5;border-left:4px solid #e53e3e;padding:.4rem .8rem;margin:.3rem 0}
.ok{color:#276749;font-weight:600}.fail{color:#c53030;font-weight:600}
code{font-size:.8rem}svg{max-width:100%;height:auto}
.scroll{overflow-x:auto;max-width:100%}
.legend span{display:inline-block;margin-right:1rem;font-size:.8rem}
td small{display:block;color:#4a5568;font-size:.75rem;white-space:nowrap}
td code{white-space:nowrap}
td.ref{overflow-wrap:anywhere;max-width:14rem}
p.cmd code{overflow-wrap:anywhere}
.legend svg{margin-right:.3rem;vertical-align:middle}
"""


def _pointer(*parts: str | int) -> str:
    """RFC 6901 JSON pointer of a value in the JSON report."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)



def _counted(r: dict[str, Any], section: str, title: str, by: str, label: str) -> list[str]:
    """An HTML section of event counts, one table row per ``by`` key."""
    sec = r[section]
    out = [f"<h2>{html.escape(title)}</h2><p>"
           f"{_n(sec['events'], section, 'events', tag='span')} events.</p>"]
    if sec[by]:
        out.append(f"<table><tr><th>{label}</th><th>events</th></tr>" + "".join(
            f"<tr>{_t(t)}{_n(n, section, by, t)}</tr>" for t, n in sec[by].items())
            + "</table>")
    return out

def _n(value: Any, *path: str | int, tag: str = "td") -> str:
    """A number shown on the page, tied to its place in the JSON report."""
    text = "-" if value is None else str(value)
    cls = ' class="n"' if tag == "td" else ""
    return f'<{tag}{cls} data-json-pointer="{html.escape(_pointer(*path))}">' \
           f"{html.escape(text)}</{tag}>"


def _t(value: Any) -> str:
    return f"<td>{html.escape('-' if value is None else str(value))}</td>"


def _when(value: Any) -> str:
    """A time cell as people read it (``2026-03-04 10:00 UTC``); the JSON keeps the instant."""
    return f"<td>{html.escape(for_people(value))}</td>"


def _counted_words(n: int, noun: str, *path: str | int) -> str:
    """``3 atoms`` / ``1 atom``, the number tied to its place in the JSON report."""
    *first, last = noun.split(" ")
    word = " ".join([*first, plural(n, last).split(" ", 1)[1]])
    return f"{_n(n, *path, tag='span')} {html.escape(word)}"


def _tile(label: str, value: Any, *path: str | int, state: str = "") -> str:
    return (f'<div class="tile {state}"><div class="n">{_n(value, *path, tag="span")}</div>'
            f'<div class="l">{html.escape(label)}</div></div>')


def _buckets(per_day: dict[str, dict[str, int]], start: str | None, end: str,
             end_inclusive: bool) -> tuple[str, list[tuple[str, dict[str, int]]]]:
    """Chart buckets (first day, counts) covering the period: days, or weeks (over 92 days)
    or months (over two years), so a long period still gives a readable chart."""
    if not per_day:
        return "day", []
    first = date.fromisoformat(start[:10] if start is not None else min(per_day))
    last_t = _time(end)
    if not end_inclusive and last_t.time() == datetime.min.time():
        last_t -= timedelta(days=1)
    last = max(last_t.date(), date.fromisoformat(max(per_day)))
    span = (last - first).days + 1
    unit = "day" if span <= 92 else "week" if span <= 730 else "month"

    def key(d: date) -> date:
        if unit == "week":
            return d - timedelta(days=d.weekday())
        return d.replace(day=1) if unit == "month" else d

    def step(d: date) -> date:
        if unit == "month":
            return d.replace(year=d.year + 1, month=1) if d.month == 12 else \
                d.replace(month=d.month + 1)
        return d + timedelta(days=7 if unit == "week" else 1)

    out: dict[date, dict[str, int]] = {}
    d = key(first)
    while d <= last:
        out[d] = {c: 0 for c in CATEGORIES}
        d = step(d)
    for day, counts in per_day.items():
        bucket = out.setdefault(key(date.fromisoformat(day)), {c: 0 for c in CATEGORIES})
        for c in CATEGORIES:
            bucket[c] += counts.get(c, 0)
    return unit, [(k.isoformat(), v) for k, v in sorted(out.items())]


def _nice_max(value: int) -> int:
    if value <= 5:
        return max(value, 1)
    magnitude: int = 10 ** (len(str(value)) - 1)
    for step in (1, 2, 5, 10):
        if value <= step * magnitude:
            return step * magnitude
    return value


def _activity_svg(r: dict[str, Any]) -> str:
    p = r["period"]
    unit, buckets = _buckets(r["activity"]["per_day"], p["from"], p["to"], p["to_inclusive"])
    if not buckets:
        return '<p class="muted">No reported events in the period.</p>'
    width, height, left, bottom, top = 1000, 300, 50, 40, 10
    plot_w, plot_h = width - left - 10, height - bottom - top
    peak = _nice_max(max(sum(b[1].values()) for b in buckets))
    bar = plot_w / len(buckets)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
             f'role="img" aria-label="Reported events per {unit}, stacked by category" '
             f'data-chart="activity" data-unit="{unit}">']
    tick = _nice_max(-(-peak // 5))
    for v in range(0, peak + 1, tick):
        y = top + plot_h - plot_h * v / peak
        parts.append(f'<line x1="{left}" x2="{width - 10}" y1="{y:.1f}" y2="{y:.1f}" '
                     f'stroke="#edf2f7"/><text x="{left - 6}" y="{y + 4:.1f}" font-size="11" '
                     f'text-anchor="end" fill="#4a5568">{v}</text>')
    label_every = max(1, len(buckets) // 12)
    for i, (label, counts) in enumerate(buckets):
        x = left + i * bar
        y = top + plot_h
        total = sum(counts.values())
        parts.append(f'<g data-bucket="{label}" data-total="{total}">')
        for c in CATEGORIES:
            n = counts[c]
            if not n:
                continue
            h = plot_h * n / peak
            y -= h
            parts.append(f'<rect x="{x + bar * 0.1:.2f}" y="{y:.2f}" width="{bar * 0.8:.2f}" '
                         f'height="{h:.2f}" fill="{_COLORS[c]}" data-category="{c}" '
                         f'data-count="{n}"><title>{label} {c}: {n}</title></rect>')
        parts.append("</g>")
        if i % label_every == 0:
            parts.append(f'<text x="{x + bar / 2:.1f}" y="{height - bottom + 16}" '
                         f'font-size="11" text-anchor="middle" fill="#4a5568">'
                         f'{label[5:] if unit != "month" else label[:7]}</text>')
    parts.append(f'<text x="{left}" y="{height - 4}" font-size="11" fill="#4a5568">'
                 f'per {unit} (UTC); {r["activity"]["reported"]} reported events</text></svg>')
    legend = "".join(f"<span>{_swatch(_COLORS[c])}{c}</span>" for c in CATEGORIES)
    return "".join(parts) + f'<div class="legend">{legend}</div>'


def _swatch(color: str) -> str:
    """A legend's colour square: SVG with a fill attribute (no style attribute, which a
    strict Content-Security-Policy refuses)."""
    return (f'<svg class="swatch" width="12" height="12" viewBox="0 0 12 12" '
            f'aria-hidden="true"><rect width="12" height="12" fill="{color}"/></svg>')


def _turnaround_svg(r: dict[str, Any]) -> str:
    items = r["erasure_requests"]["items"]
    if not items:
        return '<p class="muted">No erasure requests in the period.</p>'
    row_h, left, width, top = 28, 300, 1000, 20
    height = top + row_h * len(items) + 40
    values = [x["hours_taken"] if x["hours_taken"] is not None else x["hours_open"]
              for x in items] + [x["deadline_hours"] or 0 for x in items]
    peak = max(max(values), 1.0) * 1.1
    scale = (width - left - 20) / peak
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
             f'role="img" aria-label="Erasure turnaround against the completion deadline" '
             f'data-chart="turnaround">']
    for i, x in enumerate(items):
        y = top + i * row_h
        taken = x["hours_taken"] if x["hours_taken"] is not None else x["hours_open"]
        color = _STATUS_COLORS.get(x["status"], "#718096")
        parts.append(f'<g data-request="{html.escape(x["request_id"])}" '
                     f'data-status="{x["status"]}">')
        parts.append(f'<text x="{left - 8}" y="{y + 17}" font-size="11" text-anchor="end" '
                     f'fill="#1a202c">{html.escape(x["request_id"][:8])}… {x["status"]}</text>')
        dash = ' stroke="#1a202c" stroke-dasharray="4 2"' if x["hours_taken"] is None else ""
        parts.append(f'<rect x="{left}" y="{y + 5}" width="{max(taken * scale, 1):.2f}" '
                     f'height="16" fill="{color}"{dash} data-hours="{taken}">'
                     f'<title>{"taken" if x["hours_taken"] is not None else "open for"} '
                     f'{taken} h</title></rect>')
        if x["deadline_hours"] is not None:
            dx = left + x["deadline_hours"] * scale
            parts.append(f'<line x1="{dx:.2f}" x2="{dx:.2f}" y1="{y + 1}" y2="{y + 25}" '
                         f'stroke="#1a202c" stroke-width="2" '
                         f'data-deadline-hours="{x["deadline_hours"]}">'
                         f'<title>deadline {x["deadline_hours"]} h</title></line>')
        parts.append("</g>")
    axis_y = top + row_h * len(items) + 14
    for i in range(5):
        hours = peak * i / 4
        ax = left + hours * scale
        parts.append(f'<text x="{ax:.1f}" y="{axis_y}" font-size="11" text-anchor="middle" '
                     f'fill="#4a5568">{hours / 24:.1f} d</text>')
    parts.append(f'<text x="{left}" y="{height - 4}" font-size="11" fill="#4a5568">bar: time '
                 "from receipt to completion (dashed: still open, up to now); black line: "
                 "completion deadline</text></svg>")
    legend = "".join(f"<span>{_swatch(c)}{s}</span>" for s, c in _STATUS_COLORS.items())
    return "".join(parts) + f'<div class="legend">{legend}</div>'


def _request_row(i: int, x: dict[str, Any]) -> str:
    """One erasure request for the page: the subject by its reference, times as people read
    them, each deadline under the moment it bounds, the hours tied to the JSON report."""
    ref, sid = x.get("subject_ref"), str(x["subject_id"])
    subject = (f'<td class="ref" title="subject {html.escape(sid)}">'
               + (f"{html.escape(str(ref))}<small>{html.escape(sid[:8])}…</small>" if ref
                  else f"<code>{html.escape(sid)}</code>") + "</td>")

    def bounded(at: Any, due: Any) -> str:
        return (f"<td>{html.escape(for_people(at) if at else 'not yet')}"
                f"<small>due {html.escape(for_people(due))}</small></td>")

    key, said = (("hours_taken", "taken") if x["hours_taken"] is not None
                 else ("hours_open", "open for"))
    taken = f"{said} {_n(x[key], 'erasure_requests', 'items', i, key, tag='span')} h"
    if x["deadline_hours"] is not None:
        taken += (" of " + _n(x["deadline_hours"], "erasure_requests", "items", i,
                              "deadline_hours", tag="span") + " h")
    return (f"<tr><td><code>{html.escape(x['request_id'])}</code></td>{subject}"
            f"{_when(x['received_at'])}{bounded(x['acknowledged_at'], x['ack_due'])}"
            f"{bounded(x['completed_at'], x['complete_due'])}<td>{taken}</td>"
            f'<td class="{"fail" if x["overdue"] else ""}" data-json-pointer="'
            f'{_pointer("erasure_requests", "items", i, "status")}">'
            f"{html.escape(x['status'])}</td></tr>")


def _evidence_html(r: dict[str, Any]) -> list[str]:
    """Where the evidence of the report's erasures is and how to hand it over (ADR 0048:
    packs leave no record in the log, so the section never reads as if there were none)."""
    ep, v = r["evidence_packs"], r["verification"]
    closed = [(i, x) for i, x in enumerate(r["batches"]["items"]) if x["status"] == "closed"]
    out = ["<h2>Evidence packs</h2>"]
    if ep["recorded"]:
        out.append(f"<p>{_n(ep['events'], 'evidence_packs', 'events', tag='span')} pack "
                   "events recorded in the period.</p>")
    if not closed:
        out.append("<p>No erasure was closed in this report, so there is no erasure "
                   "evidence to pack.</p>")
    else:
        checked = ("checked by the verification above" if v["ok"] else
                   "not verified in this report (see Verification)")
        batches = _counted_words(ep["closed_batches"], "closed batches", "evidence_packs",
                                 "closed_batches")
        events = _counted_words(ep["evidence_events"], "signed events", "evidence_packs",
                                "evidence_events")
        out.append(f"<p><strong>The evidence is in the log.</strong> Each closed erasure "
                   f"left its signed tombstones and key destructions in the log, {checked}: "
                   f"{batches} with {events}.</p>")
        out.append("<table><tr><th>batch</th><th>request</th><th>closed</th>"
                   "<th>signed events</th></tr>" + "".join(
                       f"<tr><td><code>{html.escape(x['batch_id'])}</code></td>"
                       f"<td><code>{html.escape(str(x['request_id'] or '-'))}</code></td>"
                       f"{_when(x['closed_at'])}"
                       f"{_n(x['event_ids'], 'batches', 'items', i, 'event_ids')}</tr>"
                       for i, x in closed) + "</table>")
        out.append('<p class="cmd">To hand one over, build its Evidence Pack: '
                   "<code>ledger evidence-pack BATCH --out DIR</code>, or <em>Build the "
                   "Evidence Pack</em> on the console's request page. A pack holds these "
                   "events with their inclusion proofs, signed; whoever receives it checks it "
                   "offline with <code>ledger verify-pack DIR --root-key root.pub</code>.</p>")
    out.append('<p class="muted">Packs are not counted here: building one appends nothing '
               "to the log (ADR 0048), and the ledger keeps no copy of a pack. A pack is "
               "wherever it was written or downloaded, and can be built again from the log "
               "at any time, with the same evidence.</p>")
    return out


def render_html(r: dict[str, Any]) -> str:
    """One self-contained page: inline CSS and SVG, no script, nothing fetched."""
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; img-src data:\">",
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>Memory audit report, {html.escape(_period_words(r))}</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>Memory audit report</h1>", render_html_body(r), "</body></html>"]) + "\n"


_LABELLED = re.compile(r"(<h[234]>.*?</h[234]>|<summary>.*?</summary>|<table>)")


def _scrollable(body: str) -> str:
    """Each table in a focusable region that scrolls sideways on a narrow screen, named
    after the heading (or summary) above it."""
    out, label = [], "table"
    for piece in _LABELLED.split(body):
        if piece == "<table>":
            piece = (f'<div class="scroll" role="region" tabindex="0" '
                     f'aria-label="{html.escape(label)}"><table>')
        elif piece.startswith(("<h", "<summary>")):
            label = re.sub(r"<[^>]+>", "", piece)
        out.append(piece)
    return "".join(out).replace("</table>", "</table></div>")


def render_html_body(r: dict[str, Any], level: int = 2) -> str:
    """The report's body without its page or title: what :func:`render_html` wraps, and
    what the console shows inside its own page. Styled by class names only (no style
    attribute), so it renders under a strict Content-Security-Policy. ``level``: the
    heading level of its sections (3 to nest them under a page's own h2)."""
    out = [*_html_head(r), *_html_tiles(r), *_html_verification(r), *_html_activity(r),
           *_html_kinds(r), *_html_requests(r), *_html_batches(r), *_evidence_html(r),
           *_counted(r, "sweeps", "Sweeps (expiry, archive)", "by_topic", "topic"),
           *_counted(r, "policy_archiving", "Policy archiving (memoryPolicy rules at creation)",
                     "by_rule", "rule"),
           *_html_policy(r), *_html_key_roster(r),
           '<p class="muted">Ids and counts only: this report holds no memory content. '
           "Produced by <code>ledger audit</code>.</p>"]
    body = _scrollable("\n".join(out))
    if level != 2:
        body = re.sub(r"<(/?)h([23])>", lambda m: f"<{m[1]}h{int(m[2]) + level - 2}>", body)
    return body


def _html_head(r: dict[str, Any]) -> list[str]:
    """The ledger, period and scope line, then the findings."""
    return [
        f'<p class="muted">Ledger <code>{html.escape(r["ledger_id"])}</code> · period '
        f"{html.escape(_period_words(r))} · generated "
        f"{html.escape(for_people(r['generated_at']))}<br>"
        f"{html.escape(r['scope_note'])}"
        + (f" · subject <code>{html.escape(r['subject']['subject_id'])}</code>"
           if r["subject"] else "") + "</p>",
        *(f'<div class="finding">{html.escape(f)}</div>' for f in r["findings"]),
    ]


def _html_tiles(r: dict[str, Any]) -> list[str]:
    a, v, e = r["activity"], r["verification"], r["erasure_requests"]
    vstate = "" if v["ok"] is None else ("good" if v["ok"] else "bad")
    out = ['<div class="tiles">',
           _tile("events in the period", a["events"], "activity", "events"),
           _tile("reported events", a["reported"], "activity", "reported")]
    for key, label in (("creations", "creations"), ("retrievals", "retrievals"),
                       ("rehearsals", "other rehearsals")):
        s = r[key]
        if s["reported"]:
            out.append(_tile(label, s["total"] if key == "creations" else s["events"],
                             key, "total" if key == "creations" else "events"))
    if r["redactions"]["reported"]:
        out.append(_tile("redaction events", r["redactions"]["events"], "redactions",
                         "events"))
    out.append(_tile("erasure requests", e["count"], "erasure_requests", "count"))
    out.append(_tile("overdue requests", e["overdue"], "erasure_requests", "overdue",
                     state="bad" if e["overdue"] else "good"))
    if v["scope"] != "none":
        out.append(_tile("events verified", v["events_verified"], "verification",
                         "events_verified", state=vstate))
    out.append("</div>")
    return out


def _html_verification(r: dict[str, Any]) -> list[str]:
    v = r["verification"]
    out = ["<h2>Verification</h2>"]
    if v["scope"] == "none":
        out.append(f"<p>{html.escape(v['note'])}</p>")
        return out
    cls = "ok" if v["ok"] else "fail"
    out.append(f'<p>Status: <span class="{cls}" data-json-pointer="/verification/status">'
               f"{html.escape(v['status'])}</span> (scope {html.escape(v['scope'])}); head "
               f"seq {_n(v['head_seq'], 'verification', 'head_seq', tag='span')} at "
               f"{html.escape(for_people(v['head_time']))}.</p>")
    if v.get("note"):
        out.append(f'<p class="muted">{html.escape(v["note"])}</p>')
    if v["failure"]:
        fl = v["failure"]
        out.append(f'<p class="fail">FAIL at position {fl["position"]} (seq {fl["seq"]}): '
                   f"step {html.escape(str(fl['step']))}: {html.escape(fl['reason'])}</p>")
    c = v["checkpoints"]
    out.append("<table><tr><th>checkpoints recorded</th><th>checked (signature and "
               "consistency)</th><th>signed in the period</th></tr><tr>"
               + _n(c["recorded"], "verification", "checkpoints", "recorded")
               + _n(c["checked"], "verification", "checkpoints", "checked")
               + _n(c["in_period"], "verification", "checkpoints", "in_period")
               + "</tr></table>")
    return out


def _html_activity(r: dict[str, Any]) -> list[str]:
    a = r["activity"]
    return [
        "<h2>Activity over time</h2>",
        _activity_svg(r),
        "<h3>By category</h3><table><tr><th>category</th><th>events</th></tr>",
        *(f"<tr>{_t(c)}{_n(n, 'activity', 'by_category', c)}</tr>"
          for c, n in a["by_category"].items()),
        "</table>",
        "<h3>By type (topic)</h3><table><tr><th>topic</th><th>events</th></tr>",
        *(f"<tr>{_t(t)}{_n(n, 'activity', 'by_topic', t)}</tr>"
          for t, n in a["by_topic"].items()),
        "</table>",
        "<h3>By actor (signer)</h3><table><tr><th>key id</th><th>name</th><th>roles"
        "</th><th>events</th></tr>",
        *(f"<tr>{_t(x['kid'])}{_t(x['name'])}{_t(', '.join(x['roles']))}"
          f"{_n(x['events'], 'activity', 'by_actor', i, 'events')}</tr>"
          for i, x in enumerate(a["by_actor"])),
        "</table>",
        "<details><summary>Events per day (UTC)</summary><table><tr><th>day</th>"
        + "".join(f"<th>{c}</th>" for c in CATEGORIES) + "</tr>",
        *(f"<tr>{_t(d)}" + "".join(_n(counts[c], "activity", "per_day", d, c)
                                   for c in CATEGORIES) + "</tr>"
          for d, counts in a["per_day"].items()),
        "</table></details>",
    ]


def _html_kinds(r: dict[str, Any]) -> list[str]:
    """Creations, retrievals, rehearsals and redactions: one row each."""
    out = ["<h2>Creations, retrievals, rehearsals, redactions</h2><table>"
           "<tr><th>kind</th><th>audit flag</th><th>figures</th></tr>"]
    for key in ("creations", "retrievals", "rehearsals"):
        s = r[key]
        out.append(f"<tr>{_t(key)}{_t(s['audit_flag'])}<td>{_kind_figures(key, s)}</td></tr>")
    s = r["redactions"]
    out.append(f"<tr>{_t('redactions')}{_t(s['audit_flag'])}<td>{_redaction_figures(s)}</td>"
               "</tr></table>")
    return out


def _kind_figures(key: str, s: dict[str, Any]) -> str:
    if not s["reported"]:
        return html.escape(s["note"])
    if key == "creations":
        return (", ".join(_counted_words(s[f], f, key, f)
                          for f in ("atoms", "artifacts", "subjects"))
                + f"; {_n(s['total'], key, 'total', tag='span')} in all")
    if key == "retrievals":
        return (f"{_counted_words(s['events'], 'recall events', key, 'events')} on "
                f"{_counted_words(s['atoms'], 'atoms', key, 'atoms')} in "
                f"{_counted_words(s['sessions'], 'sessions', key, 'sessions')}")
    return (f"{_counted_words(s['events'], 'events', key, 'events')} on "
            f"{_counted_words(s['atoms'], 'atoms', key, 'atoms')}")


def _redaction_figures(s: dict[str, Any]) -> str:
    if not s["reported"]:
        return html.escape(s["note"])
    figures = "by mode: " + ", ".join(
        f"{_n(n, 'redactions', 'by_mode', m, tag='span')} {html.escape(m)}"
        for m, n in s["by_mode"].items())
    figures += "; " + _counted_words(s["unredactions"], "unredactions", "redactions",
                                     "unredactions")
    figures += "; " + _counted_words(s["artifact_deletions"], "artifact deletions",
                                     "redactions", "artifact_deletions")
    figures += "; data keys destroyed: " + ", ".join(
        _counted_words(n, f"{k} keys", "redactions", "data_keys_destroyed", k)
        for k, n in s["data_keys_destroyed"].items())
    return figures


def _html_requests(r: dict[str, Any]) -> list[str]:
    e = r["erasure_requests"]
    return [
        "<h2>Erasure requests and turnaround</h2>",
        f"<p>Requests: {_n(e['count'], 'erasure_requests', 'count', tag='span')}; "
        f"{_n(e['completed'], 'erasure_requests', 'completed', tag='span')} completed, "
        f"{_n(e['completed_late'], 'erasure_requests', 'completed_late', tag='span')} "
        f"completed late, {_n(e['open'], 'erasure_requests', 'open', tag='span')} open, "
        f"{_n(e['overdue'], 'erasure_requests', 'overdue', tag='span')} overdue.</p>",
        _turnaround_svg(r),
        "<table><tr><th>request</th><th>subject</th><th>received</th>"
        "<th>acknowledged</th><th>completed</th><th>time taken</th><th>status</th>"
        "</tr>",
        *(_request_row(i, x) for i, x in enumerate(e["items"])),
        "</table>",
    ]


def _html_batches(r: dict[str, Any]) -> list[str]:
    b = r["batches"]
    return [f"<h2>Redaction batches</h2><p>Batches: "
            f"{_n(b['count'], 'batches', 'count', tag='span')}; "
            f"{_n(b['closed'], 'batches', 'closed', tag='span')} closed.</p>",
            "<table><tr><th>batch</th><th>mode</th><th>request</th><th>opened</th>"
            "<th>approved by</th><th>closed</th><th>targets</th><th>events</th>"
            "<th>status</th></tr>",
            *(_batch_row(i, x) for i, x in enumerate(b["items"])),
            "</table>"]


def _batch_row(i: int, x: dict[str, Any]) -> str:
    req = x["request_id"]
    targets = ", ".join(_counted_words(x["targets"][k], k, "batches", "items", i,
                                       "targets", k)
                        for k in ("atoms", "artifacts", "subjects"))
    return (f"<tr><td><code>{html.escape(x['batch_id'])}</code></td>{_t(x['mode'])}"
            + (f'<td title="{html.escape(req)}"><code>{html.escape(req[:8])}…</code></td>'
               if req else _t(None))
            + f"{_when(x['opened_at'])}{_t(x['approved_by_name'] or x['approved_by'])}"
            f"{_when(x['closed_at'])}<td>{targets}</td>"
            f"{_n(x['event_ids'], 'batches', 'items', i, 'event_ids')}{_t(x['status'])}</tr>")


def _html_policy(r: dict[str, Any]) -> list[str]:
    pol = r["policy"]
    inf = pol["in_force"]
    out = ["<h2>Policy</h2>",
           "<p>In force at the end of the period: " + (
               f"<code>{html.escape(inf['event_id'])}</code> set "
               f"{html.escape(for_people(inf['set_at']))} by "
               f"{html.escape(str(inf['signer_name'] or inf['signer']))}" if inf else "none")
           + "</p>",
           "<p>Audit flags: " + ", ".join(
               f"{html.escape(k)}=<span data-json-pointer=\""
               f"{_pointer('policy', 'audit_flags', k)}\">"
               f"{str(val).lower()}</span>" for k, val in pol["audit_flags"].items())
           + f' <span class="muted">({html.escape(pol["audit_flags_source"])})</span></p>',
           f"<p>Changes in the period: {len(pol['changes'])}</p>"]
    if pol["changes"]:
        out.append("<table><tr><th>event</th><th>set at</th><th>signer</th></tr>" + "".join(
            f"<tr>{_t(c['event_id'])}{_when(c['set_at'])}{_t(c['signer_name'] or c['signer'])}"
            "</tr>" for c in pol["changes"]) + "</table>")
    return out


def _html_key_roster(r: dict[str, Any]) -> list[str]:
    k = r["key_roster"]
    out = [f"<h2>Key roster</h2><p>"
           f"{_n(k['changes'], 'key_roster', 'changes', tag='span')} changes in the "
           f"period; {_n(k['keys'], 'key_roster', 'keys', tag='span')} keys in the "
           "roster.</p>"]
    if k["items"]:
        out.append("<table><tr><th>at</th><th>change</th><th>key id</th><th>name</th>"
                   "<th>role</th></tr>" + "".join(
                       f"<tr>{_when(x['at'])}{_t(x['change'])}{_t(x['kid'])}{_t(x['name'])}"
                       f"{_t(x['role'])}</tr>" for x in k["items"]) + "</table>")
    return out
