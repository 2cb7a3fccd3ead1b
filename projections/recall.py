"""Recall's in-process index: one subject's candidates and vectors, decoded once, compact.

Recall is called on every assistant turn, so its cost is paid per prompt (issue 16). The
stored read models stay the truth; this module keeps, per recently recalled subject,
what ranking needs in numpy arrays:

* per atom: the static candidate test (active, not superseded, not erased, has text),
  validity bounds and creation time (epoch seconds), and the decay state reduced to
  ``log_strength = ln(baseline) + count * ln(boost)``, ``rate = ln2 / halfLife``, origin
  and valence floor, so current salience at ``now`` is one vectorised expression
  (ADR 0005's formula, the time-dependent part applied at query time);
* the subject's vectors as one float32 matrix (dense embedders) in slot order, with
  their flags, so the vector search is one matrix-vector product (ADR 0021).

Freshness: an entry remembers the atoms model's highest ``last_seq`` and the vector
segments' highest ``seq`` it has read, and the tracking positions of both models. When a
position moved, only atoms with a higher ``last_seq`` and segments with a higher ``seq``
are read again (indexed), so a rehearsal costs one row, not a reload.

Because it holds derived content (vectors, and which atoms a subject has), the index is
a registered route like the recall cache (ADR 0012): erasure purges it (the item's
vector row is overwritten with zeros and its entry forgotten) and its probe looks in it.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import math
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
import structlog
from sqlalchemy.engine import Connection

from ledger.inputs import SIDECAR  # where an import keeps the source's own times
from projections.memory import profile_of
from projections.routes import ProbeHit, ProbeResult

__all__ = ["EXACT_LIMIT", "OMISSIONS", "RecallIndex", "SubjectIndex", "epoch", "said_at",
           "static_reason"]

OMISSIONS = ("erased", "archived", "redacted", "superseded", "expired", "inactive",
             "not-valid-at-time", "outside-since-until")
"""Why recall leaves out an atom the indexes matched (ADR 0051), in the order checked.
The first six come from the atom's state (:func:`static_reason` gives their index + 1);
the last two from the time asked and the ``since``/``until`` window."""
NOT_VALID = OMISSIONS.index("not-valid-at-time") + 1
OUTSIDE = OMISSIONS.index("outside-since-until") + 1


def static_reason(status: str, erased: bool, superseded_by: str | None,
                  has_text: bool) -> int:
    """0 when the atom's state lets it be recalled, else the index + 1 in
    :data:`OMISSIONS` of the reason it cannot be (the time asked aside)."""
    if erased or not has_text or status in ("hard-redacted", "deleted"):
        return 1
    if status == "archived":
        return 2
    if status.endswith("redacted"):
        return 3
    if status == "superseded" or superseded_by is not None:
        return 4
    if status == "expired":
        return 5
    return 0 if status == "active" else 6


def said_at(valid_from: str | None, extensions: Any, created_at: str) -> str:
    """When the memory was true or said (ADR 0051): its ``valid_from``; else the time the
    source of an import gave it (the import's sidecar ``created_at``: a Konshus atom's,
    a .mem episode's, a Persona atom's own time); else when the ledger recorded it."""
    if valid_from:
        return valid_from
    if extensions:
        if isinstance(extensions, str):
            if SIDECAR not in extensions:
                return created_at
            extensions = json.loads(extensions)
        side = extensions.get(SIDECAR) if isinstance(extensions, dict) else None
        if isinstance(side, dict) and isinstance(side.get("created_at"), str):
            return str(side["created_at"])
    return created_at

EXACT_LIMIT = 20_000
"""Up to this many live vectors the search is exact (one float32 matrix-vector product).
Above it, sign bits (one per dimension) shortlist ``max(SHORTLIST, 40 * n)`` slots by
Hamming distance and those are scored exactly: memory traffic falls 32x (ADR 0021)."""
BATCH_EXACT_LIMIT = 200_000
"""Up to this many live vectors, several queries at once (the texts of one add, or of a
group of adds, looking for similar memories) are searched exactly: one matrix product on
one BLAS thread reads each row once for all of them, cheaper per query than a shortlist
each (a quarter of a millisecond a query at 20,000 vectors, one at 100,000)."""
QUERY_BLOCK = 32
"""Queries per matrix product: the scores of a block take ``4 * used * QUERY_BLOCK``
bytes (25 MB at the limit)."""
SHORTLIST = 8192
FIRST_PASS = 1 << 18
"""Above this many used slots the shortlist starts from the first 64 sign bits alone."""
_CHUNK = 1 << 16

_LN2 = math.log(2.0)
_INF = float("inf")


def epoch(value: str | None, default: float) -> float:
    """Seconds since 1970 of a stored instant (``...Z``); ``default`` when absent."""
    if value is None:
        return default
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _epochs(values: Sequence[str | None], default: float) -> Any:
    """:func:`epoch` of many stored instants, as a float64 array. The ledger's own form
    (``YYYY-MM-DDTHH:MM:SS.ffffffZ``) is parsed by numpy in one call (microseconds since
    1970 divided by 10^6: the same float as ``datetime.timestamp()``); anything else
    one by one."""
    import numpy as np

    out = np.full(len(values), default, dtype=np.float64)
    given = [k for k, v in enumerate(values) if v is not None]
    if not given:
        return out
    texts = [values[k] for k in given]
    if all(len(t) == 27 and t[-1] == "Z" and t[10] == "T" for t in texts):  # type: ignore[index,arg-type]
        us = np.array([t[:-1] for t in texts], dtype="datetime64[us]")  # type: ignore[index]
        out[given] = us.astype(np.int64) / 1e6
    else:
        out[given] = [epoch(t, default) for t in texts]
    return out


_BLOCK = 64


def _best(scores: Any, n: int) -> Any:
    """Indexes of the ``n`` largest of ``scores`` (1-d; more than ``n`` of them finite),
    ties at the cut broken arbitrarily, as ``argpartition`` breaks them.

    The largest value of each block of :data:`_BLOCK` scores is taken first: the n-th
    largest of those is a floor that at least ``n`` scores reach, so the best ``n`` are
    among the scores at or above it, usually a few, and only those are partitioned
    (``argpartition`` over every score cost 1.5 ms at 100,000)."""
    import numpy as np

    size = len(scores)
    full = size - size % _BLOCK
    if full // _BLOCK <= 4 * n:
        return np.argpartition(-scores, n - 1)[:n]
    tops = scores[:full].reshape(-1, _BLOCK).max(axis=1)
    if full < size:
        tops = np.append(tops, scores[full:].max())
    floor = np.partition(tops, len(tops) - n)[len(tops) - n]
    near = np.flatnonzero(scores >= floor)
    return near[np.argpartition(-scores[near], n - 1)[:n]]


def _batched(live: int, queries: int) -> bool:
    """Whether :meth:`SubjectIndex.vectors_top` searches ``queries`` queries over
    ``live`` vectors in matrix products (exact), rather than one at a time."""
    return queries > 1 and live <= BATCH_EXACT_LIMIT


@functools.cache
def _blas() -> Any:
    """The process's one ``threadpoolctl`` controller (about 2 ms to make)."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def _one_blas_thread() -> Any:
    """A context in which BLAS (numpy's matrix products) runs on this thread alone: its
    own threads on a busy 2-core host cost 10x (ADR 0021)."""
    return _blas().limit(limits=1, user_api="blas")


