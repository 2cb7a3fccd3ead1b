"""The certificate of erasure use cases of the facade (ADR 0046): issue the certificate of
a closed batch, resting on an Evidence Pack (one given, or one built for it), signed with
the caller's operator key, verified before it is handed out, rendered as PDF and HTML.
Joined into :class:`service.facade.MemoryService`."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from ledger.errors import EnvironmentProblem, InputError, NotFound
from ledger.inputs import is_uuid
from service.caller import Caller
from service.core import FacadeCore
from service.models import CertificateOut, CertificateWritten

if TYPE_CHECKING:
    from service.models import PackWritten


class CertificateCases(FacadeCore):
    """The certificate of erasure: :meth:`certificate` issues it and hands back its bytes
    (the console, any surface); :meth:`write_certificate` is `ledger certificate`, which
    writes them beside each other."""

    if TYPE_CHECKING:  # service/erasure_cases.py, joined beside this in MemoryService
        def write_pack(self, caller: Caller, batch_id: str, out: Path, *,
                       make_zip: bool = False,
                       progress: Callable[[str, int, int], None] | None = None
                       ) -> PackWritten: ...

    def certificate(self, caller: Caller, batch_id: str, pack: Path | None = None
                    ) -> CertificateOut:
        """The certificate of erasure of a closed batch, signed with the caller's operator
        key. It rests on the Evidence Pack ``pack`` (a folder or zip of this machine: the
        local operator only; e.g. one a second person countersigned), else on a pack built
        for it now and returned with it. The pack is verified first, and the certificate is
        verified against it before it is returned (governance/certificate.py)."""
        self._require(caller, "operator")
        from governance.certificate import issue, render_html, verify_certificate
        from governance.certificate_pdf import render_pdf
        from governance.pack_verify import read_pack, read_pack_zip

        if not is_uuid(batch_id):
            raise NotFound(f"no batch {batch_id!r}",
                           hint="see the batch id printed by `ledger redact-user`")
        self._batch_in_scope(caller, batch_id)
        root = self.app.root_public_key
        if root is None:
            raise EnvironmentProblem("no root public key: keys/root.pub is missing",
                                     hint="restore it from a copy")
        zipped = None
        if pack is not None:
            self._local_files(caller)
            files = read_pack(pack)
        else:
            with tempfile.TemporaryDirectory(prefix="ledger-certificate-") as tmp:
                written = self.write_pack(caller, batch_id, Path(tmp) / "pack", make_zip=True)
                zipped = Path(str(written.zip)).read_bytes()
            files = read_pack_zip(zipped)  # what is certified is the bytes handed out
        with self._acting(caller):
            document, statement = issue(self.app, files, batch_id, self._signing_key(caller))
        report = verify_certificate(statement, root, files)
        return CertificateOut(
            batch_id=document["batch"]["id"], statement=statement, pdf=render_pdf(document),
            html=render_html(document), pack_zip=zipped, pack_digest=report.pack_digest,
            document={k: v for k, v in document.items() if k != "roster"},
            verification=report.as_json())

    def write_certificate(self, caller: Caller, batch_id: str, out: Path, *,
                          html: Path | None = None, pack: Path | None = None
                          ) -> CertificateWritten:
        """`ledger certificate BATCH --out cert.pdf`: the PDF, its signed statement beside it
        (``cert.json``), the HTML if asked, and, without ``pack``, the Evidence Pack built
        for it beside them (``cert.evidence-pack.zip``). Refused, writing nothing, when any
        of those files exists."""
        self._local_files(caller)
        if out.suffix.lower() != ".pdf":
            raise InputError(f"--out {out}: the certificate is a PDF file",
                             hint="name it NAME.pdf; NAME.json is written beside it")
        statement = out.with_suffix(".json")
        bundled = out.with_name(out.stem + ".evidence-pack.zip") if pack is None else None
        targets = [p for p in (out, statement, html, bundled) if p is not None]
        for path in targets:
            if path.exists():
                raise InputError(f"{path} already exists", hint="choose a new --out name")
        if len({p.resolve() for p in targets}) != len(targets):
            raise InputError("--html names the same file as the certificate or its "
                             "statement", hint="give --html a .html file of its own")
        made = self.certificate(caller, batch_id, pack)
        with _all_or_none() as write:
            write(out, made.pdf)
            write(statement, made.statement)
            if html is not None:
                write(html, made.html.encode())
            if bundled is not None and made.pack_zip is not None:
                write(bundled, made.pack_zip)
        return CertificateWritten(
            certificate=str(out), statement=str(statement),
            html=None if html is None else str(html),
            pack=str(bundled if bundled is not None else pack), pack_digest=made.pack_digest,
            document=made.document, verification=made.verification)


@contextmanager
def _all_or_none() -> Iterator[Callable[[Path, bytes], None]]:
    """Write new files (never replacing one); remove those written if one fails."""
    written: list[Path] = []

    def write(path: Path, data: bytes) -> None:
        try:
            with path.open("xb") as f:
                written.append(path)
                f.write(data)
        except OSError as e:
            raise InputError(f"cannot write {path}: {e.strerror or e}",
                             hint="check that the folder exists and is writable") from e

    try:
        yield write
    except BaseException:
        for path in written:
            path.unlink(missing_ok=True)
        raise
