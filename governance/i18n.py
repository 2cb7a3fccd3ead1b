"""Documents for people, in their language: message catalogues and dates (issue 31).

What a data subject reads (the erasure receipt's page, and the copies statement in it) is
written through :class:`Words`: every sentence is an English message id looked up in the
catalogue of the reader's language, ``governance/locale/<lang>/LC_MESSAGES/messages.po``
(GNU gettext, edited with any PO editor). The ``.po`` files are the only source: they
are compiled in memory with Babel's own API the first time a language is used (a few
milliseconds), so a fresh clone, an editable install and a wheel need no build step and
no compiled ``.mo`` file can drift from its source.

Adding a language is adding a file: copy ``governance/locale/messages.pot`` (the
template, every message id; ``make i18n`` extracts it again from the code) to
``governance/locale/<lang>/LC_MESSAGES/messages.po``, set its ``Language`` and
``Plural-Forms`` headers and translate each ``msgstr``. ``tests/test_receipt_people.py``
fails while the template is stale, while a message of the template has no translation in
a catalogue, or while a translation drops or renames a ``%(name)s`` placeholder.

English is the language of the message ids themselves (no catalogue). Times are written
for people in UTC (a subject records no time zone yet): the date in the language's long
form (CLDR, through Babel), then the hour and minute.
"""

from __future__ import annotations

import functools
import gettext
import io
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from ledger import clock
from ledger.errors import ClockError

__all__ = ["LOCALE_DIR", "SOURCE_LANGUAGE", "Words", "languages", "negotiate", "words"]

LOCALE_DIR = Path(__file__).with_name("locale")
DOMAIN = "messages"
SOURCE_LANGUAGE = "en"


def languages() -> tuple[str, ...]:
    """The languages documents for people can be written in: English and every catalogue."""
    found = sorted(p.parent.parent.name for p in LOCALE_DIR.glob(f"*/LC_MESSAGES/{DOMAIN}.po"))
    return (SOURCE_LANGUAGE, *(lang for lang in found if lang != SOURCE_LANGUAGE))


def negotiate(*wanted: str | None) -> str:
    """The first of ``wanted`` (``es``, ``es-MX``, ``es_AR``; None skipped) that has a
    catalogue, by its language; else English."""
    have = languages()
    for tag in wanted:
        if not tag:
            continue
        lang = tag.replace("_", "-").split("-", 1)[0].lower()
        if lang in have:
            return lang
    return SOURCE_LANGUAGE


@functools.cache
def _translations(lang: str) -> gettext.NullTranslations:
    """The catalogue of ``lang``, compiled from its ``.po`` file with Babel."""
    if lang == SOURCE_LANGUAGE:
        return gettext.NullTranslations()
    from babel.messages.mofile import write_mo
    from babel.messages.pofile import read_po

    path = LOCALE_DIR / lang / "LC_MESSAGES" / f"{DOMAIN}.po"
    with path.open("rb") as f:
        catalogue = read_po(f, locale=lang, domain=DOMAIN)
    compiled = io.BytesIO()
    write_mo(compiled, catalogue)
    compiled.seek(0)
    return gettext.GNUTranslations(compiled)


def _instant(value: str | datetime) -> datetime:
    return clock.parse_instant(value) if isinstance(value, str) else value.astimezone(UTC)


@dataclass(frozen=True)
class Words:
    """The sentences and dates of one language. ``_`` and ``ngettext`` take an English
    message id with ``%(name)s`` placeholders and the values; they return plain text (the
    caller escapes it for HTML)."""

    lang: str

    def _(self, message: str, **values: object) -> str:
        text = _translations(self.lang).gettext(message)
        return text % values if values else text

    def ngettext(self, singular: str, plural: str, num: int, **values: object) -> str:
        text = _translations(self.lang).ngettext(singular, plural, num)
        return text % {"num": num, **values}

    def day(self, value: str | datetime | None) -> str:
        """``4 March 2026`` / ``4 de marzo de 2026`` (UTC); ``-`` for none."""
        if not value:
            return "-"
        from babel.dates import format_date

        try:
            return format_date(_instant(value).date(), format="long", locale=self.lang)
        except ClockError:
            return str(value)

    def when(self, value: str | datetime | None) -> str:
        """``March 4, 2026 at 10:00 UTC`` / ``4 de marzo de 2026 a las 10:00 (UTC)``."""
        if not value:
            return "-"
        try:
            t = _instant(value)
        except ClockError:
            return str(value)
        return self._("%(date)s at %(time)s UTC", date=self.day(t),
                      time=t.strftime("%H:%M"))


def words(*wanted: str | None) -> Words:
    """:class:`Words` of the first language of ``wanted`` that has a catalogue."""
    return Words(negotiate(*wanted))
