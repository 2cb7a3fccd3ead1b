"""``ledger certificate`` and ``ledger audit-tools verify-certificate`` (docs/adr/0046).

Heavy imports stay inside the commands. ``certificate`` calls the facade
(:class:`service.facade.MemoryService`) as the local operator, from the ``served`` opener
given to :func:`register`; ``verify-certificate`` needs no ledger home: it checks the files
it is given with public keys only (governance/certificate.py's ``verify_certificate``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from cli.opener import Served
from cli.output import JsonOpt, verdict


def register(cli: typer.Typer, served: Served, audit_cli: typer.Typer) -> None:
    @cli.command("certificate")
    def certificate_command(
        batch: Annotated[str, typer.Argument(help="The batch id (from `ledger redact-user`).")],
        out: Annotated[Path, typer.Option(
            help="Write the certificate (PDF) here; its signed statement goes beside it "
                 "(NAME.json).")],
        html_out: Annotated[Path | None, typer.Option(
            "--html", help="Also write the certificate as one HTML page.")] = None,
        pack: Annotated[Path | None, typer.Option(
            help="The Evidence Pack (folder or .zip) to rest on, e.g. one a second person "
                 "countersigned; default: build one now, written beside as "
                 "NAME.evidence-pack.zip.")] = None,
        signer: Annotated[str, typer.Option("--as", help="Operator key that signs.")]
        = "operator",
        as_json: JsonOpt = False,
    ) -> None:
        """Write the certificate of erasure of a closed batch, for an auditor's file: the
        controller, the request, the method (cryptographic erase, each read model purged),
        what was destroyed, how it was verified, the copies, who executed and who
        countersigned, and the Evidence Pack it rests on; signed, no memory content.

        Example: ledger certificate 3f2a... --out cert.pdf --html cert.html --pack pack
        """
        with served(operator=signer) as (svc, me):
            written = svc.write_certificate(me, batch, out, html=html_out, pack=pack)
        if as_json:
            sys.stdout.write(json.dumps(written.model_dump(), indent=2, sort_keys=True) + "\n")
        else:
            sys.stdout.write(f"{written.certificate}\n{written.statement}\n"
                             + (f"{written.html}\n" if written.html else "")
                             + (f"{written.pack}\n" if pack is None else ""))
        people = written.document["people"]["countersigned_by"]
        verdict(f"OK: certificate of erasure of batch {written.document['batch']['id']} "
                f"written to {written.certificate} (signed statement {written.statement}); "
                f"it rests on the Evidence Pack {written.pack} (sha256 "
                f"{written.pack_digest[:16]}…); countersigned by "
                + (", ".join(p["name"] for p in people) or "nobody"))

    @audit_cli.command("verify-certificate")
    def verify_certificate_command(
        file: Annotated[Path, typer.Argument(help="The certificate's signed statement "
                                                  "(NAME.json).")],
        root_key: Annotated[Path, typer.Option(
            help="The ledger's root public key (keys/root.pub), pinned by you.")],
        pack: Annotated[Path | None, typer.Option(
            help="The Evidence Pack (folder or .zip) it rests on: verify it too, and that "
                 "the certificate says what it proves.")] = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Verify a certificate of erasure offline: its form and schema, the roster it
        carries under your root key, the signer's role and signature, its coherence, and
        with --pack the Evidence Pack and that the certificate's facts are the pack's.

        Example: ledger audit-tools verify-certificate cert.json --root-key root.pub --pack pack.zip
        """
        from governance.certificate import CertificateInvalid, verify_certificate
        from governance.pack_verify import read_pack
        from keys.keyring import read_public_key_file
        from ledger.errors import EXIT_VERIFY, InputError

        try:
            data = file.read_bytes()
        except OSError as e:
            raise InputError(f"cannot read {file}: {e.strerror}") from e
        root = read_public_key_file(root_key)
        files = read_pack(pack) if pack is not None else None
        try:
            report = verify_certificate(data, root, files)
        except CertificateInvalid as e:
            if as_json:
                sys.stdout.write(json.dumps({"ok": False, "step": e.step, "reason": str(e)})
                                 + "\n")
            verdict(f"FAIL: {e}")
            raise typer.Exit(EXIT_VERIFY) from None
        if as_json:
            sys.stdout.write(json.dumps(report.as_json(), indent=2, sort_keys=True) + "\n")
        later = ", ".join(p["name"] for p in report.later_countersigners)
        verdict(f"OK: certificate of erasure of batch {report.batch_id} verified: signed by "
                f"{report.issued_by['name']} ({report.issued_by['kid']}) on "
                f"{report.issued_at}, result {report.result}; "
                + ("the Evidence Pack verifies and proves what it says"
                   + (f" (countersigned since by {later})" if later else "")
                   if report.pack_checked else
                   f"its facts are the signer's word until checked against the Evidence Pack "
                   f"(sha256 {report.pack_digest}): give --pack"))