def _matvec(matrix: Any, q: Any) -> Any:
    """``matrix @ q`` in one thread (numpy's own loop, not BLAS): the product is bound by
    memory, and BLAS threads on a busy 2-core host cost 10x (measured, ADR 0021)."""
    import numpy as np

    return np.einsum("ij,j->i", matrix, q)


log = structlog.get_logger("projections")

_MAGIC = b"MLRIDX01"
_PAGE = 4096
SNAPSHOT_MIN = 20_000
"""A subject with at least this many vector slots keeps a snapshot file of its index
(ADR 0059): below it, reading the index from the database is quick."""
SAVE_EVERY = 4096
"""A new snapshot is written once this many rows (or 1/64 of the subject's slots, if
more) were read from the database on top of the last one."""


def _open_file(path: Path, write: bool) -> tuple[dict[str, Any], dict[str, Any], Any]:
    """(meta, arrays by name, the mapping) of a snapshot file; ``write``: mapped shared
    and writable (an erasure's purge), else copy-on-write."""
    import mmap

    import numpy as np

    with open(path, "r+b" if write else "rb") as f:
        head = f.read(16)
        if len(head) < 16 or head[:8] != _MAGIC:
            raise ValueError(f"{path.name} is not a recall index snapshot")
        header = json.loads(f.read(int.from_bytes(head[8:], "little")))
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_WRITE if write
                       else mmap.ACCESS_COPY)
    views = {}
    for name, (dtype, shape, offset) in header["arrays"].items():
        dt = np.dtype(dtype)
        count = int(np.prod(shape))
        views[name] = np.frombuffer(mm, dtype=dt, count=count, offset=offset).reshape(shape)
    return header["meta"], views, mm


def _purge_file(path: Path, atom_ids: Sequence[str]) -> int:
    """Overwrite with zeros, in the snapshot file itself, what it holds of ``atom_ids``:
    their vector rows, sign bits and flags, and their ids wherever they are (a sorted key
    takes its predecessor's value, so the keys stay sorted). Returns how many it held."""
    import numpy as np

    try:
        _meta, v, mm = _open_file(path, write=True)
    except FileNotFoundError:
        return 0
    n = 0
    try:
        slots = _Keys(v["slot_keys"], v["slot_values"])
        atoms = _Keys(v["atom_keys"], v["atom_values"])
        for atom_id in dict.fromkeys(atom_ids):
            needle = atom_id.encode("ascii", "replace")
            slot = slots.get(atom_id)
            if slot is not None:
                v["matrix"][slot] = 0.0
                v["bits"][:, slot] = 0
                v["flags"][slot] = 0
                v["slot_ids"][slot] = b""
                n += 1
            i = atoms.get(atom_id)
            if i is not None:
                v["ids"][i] = b""
                v["a_static_ok"][i] = 0.0
            for keys, values in ((v["slot_keys"], v["slot_values"]),
                                 (v["atom_keys"], v["atom_values"])):
                at = int(np.searchsorted(keys, needle))
                while at < len(keys) and keys[at] == needle:
                    keys[at] = keys[at - 1] if at else b""
                    values[at] = -1
                    at += 1
    finally:
        mm.flush()  # the views keep the mapping open until they go
    return n


