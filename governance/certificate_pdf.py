"""The certificate of erasure as a printable PDF (ReportLab; docs/adr/0046).

It prints :func:`governance.certificate.sections`, the same words as the HTML page, on A4:
a title, a summary strip, then one table per section, each page footed with the batch,
the issue date and "page n of m". Text is set in DejaVu Sans where the system has it,
else in the Bitstream Vera that ships inside ReportLab; a character the font lacks is
printed as ``[U+XXXX]``, never dropped. The document is built with ReportLab's invariant
mode: the same certificate gives the same bytes.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

from governance.certificate import lead, sections, summary, title, when

_SYSTEM = Path("/usr/share/fonts/truetype/dejavu")
_FONTS: dict[str, Callable[[str], str]] = {}
"""Registered font name -> the filter that keeps only characters it can print."""

SANS, BOLD, MONO = "CertSans", "CertSans-Bold", "CertMono"


def _register() -> None:
    if _FONTS:
        return
    import reportlab
    from reportlab.pdfbase import pdfmetrics
    from reportlab.pdfbase.ttfonts import TTFont

    bundled = Path(reportlab.__file__).parent / "fonts"
    pairs = [(SANS, _SYSTEM / "DejaVuSans.ttf", bundled / "Vera.ttf"),
             (BOLD, _SYSTEM / "DejaVuSans-Bold.ttf", bundled / "VeraBd.ttf"),
             (MONO, _SYSTEM / "DejaVuSansMono.ttf", None)]
    for name, system, fallback in pairs:
        path = system if system.is_file() else fallback
        if path is None:  # no monospaced TrueType font: the standard Courier (cp1252)
            _FONTS[name] = _keeping(lambda ch: _cp1252(ch))
            continue
        font = TTFont(name, str(path))
        pdfmetrics.registerFont(font)
        glyphs = font.face.charToGlyph
        _FONTS[name] = _keeping(lambda ch, g=glyphs: ord(ch) in g)  # type: ignore[misc]
    if MONO not in pdfmetrics.getRegisteredFontNames():
        _FONTS["Courier"] = _FONTS.pop(MONO)


def _cp1252(ch: str) -> bool:
    try:
        ch.encode("cp1252")
    except UnicodeEncodeError:
        return False
    return True


def _keeping(printable: Callable[[str], bool]) -> Callable[[str], str]:
    def keep(text: str) -> str:
        return "".join(ch if ch in "\n" or printable(ch) else f"[U+{ord(ch):04X}]"
                       for ch in text)
    return keep


def _mono() -> str:
    return MONO if MONO in _FONTS else "Courier"


def _markup(text: str, font: str = SANS) -> str:
    """ReportLab paragraph markup of ``text``: escaped, `code` spans in the monospaced font."""
    import re

    parts = re.split(r"`([^`]*)`", text)
    out = []
    for i, part in enumerate(parts):
        if i % 2:
            out.append(f'<font face="{_mono()}" size="7.6">'
                       f"{escape(_FONTS[_mono()](part))}</font>")
        else:
            out.append(escape(_FONTS[font](part)).replace("\n", "<br/>"))
    return "".join(out)


@dataclass(frozen=True)
class _Look:
    """The page's paragraph styles, text width and rule colour (ReportLab objects)."""

    body: Any
    label: Any
    small: Any
    head: Any
    big: Any
    width: float
    rule: Any


def _look() -> _Look:
    from reportlab.lib import colors
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.styles import ParagraphStyle
    from reportlab.lib.units import mm

    body = ParagraphStyle("body", fontName=SANS, fontSize=8.4, leading=10.6)
    label = ParagraphStyle("label", parent=body, fontName=BOLD)
    small = ParagraphStyle("small", parent=body, fontSize=7.4, leading=9.2)
    head = ParagraphStyle("head", parent=body, fontName=BOLD, fontSize=10.5, leading=13,
                          spaceBefore=7, spaceAfter=2, textColor=colors.HexColor("#1a2a44"))
    big = ParagraphStyle("title", parent=body, fontName=BOLD, fontSize=18, leading=22)
    width = A4[0] - 32 * mm - 12  # the frame pads 6 pt on each side
    return _Look(body, label, small, head, big, width, colors.HexColor("#8a94a6"))


def render_pdf(doc: Mapping[str, Any]) -> bytes:
    """The certificate ``doc`` (a verified or just-issued certificate document) as PDF bytes."""
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.units import mm
    from reportlab.pdfgen.canvas import Canvas
    from reportlab.platypus import Paragraph, SimpleDocTemplate, Spacer

    _register()
    look = _look()
    story: list[Any] = [Paragraph("Certificate of erasure", look.big), Spacer(1, 2 * mm),
                        Paragraph(_markup(lead(doc)), look.body), Spacer(1, 3 * mm),
                        _summary_strip(doc, look)]
    story += [_section(s, look) for s in sections(doc)]
    footer = _markup(f"Certificate of erasure · batch {doc['batch']['id']} · issued "
                     f"{when(doc['issued_at'])}")
    buf = io.BytesIO()
    pdf = SimpleDocTemplate(
        buf, pagesize=A4, leftMargin=16 * mm, rightMargin=16 * mm, topMargin=15 * mm,
        bottomMargin=24 * mm, title=title(doc), author=doc["controller"]["name"] or "",
        subject="Certificate of erasure (NIST SP 800-88r2 cryptographic erase)",
        creator=f"{doc['tool']['name']} {doc['tool']['version']}", invariant=1, lang="en")
    pdf.build(story, canvasmaker=_numbered(Canvas, footer, look))
    return buf.getvalue()


