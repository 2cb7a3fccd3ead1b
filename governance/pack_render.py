"""The Evidence Pack's report for people (``report.html``): the predicate's facts as one
self-contained page, no scripts, no network. A subject of the signed statement like every
other file of the pack, so verify-pack checks it is the one that was signed."""

from __future__ import annotations

import html
import re
from datetime import datetime
from typing import Any

from governance.copies import NOT_COVERED_WORDS, day, group_words, keystore_words, overall_words
from governance.partial import words
from ledger import clock
from ledger.text import plural


def render_report(p: dict[str, Any]) -> str:
    """A self-contained HTML page (no scripts, no network): timeline, stores, flags."""
    e = html.escape
    req = p.get("request") or {}
    bad = ' class="bad"'  # a route not checked (a partial outcome, ADR 0047)
    rows = "".join(
        f"<tr><td>{e(r['route'])}</td><td{'' if r['reach'] == 'not-reachable' else bad}>"
        f"{e(r['reach'])}</td><td>{r.get('items', '')}</td>"
        f"<td>{e(clock.for_people(r.get('checked_at')))}</td></tr>"
        for r in p.get("reach", {}).get("routes", []))
    scan = p.get("reach", {}).get("raw_scan", {})
    flagged_ids = p.get("reach", {}).get("flagged_for_review", [])
    review_arts = p.get("reach", {}).get("flags", {}).get("artifacts_for_review", [])
    flagged = "".join(f"<li><code>{e(a)}</code></li>" for a in flagged_ids) + "".join(
        f"<li>artifact <code>{e(a)}</code></li>" for a in review_arts) or "<li>none</li>"
    timeline = "".join(
        f"<tr><td>{e(label)}</td><td>{e(clock.for_people(req.get(key)))}</td></tr>"
        for label, key in (("received", "received_at"), ("acknowledged", "acknowledged_at"),
                           ("acknowledgment due", "ack_due"), ("completed", "completed_at"),
                           ("completion due", "complete_due")))
    on_time = ""
    if req.get("completed_at") and req.get("complete_due"):
        done = datetime.fromisoformat(req["completed_at"])
        due = datetime.fromisoformat(req["complete_due"].replace("Z", "+00:00"))
        on_time = "within the deadline" if done <= due else "AFTER the deadline"
    targets = p.get("targets", {})
    counts = ", ".join(plural(len(v), k) for k, v in targets.items())
    partial = p["batch"]["outcome"] == "partial"
    done_line = (f"<p>Completed {e(on_time)}.</p>" if not partial else
                 '<p class="bad"><b>Not completed:</b> the erasure ended partial (above); '
                 'the request stays open and its deadline runs.</p>')
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Evidence Pack {e(p['batch']['id'])}</title>
<style>body{{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;color:#222}}
table{{border-collapse:collapse;margin:1rem 0}}td,th{{border:1px solid #ccc;padding:.3rem .6rem}}
.ok{{color:#075}}.bad{{color:#a00}}code{{font-size:.85em}}</style></head><body>
<h1>Erasure evidence</h1>
<p>Ledger <code>{e(p['ledger']['origin'])}</code>, batch <code>{e(p['batch']['id'])}</code>
({e(p['batch']['mode'])}), approved by <b>{e(str(p['batch']['approved_by']))}</b>.
Reason: {e(p['batch']['reason'] or 'sealed, erased with the batch key')}. Targets: {e(counts)}.</p>
{_partial_html(p)}<h2>Request timeline</h2><table>{timeline}</table>{done_line}
<h2>Where the memory could be reached</h2>
<table><tr><th>store</th><th>reach after erasure</th><th>items</th><th>checked</th></tr>
{rows}</table>
<p>Raw scan of {scan.get('files', 0)} files owned by the ledger:
<span class="{'ok' if not scan.get('hits') else 'bad'}">{len(scan.get('hits', []))} hits</span>.</p>
{_copies_html(p)}<h2>Flagged for review</h2>
<p>{plural(len(flagged_ids), 'memories')} of other subjects flagged <code>refers-to-erased</code>,
{len(review_arts)} of their artifacts listed for review; none of them erased.</p>
<ul>{flagged}</ul>
{_witness_html(p)}
<h2>Proofs</h2><p>{len(p['events'])} signed events with inclusion proofs in the tree of size
{p['checkpoints']['after']['size']}; the log before the batch (size
{p['checkpoints']['before']['size']}) is proved to be a prefix of it.
Verify offline: <code>ledger verify-pack PACK --root-key root.pub</code>.</p>
</body></html>
"""


def _partial_html(p: dict[str, Any]) -> str:
    """The partial outcome, first and plain (ADR 0047): why the erasure stopped short and
    what it did; for a completed batch, the earlier runs that had ended partial. Empty for
    a batch that never ended partial (its report is as it always was)."""
    runs = p.get("partial_outcomes") or []
    if not runs:
        return ""
    e = html.escape

    def items(reasons: list[dict[str, Any]]) -> str:
        return "".join(f"<li>{e(words(r))}</li>" for r in reasons)

    if p["batch"]["outcome"] == "partial":
        last = runs[-1]
        return (f'<h2 class="bad">PARTIAL: this erasure did not finish</h2>\n'
                f"<p>The run signed at {e(clock.for_people(last['at']))} "
                f"(<code>{e(last['event_id'])}</code>) erased less than the operator "
                f"approved, for these reasons:</p>\n<ul>{items(last['reasons'])}</ul>\n"
                "<p>The data keys it destroyed stay destroyed; the routes below marked "
                "<code>not-reachable</code> were purged and probed. A route marked "
                "<code>not-checked</code> may still hold the erased memory, and items under "
                "a legal hold are kept. The erasure is finished by "
                "<code>ledger requests resume</code>, whose own pack then proves it; this "
                "record stays in the log.</p>\n")
    rows = "".join(f"<li>{e(clock.for_people(r['at']))} (<code>{e(r['event_id'])}</code>): "
                   f"<ul>{items(r['reasons'])}</ul></li>" for r in runs)
    return (f"<h2>Earlier partial outcomes</h2>\n<p>Before it completed, this erasure "
            f"ended partial {plural(len(runs), 'times')}; each record is kept and signed:"
            f"</p>\n<ul>{rows}</ul>\n")


def _copies_html(p: dict[str, Any]) -> str:
    """The Copies section (absent in packs built before it): each copy of the erased keys
    and from when none can be decrypted, in words (governance/copies.py)."""
    c = p.get("copies")
    if not c:
        return ""
    e = html.escape
    cls = {"unrecoverable": "ok", "pending": "bad", "unbounded": "bad"}
    rows = [("The live keystore", ' class="ok"', keystore_words(c))]
    rows += [("Older copies of the keystore (backups, WAL segments, replicas, dumps): keys "
              "wrapped under KEK epoch "
              f"{g['kek_epoch']}" if g["kek_epoch"] else "Older copies of the keystore "
              "(backups, WAL segments, replicas, dumps): keys that were not wrapped",
              f' class="{"bad" if g["unwrapped_until"] else cls[g["state"]]}"',
              group_words(g, p.get("generated_at"))) for g in c["older_copies"]]
    rows += [(NOT_COVERED_WORDS[n["what"]][0].format(at=day(n["made_before"])), "",
              NOT_COVERED_WORDS[n["what"]][1].format(at=day(n["made_before"])))
             for n in c["not_covered"]]

    def words(text: str) -> str:  # `ledger ...` as code
        return re.sub(r"`([^`]+)`", r"<code>\1</code>", e(text))

    body = "".join(f"<tr><td>{e(what)}</td><td{k}>{words(said)}</td></tr>\n"
                   for what, k, said in rows)
    return (f"<h2>Copies</h2>\n<p>Where copies of the erased memory's keys can be, and from "
            f"when none of them can be decrypted (checked by <code>ledger verify-pack</code> "
            f"against the signed key-rotation events, step 8).</p>\n"
            f"<table><tr><th>copy</th><th>state</th></tr>\n{body}</table>\n"
            f"<p class=\"{cls[c['state']]}\"><b>{words(overall_words(c))}</b></p>\n")


def _witness_html(p: dict[str, Any]) -> str:
    w = p.get("witnesses")
    if not w:
        return ""
    e = html.escape

    def names(rows: list[dict[str, Any]]) -> str:
        return ", ".join(e(r["witness"].split("+", 1)[0]) for r in rows) or "none"

    return (f"<h2>Witnesses</h2><p>Checkpoint before the erasure cosigned by: "
            f"{names(w['before'])}. Checkpoint after: {names(w['after'])}. "
            f"{plural(len(w['asked']), 'witnesses')} asked; "
            f"{plural(len(w['proofs']), 'offline proof files')} (c2sp.org/tlog-proof).</p>")



__all__ = ["render_report"]
