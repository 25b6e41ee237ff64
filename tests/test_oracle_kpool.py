"""The KPool / DSA indexer row of the correctness matrix (TESTING.md), on the float64 oracle (SPEC §8).

Dims are SPEC §13's tiny ones: D=32, r_q=16, H_i=16, d_i=8, topk=8, P_k=4 (so k_sel <= 2 and real
sparsity starts at T = topk + P_k = 12). 16 indexer heads keep exact score ties away (SPEC §12
pitfall 1); the per-query loop `_arbiter` is the per-element path the vectorized `dsa.index` is
checked against (STYLE 3).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from invariants.contracts import float64_tolerance
from oracle import dsa
from oracle.config import Geometry
from oracle.types import IndexerWeights, Selection

D, R_Q, H_I, D_I, TOPK, KPOOL = 32, 16, 16, 8, 8, 4
SHORT_FORMULA, SAME_MATH = float64_tolerance("short_formula"), float64_tolerance("same_math")
BOUNDARY_LENGTHS = list(range(1, 10)) + [11, 12, 13, 23, 63, 64, 65]


def indexer_weights(rng, *, topk=TOPK, kpool=KPOOL, heads=H_I, head_dim=D_I, hidden=D, q_rank=R_Q,
                    always_select_tail=True) -> IndexerWeights:
    """Random indexer with the inert defaults (gate 1, ape 0, norm 1/0) randomized (SPEC §13)."""
    def n(*shape):
        return rng.normal(size=shape) / math.sqrt(shape[-1])
    return IndexerWeights(
        wq_b=n(heads * head_dim, q_rank), wk=n(head_dim, hidden),
        k_norm_weight=1 + 0.1 * rng.normal(size=head_dim), k_norm_bias=0.5 * rng.normal(size=head_dim),
        weights_proj=n(heads, hidden), compress_gate=n(head_dim, hidden),
        compress_ape=0.5 * rng.normal(size=(kpool, head_dim)),
        n_heads=heads, head_dim=head_dim, topk=topk, kpool=kpool,
        always_select_tail=always_select_tail)


def inputs(rng, batch, length, iw, mask=None):
    """(a [B,S,D], q_lat [B,S,r_q], packed [B,S,2d_i+1]) for a prefill of `length` tokens."""
    a = rng.normal(size=(batch, length, iw.wk.shape[1]))
    q_lat = rng.normal(size=(batch, length, iw.wq_b.shape[1]))
    return a, q_lat, dsa.index_rows(iw, a, mask)


def prefix(T, S):
    """The full causal prefix of every query: [{0..pos(s)}]."""
    return [set(range(T - S + s + 1)) for s in range(S)]


# ----------------------------------------------------------------------------- the arbiter


def _arbiter(iw, a, q_lat, packed, mask=None):
    """SPEC §8.2-8.7 one query at a time with Python loops; same tie rule (lowest pool first)."""
    B, S, _ = a.shape
    T = packed.shape[1]
    Pk, di = iw.kpool, iw.head_dim
    kI, gsc, val = packed[..., :di], packed[..., di:2 * di], packed[..., 2 * di] > 0.5
    firsts = [next((t for t in range(T) if val[b, t]), T) for b in range(B)]
    n_p = -(-T // Pk)

    def members(b, p):
        return [firsts[b] + p * Pk + m for m in range(Pk)]

    def valid(b, p):
        return all(i < T and val[b, i] for i in members(b, p))

    kept = [p for p in range(n_p) if any(valid(b, p) for b in range(B))]
    k_sel = min(iw.topk // Pk, len(kept))
    out = []
    for b in range(B):
        kbar = {}
        for p in kept:
            bar = np.zeros(di)
            for c in range(di):
                lam = [gsc[b, i, c] + iw.compress_ape[m, c] if i < T and val[b, i] else -math.inf
                       for m, i in enumerate(members(b, p))]
                top = max(lam)
                if top == -math.inf:
                    continue
                e = [math.exp(x - top) for x in lam]
                bar[c] = sum(e[m] / sum(e) * kI[b, i, c] for m, i in enumerate(members(b, p)) if e[m])
            kbar[p] = bar
        row = []
        for s in range(S):
            pos = T - S + s
            if mask is not None and not mask[b, s]:
                row.append(set())
                continue
            qI = (q_lat[b, s] @ iw.wq_b.T).reshape(iw.n_heads, di)
            wts = (a[b, s] @ iw.weights_proj.T) / math.sqrt(iw.n_heads)
            ranked = []
            for p in kept:
                cand = valid(b, p) and members(b, p)[-1] <= pos
                score = sum(wts[j] * max(0.0, float(qI[j] @ kbar[p]) / math.sqrt(di))
                            for j in range(iw.n_heads)) if cand else -math.inf
                ranked.append((-score, p, cand))
            ranked.sort()
            chosen = set()
            for _, p, cand in ranked[:k_sel]:
                if cand:
                    chosen |= set(members(b, p))
            n_vis = sum(1 for t in range(pos + 1) if val[b, t])
            tau = n_vis % Pk
            if iw.always_select_tail and Pk > 1:
                chosen |= {t for t in (firsts[b] + n_vis - tau + o for o in range(tau))
                           if t < T and t <= pos and val[b, t]}
            row.append(chosen)
        out.append(row)
    return out


@pytest.mark.parametrize("length", BOUNDARY_LENGTHS)
def test_index_matches_arbiter(length):
    rng = np.random.default_rng(100 + length)
    iw = indexer_weights(rng)
    a, q_lat, packed = inputs(rng, 2, length, iw)
    sel = dsa.index(iw, a, q_lat, packed)
    assert dsa.selected_sets(sel) == _arbiter(iw, a, q_lat, packed)


@pytest.mark.parametrize("past,length", [(12, 1), (20, 3), (63, 2), (9, 14)])
def test_index_continuation_matches_arbiter(past, length):
    """Queries are the LAST S of T cached rows: pos(s) = T - S + s."""
    rng = np.random.default_rng(past * 7 + length)
    iw = indexer_weights(rng)
    _, _, old = inputs(rng, 2, past, iw)
    a, q_lat, new = inputs(rng, 2, length, iw)
    packed = np.concatenate([old, new], axis=1)
    sel = dsa.index(iw, a, q_lat, packed)
    assert dsa.selected_sets(sel) == _arbiter(iw, a, q_lat, packed)


# ----------------------------------------------------------------------------- dense vs sparse


@pytest.mark.parametrize("length", list(range(1, 12)))
def test_index_dense_below_budget(length):
    """T < topk + P_k: every query sees exactly its causal prefix (SPEC §8.7 consequences)."""
    rng = np.random.default_rng(length)
    iw = indexer_weights(rng)
    a, q_lat, packed = inputs(rng, 2, length, iw)
    sets = dsa.selected_sets(dsa.index(iw, a, q_lat, packed))
    assert sets == [prefix(length, length)] * 2


@pytest.mark.parametrize("length", [12, 13, 23, 63, 64, 65])
def test_index_sparse_at_budget(length):
    """T >= topk + P_k: the late queries see at most topk + P_k - 1 tokens, fewer than their prefix."""
    rng = np.random.default_rng(length)
    iw = indexer_weights(rng)
    a, q_lat, packed = inputs(rng, 2, length, iw)
    sets = dsa.selected_sets(dsa.index(iw, a, q_lat, packed))
    for row in sets:
        assert all(len(sel) <= iw.slots for sel in row)
        assert len(row[-1]) < length
        assert any(len(sel) < s + 1 for s, sel in enumerate(row))


def test_index_tail_always_selected():
    """The current incomplete pool (n_vis mod P_k tokens) is always there, exactly (not off by one)."""
    rng = np.random.default_rng(5)
    iw = indexer_weights(rng)
    T = 65
    a, q_lat, packed = inputs(rng, 2, T, iw)
    for row in dsa.selected_sets(dsa.index(iw, a, q_lat, packed)):
        for pos, sel in enumerate(row):
            start = (pos + 1) // KPOOL * KPOOL
            tail = set(range(start, pos + 1))
            assert tail <= sel
            # nothing at or after the start of the current pool besides the tail
            assert {t for t in sel if t >= start} == tail


def test_index_no_tail_when_disabled():
    rng = np.random.default_rng(6)
    iw = indexer_weights(rng, always_select_tail=False)
    a, q_lat, packed = inputs(rng, 1, 23, iw)
    for pos, sel in enumerate(dsa.selected_sets(dsa.index(iw, a, q_lat, packed))[0]):
        assert all(t < (pos + 1) // KPOOL * KPOOL for t in sel)


def test_index_complete_current_pool_not_forced():
    """τ = 0: the query's own (complete) pool is attended only if it wins the top-k (SPEC §8.7)."""
    T = 16
    iw = dataclass_with(indexer_weights(np.random.default_rng(0)),
                        wq_b=_one_hot_rows(H_I, D_I, R_Q), weights_proj=np.ones((H_I, D)) / D)
    kI = np.zeros((1, T, D_I))
    # pools 0, 1, 2 have keys 1, 2, 3 along channel 0; pool 3 (the query's own) has key 0: score 0
    kI[0, :12, 0] = np.repeat([1.0, 2.0, 3.0], KPOOL)
    gsc = np.random.default_rng(1).normal(size=(1, T, D_I))
    packed = np.concatenate([kI, gsc, np.ones((1, T, 1))], axis=-1)
    a, q_lat = np.ones((1, T, D)), np.ones((1, T, R_Q))
    sel = dsa.index(iw, a, q_lat, packed)
    assert sel.scores[0, -1, 3] == 0.0 and sel.candidate[0, -1].all()
    assert np.all(sel.scores[0, -1, :3] > 0)
    sets = dsa.selected_sets(sel)[0]
    assert sets[15] == set(range(4, 12))                # pools 2 and 1; not 12..15, not the query itself
    assert sets[14] == set(range(4, 12)) | {12, 13, 14}  # the incomplete pool as tail
    assert list(sel.indices[0, 15, :8]) == [8, 9, 10, 11, 4, 5, 6, 7]   # best pool first


