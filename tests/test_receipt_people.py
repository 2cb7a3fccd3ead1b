"""The erasure receipt as people read it (issue 31): in the subject's language (English and
Spanish to start), the controller's name instead of the log's origin, dates written for
people in UTC, the copies statement in people's words; every string from a message
catalogue (governance/locale/), and the receipt's verification independent of the
language it is shown in."""

from __future__ import annotations

import base64
import io
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from governance.copies import subject_words
from governance.i18n import LOCALE_DIR, Words, languages, negotiate, words
from governance.receipt import build_receipt, render_html, verify_receipt
from ledger.application import LedgerApp
from ledger.home import Config

from .conftest import run_cli

ACME = "Acme Memoria S.L."
T0 = "2026-03-04T10:00:00Z"


def _text(page: str) -> str:
    """The page's words, tags dropped and spaces folded (what a reader sees)."""
    import html

    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", page))).strip()


def _erase(home: Path, subject_locale: str | None) -> tuple[LedgerApp, str]:
    from governance.erasure import redact_user
    from projections.service import Projections

    app = LedgerApp(Config.load(home))
    proj = Projections(app)
    try:
        data: dict[str, Any] = {"ref": "user_9f4e", "display_name": "J. Miller"}
        if subject_locale:
            data["locale"] = subject_locale
        app.register_subject(data)
        app.capture_artifact({"subject": "user_9f4e", "ref": "c1", "kind": "chat",
                              "body": "a chat"})
        app.add_atoms([{"subject": "user_9f4e", "text": f"fact {i}"} for i in range(3)])
        res = redact_user(app, proj, "user_9f4e", reason="asked by email", operator="operator",
                          legal_basis="RGPD art. 17.1.a")
    finally:
        proj.close()
    return app, str(res["request_id"])


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """A ledger whose controller is Acme (default language English), with a subject who
    registered ``es-ES`` and was erased, at a pinned clock."""
    monkeypatch.delenv("LEDGER_HOME", raising=False)
    monkeypatch.setenv("LEDGER_NOW", T0)
    home = tmp_path / "home"
    LedgerApp.initialize(home, controller=ACME, contact="privacidad@acme.example")
    app, request = _erase(home, "es-ES")
    try:
        yield {"app": app, "request": request, "home": home}
    finally:
        app.close()


def test_dates_and_languages_for_people() -> None:
    assert languages()[:2] == ("en", "es")
    assert [negotiate(x) for x in ("es", "es-MX", "es_AR", "ES", "fr", None)] == \
        ["es", "es", "es", "es", "en", "en"]
    assert negotiate(None, "fr-FR", "es") == "es"
    assert words("en").when("2026-03-04T10:00:00.128603+00:00") == "March 4, 2026 at 10:00 UTC"
    assert words("es").when("2026-03-04T10:00:00Z") == "4 de marzo de 2026 a las 10:00 (UTC)"
    assert words("es").when(None) == "-" and words("en").when("not a time") == "not a time"


def test_receipt_in_spanish_for_a_subject_who_registered_es(ledger: dict[str, Any]) -> None:
    app, request = ledger["app"], ledger["request"]
    data = build_receipt(app, request)
    doc = json.loads(base64.b64decode(json.loads(data)["payload"]))
    assert doc["locale"] == "es"
    assert doc["controller"] == {"name": ACME, "contact": "privacidad@acme.example"}
    page = render_html(data)
    text = _text(page)
    assert '<html lang="es">' in page
    assert "Justificante de la supresión de sus datos" in text
    assert ("Usted solicitó a Acme Memoria S.L., como responsable del tratamiento, la "
            "supresión de los datos que conservaba sobre usted. Su solicitud se recibió el 4 "
            "de marzo de 2026 a las 10:00 (UTC) y se atendió por completo el 4 de marzo de "
            "2026 a las 10:00 (UTC).") in text
    assert "Su referencia: user_9f4e." in text and "Fundamento jurídico invocado: RGPD" in text
    for line in ("3 datos que un asistente de IA recordaba sobre usted",
                 "1 documento de origen (una conversación, una nota) del que se extrajeron "
                 "esos datos", "su perfil (su nombre y sus datos)"):
        assert f"<li>{line}</li>" in page
    assert ("Se destruyeron las claves que permitían descifrarlo, de modo que ya nadie, "
            "tampoco Acme Memoria S.L., puede leerlo en el sistema.") in text
    assert "La supresión consta en 9 asientos firmados del registro del sistema" in text
    # the copies statement, in people's words (no KEK rotation policy: none scheduled)
    assert "Copias de seguridad y otras copias" in text
    assert "No hay ninguna sustitución prevista" in text
    assert "Puede pedir a Acme Memoria S.L. un nuevo justificante" in text
    assert "de esas copias responde Acme Memoria S.L., no este sistema." in text
    # no English left, no machine time, no log origin in the words addressed to the person
    for english in ("You asked", "erased", "receipt was", "memories", "UTC and"):
        assert english not in text.split("Elementos suprimidos")[0], english
    assert "T10:00:00" not in text and "+00:00" not in text
    assert f"solicitó a {app.config.origin}" not in text