def _fields(rows: list[Any], look: _Look) -> Any:
    """A section's rows: label, then text."""
    from reportlab.lib.units import mm
    from reportlab.platypus import Paragraph, Table, TableStyle

    t = Table([[Paragraph(_markup(r.label, BOLD), look.label),
                Paragraph(_markup(r.text), look.body)]
               for r in rows], colWidths=[33 * mm, look.width - 33 * mm])
    t.setStyle(TableStyle([("VALIGN", (0, 0), (-1, -1), "TOP"),
                           ("LEFTPADDING", (0, 0), (-1, -1), 2),
                           ("RIGHTPADDING", (0, 0), (-1, -1), 4),
                           ("TOPPADDING", (0, 0), (-1, -1), 1.5),
                           ("BOTTOMPADDING", (0, 0), (-1, -1), 1.5)]))
    return t


def _summary_strip(doc: Mapping[str, Any], look: _Look) -> Any:
    """The four-cell strip under the lead: result, destroyed, older copies, countersigned."""
    from reportlab.lib import colors
    from reportlab.platypus import Paragraph, Table, TableStyle

    strip = summary(doc)
    first = [Paragraph(_markup(x), look.body) for _, x in strip]
    tint = "#1f6f3a" if doc["verification"]["result"] == "passed" else "#b00020"
    first[0] = Paragraph(f'<font name="{BOLD}" color="{tint}">{_markup(strip[0][1], BOLD)}'
                         "</font>", look.body)
    strip_table = Table([[Paragraph(_markup(k, BOLD), look.small) for k, _ in strip], first],
                        colWidths=[look.width / 4] * 4)
    strip_table.setStyle(TableStyle([
        ("BACKGROUND", (0, 0), (-1, -1), colors.HexColor("#eef1f6")),
        ("BOX", (0, 0), (-1, -1), 0.6, look.rule), ("VALIGN", (0, 0), (-1, -1), "TOP"),
        ("TOPPADDING", (0, 0), (-1, -1), 2.5), ("BOTTOMPADDING", (0, 0), (-1, -1), 2.5)]))
    return strip_table


def _section(s: Any, look: _Look) -> Any:
    """One section, kept on one page: its title, rows, table and the rows after it."""
    from reportlab.lib import colors
    from reportlab.lib.units import mm
    from reportlab.platypus import KeepTogether, Paragraph, Spacer, Table, TableStyle

    width = look.width
    part: list[Any] = [Paragraph(_markup(s.title, BOLD), look.head), _fields(s.rows, look)]
    if s.table is not None:
        headers, rows = s.table
        grid = Table([[Paragraph(_markup(h, BOLD), look.small) for h in headers]]
                     + [[Paragraph(_markup(x), look.small) for x in r] for r in rows],
                     colWidths=[width * 0.34, width * 0.16, width * 0.2, width * 0.3],
                     repeatRows=1)
        grid.setStyle(TableStyle([
            ("GRID", (0, 0), (-1, -1), 0.4, look.rule),
            ("BACKGROUND", (0, 0), (-1, 0), colors.HexColor("#eef1f6")),
            ("VALIGN", (0, 0), (-1, -1), "TOP"),
            ("TOPPADDING", (0, 0), (-1, -1), 1.2), ("BOTTOMPADDING", (0, 0), (-1, -1), 1.2)]))
        part += [Spacer(1, 1 * mm), grid, Spacer(1, 1 * mm)]
    if s.after:
        part.append(_fields(s.after, look))
    return KeepTogether(part)


def _numbered(canvas_cls: Any, footer: str, look: _Look) -> Any:
    """A canvas class that foots each page with ``footer`` and "page n of m"."""
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.units import mm
    from reportlab.platypus import Paragraph

    class Numbered(canvas_cls):  # type: ignore[misc]
        """Draws "page n of m" once the number of pages is known."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._pages: list[dict[str, Any]] = []

        def showPage(self) -> None:  # ReportLab's name
            self._pages.append(dict(self.__dict__))
            self._startPage()

        def save(self) -> None:
            total = len(self._pages)
            for state in self._pages:
                self.__dict__.update(state)
                self._foot(total)
                super().showPage()
            super().save()

        def _foot(self, total: int) -> None:
            p = Paragraph(f"{footer} · page {self._pageNumber} of {total}", look.small)
            _w, h = p.wrap(look.width, 20 * mm)
            self.setStrokeColor(look.rule)
            self.setLineWidth(0.4)
            self.line(16 * mm, 14 * mm + h + 1.5 * mm, A4[0] - 16 * mm, 14 * mm + h + 1.5 * mm)
            p.drawOn(self, 16 * mm, 14 * mm)
    return Numbered


__all__ = ["render_pdf"]