def test_index_ties_prefer_the_lowest_pool():
    """Exact score ties go to the lowest pool index (stable sort); torch.topk is not tie-stable."""
    T = 16
    iw = dataclass_with(indexer_weights(np.random.default_rng(0)),
                        wq_b=_one_hot_rows(H_I, D_I, R_Q), weights_proj=np.ones((H_I, D)) / D)
    kI = np.zeros((1, T, D_I))
    kI[0, :, 0] = 1.0                                      # every pool's K̄ = e_0: four equal scores
    packed = np.concatenate([kI, np.zeros((1, T, D_I)), np.ones((1, T, 1))], axis=-1)
    sel = dsa.index(iw, np.ones((1, T, D)), np.ones((1, T, R_Q)), packed)
    assert np.all(sel.scores[0, -1] == sel.scores[0, -1, 0])
    assert list(sel.indices[0, 15]) == [0, 1, 2, 3, 4, 5, 6, 7, -1, -1, -1]
    assert list(sel.indices[0, 14]) == [0, 1, 2, 3, 4, 5, 6, 7, 12, 13, 14]


def dataclass_with(w, **changes):
    return dataclasses.replace(w, **changes)


def _one_hot_rows(heads, head_dim, q_rank):
    """wq_b making every head's qI = (Σ q_lat, 0, ..., 0)."""
    wq = np.zeros((heads * head_dim, q_rank))
    wq[::head_dim] = 1.0 / q_rank
    return wq