def _write_snapshot(path: Path, meta: Mapping[str, Any], views: Mapping[str, Any], ids: Any,
                    slot_ids: Any, cap: int, ncap: int, dim: int, words: int) -> int:
    """:meth:`SubjectIndex.snapshot`'s writing (on any thread)."""
    import numpy as np

    n, used = len(ids), len(slot_ids)
    order = np.argsort(ids, kind="stable")
    some = np.flatnonzero(slot_ids != b"")
    slot_order = some[np.argsort(slot_ids[some], kind="stable")]
    parts: list[tuple[str, Any, tuple[int, ...], Any]] = [
        ("matrix", np.float32, (cap, dim), views["matrix"]),
        ("bits", np.uint64, (words, cap), views["bits"]),
        ("flags", np.uint8, (cap,), views["flags"]),
        ("slot_atom", np.int64, (cap,), views["slot_atom"]),
        ("center", np.float32, (dim,), views["center"]),
        *((name, np.float64, (ncap,), v) for name, v in views.items()
          if name.startswith("a_")),
        ("ids", f"S{_WIDTH}", (n,), ids),
        ("atom_keys", f"S{_WIDTH}", (n,), ids[order]),
        ("atom_values", np.int64, (n,), order.astype(np.int64)),
        ("slot_ids", f"S{_WIDTH}", (used,), slot_ids),
        ("slot_keys", f"S{_WIDTH}", (len(some),), slot_ids[slot_order]),
        ("slot_values", np.int64, (len(some),), slot_order.astype(np.int64)),
    ]
    layout: dict[str, tuple[str, tuple[int, ...], int]] = {}
    offset = _PAGE * 16  # the header's room
    for name, dtype, shape, _data in parts:
        dt = np.dtype(dtype)
        layout[name] = (dt.str, shape, offset)
        size = dt.itemsize * int(np.prod(shape))
        offset += -(-size // _PAGE) * _PAGE
    header = json.dumps({"meta": meta, "arrays": layout}).encode()
    if len(header) + 16 > _PAGE * 16:
        raise ValueError("snapshot header too large")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(_MAGIC + len(header).to_bytes(8, "little") + header)
            for name, _dtype, shape, data in parts:
                start = layout[name][2]
                if name == "bits":  # word-major: each word's used slots, in place
                    for w in range(shape[0]):
                        f.seek(start + w * shape[1] * 8)
                        f.write(np.ascontiguousarray(data[w]).tobytes())
                    continue
                f.seek(start)
                for lo in range(0, len(data), _CHUNK):
                    f.write(np.ascontiguousarray(data[lo:lo + _CHUNK]).tobytes())
            f.truncate(offset)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return offset


_MISSING = object()
_WIDTH = 36


class _Names:
    """Index -> atom id (or None), list-like: a frozen base (an ``S36`` array, possibly a
    snapshot file's, mapped) and the changes and additions made since in this process."""

    def __init__(self, base: Any = None) -> None:
        self.base = base
        self.n_base = 0 if base is None else len(base)
        self.extra: list[str | None] = []
        self.changed: dict[int, str | None] = {}

    def __len__(self) -> int:
        return self.n_base + len(self.extra)

    def __getitem__(self, i: int) -> str | None:
        if i >= self.n_base:
            return self.extra[i - self.n_base]
        got = self.changed.get(i, _MISSING)
        if got is not _MISSING:
            return got  # type: ignore[return-value]
        raw = bytes(self.base[i])  # numpy drops the trailing NULs: b"" for an empty one
        return raw.decode("ascii") if raw else None

    def __setitem__(self, i: int, value: str | None) -> None:
        if i >= self.n_base:
            self.extra[i - self.n_base] = value
        else:
            self.changed[i] = value

    def append(self, value: str | None) -> None:
        self.extra.append(value)

    def extend(self, values: Sequence[str | None]) -> None:
        self.extra.extend(values)

    def array(self, n: int) -> Any:
        """The first ``n`` as an ``S36`` array (empty: all NUL bytes)."""
        import numpy as np

        out = np.zeros(n, dtype=f"S{_WIDTH}")
        k = min(n, self.n_base)
        if k:
            out[:k] = self.base[:k]
        for i, v in self.changed.items():
            if i < n:
                out[i] = (v or "").encode("ascii")
        tail = self.extra[:max(0, n - self.n_base)]
        if tail:
            out[self.n_base:self.n_base + len(tail)] = [(v or "").encode("ascii")
                                                        for v in tail]
        return out


class _Keys:
    """Atom id -> int, dict-like: a frozen base (ids sorted, with their values: a snapshot
    file's, mapped, searched by bisection) and the changes made since in this process."""

    def __init__(self, keys: Any = None, values: Any = None) -> None:
        self.keys = keys if keys is not None and len(keys) else None
        self.values = values
        self.over: dict[str, int | None] = {}

    def get(self, key: str, default: int | None = None) -> int | None:
        got = self.over.get(key, _MISSING)
        if got is not _MISSING:
            return default if got is None else got  # type: ignore[return-value]
        if self.keys is not None:
            import numpy as np

            b = key.encode("ascii", "replace")
            i = int(np.searchsorted(self.keys, b))
            if i < len(self.keys) and self.keys[i] == b:
                v = int(self.values[i])
                if v >= 0:
                    return v
        return default

    def lookup(self, keys: Sequence[str]) -> Any:
        """The values of ``keys`` as an int64 array, -1 for those absent."""
        import numpy as np

        out = np.full(len(keys), -1, dtype=np.int64)
        rest: list[int] = []
        for j, key in enumerate(keys):
            got = self.over.get(key, _MISSING)
            if got is _MISSING:
                rest.append(j)
            elif got is not None:
                out[j] = int(got)  # type: ignore[call-overload]
        if rest and self.keys is not None:
            wanted = np.array([keys[j].encode("ascii", "replace") for j in rest],
                              dtype=f"S{_WIDTH}")
            at = np.minimum(np.searchsorted(self.keys, wanted), len(self.keys) - 1)
            found = np.where(self.keys[at] == wanted, self.values[at], -1)
            out[rest] = found
        return out

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key) is not None

    def __getitem__(self, key: str) -> int:
        got = self.get(key)
        if got is None:
            raise KeyError(key)
        return got

    def __setitem__(self, key: str, value: int) -> None:
        self.over[key] = value

    def pop(self, key: str, default: int | None = None) -> int | None:
        got = self.get(key)
        if got is None:
            return default
        self.over[key] = None
        return got



@dataclass
class _Profile:
    log_boost: float
    rate: float
    protection: float