def test_receipt_in_english_with_the_controller_name(ledger: dict[str, Any]) -> None:
    data = build_receipt(ledger["app"], ledger["request"], locale="en")
    page = render_html(data)
    text = _text(page)
    assert '<html lang="en">' in page and "Your erasure receipt" in text
    assert ("You asked Acme Memoria S.L. to erase the data it held about you. Your request "
            "was received on March 4, 2026 at 10:00 UTC and completed on March 4, 2026 at "
            "10:00 UTC.") in text
    assert "<li>3 memories: things an AI assistant remembered about you</li>" in page
    assert "<li>1 source document (a chat, a note) that memories were drawn from</li>" in page
    assert ("The keys that could decrypt it were destroyed, so no one, Acme Memoria S.L. "
            "included, can read it from the ledger any more.") in text
    assert ("No rotation is scheduled, so there is no date yet after which no copy can "
            "decrypt what was erased; ask Acme Memoria S.L. for a new receipt after the next "
            "rotation.") in text
    assert "Questions about this receipt: privacidad@acme.example." in text


def test_verification_does_not_depend_on_the_language(ledger: dict[str, Any]) -> None:
    """The page is presentation: the same signed facts verify the same whatever language
    they are shown in, and a receipt shown in another language is the same page."""
    app, request = ledger["app"], ledger["request"]
    es, en = build_receipt(app, request), build_receipt(app, request, locale="en")
    reports = [verify_receipt(d, app.signer("operator").public_key, app.log_vkey()).as_json()
               for d in (es, en)]
    assert reports[0] == reports[1]
    assert render_html(es, locale="en") == render_html(en)
    assert render_html(en, locale="es") == render_html(es)
    docs = [json.loads(base64.b64decode(json.loads(d)["payload"])) for d in (es, en)]
    assert [d.pop("locale") for d in docs] == ["es", "en"] and docs[0] == docs[1]


