"""The MLA row of the correctness matrix (TESTING.md), on the float64 oracle (SPEC §7, §10).

Dims are SPEC §13's tiny ones: D=32, H=2, d_n=d_v=8, r_q=r_kv=16, indexer H_i=16, d_i=8, topk=8,
P_k=4. The full-size scale (d_n = 256 -> 1/16) is checked on a one-head layer of that width.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import scipy.special

from invariants.contracts import float64_tolerance
from oracle import dsa, mla
from oracle.types import IndexerWeights, MLAWeights, Selection

D, H, DN, DV, R_Q, R_KV = 32, 2, 8, 8, 16, 16
H_I, D_I, TOPK, KPOOL = 16, 8, 8, 4
EPS = 1e-5
SHORT_FORMULA, SHORT_REDUCTION = float64_tolerance("short_formula"), float64_tolerance("short_reduction")
SAME_MATH = float64_tolerance("same_math")


def _n(rng, *shape):
    return rng.normal(size=shape) / math.sqrt(shape[-1])


def mla_weights(rng, *, heads=H, nope=DN, v=DV, q_rank=R_Q, kv_rank=R_KV, hidden=D,
                bias=False) -> MLAWeights:
    """Random MLA weights; norm weights 1 + N(0, 0.1²) (SPEC §13)."""
    def b(n):
        return 0.3 * rng.normal(size=n) if bias else None
    return MLAWeights(
        q_a_proj=_n(rng, q_rank, hidden), q_a_layernorm=1 + 0.1 * rng.normal(size=q_rank),
        q_b_proj=_n(rng, heads * nope, q_rank), kv_a_proj_with_mqa=_n(rng, kv_rank, hidden),
        kv_a_layernorm=1 + 0.1 * rng.normal(size=kv_rank),
        kv_b_proj=2 * _n(rng, heads * (nope + v), kv_rank), o_proj=_n(rng, hidden, heads * v),
        num_heads=heads, nope_dim=nope, v_dim=v, eps=EPS,
        q_a_bias=b(q_rank), kv_a_bias=b(kv_rank), o_bias=b(hidden))


def indexer_weights(rng) -> IndexerWeights:
    return IndexerWeights(
        wq_b=_n(rng, H_I * D_I, R_Q), wk=_n(rng, D_I, D),
        k_norm_weight=1 + 0.1 * rng.normal(size=D_I), k_norm_bias=0.5 * rng.normal(size=D_I),
        weights_proj=_n(rng, H_I, D), compress_gate=_n(rng, D_I, D),
        compress_ape=0.5 * rng.normal(size=(KPOOL, D_I)),
        n_heads=H_I, head_dim=D_I, topk=TOPK, kpool=KPOOL)


def causal_indices(B, S, T):
    """Every query's full causal prefix as a [B, S, T] selection (-1 padded)."""
    pos = T - S + np.arange(S)
    t = np.arange(T)
    return np.broadcast_to(np.where(t[None, :] <= pos[:, None], t[None, :], -1), (B, S, T)).copy()


def assert_close(got, want, rtol=SAME_MATH, what=""):
    scale = max(1.0, float(np.abs(want[np.isfinite(want)]).max(initial=0.0)))
    finite = np.isfinite(want)
    assert np.array_equal(finite, np.isfinite(got)), f"{what}: -inf pattern differs"
    assert np.array_equal(got[~finite], want[~finite]), f"{what}: non-finite entries differ"
    err = float(np.abs(got[finite] - want[finite]).max(initial=0.0))
    assert err <= rtol * scale, f"{what}: max abs err {err:.3e} > {rtol:.0e} x {scale:.3g}"


# ----------------------------------------------------------------------------- expanded vs absorbed


