"""Texts for the benchmarks that add memories and look for similar ones (ADR 0052).

``crowded``: texts that share most of their words, as a busy subject's do, so many
memories are near every new one and the keyword index matches many rows. ``varied``:
eight words of the project's own documentation, drawn by a seed, so few memories are near
a new one, as an assistant's distinct memories of a person are."""

from __future__ import annotations

import random
import re
from functools import cache
from pathlib import Path


def crowded(i: int, salt: str) -> str:
    return f"memory {salt} {i} about topic {i % 97}"


@cache
def _vocabulary() -> tuple[str, ...]:
    docs = Path(__file__).resolve().parents[1] / "docs"
    return tuple(sorted({w.lower() for f in sorted(docs.rglob("*.md"))
                         for w in re.findall(r"[A-Za-z]{4,}", f.read_text(encoding="utf-8"))}))


def varied(i: int, salt: str) -> str:
    """Eight words of the project's documentation, drawn by a seed of ``salt`` and ``i``."""
    return " ".join(random.Random(f"{salt}/{i}").sample(_vocabulary(), 8))


TEXTS = {"crowded": crowded, "varied": varied}