# ----------------------------------------------------------------------------- anchoring, padding


@pytest.mark.parametrize("pad,length", [(1, 13), (2, 23), (3, 9), (5, 64), (4, 65)])
def test_index_left_padding_anchor(pad, length):
    """A left-padded row selects the unpadded row's tokens, shifted: pools start at its first real token."""
    rng = np.random.default_rng(pad * 100 + length)
    iw = indexer_weights(rng)
    a_u, q_u, packed_u = inputs(rng, 1, length, iw)
    ref = dsa.selected_sets(dsa.index(iw, a_u, q_u, packed_u))[0]
    # row 0: garbage (not zeros: DSA does not zero padding) then the same tokens; row 1: all real
    T = pad + length
    a = rng.normal(size=(2, T, D))
    q_lat = rng.normal(size=(2, T, R_Q))
    a[0, pad:], q_lat[0, pad:] = a_u[0], q_u[0]
    mask = np.ones((2, T), dtype=bool)
    mask[0, :pad] = False
    sel = dsa.index(iw, a, q_lat, dsa.index_rows(iw, a, mask), mask)
    assert sel.pool_first.tolist() == [pad, 0]
    got = dsa.selected_sets(sel)[0]
    assert got[:pad] == [set()] * pad
    assert got[pad:] == [{t + pad for t in s} for s in ref]
    assert np.all(sel.indices[0, :pad] == -1)
    assert dsa.selected_sets(sel) == _arbiter(iw, a, q_lat, dsa.index_rows(iw, a, mask), mask)


