"""Embedders: text to vectors, behind one small interface.

The default, :class:`HashingEmbedder`, works offline with no model download: feature
hashing of words, word bigrams and character trigrams into a fixed number of
dimensions, signed, sublinear, L2-normalised. It captures shared words and spelling
(``work`` ~ ``works`` ~ ``working``), not meaning (``job`` !~ ``work``); see
docs/adr/0006-offline-embedder.md for its limits. A real model plugs in through
:class:`Embedder`; its ``id`` goes into the vector index's version, so changing the
embedder triggers a rebuild instead of mixing vector spaces.
"""

from __future__ import annotations

import math
import re
import sys
import unicodedata
import zlib
from array import array
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

__all__ = ["STOPWORDS", "Embedder", "HashingEmbedder", "cosine", "from_bytes", "to_bytes"]

_WORD = re.compile(r"[^\W_]+", re.UNICODE)

STOPWORDS = frozenset("""
a about above after again against all am an and any are as at be because been before being
below between both but by can could did do does doing down during each few for from further
had has have having he her here hers herself him himself his how i if in into is it its itself
just me more most my myself no nor not now of off on once only or other our ours ourselves out
over own same she should so some such than that the their theirs them themselves then there
these they this those through to too under until up very was we were what when where which
while who whom why will with would you your yours yourself yourselves
al como con de del el ella ellas ellos en era es esa ese eso esta este esto fue ha hay la las
le les lo los me mi muy no nos o para pero por que se si sin sobre su sus te tu un una uno y ya
""".split())
"""English and Spanish function words, dropped before hashing (no IDF is available)."""


@runtime_checkable
class Embedder(Protocol):
    """Maps texts to vectors of ``dim`` floats; equal input gives equal output."""

    id: str
    """Names the model, its version and dimension (e.g. ``hashing-v1/256``)."""
    dim: int

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


class HashingEmbedder:
    """Feature hashing of word unigrams, word bigrams and character trigrams.

    Function words (:data:`STOPWORDS`, English and Spanish) are dropped first. Per
    feature: a CRC-32 of its tagged UTF-8 bytes picks the bucket (``h % dim``) and
    the sign (bit 31), which keeps collisions unbiased. Weights: words 1.0 (0.5 for
    one- and two-letter words), bigrams 0.5, character trigrams of ``<word>`` 0.5 each
    (so ``work`` and ``working`` share three of them). Counts are damped with ``1 + log(tf)``
    and the vector is L2-normalised; the empty text maps to the zero vector.
    """

    def __init__(self, dim: int = 256) -> None:
        if not 16 <= dim <= 4096:
            raise ValueError(f"dim must be in [16, 4096], got {dim}")
        self.dim = dim
        self.id = f"hashing-v1/{dim}"
        self._slots: dict[str, tuple[int, float]] = {}
        self._words: dict[str, tuple[tuple[int, float], ...]] = {}

    def features(self, text: str) -> dict[str, float]:
        """Weighted features of one text, summed per feature (for tests and the ADR)."""
        feats: dict[str, float] = {}
        for key, weight in self._features(text):
            feats[key] = feats.get(key, 0.0) + weight
        return feats

    def _features(self, text: str) -> list[tuple[str, float]]:
        words = [w for w in _WORD.findall(unicodedata.normalize("NFKC", text).lower())
                 if w not in STOPWORDS]
        out: list[tuple[str, float]] = []
        for i, word in enumerate(words):
            out.append(("w:" + word, 1.0 if len(word) > 2 else 0.5))
            if i:
                out.append(("b:" + words[i - 1] + " " + word, 0.5))
            padded = f"<{word}>"
            out.extend(("c:" + padded[j:j + 3], 0.5) for j in range(len(padded) - 2))
        return out

    def _slot(self, key: str) -> tuple[int, float]:
        """Bucket and sign of a feature (memoised; the cache is bounded)."""
        slot = self._slots.get(key)
        if slot is None:
            h = zlib.crc32(key.encode("utf-8"))
            slot = (h % self.dim, -1.0 if h & 0x80000000 else 1.0)
            if len(self._slots) >= 1 << 18:
                self._slots.clear()
            self._slots[key] = slot
        return slot

    def _word(self, word: str) -> tuple[tuple[int, float], ...]:
        """Signed bucket weights of a word's unigram and trigrams (memoised, bounded)."""
        got = self._words.get(word)
        if got is None:
            padded = f"<{word}>"
            feats = [("w:" + word, 1.0 if len(word) > 2 else 0.5)]
            feats.extend(("c:" + padded[j:j + 3], 0.5) for j in range(len(padded) - 2))
            got = tuple((i, sign * w) for (i, sign), w in
                        ((self._slot(k), w) for k, w in feats))
            if len(self._words) >= 1 << 16:
                self._words.clear()
            self._words[word] = got
        return got

    def embed_one(self, text: str) -> list[float]:
        words = [w for w in _WORD.findall(unicodedata.normalize("NFKC", text).lower())
                 if w not in STOPWORDS]
        acc: dict[int, float] = {}
        for n, word in enumerate(words):
            # same features, same order as _features(): unigram, bigram, trigrams
            slots = self._word(word)
            index, value = slots[0]
            acc[index] = acc.get(index, 0.0) + value
            if n:
                index, sign = self._slot("b:" + words[n - 1] + " " + word)
                acc[index] = acc.get(index, 0.0) + sign * 0.5
            for index, value in slots[1:]:
                acc[index] = acc.get(index, 0.0) + value
        damped = {i: (math.copysign(1.0 + math.log(abs(v)), v) if abs(v) > 1.0 else v)
                  for i, v in acc.items() if v != 0.0}
        norm = math.sqrt(sum(v * v for v in damped.values()))
        vec = [0.0] * self.dim
        if norm > 0.0:
            for i, v in damped.items():
                vec[i] = v / norm
        return vec

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self.embed_one(t) for t in texts]


def to_bytes(vector: Sequence[float]) -> bytes:
    """Little-endian float32 bytes (the stored form)."""
    arr = array("f", vector)
    if sys.byteorder != "little":
        arr.byteswap()
    return arr.tobytes()


def from_bytes(data: bytes) -> array[float]:
    arr = array("f")
    arr.frombytes(data)
    if sys.byteorder != "little":
        arr.byteswap()
    return arr


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity; 0.0 when either vector is zero."""
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na > 0.0 and nb > 0.0 else 0.0