class SubjectIndex:
    """One subject's atoms (static candidate data, decay state) and vectors."""

    def __init__(self, subject_id: str, dim: int) -> None:
        import numpy as np

        self.subject_id = subject_id
        self.dim = dim
        self.atoms_seq = 0
        self.vec_seq = 0
        self.positions: tuple[int, int] = (-1, -1)
        self.ids = _Names()
        """Atom id of each atom index."""
        self.pos = _Keys()
        """Atom index of each atom id."""
        self._n = 0
        self._cols = ("static_ok", "reason", "valid_from", "valid_to", "created", "said",
                      "log_strength", "rate", "origin", "floor")
        self.arrays: dict[str, Any] = {c: np.zeros(0) for c in self._cols}
        self.slot_ids = _Names()
        """Atom id of each vector slot (None: empty)."""
        self.matrix = np.zeros((0, dim), dtype=np.float32)
        self.bits = np.zeros(((dim + 63) // 64, 0), dtype=np.uint64)
        """Sign bits, one row per 64-bit word (word-major): the first pass of a large
        subject's shortlist reads word 0 of every slot as one contiguous array."""
        self.flags = np.zeros(0, dtype=np.uint8)
        self.slot_atom = np.zeros(0, dtype=np.int64)
        """Per slot, the index of its atom in the atom arrays (-1: none, or not read yet)."""
        self.used = 0
        self.slot_of = _Keys()
        """Vector slot of each atom id that holds one."""
        self.center = np.zeros(dim, dtype=np.float32)
        """Subtracted before taking sign bits: embedding spaces are anisotropic (every
        vector leans the same way), and bits of the centred vectors split them better."""
        self._centered = 0
        self._live: Any = None
        self._dead: Any = None
        self._present: Any = None
        self._absent: Any = None
        self._rows = np.zeros((0, dim), dtype=np.float32)
        """Reused buffer for the shortlist's rows (a fresh 8 MiB array per query cost
        its page faults)."""
        self.unsaved = 0
        """Rows read from the database since the snapshot file this entry matches (all of
        them when there is none): a new snapshot is written when they are many."""
        self.cleared: list[str] = []
        """Atoms whose vectors a refresh found erased (their slot emptied): purged from
        the snapshot file at once, should it still hold them."""
        self.generation: str | None = None
        """The vector index's generation (:meth:`VectorIndex.generation`) read with it."""
        self._mm: Any = None

    # ------------------------------------------------------------------ atoms
    def _grow(self, n: int) -> None:
        import numpy as np

        cap = len(self.arrays["created"])
        if n <= cap:
            return
        new_cap = max(n, cap * 2, 1024)
        for c in self._cols:
            old = self.arrays[c]
            grown = np.zeros(new_cap, dtype=old.dtype if len(old) else np.float64)
            grown[:len(old)] = old
            self.arrays[c] = grown

    def put_atoms(self, rows: Sequence[Any], profiles: dict[str | None, _Profile]) -> None:
        """Rows of ``RecallIndex._refresh``'s query, new or changed, column by column
        (the first recall of a large subject reads every row: issue 16)."""
        import numpy as np

        if not rows:
            return
        (atom_ids, status, erased, superseded_by, has_text, valid_from, valid_to,
         baseline, count, valence, origin, profile_json, created, last_seq,
         extensions) = zip(*rows, strict=True)
        ids = [str(x) for x in atom_ids]
        pos = self.pos
        self._grow(self._n + sum(1 for x in ids if x not in pos))
        where = np.empty(len(ids), dtype=np.int64)
        for k, atom_id in enumerate(ids):
            i = pos.get(atom_id)
            if i is None:
                i = self._n
                self._n += 1
                pos[atom_id] = i
                self.ids.append(atom_id)
                slot = self.slot_of.get(atom_id)
                if slot is not None:
                    self.slot_atom[slot] = i
            where[k] = i
        profs = []
        for pj in profile_json:
            prof = profiles.get(pj)
            if prof is None:
                p = profile_of(json.loads(pj) if pj else None)
                prof = _Profile(math.log(p.rehearsal_boost), _LN2 / p.half_life_days,
                                p.valence_protection)
                profiles[pj] = prof
            profs.append(prof)
        a = self.arrays
        reasons = [static_reason(str(st), bool(er), sb, bool(ht))
                   for st, er, sb, ht in zip(status, erased, superseded_by, has_text,
                                             strict=True)]
        a["reason"][where] = reasons
        a["static_ok"][where] = [float(r == 0) for r in reasons]
        a["valid_from"][where] = _epochs(valid_from, -_INF)
        a["valid_to"][where] = _epochs(valid_to, _INF)
        a["created"][where] = _epochs(created, 0.0)
        a["said"][where] = _epochs([said_at(v, x, c) for v, x, c in zip(
            valid_from, extensions, created, strict=True)], 0.0)
        a["origin"][where] = _epochs(origin, 0.0)
        a["log_strength"][where] = [
            math.log(b) + int(c) * pr.log_boost if b > 0 else -_INF
            for b, c, pr in zip(baseline, count, profs, strict=True)]
        a["rate"][where] = [pr.rate / 86_400.0 for pr in profs]
        a["floor"][where] = [min(1.0, pr.protection * abs(float(v)))
                             for v, pr in zip(valence, profs, strict=True)]
        self.atoms_seq = max(self.atoms_seq, max(int(x) for x in last_seq))

    def salience(self, at: float, rows: Any) -> tuple[Any, Any]:
        """(clamped salience, raw salience) at epoch ``at`` of atom indexes ``rows``
        (ADR 0005: negative elapsed time counts as 0; the valence term is a floor)."""
        import numpy as np

        a = self.arrays
        elapsed = np.maximum(0.0, at - a["origin"][rows])
        with np.errstate(over="ignore"):
            raw = np.exp(np.minimum(a["log_strength"][rows] - a["rate"][rows] * elapsed,
                                    709.0)) + a["floor"][rows]
        return np.clip(raw, 0.0, 1.0), raw

    def candidates(self, at: float, rows: Any) -> Any:
        """Boolean mask over atom indexes ``rows``: Persona §6 selection, salience aside."""
        a = self.arrays
        return ((a["static_ok"][rows] > 0) & (a["valid_from"][rows] <= at)
                & (at < a["valid_to"][rows]))

    def reasons(self, at: float, rows: Any, since: float, until: float) -> Any:
        """Per atom index of ``rows``: 0 when it can be recalled at ``at`` from the window
        ``since <= said < until``, else its reason's index + 1 in :data:`OMISSIONS`."""
        import numpy as np

        a = self.arrays
        out = a["reason"][rows].astype(np.int64)
        out[(out == 0) & (a["static_ok"][rows] <= 0)] = 1  # forgotten by an erasure
        invalid = (a["valid_from"][rows] > at) | (at >= a["valid_to"][rows])
        out[(out == 0) & invalid] = NOT_VALID
        said = a["said"][rows]
        out[(out == 0) & ((said < since) | (said >= until))] = OUTSIDE
        return out

    # ------------------------------------------------------------------ vectors
    def put_segment(self, segment: int, size: int, ids: bytes, flags: bytes, vals: bytes,
                    seq: int) -> None:
        import numpy as np

        count = len(flags)
        start = segment * size
        end = start + count
        if end > len(self.flags):
            cap = max(end, 2 * len(self.flags), 1024)
            grown = np.zeros((cap, self.dim), dtype=np.float32)
            grown[:len(self.matrix)] = self.matrix
            self.matrix = grown
            gbits = np.zeros((self.bits.shape[0], cap), dtype=np.uint64)
            gbits[:, :self.bits.shape[1]] = self.bits
            self.bits = gbits
            gflags = np.zeros(cap, dtype=np.uint8)
            gflags[:len(self.flags)] = self.flags
            self.flags = gflags
            gatom = np.full(cap, -1, dtype=np.int64)
            gatom[:len(self.slot_atom)] = self.slot_atom
            self.slot_atom = gatom
            self.slot_ids.extend([None] * (cap - len(self.slot_ids)))
        self.used = max(self.used, end)
        self.matrix[start:end] = np.frombuffer(vals, dtype="<f4").reshape(count, self.dim)
        self.bits[:, start:end] = self._signs(self.matrix[start:end]).T
        self.flags[start:end] = np.frombuffer(flags, dtype=np.uint8)
        self._live = self._dead = None
        for j in range(count):
            raw = ids[j * 36:(j + 1) * 36]
            old = self.slot_ids[start + j]
            if raw == b"\x00" * 36:
                if old is not None:
                    self.slot_of.pop(old, None)
                    self.cleared.append(old)
                self.slot_ids[start + j] = None
                self.slot_atom[start + j] = -1
            else:
                atom_id = raw.decode("ascii")
                self.slot_ids[start + j] = atom_id
                self.slot_of[atom_id] = start + j
                self.slot_atom[start + j] = self.pos.get(atom_id, -1) or 0
        self.vec_seq = max(self.vec_seq, seq)

    def _signs(self, rows: Any) -> Any:
        """Sign bits of rows, packed into uint64 words (padding bits zero)."""
        import numpy as np

        packed = np.packbits(rows > self.center, axis=1)
        width = self.bits.shape[0] * 8
        if packed.shape[1] < width:
            packed = np.pad(packed, ((0, 0), (0, width - packed.shape[1])))
        return np.ascontiguousarray(packed).view(np.uint64)

    def live(self, present: bool = False) -> Any:
        """Indexes of the retrievable slots, or (``present``) of every slot that holds a
        vector, retrievable or not (cached until a segment or an erasure)."""
        import numpy as np

        if self._live is None:
            on = self.flags[:self.used] == 1
            self._live = np.flatnonzero(on)
            self._dead = np.flatnonzero(~on)
            some = self.flags[:self.used] != 0
            self._present = np.flatnonzero(some)
            self._absent = np.flatnonzero(~some)
        return self._present if present else self._live

    def _recenter(self, live: Any) -> None:
        """Centre on the live vectors' mean and retake every sign bit; done when the
        subject has doubled since the last time, so its cost is amortised."""
        import numpy as np

        total = np.zeros(self.dim, dtype=np.float64)
        for start in range(0, self.used, _CHUNK):
            end = min(self.used, start + _CHUNK)
            total += self.matrix[start:end][self.flags[start:end] == 1].sum(axis=0)
        self.center = (total / max(1, len(live))).astype(np.float32)
        for start in range(0, self.used, _CHUNK):
            end = min(self.used, start + _CHUNK)
            self.bits[:, start:end] = self._signs(self.matrix[start:end]).T
        self._centered = len(live)

    def _hamming(self, qbits: Any, idx: Any = None) -> Any:
        """Hamming distance (uint16) of the sign bits of every used slot, or of slots
        ``idx``, to ``qbits``; in chunks that stay in cache (whole-array temporaries cost
        more than the arithmetic at 10^6 slots)."""
        import numpy as np

        total = self.used if idx is None else len(idx)
        out = np.zeros(total, dtype=np.uint16)
        for start in range(0, total, _CHUNK):
            end = min(total, start + _CHUNK)
            h = out[start:end]
            for w in range(self.bits.shape[0]):
                word = (self.bits[w, start:end] if idx is None
                        else self.bits[w].take(idx[start:end]))
                h += np.bitwise_count(np.bitwise_xor(word, qbits[w]))
        return out

    def recallable(self, at: float, since: float, until: float) -> Any:
        """Boolean mask over the used slots: retrievable, and its atom recallable at ``at``
        from the window ``since <= said < until`` (:meth:`reasons` 0). With a window,
        recall searches these slots only (ADR 0051)."""

        ok = self.reasons(at, slice(0, self._n), since, until) == 0  # views, no copies
        atom = self.slot_atom[:self.used]
        mask = (self.flags[:self.used] == 1) & (atom >= 0)
        mask[mask] = ok[atom[mask]]
        return mask

    def _shortlist(self, qbits: Any, m: int, dead: Any) -> Any:
        """About ``m`` live slots nearest by Hamming distance (all ties at the cut kept).

        Above :data:`FIRST_PASS` used slots, the first word's distance (64 bits) first
        keeps ``max(16 m, used / 16)`` slots, and only those are compared on every word:
        a quarter of the memory traffic at 10^6 slots."""
        import numpy as np

        words = self.bits.shape[0]
        idx = None
        if self.used > FIRST_PASS and words > 1:
            near = np.bitwise_count(np.bitwise_xor(self.bits[0, :self.used], qbits[0]))
            near[dead] = 65
            keep = max(16 * m, self.used // 16)
            cut = int(np.searchsorted(np.cumsum(np.bincount(near, minlength=66)), keep))
            idx = np.flatnonzero(near <= min(cut, 64))
            ham = self._hamming(qbits, idx)
        else:
            ham = self._hamming(qbits)
            ham[dead] = self.dim + 1
        # a counting sort's threshold, cheaper than argpartition over every slot
        cut = int(np.searchsorted(np.cumsum(np.bincount(ham, minlength=self.dim + 2)), m))
        chosen = np.flatnonzero(ham <= min(cut, self.dim))
        return chosen if idx is None else idx[chosen]

    def vector_top(self, q: Any, n: int, present: bool = False,
                   allowed: Any = None) -> list[tuple[str, float]]:
        """Best ``n`` retrievable slots (``present``: any slot holding a vector; ``allowed``:
        the slots of this boolean mask over the used ones) by cosine: exact up to
        :data:`EXACT_LIMIT` live vectors, else exact over a Hamming shortlist of (centred)
        sign bits."""
        import numpy as np

        if not len(self.flags) or n <= 0:
            return []
        used = self.used
        live = self.live(present)
        dead = self._absent if present else self._dead
        if allowed is not None:
            live, dead = np.flatnonzero(allowed), np.flatnonzero(~allowed)
        count = len(live)
        if not count:
            return []
        m = max(SHORTLIST, 40 * n)
        if count > EXACT_LIMIT and count > m:
            every = self.live()
            if 2 * self._centered <= len(every):
                self._recenter(every)
            qbits = self._signs(q.reshape(1, -1))[0]
            idx = self._shortlist(qbits, m, dead)
            if len(self._rows) < len(idx):
                self._rows = np.empty((max(len(idx), 2 * m), self.dim), dtype=np.float32)
            rows = self._rows[:len(idx)]
            np.take(self.matrix, idx, axis=0, out=rows, mode="clip")  # valid indexes
            scores = _matvec(rows, q)
        elif 4 * count < used:  # a few slots (a window): only their rows are read
            idx = live
            scores = _matvec(self.matrix[idx], q)
        else:
            idx = live
            scores = _matvec(self.matrix[:used], q)[idx]
        if len(idx) > n:
            part = np.argpartition(-scores, n - 1)[:n]
            idx, scores = idx[part], scores[part]
        return self._ranked(idx, scores)

    def _ranked(self, idx: Any, scores: Any) -> list[tuple[str, float]]:
        """(atom id, score) of the slots ``idx``, best first, ties by slot."""
        import numpy as np

        order = np.lexsort((idx, -scores))
        return [(self.slot_ids[i] or "", float(s))
                for i, s in zip(idx[order].tolist(), scores[order].tolist(), strict=True)]

    def vectors_top(self, qs: Any, n: int) -> list[list[tuple[str, float]]]:
        """:meth:`vector_top` of each row of ``qs`` (unit query vectors), for several
        queries at once: exact, by matrix products over the used rows, up to
        :data:`BATCH_EXACT_LIMIT` live vectors; above it, one query at a time."""
        import numpy as np

        if n <= 0 or not len(self.flags) or not len(live := self.live()):
            return [[] for _ in range(len(qs))]
        if not _batched(len(live), len(qs)):
            return [self.vector_top(np.asarray(q, dtype=np.float32), n) for q in qs]
        out: list[list[tuple[str, float]]] = []
        rows = self.matrix[:self.used]
        dead = self._dead
        for start in range(0, len(qs), QUERY_BLOCK):
            block = np.asarray(qs[start:start + QUERY_BLOCK], dtype=np.float32)
            with _one_blas_thread():  # (this order of the product is the quicker one)
                scores = np.ascontiguousarray((rows @ block.T).T)  # a row per query
            scores[:, dead] = -np.inf  # never among the best: n < the live slots below
            for got in scores:
                idx = _best(got, n) if len(live) > n else live
                out.append(self._ranked(idx, got[idx]))
        return out

    def exact(self, queries: int) -> bool:
        """Whether :meth:`vectors_top` of ``queries`` queries scores every retrievable
        slot, so that a slot it leaves out scores no more than the last one it gives."""
        live = len(self.live())
        return live <= EXACT_LIMIT or _batched(live, queries)

    def cosines(self, q: Any, atom_ids: Sequence[str]) -> dict[str, float]:
        """The exact cosine of each of ``atom_ids`` that holds a vector here (recall scores
        the keyword index's proposals on the vector signal too: ADR 0051)."""

        at = self.slot_of.lookup(atom_ids)
        keep = at >= 0
        keep[keep] = self.flags[at[keep]] != 0
        if not keep.any():
            return {}
        known = [a for a, k in zip(atom_ids, keep.tolist(), strict=True) if k]
        scores = _matvec(self.matrix[at[keep]], q)
        return {a: float(v) for a, v in zip(known, scores.tolist(), strict=True)}

    def forget(self, atom_id: str) -> int:
        """Erase one atom from this entry: vector row zeroed, candidate data dropped."""
        n = 0
        slot = self.slot_of.pop(atom_id, None)
        if slot is not None:
            self.matrix[slot] = 0.0
            self.bits[:, slot] = 0
            self.flags[slot] = 0
            self._live = self._dead = None
            self.slot_ids[slot] = None
            self._rows[:] = 0.0  # the last shortlist's copies may hold this vector
            n += 1
        i = self.pos.get(atom_id)
        if i is not None:
            self.arrays["static_ok"][i] = 0.0
            n += 1
        return n

    # ------------------------------------------------------------------ snapshot file
    def save(self, path: Path, meta: Mapping[str, Any], headroom: int) -> int:
        """Write this index to ``path`` now: ``snapshot(meta, headroom)(path)``."""
        return self.snapshot(meta, headroom)(path)

    def snapshot(self, meta: Mapping[str, Any], headroom: int) -> Callable[[Path], int]:
        """Take what a snapshot file holds, and return the function that writes it to a
        path (through a temporary file and a rename, synced first): what :meth:`load`
        maps. ``headroom`` empty slots (and atoms) are left after the used ones, as holes
        that take no disk, so the segments written after it are put in place rather than
        by copying the matrix. The function returns the bytes written.

        What this process may change while the function runs on another thread is copied
        here (ids, the centre, the sequence numbers); the arrays are taken as they are:
        a slot changed meanwhile is in a segment written after ``vec_seq`` (read again on
        top of the file), or an erasure's, which purges the file after the rename."""

        every = self.live()
        if len(every) > EXACT_LIMIT and 2 * self._centered <= len(every):
            self._recenter(every)  # as the first search would: once, here, not per process
        n, used = self._n, self.used
        cap, ncap = used + headroom, n + max(1024, n // 8)
        ids = self.ids.array(n)
        slot_ids = self.slot_ids.array(used)
        header_meta = dict(meta, atoms_seq=self.atoms_seq, vec_seq=self.vec_seq,
                           positions=self.positions, n=n, used=used,
                           centered=self._centered, dim=self.dim)
        dim, words = self.dim, self.bits.shape[0]
        views = {"matrix": self.matrix[:used], "bits": self.bits[:, :used],
                 "flags": self.flags[:used], "slot_atom": self.slot_atom[:used],
                 "center": self.center.copy(),
                 **{f"a_{c}": self.arrays[c][:n] for c in self._cols}}
        self.unsaved = 0
        return lambda path: _write_snapshot(path, header_meta, views, ids, slot_ids, cap,
                                            ncap, dim, words)

    @classmethod
    def load(cls, path: Path, subject_id: str) -> tuple[SubjectIndex, dict[str, Any]]:
        """The index a :meth:`save` wrote, its arrays mapped copy-on-write (what this
        process changes stays in this process; the file changes only by a new save or
        an erasure's purge); and the file's meta."""
        meta, views, mm = _open_file(path, write=False)
        dim = int(meta["dim"])
        self = cls(subject_id, dim)
        self._mm = mm
        self.matrix, self.bits = views["matrix"], views["bits"]
        self.flags, self.slot_atom = views["flags"], views["slot_atom"]
        self.slot_atom[int(meta["used"]):] = -1
        self.center = views["center"]
        self.arrays = {c: views[f"a_{c}"] for c in self._cols}
        self._n, self.used = int(meta["n"]), int(meta["used"])
        self._centered = int(meta["centered"])
        self.ids = _Names(views["ids"])
        self.pos = _Keys(views["atom_keys"], views["atom_values"])
        self.slot_ids = _Names(views["slot_ids"])
        self.slot_ids.extend([None] * (len(self.flags) - self.used))
        self.slot_of = _Keys(views["slot_keys"], views["slot_values"])
        self.atoms_seq, self.vec_seq = int(meta["atoms_seq"]), int(meta["vec_seq"])
        self.positions = (int(meta["positions"][0]), int(meta["positions"][1]))
        self.generation = meta.get("generation")
        self.unsaved = 0
        return self, meta

    def nbytes(self) -> int:
        return int(self.matrix.nbytes + self.bits.nbytes + self._rows.nbytes
                   + sum(v.nbytes for v in self.arrays.values()))


class RecallIndex:
    """Subject indexes of recently recalled subjects (LRU, bounded by count); a route.

    ``folder`` (the home's ``recall-index/``): where a large subject's index is kept as
    a snapshot file between processes (ADR 0059), one file per subject, mapped by the
    next process instead of read from the database; the rows written since are read on
    top of it. The route purges an erased atom from those files too."""

    name = "recall-index"
    model = "recall-index"
    in_process = True

    def __init__(self, atoms: Any, vectors: Any, maxsize: int = 32,
                 folder: Path | None = None) -> None:
        self.atoms = atoms
        self.vectors = vectors
        self.maxsize = maxsize
        self.folder = folder
        self._entries: OrderedDict[str, SubjectIndex] = OrderedDict()
        self._profiles: dict[str | None, _Profile] = {}
        self._saving: dict[str, threading.Thread] = {}

    def usable(self) -> bool:
        """Dense vectors only: the hashing fallback keeps the stored sparse search."""
        return bool(self.vectors.dense)

    def get(self, conn: Connection, subject_id: str, positions: tuple[int, int]) -> SubjectIndex:
        """The subject's index, read or brought up to date for these model positions."""
        entry = self._entries.get(subject_id)
        if entry is None:
            entry = self._open(conn, subject_id) or SubjectIndex(subject_id, self.vectors.dim)
            self._entries[subject_id] = entry
            while len(self._entries) > self.maxsize:
                self._entries.popitem(last=False)
        self._entries.move_to_end(subject_id)
        if entry.positions != positions:
            if entry.generation is None:
                entry.generation = self.vectors.generation(conn)
            self._refresh(conn, entry)
            entry.positions = positions
            if entry.cleared:
                self._purge_files([entry.subject_id], entry.cleared)
                entry.cleared = []
        if entry.unsaved:
            try:
                self._save(conn, entry)
            except OSError as e:  # a home this process may not write: recall goes on
                log.warning("projections.recall_index_not_saved", subject_id=subject_id,
                            error=e.__class__.__name__)
        return entry

    # ------------------------------------------------------------------ snapshot files
    def path(self, subject_id: str) -> Path | None:
        return None if self.folder is None else self.folder / f"{subject_id}.idx"

    def _meta(self, conn: Connection) -> dict[str, Any]:
        v = self.vectors
        return {"format": 1, "version": v.version, "segment_size": v.segment_size,
                "generation": v.generation(conn)}

    def _lock(self) -> int:
        """Take the folder's lock (a save's check and rename, and a purge, one at a
        time); closing the returned descriptor releases it."""
        assert self.folder is not None
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self.folder / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(fd)
            raise
        return fd

    @contextlib.contextmanager
    def _locked(self) -> Any:
        fd = self._lock()
        try:
            yield
        finally:
            os.close(fd)

    def wait(self) -> None:
        """Until the snapshot files being written are written."""
        for t in list(self._saving.values()):
            t.join()

    def _open(self, conn: Connection, subject_id: str) -> SubjectIndex | None:
        """The subject's snapshot file, mapped, when it matches the vector index (same
        embedder, segment size and generation: a rebuild starts a new one); a file that
        does not is deleted."""
        path = self.path(subject_id)
        if path is None or not path.exists():
            return None
        try:
            entry, meta = SubjectIndex.load(path, subject_id)
        except (OSError, ValueError, KeyError):
            entry, meta = None, {}
        want = self._meta(conn)
        if entry is None or any(meta.get(k) != want[k] for k in want) \
                or entry.dim != self.vectors.dim:
            with contextlib.suppress(OSError), self._locked():
                path.unlink(missing_ok=True)
            return None
        every = entry.live()
        if len(every) > EXACT_LIMIT and 2 * entry._centered <= len(every):
            entry.unsaved = entry.used  # its sign bits are to be centred: written again
        return entry

    def _save(self, conn: Connection, entry: SubjectIndex) -> None:
        """Write the entry's snapshot when the subject is large and many of its rows were
        read from the database since the last one, on a thread of its own (a recall
        does not wait for it; the process's exit does). Under the folder's lock, held
        from the check to the rename, and only if the entry is still current: a vector
        segment written (an erasure's purge among them) after its last read, or a new
        generation, and it is not written (else it could put back what the purge took
        out; a purge that comes after the check waits for the rename, then purges)."""
        sid = entry.subject_id
        if self.folder is None or entry.used < SNAPSHOT_MIN or sid in self._saving \
                or entry.unsaved < max(SAVE_EVERY, entry.used // 64):
            return
        path = self.path(sid)
        assert path is not None
        meta = self._meta(conn)
        s = self.vectors.segments
        fd = self._lock()
        try:
            if meta["generation"] != entry.generation or (
                    self.vectors.store.table_exists(conn, s.name) and conn.execute(
                        sa.select(sa.func.count()).select_from(s).where(
                            s.c.subject_id == sid, s.c.seq > entry.vec_seq)).scalar_one()):
                os.close(fd)
                return
            write = entry.snapshot(meta, max(self.vectors.segment_size, entry.used // 8))
        except BaseException:
            os.close(fd)
            raise

        def run() -> None:
            try:
                write(path)
            except OSError as e:
                log.warning("projections.recall_index_not_saved", subject_id=sid,
                            error=e.__class__.__name__)
            finally:
                os.close(fd)
                self._saving.pop(sid, None)

        thread = threading.Thread(target=run, name="recall-index-save")
        self._saving[sid] = thread
        thread.start()

    def _purge_files(self, subject_ids: Sequence[str] | None, item_ids: Sequence[str]) -> int:
        """Purge items from the snapshot files (of ``subject_ids``, or all)."""
        if self.folder is None or not self.folder.is_dir() or not item_ids:
            return 0
        with self._locked():
            paths = (sorted(self.folder.glob("*.idx")) if subject_ids is None
                     else [p for s in subject_ids if (p := self.path(s)) is not None])
            return sum(_purge_file(p, item_ids) for p in paths)

    def _refresh(self, conn: Connection, entry: SubjectIndex) -> None:
        a, c = self.atoms.atoms, self.atoms.atom_content
        stmt = (sa.select(a.c.atom_id, a.c.status, a.c.content_erased, a.c.superseded_by,
                          c.c.text.is_not(None), a.c.valid_from, a.c.valid_to, a.c.baseline,
                          a.c.rehearsal_count, a.c.emotional_valence, a.c.decay_origin,
                          a.c.decay_profile, a.c.created_at, a.c.last_seq,
                          a.c.extensions)
                .select_from(a.outerjoin(c, a.c.atom_id == c.c.atom_id))
                .where(a.c.subject_id == entry.subject_id))
        if entry.atoms_seq:
            stmt = stmt.where(a.c.last_seq > entry.atoms_seq)
        rows = conn.execute(stmt).all()
        entry.put_atoms(rows, self._profiles)
        entry.unsaved += len(rows)
        v = self.vectors
        if not v.store.table_exists(conn, v.segments.name):
            return
        for raw in v._rows(conn, entry.subject_id, after_seq=entry.vec_seq or None):
            entry.put_segment(raw.segment, v.segment_size, raw.ids, raw.flags, raw.vals,
                              raw.seq)
            entry.unsaved += len(raw.flags)

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)

    # ------------------------------------------------------------------ route
    def purge(self, conn: Connection | None, item_id: str) -> int:
        return self.purge_many(conn, [item_id])

    def purge_many(self, conn: Connection | None, item_ids: Sequence[str]) -> int:
        """Forget the items in every entry, and overwrite them in every snapshot file."""
        n = sum(e.forget(i) for i in item_ids for e in self._entries.values())
        return n + self._purge_files(None, item_ids)

    def compact(self, conn: Connection | None) -> None:
        return None

    def content_tables(self) -> Sequence[str]:
        return ()

    def _files(self) -> list[SubjectIndex]:
        """Every snapshot file, mapped. The probes name them ``recall-index-file``, not
        by subject: a probe's result goes into the evidence of an erasure of others."""
        if self.folder is None or not self.folder.is_dir():
            return []
        out = []
        for p in sorted(self.folder.glob("*.idx")):
            with contextlib.suppress(OSError, ValueError, KeyError):
                out.append(SubjectIndex.load(p, p.stem)[0])
        return out

    def probe(self, item_id: str, content: str | None) -> ProbeResult:
        hits = []
        files = self._files()
        n = sum(1 for e in self._entries.values() if item_id in e.slot_of)
        if n:
            hits.append(ProbeHit("recall-index", "id", n))
        held = sum(1 for e in files if item_id in e.slot_of)
        if held:
            hits.append(ProbeHit("recall-index-file", "id", held))
        if content and (self._entries or files):
            import numpy as np

            q = np.asarray(self.vectors.embed_query(content), dtype=np.float32)
            for where, entries in (("recall-index", list(self._entries.values())),
                                   ("recall-index-file", files)):
                near = sorted({a for e in entries for a, s in e.vector_top(q, 16)
                               if s >= 0.9})
                if near:
                    hits.append(ProbeHit(where, "content", len(near),
                                         tuple(a for a in near if a != item_id)))
        return ProbeResult(self.name, item_id, self._checked(files), tuple(hits))

    def probe_many(self, items: Mapping[str, Sequence[str]]) -> list[ProbeResult]:
        files = self._files()
        out = []
        for i in items:
            hits = []
            n = sum(1 for e in self._entries.values() if i in e.slot_of)
            if n:
                hits.append(ProbeHit("recall-index", "id", n))
            held = sum(1 for e in files if i in e.slot_of)
            if held:
                hits.append(ProbeHit("recall-index-file", "id", held))
            out.append(ProbeResult(self.name, i, self._checked(files), tuple(hits)))
        return out

    @staticmethod
    def _checked(files: Sequence[SubjectIndex]) -> tuple[str, ...]:
        return ("recall-index", "recall-index-file") if files else ("recall-index",)