def test_index_padded_queries_all_minus_one():
    """Padded queries anywhere (left, middle, right) have rows of -1 only."""
    rng = np.random.default_rng(8)
    iw = indexer_weights(rng)
    mask = np.ones((3, 20), dtype=bool)
    mask[0, :3] = False
    mask[1, 17:] = False
    mask[2, 5:7] = False
    a, q_lat, packed = inputs(rng, 3, 20, iw, mask)
    sel = dsa.index(iw, a, q_lat, packed, mask)
    assert np.all(sel.indices[~mask] == -1)
    assert np.all((sel.indices[mask] >= 0).any(axis=-1))
    assert dsa.selected_sets(sel) == _arbiter(iw, a, q_lat, packed, mask)
    # mask=None takes the padding from the valid flags of the packed rows
    assert np.array_equal(dsa.index(iw, a, q_lat, packed).indices, sel.indices)


# ----------------------------------------------------------------------------- output contract


def test_index_width():
    """Width topk + P_k - 1 (2051 at full size), not topk."""
    full = Geometry.preset("full")
    assert full.index_slots == dsa.slots(full.index_topk, full.index_kpool) == 2051
    assert Geometry.preset("tiny").index_slots == dsa.slots(TOPK, KPOOL) == 11
    rng = np.random.default_rng(9)
    for topk, kpool in ((TOPK, KPOOL), (full.index_topk, full.index_kpool), (8, 1), (16, 8)):
        iw = indexer_weights(rng, topk=topk, kpool=kpool)
        a, q_lat, packed = inputs(rng, 2, 13, iw)
        sel = dsa.index(iw, a, q_lat, packed)
        assert sel.indices.shape == (2, 13, topk + kpool - 1) == (2, 13, iw.slots)
        assert sel.indices.dtype == np.int64


@pytest.mark.parametrize("length", [4, 13, 64, 65])
def test_index_indices_valid_and_unique(length):
    rng = np.random.default_rng(10 + length)
    iw = indexer_weights(rng)
    mask = np.ones((2, length), dtype=bool)
    mask[1, :2] = False
    a, q_lat, packed = inputs(rng, 2, length, iw, mask)
    sel = dsa.index(iw, a, q_lat, packed, mask)
    for b in range(2):
        for s in range(length):
            row = sel.indices[b, s]
            real = row[row >= 0]
            assert len(set(real.tolist())) == len(real)           # unique
            assert np.all(row[len(real):] == -1)                   # -1 only as padding at the end
            assert np.all(real <= s) and np.all(mask[b, real])     # causal and real
            assert len(real) <= iw.slots


