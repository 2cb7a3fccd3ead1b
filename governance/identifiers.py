"""How an erasure request's identifiers find references in other people's memories.

An identifier (a name, an e-mail address) given to ``ledger redact-user --identifier``
never selects anything to erase: it only finds memories of *other* subjects that may
refer to the person, which are then flagged for review (ADR 0012). Matching is:

* Unicode-normalised and case-folded on both sides (NFKC, then ``str.casefold``), so
  "J. MILLER", "j. miller" and the same in full-width letters are one identifier;
* on word boundaries: the character before and after a match is not a letter, digit or
  underscore, so "Ann" matches "lunch with Ann." but not "Annual planning";
* whitespace-tolerant: a run of spaces in the identifier matches any run of whitespace;
* refused below :data:`MIN_IDENTIFIER_CHARS` characters (after normalisation), or
  without a letter or digit: such an identifier matches everywhere.

Pure: strings in, positions out. Identifiers are personal data: nothing here logs them,
and callers refer to one by its position in the request (1-based), never by its text.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ledger.errors import InputError

MIN_IDENTIFIER_CHARS = 3
"""Shortest identifier accepted, in characters after normalisation ("Ann", "Bo Li")."""

BROAD_MATCHES = 20
"""An identifier that matches more memories of others than this gets a warning."""


def normalise(text: str) -> str:
    """NFKC, case-folded, NFKC again (folding can denormalise): the form both sides of a
    match are compared in."""
    if text.isascii():  # NFKC leaves ASCII as it is, and case-folds it to lower case
        return text.lower()
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())


@dataclass(frozen=True)
class Identifier:
    position: int  # 1-based, in the order given
    pattern: re.Pattern[str]
    word: str  # its longest word: a value without it cannot match (a cheap first test)


def compile_identifiers(identifiers: Sequence[str]) -> list[Identifier]:
    """Check and compile; raise :class:`InputError` naming the identifier by position."""
    out = []
    for position, raw in enumerate(identifiers, start=1):
        words = normalise(raw).split()
        text = " ".join(words)
        if len(text) < MIN_IDENTIFIER_CHARS or not any(ch.isalnum() for ch in text):
            raise InputError(
                f"--identifier #{position} is too short to identify anyone ({len(text)} "
                f"characters; at least {MIN_IDENTIFIER_CHARS}, with a letter or digit)",
                hint="give the full name or the e-mail address, e.g. --identifier "
                     "\"Jane Miller\"")
        body = r"\s+".join(re.escape(w) for w in words)
        out.append(Identifier(position, re.compile(rf"(?<!\w){body}(?!\w)"),
                              max(words, key=len)))
    return out


@dataclass(frozen=True)
class Match:
    position: int  # which identifier (1-based)
    field: str  # which field of the memory matched first (text, gist, tags, details, ...)


def first_matches(identifiers: Sequence[Identifier],
                  fields: Iterable[tuple[str, str | None]]) -> list[Match]:
    """For each identifier, the first field (in the order given) it matches, if any."""
    normalised = [(name, normalise(value)) for name, value in fields if value]
    found = []
    for ident in identifiers:
        for name, value in normalised:
            if ident.word in value and ident.pattern.search(value):
                found.append(Match(ident.position, name))
                break
    return found