@pytest.mark.parametrize("T,selection", [(9, "causal"), (23, "indexer"), (65, "indexer"), (13, "random")])
def test_absorbed_equals_expanded(T, selection):
    """Identical scores (not proportional: same -inf pattern, same finite values) and outputs."""
    rng = np.random.default_rng(T)
    w = mla_weights(rng)
    a = rng.normal(size=(2, T, D))
    q, q_lat, c = mla.project(w, a)
    if selection == "causal":
        indices = causal_indices(2, T, T)
    elif selection == "indexer":
        iw = indexer_weights(rng)
        indices = dsa.index(iw, a, q_lat, dsa.index_rows(iw, a)).indices
    else:
        indices = rng.integers(-1, T, size=(2, T, 5))
        indices[0, 3] = -1
    o_e, s_e = mla.expanded(w, q, c, indices)
    o_a, s_a = mla.absorbed(w, q, c, indices)
    assert o_e.shape == (2, T, H, DV) and s_e.shape == (2, T, H, T)
    assert_close(s_a, s_e, what="scores")
    assert_close(o_a, o_e, what="o")
    assert np.isneginf(s_e).any() or selection == "causal" and T == 1


def test_expanded_is_softmax_attention_over_the_selection():
    """With the causal selection, expanded == textbook causal attention on k, v = kv_b(c) per head."""
    rng = np.random.default_rng(1)
    w = mla_weights(rng)
    T = 11
    q = rng.normal(size=(1, T, H, DN))
    c = rng.normal(size=(1, T, R_KV))
    o, s = mla.expanded(w, q, c, causal_indices(1, T, T))
    kvb = (c @ w.kv_b_proj.T).reshape(1, T, H, DN + DV)
    for h in range(H):
        k, v = kvb[0, :, h, :DN], kvb[0, :, h, DN:]          # per head: d_n key rows, then d_v value rows
        logits = q[0, :, h] @ k.T / math.sqrt(DN)
        logits[np.triu_indices(T, 1)] = -np.inf
        assert np.allclose(s[0, :, h], logits, rtol=0, atol=SHORT_REDUCTION)
        assert np.allclose(o[0, :, h], scipy.special.softmax(logits, axis=-1) @ v, rtol=0, atol=SHORT_REDUCTION)


@pytest.mark.parametrize("nope,scale", [(256, 1 / 16), (DN, DN ** -0.5), (64, 1 / 8)])
def test_expanded_scale_is_exactly_nope_dim(nope, scale):
    """Scale d_n^-1/2 from the weights (1/16 at full size d_n = 256), applied to q·k and nowhere else."""
    rng = np.random.default_rng(nope)
    w = mla_weights(rng, heads=1, nope=nope, v=4, kv_rank=4, q_rank=4, hidden=8)
    T = 5
    q = rng.normal(size=(1, T, 1, nope))
    c = rng.normal(size=(1, T, 4))
    k = c[0] @ w.kv_b_proj[:nope].T                                    # [T, d_n]
    for fn in (mla.expanded, mla.absorbed):
        _, s = fn(w, q, c, causal_indices(1, T, T))
        want = (q[0, :, 0] @ k.T) * scale
        mask = np.tril(np.ones((T, T), dtype=bool))
        assert np.allclose(s[0, :, 0][mask], want[mask], rtol=SHORT_REDUCTION, atol=0)
        # the latent is used unscaled: doubling it doubles every score
        _, s2 = fn(w, q, 2 * c, causal_indices(1, T, T))
        assert np.allclose(s2[0, :, 0][mask], 2 * want[mask], rtol=SHORT_REDUCTION, atol=0)


def test_expanded_empty_selection_gives_zero():
    """A query with nothing selected (a padded query) gets 0 like SDPA, not NaN (SPEC §7, §12 p20)."""
    rng = np.random.default_rng(2)
    w = mla_weights(rng)
    q = rng.normal(size=(2, 3, H, DN))
    c = rng.normal(size=(2, 7, R_KV))
    indices = np.full((2, 3, 11), -1)
    indices[1, 2, :3] = [0, 4, 4]                                      # duplicates are harmless
    for fn in (mla.expanded, mla.absorbed):
        o, s = fn(w, q, c, indices)
        assert not np.isnan(o).any()
        assert np.all(o[0] == 0) and np.all(o[1, :2] == 0) and np.all(np.isneginf(s[0]))
        kvb = (c[1] @ w.kv_b_proj.T).reshape(7, H, DN + DV)
        for h in range(H):
            logits = kvb[[0, 4], h, :DN] @ q[1, 2, h] / math.sqrt(DN)
            want = scipy.special.softmax(logits) @ kvb[[0, 4], h, DN:]
            assert np.allclose(o[1, 2, h], want, rtol=SHORT_REDUCTION, atol=SHORT_FORMULA)