def test_candidates_visible_by_last_token():
    """Pool p is a candidate for pos iff its LAST member 4p+3 <= pos (not its first)."""
    rng = np.random.default_rng(11)
    iw = indexer_weights(rng)
    T = 23
    a, q_lat, packed = inputs(rng, 1, T, iw)
    sel = dsa.index(iw, a, q_lat, packed)
    P = T // KPOOL
    want = (KPOOL * np.arange(P) + KPOOL - 1)[None, :] <= np.arange(T)[:, None]
    assert np.array_equal(sel.candidate[0], want)
    assert np.all(np.isneginf(sel.scores[0][~want])) and np.all(np.isfinite(sel.scores[0][want]))
    assert sel.k_sel == min(TOPK // KPOOL, P)
    assert sel.kept.tolist() == [True] * P + [False]


def test_pool_keys_per_channel_softmax():
    """K̄ is a per-channel softmax over members of gsc + ape, not a mean and not one gate per token."""
    T, di, kpool = 4, 2, 4
    kI = np.array([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0], [4.0, 40.0]])
    # channel 0 favours member 3, channel 1 favours member 0
    gsc = np.array([[0.0, 5.0], [0.0, 0.0], [0.0, 0.0], [5.0, 0.0]])
    ape = np.array([[0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 1.0]])
    packed = np.concatenate([kI, gsc, np.ones((T, 1))], axis=-1)[None]
    kbar, member_idx, pool_valid, first, kept = dsa.pool_keys(packed, ape, kpool)
    lam = gsc + ape
    pi = np.exp(lam) / np.exp(lam).sum(axis=0)
    assert np.allclose(kbar[0, 0], (pi * kI).sum(axis=0), rtol=SHORT_FORMULA, atol=0)
    assert not np.allclose(kbar[0, 0], kI.mean(axis=0), atol=1e-2)
    assert kbar[0, 0, 0] > 3.9 and kbar[0, 0, 1] < 11.0
    assert member_idx.tolist() == [[[0, 1, 2, 3]]] and pool_valid.tolist() == [[True]]
    assert first.tolist() == [0] and kept.tolist() == [True]


def test_pool_keys_empty_and_partial_pools():
    """Row 1 left-padded by 2: its pools start at 2; pool 1 is valid only in row 0 but kept; NaN-free."""
    rng = np.random.default_rng(12)
    T = 8
    packed = rng.normal(size=(2, T, 2 * D_I + 1))
    packed[..., -1] = 1.0
    packed[1, :2, -1] = 0.0
    kbar, member_idx, pool_valid, first, kept = dsa.pool_keys(packed, np.zeros((KPOOL, D_I)), KPOOL)
    assert first.tolist() == [0, 2] and kept.tolist() == [True, True]
    assert pool_valid.tolist() == [[True, True], [True, False]]
    assert member_idx[1].tolist() == [[2, 3, 4, 5], [6, 7, 8, 9]]
    assert np.all(np.isfinite(kbar))
    packed[1, :, -1] = 0.0                                          # a row with no real token
    kbar, _, pool_valid, first, _ = dsa.pool_keys(packed, np.zeros((KPOOL, D_I)), KPOOL)
    assert first.tolist() == [0, T] and not pool_valid[1].any() and np.all(kbar[1] == 0)


def test_scores_signed_head_weights():
    """I = Σ_j w_j relu(q·K̄ / sqrt(d_i)), w = weights_proj(a)/sqrt(H_i) signed: negative heads lower I."""
    rng = np.random.default_rng(13)
    iw = indexer_weights(rng)
    a, q_lat, packed = inputs(rng, 1, 23, iw)
    kbar = dsa.pool_keys(packed, iw.compress_ape, KPOOL)[0]
    I = dsa.scores(iw, q_lat, a, kbar)
    qI = (q_lat @ iw.wq_b.T).reshape(1, 23, H_I, D_I)
    wts = a @ iw.weights_proj.T / math.sqrt(H_I)
    assert (wts < 0).any() and (wts > 0).any()
    want = np.zeros_like(I)
    for s in range(23):
        for p in range(kbar.shape[1]):
            want[0, s, p] = sum(wts[0, s, j] * max(0.0, qI[0, s, j] @ kbar[0, p] / math.sqrt(D_I))
                                for j in range(H_I))
    assert np.allclose(I, want, rtol=SAME_MATH, atol=SHORT_FORMULA)
    assert (I < 0).any()
    # flipping every head weight flips the ranking: the best pool becomes the worst
    flipped = dsa.scores(dataclass_with(iw, weights_proj=-iw.weights_proj), q_lat, a, kbar)
    assert np.allclose(flipped, -I, rtol=SHORT_FORMULA, atol=0)
    sel_pos = dsa.index(iw, a, q_lat, packed)
    sel_neg = dsa.index(dataclass_with(iw, weights_proj=-iw.weights_proj), a, q_lat, packed)
    assert dsa.selected_sets(sel_pos)[0][-1] != dsa.selected_sets(sel_neg)[0][-1]


