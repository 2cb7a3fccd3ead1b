"""RFC 9162 Merkle tree: hashing, a store-backed append-only tree, proofs and pure verifiers.

Hashing (RFC 9162 §2.1.1, same as RFC 6962 §2.1):

* ``leaf_hash(d) = SHA-256(0x00 || d)``
* ``node_hash(l, r) = SHA-256(0x01 || l || r)``
* ``EMPTY_ROOT = SHA-256("")``

The tree keeps every *complete* subtree node in a :class:`TreeStore`, addressed by
``(level, index)``: level 0 holds the leaf hashes, and node ``(k, i)`` is the root of the
perfect subtree over leaves ``[i * 2**k, (i + 1) * 2**k)``; it is written once those
``2**k`` leaves exist and never changes.  Any root, inclusion proof or consistency proof,
for the current size or any earlier one, is folded from ``O(log n)`` of these nodes.

The verifiers (:func:`verify_inclusion`, :func:`verify_consistency`) follow RFC 9162
§2.1.3.2 and §2.1.4.2 step by step, take only bytes and integers, return ``None`` and
raise :class:`ProofError` naming the failed step.  ``docs/spec/checkpoint.md`` ("Merkle
tree") uses the same step numbers.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Sequence
from typing import NoReturn, Protocol, runtime_checkable

from ledger.errors import VerificationFailed

__all__ = [
    "EMPTY_ROOT",
    "HASH_SIZE",
    "EdgeAppender",
    "MemoryTreeStore",
    "MerkleTree",
    "NodeKey",
    "ProofError",
    "TreeStore",
    "appended_nodes",
    "frontier_keys",
    "leaf_hash",
    "node_hash",
    "root_from_leaves",
    "verify_consistency",
    "verify_inclusion",
]

HASH_SIZE = 32
LEAF_PREFIX = b"\x00"
NODE_PREFIX = b"\x01"
EMPTY_ROOT = hashlib.sha256(b"").digest()
# Sizes and indexes travel as unsigned 64-bit integers in RFC 9162 structures.
MAX_TREE_SIZE = (1 << 64) - 1

NodeKey = tuple[int, int]
"""``(level, index)`` of a stored complete-subtree node."""


class ProofError(VerificationFailed, ValueError):
    """A Merkle proof failed verification; ``step`` is the RFC 9162 step that failed.

    A ``ValueError`` for pure callers and a ``VerificationFailed`` for the CLI's exit code.
    """

    def __init__(self, kind: str, step: int, detail: str) -> None:
        self.kind = kind
        self.step = step
        self.detail = detail
        super().__init__(f"{kind} proof step {step}: {detail}")


def leaf_hash(leaf_bytes: bytes) -> bytes:
    """RFC 9162 leaf hash: ``SHA-256(0x00 || leaf_bytes)``."""
    return hashlib.sha256(LEAF_PREFIX + bytes(leaf_bytes)).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """RFC 9162 interior node hash: ``SHA-256(0x01 || left || right)``."""
    return hashlib.sha256(NODE_PREFIX + left + right).digest()


def _hex(value: bytes) -> str:
    """Short hex prefix for error messages."""
    return value[:8].hex() + "…"


def _is_hash(value: object) -> bool:
    return isinstance(value, bytes) and len(value) == HASH_SIZE


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_TREE_SIZE


def _split(width: int) -> int:
    """Largest power of two strictly below ``width`` (``width >= 2``), RFC 9162 §2.1.1."""
    return 1 << ((width - 1).bit_length() - 1)


def root_from_leaves(hashes: Sequence[bytes]) -> bytes:
    """Reference MTH over leaf *hashes*, straight from the recursive RFC 9162 definition.

    Used by tests and full rebuilds; :meth:`MerkleTree.root` is the incremental path.
    """
    for position, value in enumerate(hashes):
        if not _is_hash(value):
            raise ValueError(f"leaf hash at position {position} is not {HASH_SIZE} bytes")
    if not hashes:
        return EMPTY_ROOT

    def mth(start: int, end: int) -> bytes:
        if end - start == 1:
            return hashes[start]
        k = _split(end - start)
        return node_hash(mth(start, start + k), mth(start + k, end))

    return mth(0, len(hashes))


@runtime_checkable
class TreeStore(Protocol):
    """Storage of complete-subtree nodes, keyed by ``(level, index)``.

    Contract (the SQL implementation keeps the same one):

    * ``size()`` is the number of leaves, i.e. of level-0 nodes.
    * ``get_many(keys)`` returns the hashes in the order of ``keys`` and raises
      ``KeyError`` naming the first missing key.
    * ``put_many(nodes)`` writes all nodes or none (one transaction).  Nodes are
      append-only: writing a key that exists with a different hash raises ``ValueError``;
      rewriting the same hash is a no-op.  Nodes of one level arrive in increasing index.
    """

    def size(self) -> int:
        """Number of leaves stored."""
        ...

    def get_many(self, keys: Sequence[NodeKey]) -> list[bytes]:
        """Hashes of ``keys``, in order."""
        ...

    def put_many(self, nodes: Sequence[tuple[NodeKey, bytes]]) -> None:
        """Atomically append ``nodes``."""
        ...


@runtime_checkable
class EdgeAppender(Protocol):
    """A :class:`TreeStore` that appends leaves itself, in one transaction, from the right
    edge it reads (or remembers): :meth:`MerkleTree.extend` hands it the leaves instead
    of reading the frontier with ``get_many`` and writing with ``put_many``."""

    def append_leaves(self, hashes: Sequence[bytes], size: int | None = None) -> int | None:
        """Append leaf hashes after the stored ones; the new size. ``size``: the size the
        tree must have; when it has another, nothing is written and None returned."""
        ...


def frontier_keys(n: int) -> list[NodeKey]:
    """The right edge of a tree of ``n`` leaves: the last complete node of each level
    whose bit is set in ``n``, the only left siblings that leaves appended can need."""
    return [(level, (n >> level) - 1) for level in range(n.bit_length()) if n >> level & 1]


def appended_nodes(n: int, frontier: dict[int, bytes], hashes: Sequence[bytes]
                   ) -> list[tuple[NodeKey, bytes]]:
    """The complete-subtree nodes that appending leaf ``hashes`` to a tree of ``n`` leaves
    adds, level by level in index order; ``frontier``: the hash of each node of
    :func:`frontier_keys` by level (consumed)."""
    new_nodes: list[tuple[NodeKey, bytes]] = []
    for value in hashes:
        level, index, node = 0, n, value
        while True:
            new_nodes.append(((level, index), node))
            if index & 1 == 0:
                frontier[level] = node
                break
            node = node_hash(frontier.pop(level), node)
            level, index = level + 1, index >> 1
        n += 1
    return new_nodes


class MemoryTreeStore:
    """In-memory :class:`TreeStore`: one list of hashes per level."""

    def __init__(self) -> None:
        self._levels: list[list[bytes]] = []

    def size(self) -> int:
        """Number of leaves stored."""
        return len(self._levels[0]) if self._levels else 0

    def get_many(self, keys: Sequence[NodeKey]) -> list[bytes]:
        """Hashes of ``keys``, in order; ``KeyError`` for a node that does not exist."""
        out: list[bytes] = []
        for level, index in keys:
            if not (0 <= level < len(self._levels) and 0 <= index < len(self._levels[level])):
                raise KeyError(f"no Merkle node at level {level} index {index}")
            out.append(self._levels[level][index])
        return out

    def put_many(self, nodes: Sequence[tuple[NodeKey, bytes]]) -> None:
        """Append ``nodes``; checks the whole batch before writing any of it."""
        lengths = [len(level) for level in self._levels]
        appends: list[tuple[int, bytes]] = []
        for (level, index), value in nodes:
            if not _is_hash(value):
                raise ValueError(f"node ({level}, {index}) is not a {HASH_SIZE}-byte hash")
            if level < 0 or index < 0 or level > len(lengths):
                raise ValueError(f"node ({level}, {index}) is out of range")
            if level == len(lengths):
                lengths.append(0)
            stored = len(self._levels[level]) if level < len(self._levels) else 0
            if index == lengths[level]:
                lengths[level] += 1
                appends.append((level, value))
            elif index < stored:
                if self._levels[level][index] != value:
                    raise ValueError(f"node ({level}, {index}) already stored with another hash")
            else:
                raise ValueError(
                    f"node ({level}, {index}) is not the next node of level {level}"
                    f" (expected index {lengths[level]})"
                )
        for level, value in appends:
            if level == len(self._levels):
                self._levels.append([])
            self._levels[level].append(value)


class MerkleTree:
    """Append-only RFC 9162 tree over a :class:`TreeStore`.

    Single writer: callers serialise ``append``/``extend`` (the store's transaction does).
    Every query reads ``O(log n)`` stored nodes in one ``get_many`` call.
    """

    def __init__(self, store: TreeStore) -> None:
        self._store = store

    @property
    def store(self) -> TreeStore:
        """The backing store."""
        return self._store

    def size(self) -> int:
        """Current number of leaves."""
        return self._store.size()

    def append(self, leaf_hash: bytes) -> int:
        """Append one leaf hash; returns its 0-based index."""
        return self.extend([leaf_hash]) - 1

    def extend(self, leaf_hashes: Iterable[bytes], size: int | None = None) -> int:
        """Append leaf hashes in order with one read and one write; returns the new size.

        ``size`` is the store's current size when the caller has just read it (under the
        same single-writer lock), which saves reading it again.
        """
        hashes = list(leaf_hashes)
        for position, value in enumerate(hashes):
            if not _is_hash(value):
                raise ValueError(f"leaf hash at batch position {position} is not {HASH_SIZE} bytes")
        if isinstance(self._store, EdgeAppender):  # one read and one write in all
            appended = self._store.append_leaves(hashes, size)
            if appended is None:
                raise ValueError(f"the stored tree no longer has {size} leaves")
            return appended
        n = self._store.size() if size is None else size
        if not hashes:
            return n
        keys = frontier_keys(n)
        frontier = {level: node for (level, _), node in
                    zip(keys, self._store.get_many(keys), strict=True)}
        self._store.put_many(appended_nodes(n, frontier, hashes))
        return n + len(hashes)

    def _size_arg(self, size: int | None, what: str) -> int:
        current = self._store.size()
        if size is None:
            return current
        if not _is_count(size) or size > current:
            raise ValueError(f"{what} {size!r} is outside 0..{current} (current tree size)")
        return size

    def _range_hashes(self, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """MTH of each leaf range, from stored nodes, with a single ``get_many``.

        Every range comes from the RFC 9162 recursion, so ``start`` is a multiple of the
        smallest power of two >= its width and the range tiles into aligned perfect
        subtrees: one per set bit of the width, largest first.
        """
        plans: list[list[NodeKey]] = []
        wanted: dict[NodeKey, None] = {}
        for start, end in ranges:
            keys: list[NodeKey] = []
            pos, width = start, end - start
            for level in range(width.bit_length() - 1, -1, -1):
                if width >> level & 1:
                    keys.append((level, pos >> level))
                    pos += 1 << level
            plans.append(keys)
            wanted.update(dict.fromkeys(keys))
        order = list(wanted)
        found = dict(zip(order, self._store.get_many(order), strict=True))
        out: list[bytes] = []
        for keys in plans:
            acc = found[keys[-1]]
            for key in reversed(keys[:-1]):
                acc = node_hash(found[key], acc)
            out.append(acc)
        return out

    def root(self, size: int | None = None) -> bytes:
        """MTH of the first ``size`` leaves (default: all)."""
        size = self._size_arg(size, "size")
        if size == 0:
            return EMPTY_ROOT
        return self._range_hashes([(0, size)])[0]

    def inclusion_proof(self, index: int, size: int) -> list[bytes]:
        """RFC 9162 §2.1.3.1 ``PATH(index, D[size])``, deepest sibling first."""
        size = self._size_arg(size, "size")
        if not _is_count(index) or index >= size:
            raise ValueError(f"leaf index {index!r} is outside 0..{size - 1} (size {size})")
        ranges: list[tuple[int, int]] = []
        start, end = 0, size
        while end - start > 1:
            k = _split(end - start)
            if index < start + k:
                ranges.append((start + k, end))
                end = start + k
            else:
                ranges.append((start, start + k))
                start += k
        ranges.reverse()
        return self._range_hashes(ranges)

    def consistency_proof(self, old_size: int, new_size: int) -> list[bytes]:
        """RFC 9162 §2.1.4.1 ``PROOF(old_size, D[new_size])``; empty when sizes are equal or 0."""
        new_size = self._size_arg(new_size, "new size")
        if not _is_count(old_size) or old_size > new_size:
            raise ValueError(f"old size {old_size!r} is outside 0..{new_size} (new size)")
        if old_size in (0, new_size):
            return []
        # Iterative SUBPROOF(m, D[start:end], b).
        ranges: list[tuple[int, int]] = []
        start, end, complete = 0, new_size, True
        while True:
            width, m = end - start, old_size - start
            if m == width:
                if not complete:
                    ranges.append((start, end))
                break
            k = _split(width)
            if m <= k:
                ranges.append((start + k, end))
                end = start + k
            else:
                ranges.append((start, start + k))
                start += k
                complete = False
        ranges.reverse()
        return self._range_hashes(ranges)


def _fail(kind: str, step: int, detail: str) -> NoReturn:
    raise ProofError(kind, step, detail)


def _check_hashes(kind: str, named: Sequence[tuple[str, object]], proof: object) -> list[bytes]:
    """Step 0: every hash is 32 bytes and the proof is a sequence of them."""
    for name, value in named:
        if not _is_hash(value):
            _fail(kind, 0, f"{name} is not a {HASH_SIZE}-byte hash")
    if isinstance(proof, (bytes, bytearray, str)) or not isinstance(proof, Sequence):
        _fail(kind, 0, "proof is not a sequence of hashes")
    path: list[bytes] = []
    for position, value in enumerate(proof):
        if not _is_hash(value):
            _fail(kind, 0, f"proof hash at position {position} is not a {HASH_SIZE}-byte hash")
        path.append(value)
    return path


def verify_inclusion(
    leaf_hash: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes
) -> None:
    """Verify that ``leaf_hash`` is leaf ``index`` of the tree of ``size`` with ``root``.

    RFC 9162 §2.1.3.2; returns ``None``, raises :class:`ProofError` naming the step.
    """
    kind = "inclusion"
    path = _check_hashes(kind, [("leaf hash", leaf_hash), ("root", root)], proof)
    if not _is_count(index) or not _is_count(size):
        _fail(kind, 0, f"index {index!r} and size {size!r} must be integers in 0..2^64-1")
    # 1. leaf_index must be below tree_size.
    if index >= size:
        _fail(kind, 1, f"leaf index {index} is not below tree size {size}")
    # 2. fn = leaf_index, sn = tree_size - 1.
    fn, sn = index, size - 1
    # 3. r = hash.
    r = leaf_hash
    # 4. Fold each proof hash p.
    for position, p in enumerate(path):
        if sn == 0:
            _fail(
                kind, 4,
                f"proof has {len(path)} hashes but the path for index {index} in size {size}"
                f" ends after {position}",
            )
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    # 5. sn must be 0 and r must equal root_hash.
    if sn != 0:
        _fail(
            kind, 5,
            f"proof has {len(path)} hashes, too few for index {index} in size {size}",
        )
    if not hmac.compare_digest(r, root):
        _fail(
            kind, 5,
            f"computed root {_hex(r)} != expected root {_hex(root)}"
            f" (leaf {_hex(leaf_hash)} index {index} size {size})",
        )


def verify_consistency(
    old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> None:
    """Verify that the tree (``new_size``, ``new_root``) extends (``old_size``, ``old_root``).

    RFC 9162 §2.1.4.2 for ``0 < old_size < new_size``; step 0 settles the other cases.
    Returns ``None``, raises :class:`ProofError` naming the step.
    """
    kind = "consistency"
    path = _check_hashes(kind, [("old root", old_root), ("new root", new_root)], proof)
    if not _is_count(old_size) or not _is_count(new_size):
        _fail(kind, 0, f"sizes {old_size!r}, {new_size!r} must be integers in 0..2^64-1")
    if old_size > new_size:
        _fail(kind, 0, f"old size {old_size} is larger than new size {new_size} (rollback)")
    if old_size == new_size or old_size == 0:
        if path:
            _fail(
                kind, 0, f"proof from size {old_size} to {new_size} must be empty, has {len(path)}"
            )
        expected_old = new_root if old_size == new_size else EMPTY_ROOT
        if not hmac.compare_digest(old_root, expected_old):
            _fail(
                kind, 0,
                f"old root {_hex(old_root)} != {_hex(expected_old)} expected for size {old_size}"
                f" (new size {new_size})",
            )
        return
    proof_len = len(path)
    # 1. An empty proof fails.
    if not path:
        _fail(kind, 1, f"proof from size {old_size} to {new_size} is empty")
    # 2. If old_size is an exact power of 2, prepend old_root.
    if old_size & (old_size - 1) == 0:
        path.insert(0, old_root)
    # 3. fn = first - 1, sn = second - 1.
    fn, sn = old_size - 1, new_size - 1
    # 4. While LSB(fn) is set, right-shift fn and sn.
    while fn & 1:
        fn >>= 1
        sn >>= 1
    # 5. fr = sr = first path value.
    fr = sr = path[0]
    # 6. Fold each subsequent value c.
    for position, c in enumerate(path[1:], start=1):
        if sn == 0:
            _fail(
                kind, 6,
                f"proof has {proof_len} hashes but the path from size {old_size} to {new_size}"
                f" ends after {position - len(path) + proof_len}",
            )
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    # 7. sn must be 0, fr must equal old_root and sr must equal new_root.
    if sn != 0:
        _fail(kind, 7, f"proof has {proof_len} hashes, too few for size {old_size} to {new_size}")
    if not hmac.compare_digest(fr, old_root):
        _fail(
            kind, 7,
            f"computed old root {_hex(fr)} != old root {_hex(old_root)} at size {old_size}"
            f" (new size {new_size})",
        )
    if not hmac.compare_digest(sr, new_root):
        _fail(
            kind, 7,
            f"computed new root {_hex(sr)} != new root {_hex(new_root)} at size {new_size}"
            f" (old size {old_size})",
        )