def test_default_language_is_the_ledgers_then_english(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LEDGER_HOME", raising=False)
    monkeypatch.setenv("LEDGER_NOW", T0)
    LedgerApp.initialize(tmp_path / "es", locale="es")
    app, request = _erase(tmp_path / "es", None)  # no locale of the subject's own
    try:
        assert "Justificante de la supresión" in render_html(build_receipt(app, request))
    finally:
        app.close()
    LedgerApp.initialize(tmp_path / "en")  # no controller named: said in plain words
    app, request = _erase(tmp_path / "en", "fr-FR")  # no French catalogue: English
    try:
        text = _text(render_html(build_receipt(app, request)))
        assert text.startswith("Erasure receipt") and "Your erasure receipt" in text
        assert "You asked the organisation that kept this memory to erase" in text
        assert "Questions about" not in text
    finally:
        app.close()


def test_copies_statement_in_both_languages() -> None:
    until = "2026-05-01T08:30:00Z"
    done = {"state": "unrecoverable", "until": until}
    assert subject_words(done, Words("en")) == (
        "Copies of the key store made before the erasure (backups, database logs, replicas) "
        "held the keys only locked under a key-encryption key. That key was destroyed too: "
        "since May 1, 2026 at 08:30 UTC, no copy of the key store anywhere can decrypt what "
        "was erased.")
    assert subject_words(done, Words("es")) == (
        "Las copias del almacén de claves hechas antes de la supresión (copias de seguridad, "
        "registros de la base de datos, réplicas) solo guardaban las claves cifradas con una "
        "clave maestra. Esa clave maestra también se destruyó: desde el 1 de mayo de 2026 a "
        "las 08:30 (UTC), ninguna copia del almacén de claves, esté donde esté, permite "
        "descifrar lo que se suprimió.")
    due = {"state": "pending", "until": until}
    assert "It is due on May 1, 2026 at 08:30 UTC: after that date" in subject_words(due)
    assert "prevista para el 1 de mayo de 2026 a las 08:30 (UTC). A partir de esa fecha" in \
        subject_words(due, Words("es"))
    loose = {"state": "unbounded", "until": None}
    assert subject_words(loose, Words("es"), ACME).endswith(
        "Puede preguntar a Acme Memoria S.L. durante cuánto tiempo conserva las copias de "
        "seguridad.")


# ----------------------------------------------------------------------------- catalogues
def _extracted() -> set[Any]:
    """Every message id the code marks (``_``, ``ngettext``), as ``make i18n`` extracts."""
    from babel.messages.extract import extract_from_file

    root = Path(__file__).parents[1]
    found: set[Any] = set()
    for name in ("governance/i18n.py", "governance/receipt.py", "governance/copies.py"):
        for _line, msg, _comments, _context in extract_from_file(
                "python", root / name, keywords={"_": None, "ngettext": (1, 2)}):
            found.add(msg)
    return found


def _catalogue(path: Path) -> Any:
    from babel.messages.pofile import read_po

    with path.open("rb") as f:
        return read_po(f)


def test_the_template_holds_every_message_of_the_code() -> None:
    template = {m.id for m in _catalogue(LOCALE_DIR / "messages.pot") if m.id}
    assert template == _extracted(), "run `make i18n` and translate the new messages"


@pytest.mark.parametrize("lang", [lang for lang in languages() if lang != "en"])
def test_every_catalogue_translates_every_message(lang: str) -> None:
    template = {m.id for m in _catalogue(LOCALE_DIR / "messages.pot") if m.id}
    catalogue = _catalogue(LOCALE_DIR / lang / "LC_MESSAGES" / "messages.po")
    assert catalogue.plural_forms, "a Plural-Forms header"
    held = {m.id: m for m in catalogue if m.id}
    assert set(held) == template
    for mid, m in held.items():
        ids = mid if isinstance(mid, tuple) else (mid,)
        strs = m.string if isinstance(m.string, tuple) else (m.string,)
        assert all(strs) and not m.fuzzy, mid
        wanted = set(re.findall(r"%\((\w+)\)[sd]", " ".join(ids)))
        for s in strs:  # a placeholder renamed or lost breaks the sentence at run time
            assert set(re.findall(r"%\((\w+)\)[sd]", s)) <= wanted, (mid, s)
            assert wanted - {"num"} <= set(re.findall(r"%\((\w+)\)[sd]", s)), (mid, s)


def test_catalogues_compile_with_babel(tmp_path: Path) -> None:
    """What governance/i18n.py does at first use: no compiled file in the repository."""
    from babel.messages.mofile import write_mo

    assert not list(LOCALE_DIR.rglob("*.mo"))
    for lang in languages()[1:]:
        buf = io.BytesIO()
        write_mo(buf, _catalogue(LOCALE_DIR / lang / "LC_MESSAGES" / "messages.po"))
        assert len(buf.getvalue()) > 1000


def test_cli_receipt_locale_option(ledger: dict[str, Any], tmp_path: Path) -> None:
    home, request = ledger["home"], ledger["request"]
    out, page = tmp_path / "r.json", tmp_path / "r.html"
    r = run_cli("--home", str(home), "receipt", request, "--out", str(out), "--html",
                str(page), "--locale", "en")
    assert r.code == 0, r.err
    assert "You asked Acme Memoria S.L." in _text(page.read_text(encoding="utf-8"))
    r = run_cli("--home", str(home), "receipt", request, "--out", str(tmp_path / "x.json"),
                "--locale", "fr")
    assert r.code == 2 and "--locale 'fr' has no catalogue" in r.err and "en, es" in r.err
    assert not (tmp_path / "x.json").exists()
