"""RFC 9162 tree, proofs and verifiers, checked against pymerkle (test-only oracle).

pymerkle 7 ``InmemoryTree`` hashes an entry ``d`` as ``SHA-256(0x00 || d)`` and nodes as
``SHA-256(0x01 || l || r)`` (its default, security on), counts leaves from one and returns
inclusion paths as ``[leaf, sibling_0, sibling_1, ...]``.  Its consistency paths use their
own layout (not RFC 9162's), so for consistency we cross-check the other way round: its
proof must verify, with its own verifier, against *our* roots; our proof is compared with
a recursive RFC 9162 ``SUBPROOF`` written below.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Sequence

import pymerkle
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.merkle import (
    EMPTY_ROOT,
    MemoryTreeStore,
    MerkleTree,
    NodeKey,
    ProofError,
    TreeStore,
    leaf_hash,
    node_hash,
    root_from_leaves,
    verify_consistency,
    verify_inclusion,
)

SMALL = 300
LARGE = 100_000


def entry(i: int) -> bytes:
    return b"entry-%d" % i


def build_tree(n: int, seed: int = 0) -> tuple[MerkleTree, list[bytes]]:
    """Our tree over ``n`` entries, appended in random-sized batches and single appends."""
    hashes = [leaf_hash(entry(i)) for i in range(n)]
    tree = MerkleTree(MemoryTreeStore())
    rng = random.Random(seed)
    pos = 0
    while pos < n:
        step = rng.choice([1, 1, 2, 3, 7, 64, 1000])
        if step == 1:
            tree.append(hashes[pos])
        else:
            tree.extend(hashes[pos : pos + step])
        pos = min(n, pos + step)
    return tree, hashes


def build_pymerkle(n: int) -> pymerkle.InmemoryTree:
    pm = pymerkle.InmemoryTree(algorithm="sha256")
    for i in range(n):
        pm.append_entry(entry(i))
    return pm


def rfc_subproof(m: int, leaves: Sequence[bytes], complete: bool) -> list[bytes]:
    """RFC 9162 §2.1.4.1 SUBPROOF(m, D[n], b), straight from the definition."""
    n = len(leaves)
    if m == n:
        return [] if complete else [root_from_leaves(leaves)]
    k = 1 << ((n - 1).bit_length() - 1)
    if m <= k:
        return [*rfc_subproof(m, leaves[:k], complete), root_from_leaves(leaves[k:])]
    return [*rfc_subproof(m - k, leaves[k:], False), root_from_leaves(leaves[:k])]


@pytest.fixture(scope="module")
def small() -> tuple[MerkleTree, list[bytes], pymerkle.InmemoryTree]:
    tree, hashes = build_tree(SMALL)
    return tree, hashes, build_pymerkle(SMALL)


@pytest.fixture(scope="module")
def large() -> tuple[MerkleTree, list[bytes], pymerkle.InmemoryTree]:
    tree, hashes = build_tree(LARGE, seed=1)
    return tree, hashes, build_pymerkle(LARGE)


def sampled_sizes(rng: random.Random) -> list[int]:
    edges = [s for k in range(1, 17) for s in ((1 << k) - 1, 1 << k, (1 << k) + 1)]
    return sorted({s for s in edges if s <= LARGE} | {rng.randrange(1, LARGE) for _ in range(40)}
                  | {LARGE})


# --- hashing --------------------------------------------------------------------------------


def test_hashing_uses_rfc9162_domain_prefixes() -> None:
    assert leaf_hash(b"abc") == hashlib.sha256(b"\x00abc").digest()
    left, right = b"\x11" * 32, b"\x22" * 32
    assert node_hash(left, right) == hashlib.sha256(b"\x01" + left + right).digest()
    assert EMPTY_ROOT == hashlib.sha256(b"").digest()


def test_rfc6962_known_answer_roots() -> None:
    """Roots of the RFC 6962 / Certificate Transparency reference test leaves."""
    leaves = [bytes.fromhex(h) for h in
              ["", "00", "10", "2021", "3031", "40414243", "5051525354555657",
               "606162636465666768696a6b6c6d6e6f"]]
    expected = [
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
        "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
        "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
        "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
        "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
        "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
    ]
    tree = MerkleTree(MemoryTreeStore())
    tree.extend(leaf_hash(d) for d in leaves)
    assert [tree.root(n).hex() for n in range(1, 9)] == expected


def test_empty_tree_root() -> None:
    tree = MerkleTree(MemoryTreeStore())
    assert tree.root() == EMPTY_ROOT == root_from_leaves([])
    assert tree.size() == 0


# --- agreement with pymerkle and the recursive definition ----------------------------------


def test_roots_match_pymerkle_for_every_size_up_to_300(small: tuple[
        MerkleTree, list[bytes], pymerkle.InmemoryTree]) -> None:
    tree, hashes, pm = small
    for n in range(1, SMALL + 1):
        expected = pm.get_root(n)
        assert tree.root(n) == expected, n
        assert root_from_leaves(hashes[:n]) == expected, n


def test_inclusion_proofs_match_pymerkle_for_every_size_up_to_300(small: tuple[
        MerkleTree, list[bytes], pymerkle.InmemoryTree]) -> None:
    tree, hashes, pm = small
    rng = random.Random(2)
    for n in range(1, SMALL + 1):
        root = tree.root(n)
        indices = range(n) if n <= 64 else {0, n - 1, n // 2, *rng.sample(range(n), 8)}
        for i in indices:
            proof = tree.inclusion_proof(i, n)
            oracle = pm.prove_inclusion(i + 1, n)
            assert oracle.path[0] == hashes[i]
            assert proof == oracle.path[1:], (i, n)
            verify_inclusion(hashes[i], i, n, proof, root)


def test_sampled_sizes_up_to_100000_match_pymerkle(large: tuple[
        MerkleTree, list[bytes], pymerkle.InmemoryTree]) -> None:
    tree, hashes, pm = large
    assert tree.size() == LARGE
    assert tree.root() == root_from_leaves(hashes) == pm.get_root()
    rng = random.Random(3)
    for n in sampled_sizes(rng):
        root = tree.root(n)
        assert root == pm.get_root(n), n
        for i in {0, n - 1, rng.randrange(n)}:
            proof = tree.inclusion_proof(i, n)
            assert proof == pm.prove_inclusion(i + 1, n).path[1:], (i, n)
            verify_inclusion(hashes[i], i, n, proof, root)


def test_consistency_proofs_for_all_pairs_up_to_64(small: tuple[
        MerkleTree, list[bytes], pymerkle.InmemoryTree]) -> None:
    tree, hashes, pm = small
    roots = [tree.root(n) for n in range(65)]
    for n in range(65):
        for m in range(n + 1):
            proof = tree.consistency_proof(m, n)
            if 0 < m < n:
                assert proof == rfc_subproof(m, hashes[:n], True), (m, n)
            else:
                assert proof == []
            verify_consistency(m, n, roots[m], roots[n], proof)
            if m > 0:
                pm.prove_consistency(m, n).verify(roots[m], roots[n])


def test_consistency_proofs_for_sampled_large_pairs(large: tuple[
        MerkleTree, list[bytes], pymerkle.InmemoryTree]) -> None:
    tree, _, pm = large
    rng = random.Random(4)
    sizes = sampled_sizes(rng)
    pairs = {(rng.choice(sizes), rng.choice(sizes)) for _ in range(60)}
    pairs |= {(1, LARGE), (LARGE - 1, LARGE), (1 << 16, LARGE), ((1 << 16) + 1, LARGE)}
    for a, b in sorted(pairs):
        m, n = min(a, b), max(a, b)
        old_root, new_root = tree.root(m), tree.root(n)
        verify_consistency(m, n, old_root, new_root, tree.consistency_proof(m, n))
        pm.prove_consistency(m, n).verify(old_root, new_root)


# --- cost: O(log n) stored nodes per query, one read call -----------------------------------


class CountingStore:
    """Wraps a store and counts ``get_many`` calls and keys."""

    def __init__(self, inner: TreeStore) -> None:
        self.inner = inner
        self.calls = 0
        self.keys = 0

    def size(self) -> int:
        return self.inner.size()

    def get_many(self, keys: Sequence[NodeKey]) -> list[bytes]:
        self.calls += 1
        self.keys += len(keys)
        return self.inner.get_many(keys)

    def put_many(self, nodes: Sequence[tuple[NodeKey, bytes]]) -> None:
        self.inner.put_many(nodes)


def test_every_query_reads_log_n_nodes_in_one_call(large: tuple[
        MerkleTree, list[bytes], pymerkle.InmemoryTree]) -> None:
    big, _, _ = large
    counting = CountingStore(big.store)
    tree = MerkleTree(counting)
    assert isinstance(counting, TreeStore)
    rng = random.Random(6)
    for n in [*sampled_sizes(rng)[::4], LARGE]:
        bound = 2 * math.ceil(math.log2(n + 1)) + 2
        for query in ("root", "inclusion", "consistency"):
            counting.calls = counting.keys = 0
            if query == "root":
                tree.root(n)
            elif query == "inclusion":
                tree.inclusion_proof(rng.randrange(n), n)
            else:
                tree.consistency_proof(rng.randrange(1, n + 1), n)
            assert counting.calls <= 1
            assert counting.keys <= bound, (query, n, counting.keys, bound)


def test_append_reads_only_the_right_edge() -> None:
    counting = CountingStore(MemoryTreeStore())
    tree = MerkleTree(counting)
    tree.extend(leaf_hash(entry(i)) for i in range(1023))
    counting.calls = counting.keys = 0
    tree.append(leaf_hash(entry(1023)))
    assert counting.calls == 1 and counting.keys == 10  # 1023 = ten set bits


# --- store and tree argument checks --------------------------------------------------------


class TreeStoreContract:
    """The TreeStore contract; a backend's tests subclass this and override ``make_store``.

    (``from test_merkle import TreeStoreContract``; the name has no ``Test`` prefix so it
    is only collected through subclasses.)
    """

    def make_store(self) -> TreeStore:
        raise NotImplementedError

    def test_empty_store(self) -> None:
        store = self.make_store()
        assert store.size() == 0
        assert store.get_many([]) == []
        with pytest.raises(KeyError):
            store.get_many([(0, 0)])
        assert MerkleTree(store).root() == EMPTY_ROOT

    def test_incremental_appends_equal_one_batch_rebuild(self) -> None:
        hashes = [leaf_hash(entry(i)) for i in range(1500)]
        incremental = MerkleTree(self.make_store())
        rng = random.Random(5)
        pos = 0
        while pos < len(hashes):
            step = rng.choice([1, 2, 5, 64, 300])
            incremental.extend(hashes[pos : pos + step])
            pos += step
        batch = MerkleTree(self.make_store())
        batch.extend(hashes)
        assert incremental.size() == batch.size() == 1500
        for level in range(11):
            keys = [(level, i) for i in range(1500 >> level)]
            assert incremental.store.get_many(keys) == batch.store.get_many(keys)
        assert incremental.root() == root_from_leaves(hashes)
        with pytest.raises(KeyError):
            incremental.store.get_many([(0, 1500)])
        with pytest.raises(KeyError):
            incremental.store.get_many([(11, 0)])  # 2048 leaves do not exist yet

    def test_rewrite_with_another_hash_rejected_and_nothing_written(self) -> None:
        store = self.make_store()
        MerkleTree(store).extend([leaf_hash(b"a"), leaf_hash(b"b")])
        keys: list[NodeKey] = [(0, 0), (0, 1), (1, 0)]
        before = store.get_many(keys)
        with pytest.raises(ValueError):
            store.put_many([((0, 2), leaf_hash(b"c")), ((0, 0), leaf_hash(b"x"))])
        assert store.size() == 2
        assert store.get_many(keys) == before
        with pytest.raises(KeyError):
            store.get_many([(0, 2)])

    def test_rewrite_with_same_hash_is_a_no_op(self) -> None:
        store = self.make_store()
        MerkleTree(store).extend([leaf_hash(b"a"), leaf_hash(b"b")])
        store.put_many([((0, 0), leaf_hash(b"a")), ((1, 0), node_hash(leaf_hash(b"a"),
                                                                        leaf_hash(b"b")))])
        assert store.size() == 2

    def test_gap_rejected(self) -> None:
        store = self.make_store()
        MerkleTree(store).extend([leaf_hash(b"a")])
        with pytest.raises(ValueError):
            store.put_many([((0, 5), leaf_hash(b"gap"))])
        assert store.size() == 1


class TestMemoryTreeStore(TreeStoreContract):
    def make_store(self) -> TreeStore:
        return MemoryTreeStore()


def test_tree_rejects_out_of_range_queries_and_bad_leaves() -> None:
    tree, _ = build_tree(10)
    for call in (lambda: tree.root(11), lambda: tree.root(-1),
                 lambda: tree.inclusion_proof(10, 10), lambda: tree.inclusion_proof(0, 11),
                 lambda: tree.inclusion_proof(-1, 10), lambda: tree.consistency_proof(6, 5),
                 lambda: tree.consistency_proof(1, 11)):
        with pytest.raises(ValueError):
            call()
    with pytest.raises(ValueError, match="batch position 1"):
        tree.extend([leaf_hash(b"ok"), b"short"])
    assert tree.size() == 10


# --- attacks on inclusion proofs -----------------------------------------------------------


@pytest.fixture(scope="module")
def t20() -> tuple[MerkleTree, list[bytes]]:
    return build_tree(20, seed=7)


def test_inclusion_proof_for_wrong_index_rejected(t20: tuple[MerkleTree, list[bytes]]) -> None:
    tree, hashes = t20
    proof = tree.inclusion_proof(2, 16)
    with pytest.raises(ProofError, match="inclusion proof step 5: computed root") as e:
        verify_inclusion(hashes[2], 3, 16, proof, tree.root(16))
    assert e.value.step == 5


def test_inclusion_proof_for_wrong_leaf_rejected(t20: tuple[MerkleTree, list[bytes]]) -> None:
    tree, hashes = t20
    with pytest.raises(ProofError, match="step 5"):
        verify_inclusion(hashes[4], 3, 20, tree.inclusion_proof(3, 20), tree.root(20))


def test_inclusion_proof_for_other_tree_size_rejected(t20: tuple[MerkleTree, list[bytes]]) -> None:
    """A proof made for size 20 does not verify against the (19, root) checkpoint.

    (size, root) must come from one verified checkpoint: RFC 9162 uses the size only to
    shape the path, so a mismatched pair is not something a verifier can detect.
    """
    tree, hashes = t20
    for index in (5, 17):
        proof = tree.inclusion_proof(index, 20)
        with pytest.raises(ProofError, match="step 5"):
            verify_inclusion(hashes[index], index, 19, proof, tree.root(19))


def test_inclusion_index_beyond_tree_size_rejected(t20: tuple[MerkleTree, list[bytes]]) -> None:
    tree, hashes = t20
    with pytest.raises(ProofError, match="step 1: leaf index 20 is not below tree size 20"):
        verify_inclusion(hashes[0], 20, 20, [], tree.root(20))


def test_truncated_proof_rejected(t20: tuple[MerkleTree, list[bytes]]) -> None:
    tree, hashes = t20
    proof = tree.inclusion_proof(9, 20)
    with pytest.raises(ProofError, match="step 5: proof has 4 hashes, too few"):
        verify_inclusion(hashes[9], 9, 20, proof[:-1], tree.root(20))


def test_padded_inclusion_proof_rejected(t20: tuple[MerkleTree, list[bytes]]) -> None:
    tree, hashes = t20
    proof = tree.inclusion_proof(9, 20)
    with pytest.raises(ProofError, match="step 4: proof has 6 hashes"):
        verify_inclusion(hashes[9], 9, 20, [*proof, hashes[0]], tree.root(20))


def test_interior_node_presented_as_leaf_rejected(t20: tuple[MerkleTree, list[bytes]]) -> None:
    """Second preimage: the 64 bytes under node (1, 0) offered as one leaf's data.

    Without the 0x00/0x01 prefixes its hash would equal the node and the proof of leaf 0 in a
    2-leaf view would verify against the 4-leaf root.
    """
    tree, hashes = t20
    forged_leaf = hashes[0] + hashes[1]
    sibling = node_hash(hashes[2], hashes[3])
    with pytest.raises(ProofError, match="step 5: computed root"):
        verify_inclusion(leaf_hash(forged_leaf), 0, 2, [sibling], tree.root(4))


def test_inclusion_proof_against_forked_root_rejected(t20: tuple[MerkleTree, list[bytes]]) -> None:
    tree, hashes = t20
    fork, _ = build_tree(0)
    fork.extend([*hashes[:10], leaf_hash(b"forged"), *hashes[11:]])
    with pytest.raises(ProofError, match="step 5"):
        verify_inclusion(hashes[3], 3, 20, tree.inclusion_proof(3, 20), fork.root(20))


def test_malformed_hash_length_rejected(t20: tuple[MerkleTree, list[bytes]]) -> None:
    tree, hashes = t20
    proof = tree.inclusion_proof(1, 20)
    with pytest.raises(ProofError, match="step 0: proof hash at position 2"):
        verify_inclusion(hashes[1], 1, 20, [*proof[:2], proof[2][:31], *proof[3:]], tree.root(20))
    with pytest.raises(ProofError, match="step 0: root"):
        verify_inclusion(hashes[1], 1, 20, proof, tree.root(20) + b"\x00")


# --- attacks on consistency proofs ---------------------------------------------------------


def test_consistency_proof_from_forked_tree_rejected(t20: tuple[MerkleTree, list[bytes]]) -> None:
    """The log showed checkpoint (13, root) to one auditor and extended a different history."""
    tree, hashes = t20
    fork, _ = build_tree(0)
    fork.extend([*hashes[:12], leaf_hash(b"fork"), *hashes[13:]])
    with pytest.raises(ProofError, match="consistency proof step 7: computed old root") as e:
        verify_consistency(13, 20, tree.root(13), fork.root(20), fork.consistency_proof(13, 20))
    assert e.value.step == 7


def test_consistency_proof_after_deleted_entry_rejected(t20: tuple[
        MerkleTree, list[bytes]]) -> None:
    tree, hashes = t20
    rewritten, _ = build_tree(0)
    rewritten.extend([*hashes[:6], *hashes[7:], leaf_hash(b"padding")])  # entry 6 deleted
    with pytest.raises(ProofError, match="step 7"):
        verify_consistency(
            11, 20, tree.root(11), rewritten.root(20), rewritten.consistency_proof(11, 20)
        )


def test_consistency_proof_after_reordered_entries_rejected(t20: tuple[
        MerkleTree, list[bytes]]) -> None:
    tree, hashes = t20
    swapped = list(hashes)
    swapped[2], swapped[3] = swapped[3], swapped[2]
    rewritten = MerkleTree(MemoryTreeStore())
    rewritten.extend(swapped)
    with pytest.raises(ProofError, match="step 7"):
        verify_consistency(8, 20, tree.root(8), rewritten.root(20),
                           rewritten.consistency_proof(8, 20))


def test_rollback_to_smaller_size_rejected(t20: tuple[MerkleTree, list[bytes]]) -> None:
    tree, _ = t20
    with pytest.raises(ProofError, match="step 0: old size 20 is larger than new size 12"):
        verify_consistency(20, 12, tree.root(20), tree.root(12), [])


def test_split_view_at_same_size_rejected(t20: tuple[MerkleTree, list[bytes]]) -> None:
    tree, hashes = t20
    fork = MerkleTree(MemoryTreeStore())
    fork.extend([*hashes[:19], leaf_hash(b"other")])
    with pytest.raises(ProofError, match="step 0: old root"):
        verify_consistency(20, 20, tree.root(20), fork.root(20), [])


def test_consistency_from_empty_tree_needs_empty_root(t20: tuple[MerkleTree, list[bytes]]) -> None:
    tree, _ = t20
    verify_consistency(0, 20, EMPTY_ROOT, tree.root(20), [])
    with pytest.raises(ProofError, match="step 0"):
        verify_consistency(0, 20, tree.root(1), tree.root(20), [])


def test_empty_consistency_proof_rejected(t20: tuple[MerkleTree, list[bytes]]) -> None:
    tree, _ = t20
    with pytest.raises(ProofError, match="step 1: proof from size 8 to 20 is empty"):
        verify_consistency(8, 20, tree.root(8), tree.root(20), [])


def test_truncated_consistency_proof_rejected(t20: tuple[MerkleTree, list[bytes]]) -> None:
    tree, _ = t20
    proof = tree.consistency_proof(7, 20)
    with pytest.raises(ProofError, match="step 7: proof has 5 hashes, too few"):
        verify_consistency(7, 20, tree.root(7), tree.root(20), proof[:-1])


def test_padded_consistency_proof_rejected(t20: tuple[MerkleTree, list[bytes]]) -> None:
    tree, hashes = t20
    proof = tree.consistency_proof(7, 20)
    with pytest.raises(ProofError, match="step 6: proof has 7 hashes"):
        verify_consistency(7, 20, tree.root(7), tree.root(20), [*proof, hashes[0]])


def test_reordered_consistency_proof_rejected(t20: tuple[MerkleTree, list[bytes]]) -> None:
    tree, _ = t20
    proof = tree.consistency_proof(7, 20)
    with pytest.raises(ProofError, match="step 7"):
        verify_consistency(7, 20, tree.root(7), tree.root(20), [proof[1], proof[0], *proof[2:]])


# --- property: every single bit flip fails --------------------------------------------------

FLIP_TREE, FLIP_HASHES = build_tree(700, seed=8)


def flip(value: bytes, bit: int) -> bytes:
    out = bytearray(value)
    out[bit // 8 % len(out)] ^= 1 << (bit % 8)
    return bytes(out)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), n=st.integers(1, 700), bit=st.integers(0, 255))
def test_any_bit_flip_in_inclusion_proof_leaf_or_root_fails(
    data: st.DataObject, n: int, bit: int
) -> None:
    i = data.draw(st.integers(0, n - 1))
    leaf, root = FLIP_HASHES[i], FLIP_TREE.root(n)
    proof = FLIP_TREE.inclusion_proof(i, n)
    verify_inclusion(leaf, i, n, proof, root)
    target = data.draw(st.integers(-2, len(proof) - 1))
    if target == -2:
        leaf = flip(leaf, bit)
    elif target == -1:
        root = flip(root, bit)
    else:
        proof[target] = flip(proof[target], bit)
    with pytest.raises(ProofError):
        verify_inclusion(leaf, i, n, proof, root)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), n=st.integers(2, 700), bit=st.integers(0, 255))
def test_any_bit_flip_in_consistency_proof_or_roots_fails(
    data: st.DataObject, n: int, bit: int
) -> None:
    m = data.draw(st.integers(1, n))
    old_root, new_root = FLIP_TREE.root(m), FLIP_TREE.root(n)
    proof = FLIP_TREE.consistency_proof(m, n)
    verify_consistency(m, n, old_root, new_root, proof)
    target = data.draw(st.integers(-2, len(proof) - 1))
    if target == -2:
        old_root = flip(old_root, bit)
    elif target == -1:
        new_root = flip(new_root, bit)
    else:
        proof[target] = flip(proof[target], bit)
    with pytest.raises(ProofError):
        verify_consistency(m, n, old_root, new_root, proof)
