"""``ledger receipt`` and ``ledger audit-tools verify-receipt`` (docs/adr/0023).

Heavy imports stay inside the commands. ``receipt`` calls the facade
(:class:`service.facade.MemoryService`) as the local operator, from the ``served`` opener
given to :func:`register`; ``verify-receipt`` needs no ledger home: it checks the file
alone (governance/receipt.py's ``verify_receipt``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from cli.opener import Served
from cli.output import JsonOpt


def register(cli: typer.Typer, served: Served, audit_cli: typer.Typer) -> None:
    @cli.command("receipt")
    def receipt_command(
        request: Annotated[str, typer.Argument(help="The erasure request id (from "
                                                    "`ledger redact-user`).")],
        out: Annotated[Path, typer.Option(help="Write the signed receipt (JSON) here.")],
        html_out: Annotated[Path | None, typer.Option(
            "--html", help="Also write the one-page HTML for the person.")] = None,
        signer: Annotated[str, typer.Option("--as", help="Operator key that signs.")]
        = "operator",
        locale: Annotated[str | None, typer.Option(
            help="Language of the page for the person (en, es); default: the subject's "
                 "locale, else the ledger's ([controller] locale).")] = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Write the erasure receipt for the data subject: what was erased (count and ids),
        when, and the tombstones' inclusion proofs against a witnessed checkpoint; signed by
        the operator, no memory content. The page (--html) is written for the person, in
        their language, with the controller's name (`ledger init --controller`).

        Example: ledger receipt 3f2a... --out receipt.json --html receipt.html --locale es
        """
        from cli.words import missing_request
        from governance.i18n import languages
        from ledger.errors import InputError, NotFound

        if locale is not None and locale.replace("_", "-").split("-")[0] not in languages():
            raise InputError(f"--locale {locale!r} has no catalogue",
                             hint=f"use one of: {', '.join(languages())}")
        for path in (out, html_out):
            if path is not None and path.exists():
                raise InputError(f"{path} already exists", hint="choose a new file name")
        with served(operator=signer) as (svc, me):
            try:
                receipt = svc.erasure_receipt(me, request, html=html_out is not None,
                                              locale=locale)
            except NotFound as e:
                raise missing_request(e) from None
        data = receipt.content
        try:
            out.write_bytes(data)
            if html_out is not None and receipt.html is not None:
                html_out.write_text(receipt.html, encoding="utf-8")
        except OSError as e:
            out.unlink(missing_ok=True)
            raise InputError(f"cannot write the receipt: {e}") from e
        if as_json:
            sys.stdout.write(json.dumps({"receipt": str(out), "bytes": len(data),
                                         "html": str(html_out) if html_out else None}) + "\n")
        else:
            sys.stdout.write(f"{out}\n")
        sys.stderr.write(f"OK: erasure receipt written to {out} ({len(data)} bytes)\n")

    @audit_cli.command("verify-receipt")
    def verify_receipt_command(
        file: Annotated[Path, typer.Argument(help="The receipt (JSON).")],
        operator_key: Annotated[Path | None, typer.Option(
            help="Pin the operator's public key (.pub); default: the key the receipt names."
        )] = None,
        log_key: Annotated[str | None, typer.Option(
            help="Pin the log's verifier key (vkey); default: the one the receipt names.")]
        = None,
        policy: Annotated[Path | None, typer.Option(
            help="A witness policy (c2sp.org/tlog-policy) the checkpoint must meet.")] = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Verify an erasure receipt offline: signature, checkpoint, tombstone proofs,
        witnesses, and its statement on copies against the key-rotation events it carries.

        Example: ledger audit-tools verify-receipt receipt.json --policy witnesses.policy
        """
        from governance.copies import copies_line
        from governance.receipt import ReceiptInvalid, verify_receipt
        from keys.keyring import read_public_key_file
        from ledger.clock import for_people
        from ledger.errors import EXIT_VERIFY, InputError
        from ledger.text import plural
        from ledger.witness.policy import parse_policy

        try:
            data = file.read_bytes()
            rules = parse_policy(policy.read_bytes()) if policy is not None else None
        except OSError as e:
            raise InputError(f"cannot read {e.filename}: {e.strerror}") from e
        pub = read_public_key_file(operator_key) if operator_key else None
        try:
            report = verify_receipt(data, pub, log_key, rules)
        except ReceiptInvalid as e:
            if as_json:
                sys.stdout.write(json.dumps({"ok": False, "step": e.step, "reason": str(e)})
                                 + "\n")
            sys.stderr.write(f"FAIL: {e}\n")
            raise typer.Exit(EXIT_VERIFY) from None
        if as_json:
            sys.stdout.write(json.dumps(report.as_json(), indent=2, sort_keys=True) + "\n")
        counts = ", ".join(plural(n, k) for k, n in report.erased.items())
        pinned = [k for k, v in report.trusted.items() if v]
        copies = report.copies and {  # the verdict is read by people: times as they read them
            **report.copies, "until": report.copies["until"] and for_people(
                report.copies["until"]), "unwrapped_until": report.copies["unwrapped_until"]
            and for_people(report.copies["unwrapped_until"])}
        sys.stderr.write(
            f"OK: receipt for request {report.request_id} verified: erased {counts} by "
            f"{for_people(report.completed_at)}; "
            f"{plural(report.tombstones, 'tombstones')} in the log of size "
            f"{report.checkpoint_size}; witnesses: "
            f"{', '.join(w.split('+', 1)[0] for w in report.witnesses) or 'none'}"
            + (f"; {report.policy}" if report.policy else "")
            + (f"; {copies_line(copies)}" if copies else "")
            + ("; keys pinned: " + ", ".join(pinned) if pinned else
               "; keys taken from the receipt (pin them with --operator-key/--log-key)")
            + "\n")