# ----------------------------------------------------------------------------- projections, cache


def test_project_caches_the_normalized_latent():
    """c = RMSNorm_{kv_a_layernorm}(kv_a(a)) is cached; q_lat = RMSNorm(q_a(a)) (SPEC §7, §12 p9)."""
    rng = np.random.default_rng(3)
    for bias in (False, True):
        w = mla_weights(rng, bias=bias)
        a = 3 * rng.normal(size=(2, 5, D))
        q, q_lat, c = mla.project(w, a)
        kv = a @ w.kv_a_proj_with_mqa.T + (w.kv_a_bias if bias else 0)
        want_c = w.kv_a_layernorm * kv / np.sqrt(np.mean(kv ** 2, axis=-1, keepdims=True) + EPS)
        assert np.allclose(c, want_c, rtol=SHORT_FORMULA, atol=0)
        assert np.allclose(np.sqrt(np.mean((c / w.kv_a_layernorm) ** 2, axis=-1)), 1.0, atol=1e-5)
        qa = a @ w.q_a_proj.T + (w.q_a_bias if bias else 0)
        want_q_lat = w.q_a_layernorm * qa / np.sqrt(np.mean(qa ** 2, axis=-1, keepdims=True) + EPS)
        assert np.allclose(q_lat, want_q_lat, rtol=SHORT_FORMULA, atol=0)
        assert np.allclose(q, (want_q_lat @ w.q_b_proj.T).reshape(2, 5, H, DN), rtol=SHORT_REDUCTION, atol=0)
        iw = indexer_weights(rng)
        _, cache, _ = mla.sublayer(w, iw, a)
        assert np.array_equal(cache.latent, c)
        assert np.array_equal(cache.index_rows, dsa.index_rows(iw, a))


@pytest.mark.parametrize("splits", [(9, 14), (13, 10), (22, 1), (12, 1, 1, 1, 3), (3, 1, 1, 60), (64, 1)])
def test_sublayer_prefill_equals_continuation(splits):
    """Cache protocol (SPEC §10): one call over S tokens == calls over the parts with the returned cache."""
    rng = np.random.default_rng(sum(splits) * 31 + len(splits))
    w, iw = mla_weights(rng), indexer_weights(rng)
    S = sum(splits)
    a = rng.normal(size=(2, S, D))
    y, cache, sel = mla.sublayer(w, iw, a)
    parts, part_cache, sets, start = [], None, [[], []], 0
    for n in splits:
        y_i, part_cache, sel_i = mla.sublayer(w, iw, a[:, start:start + n], part_cache)
        parts.append(y_i)
        for b, row in enumerate(dsa.selected_sets(sel_i)):
            sets[b] += row
        start += n
    assert sets == dsa.selected_sets(sel)
    assert_close(np.concatenate(parts, axis=1), y, rtol=SAME_MATH, what="y")
    assert_close(part_cache.latent, cache.latent, rtol=SHORT_REDUCTION, what="cache.latent")
    assert_close(part_cache.index_rows, cache.index_rows, rtol=SHORT_REDUCTION, what="cache.index_rows")
    assert cache.latent.shape == (2, S, R_KV) and cache.index_rows.shape == (2, S, 2 * D_I + 1)


@pytest.mark.parametrize("pad,length", [(2, 9), (3, 23), (1, 65)])
def test_sublayer_left_padding(pad, length):
    """A left-padded row's real outputs equal the unpadded row's; padded queries give y = 0; then decode."""
    rng = np.random.default_rng(pad * 1000 + length)
    w, iw = mla_weights(rng), indexer_weights(rng)
    a_u = rng.normal(size=(1, length + 2, D))
    y_u, _, _ = mla.sublayer(w, iw, a_u[:, :length])
    T = pad + length
    a = rng.normal(size=(2, T + 2, D))                  # garbage at the pads: DSA does not zero them
    a[0, pad:] = a_u[0]
    mask = np.ones((2, T), dtype=bool)
    mask[0, :pad] = False
    y, cache, sel = mla.sublayer(w, iw, a[:, :T], mask=mask)
    assert_close(y[0, pad:], y_u[0], rtol=SAME_MATH, what="padded row")
    assert np.all(y[0, :pad] == 0) and np.all(sel.indices[0, :pad] == -1)
    # two decode steps with an all-ones mask (SPEC §10): the cached valid flags remember the padding
    _, cache_u, _ = mla.sublayer(w, iw, a_u[:, :length])
    for step in range(2):
        y_u1, cache_u, _ = mla.sublayer(w, iw, a_u[:, length + step:length + step + 1], cache_u)
        y1, cache, _ = mla.sublayer(w, iw, a[:, T + step:T + step + 1], cache)
        assert_close(y1[0], y_u1[0], rtol=SAME_MATH, what=f"decode step {step}")