def test_shared_is_the_previous_selection():
    rng = np.random.default_rng(14)
    iw = indexer_weights(rng)
    a, q_lat, packed = inputs(rng, 1, 13, iw)
    sel = dsa.index(iw, a, q_lat, packed)
    assert dsa.shared(sel) is sel


# ----------------------------------------------------------------------------- bad inputs


def _bad_calls():
    """Validation and the oracle's own helpers; the dsa namespace's refusals are invariants/dsa_checks.py
    BAD_CALLS (tests/test_bad_calls.py)."""
    rng = np.random.default_rng(15)
    iw = indexer_weights(rng)
    a, q_lat, packed = inputs(rng, 2, 6, iw)
    sel = dsa.index(iw, a, q_lat, packed)
    return {
        "IndexerWeights(topk=8, kpool=3).validate()": (
            lambda: indexer_weights(rng, topk=8, kpool=3).validate(), r"IndexerWeights\.topk"),
        "IndexerWeights(compress_ape [3, d_i]).validate()": (
            lambda: dataclass_with(iw, compress_ape=np.zeros((3, D_I))).validate(),
            r"IndexerWeights\.compress_ape"),
        "check_indices(width topk, not topk + P_k - 1)": (
            lambda: dsa.check_indices(sel.indices[..., :TOPK], 2, 6, 6, iw.slots),
            r"^indices: width 8, expected topk \+ P_k - 1 = 11"),
        "check_indices(position >= T)": (
            lambda: dsa.check_indices(sel.indices + 6, 2, 6, 6), r"^indices: entries"),
        "check_indices(float dtype)": (
            lambda: dsa.check_indices(sel.indices.astype(float), 2, 6, 6), r"^indices: expected an integer"),
        "check_indices(wrong [B, S])": (
            lambda: dsa.check_indices(sel.indices[:, :5], 2, 6, 6), r"^indices: expected \[B=2, S=6"),
        "shared(indices array instead of a Selection)": (
            lambda: dsa.shared(sel.indices), r"^prev"),
    }


BAD = _bad_calls()


@pytest.mark.parametrize("fn, message", list(BAD.values()), ids=list(BAD))
def test_bad_inputs(fn, message):
    with pytest.raises(ValueError, match=message):
        fn()


def test_selection_is_a_namedtuple_of_the_documented_shapes():
    rng = np.random.default_rng(16)
    iw = indexer_weights(rng)
    a, q_lat, packed = inputs(rng, 2, 23, iw)
    sel = dsa.index(iw, a, q_lat, packed)
    assert isinstance(sel, Selection)
    P = 23 // KPOOL
    assert sel.scores.shape == sel.candidate.shape == (2, 23, P)
    assert sel.candidate.dtype == bool and sel.pool_first.shape == (2,) and sel.kept.shape == (6,)
    assert sel.map(np.copy).k_sel == sel.k_sel == 2


def test_as_set_keeps_each_position_once_in_order():
    """oracle.dsa.as_set: a row's repeats become -1 and move to the end; first occurrences keep their order
    (a selection with mask holes repeats its tail's tokens: SPEC §8.7, "duplicates harmless")."""
    rows = np.array([[[12, 13, 14, 15, 12, 13, -1], [0, -1, 3, 0, 3, 5, -1]]])
    got = dsa.as_set(rows)
    np.testing.assert_array_equal(got, [[[12, 13, 14, 15, -1, -1, -1], [0, 3, 5, -1, -1, -1, -1]]])
    np.testing.assert_array_equal(dsa.as_set(got), got)