def test_sublayer_shared_reuses_prev_selection():
    """A "shared" layer attends over exactly the previous full layer's selection (SPEC §8.8)."""
    rng = np.random.default_rng(4)
    w1, w2, iw = mla_weights(rng), mla_weights(rng), indexer_weights(rng)
    a1, a2 = rng.normal(size=(2, 2, 23, D))
    _, cache1, sel = mla.sublayer(w1, iw, a1)
    y2, cache2, sel2 = mla.sublayer(w2, None, a2, prev=sel, kind="shared")
    assert sel2 is sel
    assert cache2.index_rows is None and cache2.latent.shape == (2, 23, R_KV)
    q, _, c = mla.project(w2, a2)
    o, _ = mla.expanded(w2, q, c, sel.indices)
    assert np.array_equal(y2, o.reshape(2, 23, H * DV) @ w2.o_proj.T)
    # its own indexer would have chosen differently: the hand-off is what makes the layer shared
    own = mla.sublayer(w2, iw, a2)[2]
    assert dsa.selected_sets(own) != dsa.selected_sets(sel)
    # decode: both layers step together, the shared one with the full one's new selection
    b1, b2 = rng.normal(size=(2, 2, 1, D))
    _, _, sel_d = mla.sublayer(w1, iw, b1, cache1)
    y_d, cache2, _ = mla.sublayer(w2, iw, b2, cache2, prev=sel_d, kind="shared")
    assert cache2.latent.shape == (2, 24, R_KV) and y_d.shape == (2, 1, D)


def test_sublayer_with_attention_bias():
    """attention_bias adds q_a / kv_a / o_proj biases; a padded query's y is exactly o_bias."""
    rng = np.random.default_rng(5)
    w, iw = mla_weights(rng, bias=True), indexer_weights(rng)
    a = rng.normal(size=(1, 6, D))
    mask = np.array([[0, 1, 1, 1, 1, 1]], dtype=bool)
    y, _, _ = mla.sublayer(w, iw, a, mask=mask)
    assert np.array_equal(y[0, 0], w.o_bias)
    y_nb, _, _ = mla.sublayer(dataclasses.replace(w, o_bias=None), iw, a, mask=mask)
    assert np.allclose(y - y_nb, w.o_bias, rtol=0, atol=SHORT_FORMULA)
    assert w.map(np.copy).o_bias is not w.o_bias and mla_weights(rng).map(np.copy).o_bias is None


# ----------------------------------------------------------------------------- bad inputs


def _bad_calls():
    """Weights refusing validation; the mla namespace's refusals are invariants/mla_checks.py BAD_CALLS."""
    w = mla_weights(np.random.default_rng(6))
    return {
        "MLAWeights(kv_b_proj of another width).validate()": (
            lambda: dataclasses.replace(w, kv_b_proj=w.kv_b_proj[1:]).validate(),
            r"MLAWeights\.kv_b_proj"),
        "MLAWeights(v_dim=0).validate()": (
            lambda: dataclasses.replace(w, v_dim=0).validate(), r"MLAWeights\.v_dim"),
    }


BAD = _bad_calls()


@pytest.mark.parametrize("fn, message", list(BAD.values()), ids=list(BAD))
def test_bad_inputs(fn, message):
    with pytest.raises(ValueError, match=message):
        fn()


def test_selection_from_sublayer_is_a_selection():
    rng = np.random.default_rng(7)
    _, _, sel = mla.sublayer(mla_weights(rng), indexer_weights(rng), rng.normal(size=(1, 13, D)))
    assert isinstance(sel, Selection) and sel.indices.shape == (1, 13, TOPK + KPOOL - 1)
