"""The "torch" DSA and MLA baselines (impl/baseline/dsa.py, mla.py) against the float64 oracle, and
their planted mutants (impl/mutants/, mechanisms "dsa" and "mla").

float64 TorchDSA / TorchMLA are the oracle's math (invariants/contracts.d/defaults.toml [float64]), with
selections EXACTLY equal (same stable tie rule, exact ties generated on purpose); float32 is close
(mla.*[baseline_unit]). Every dsa/mla mutant is caught by a hand-built probe on which the correct
baseline agrees with the oracle (so the probe, not noise, tells them apart). Dims are SPEC §13's tiny
ones: D=32, H=2, d_n=d_v=8, r_q=r_kv=16, H_i=16, d_i=8, topk=8, P_k=4.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from impl.baseline import dsa as tdsa
from impl.baseline import mla as tmla
from impl.baseline.dsa import TorchDSA
from impl.baseline.mla import TorchMLA
from impl.mutants import MUTANTS, get
from invariants.contracts import assert_contract, float64_tolerance
from oracle import dsa as odsa
from oracle import mla as omla
from oracle.types import DSACache, IndexerWeights, MLAWeights, Selection

D, H, DN, DV, R_Q, R_KV = 32, 2, 8, 8, 16, 16
H_I, D_I, TOPK, KPOOL = 16, 8, 8, 4
EPS = 1e-5
# float64 baselines against the oracle: the same math reordered (contracts.d/defaults.toml [float64])
SAME_MATH, REORDERED_SUM = float64_tolerance("same_math"), float64_tolerance("reordered_sum")
CONDITIONED_PROBE = float64_tolerance("conditioned_probe")


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


# ----------------------------------------------------------------------------- data


def _n(rng, *shape):
    return rng.normal(size=shape) / math.sqrt(shape[-1])


def mla_weights(rng, *, bias=False) -> MLAWeights:
    """Random MLA weights; norm weights 1 + N(0, 0.1²) (SPEC §13)."""
    def b(n):
        return 0.3 * rng.normal(size=n) if bias else None
    return MLAWeights(
        q_a_proj=_n(rng, R_Q, D), q_a_layernorm=1 + 0.1 * rng.normal(size=R_Q),
        q_b_proj=_n(rng, H * DN, R_Q), kv_a_proj_with_mqa=_n(rng, R_KV, D),
        kv_a_layernorm=1 + 0.1 * rng.normal(size=R_KV),
        kv_b_proj=2 * _n(rng, H * (DN + DV), R_KV), o_proj=_n(rng, D, H * DV),
        num_heads=H, nope_dim=DN, v_dim=DV, eps=EPS,
        q_a_bias=b(R_Q), kv_a_bias=b(R_KV), o_bias=b(D))


def indexer_weights(rng, **kw) -> IndexerWeights:
    """Random indexer; LayerNorm bias, gate and ape randomised (defaults make pooling inert)."""
    return IndexerWeights(
        wq_b=_n(rng, H_I * D_I, R_Q), wk=_n(rng, D_I, D),
        k_norm_weight=1 + 0.1 * rng.normal(size=D_I), k_norm_bias=0.5 * rng.normal(size=D_I),
        weights_proj=_n(rng, H_I, D), compress_gate=2 * _n(rng, D_I, D),
        compress_ape=0.5 * rng.normal(size=(KPOOL, D_I)),
        n_heads=H_I, head_dim=D_I, topk=TOPK, kpool=KPOOL, **kw)


def left_mask(B, S, pads):
    """[B, S] int mask with pads[b] leading pad tokens in row b."""
    m = np.ones((B, S), dtype=np.int64)
    for b, p in enumerate(pads):
        m[b, :p] = 0
    return m


def dsa_inputs(rng, B, T, pads=None):
    """a [B,T,D], q_lat [B,T,r_q], mask (None or left padding)."""
    a = rng.normal(size=(B, T, D))
    q_lat = rng.normal(size=(B, T, R_Q))
    return a, q_lat, None if pads is None else left_mask(B, T, pads)


class AsNumpy:
    """A TorchDSA / TorchMLA called with float64 NumPy (as the oracle is): float arrays become tensors
    of `dtype`, integer and bool arrays keep their type; everything comes back as NumPy (floats as
    float64), containers (Selection, DSACache, tuples) rebuilt."""

    def __init__(self, impl, dtype=torch.float64):
        self.impl, self.dtype = impl, dtype

    def __getattr__(self, name):
        fn = getattr(self.impl, name)
        return lambda *a, **kw: self._out(fn(*map(self._in, a), **{k: self._in(v) for k, v in kw.items()}))

    def _in(self, a):
        if isinstance(a, (IndexerWeights, MLAWeights, Selection, DSACache)):
            return a.map(self._in)
        if isinstance(a, np.ndarray):
            t = torch.from_numpy(np.ascontiguousarray(a))
            return t.to(self.dtype) if t.dtype.is_floating_point else t
        return a

    def _out(self, r):
        if isinstance(r, torch.Tensor):
            r = r.detach()
            return (r.to(torch.float64) if r.dtype.is_floating_point else r).numpy()
        if isinstance(r, (Selection, DSACache)):
            return r.map(lambda x: None if x is None else self._out(x))
        if isinstance(r, tuple):
            return tuple(self._out(x) for x in r)
        return r


DSA64, MLA64 = AsNumpy(tdsa.dsa), AsNumpy(tmla.mla)
DSA32, MLA32 = AsNumpy(tdsa.dsa, torch.float32), AsNumpy(tmla.mla, torch.float32)


def rel(got, want) -> float:
    """max |got - want| / max(1, max |want|) over the finite entries; inf on any shape or
    non-finite-pattern mismatch (the probe and tolerance metric of this file)."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        return math.inf
    fin = np.isfinite(want)
    if not np.array_equal(fin, np.isfinite(got)) or not np.array_equal(got[~fin], want[~fin]):
        return math.inf
    if not fin.any():
        return 0.0
    return float(np.abs(got[fin] - want[fin]).max() / max(1.0, np.abs(want[fin]).max()))


def assert_close(got, want, tol, what=""):
    r = rel(got, want)
    assert r <= tol, f"{what}: rel err {r:.3e} > {tol:.0e}"


def f32(path, quantity, got, want):
    """float32 baseline against the oracle under mla.<path>.<quantity>[baseline_unit] (this file's metric)."""
    assert_contract("mla", path, quantity, "baseline_unit", "float32", got, want)


def assert_selection(got: Selection, want: Selection, tol, exact_indices=True):
    """tol: a float64 tolerance on the scores, or "float32" for mla.sublayer.scores[baseline_unit]."""
    assert isinstance(got, Selection)
    assert got.k_sel == want.k_sel
    for name in ("candidate", "pool_first", "kept"):
        assert np.array_equal(getattr(got, name), getattr(want, name)), name
    if tol == "float32":
        f32("sublayer", "scores", got.scores, want.scores)
    else:
        assert_close(got.scores, want.scores, tol, "scores")
    assert got.indices.dtype == np.int64 and got.indices.shape == want.indices.shape
    if exact_indices:
        assert np.array_equal(got.indices, want.indices), "indices"


# ----------------------------------------------------------------------------- DSA, float64 == oracle

LENGTHS = [1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 23, 63, 64, 65]


@pytest.mark.parametrize("T", LENGTHS)
def test_index_rows_pool_keys_scores_float64(T):
    rng = np.random.default_rng(100 + T)
    iw = indexer_weights(rng)
    a, q_lat, mask = dsa_inputs(rng, 2, T, pads=[0, min(3, T - 1)])
    want = odsa.index_rows(iw, a, mask)
    got = DSA64.index_rows(iw, a, mask)
    assert_close(got, want, SAME_MATH, "index_rows")
    for g, w_ in zip(DSA64.pool_keys(got, iw.compress_ape, KPOOL), odsa.pool_keys(want, iw.compress_ape, KPOOL)):
        if g.dtype.kind == "f":
            assert_close(g, w_, SAME_MATH, "kbar")
        else:
            assert np.array_equal(g, w_)
    kbar = odsa.pool_keys(want, iw.compress_ape, KPOOL)[0]
    assert_close(DSA64.scores(iw, q_lat, a, kbar), odsa.scores(iw, q_lat, a, kbar), SAME_MATH, "scores")


@pytest.mark.parametrize("T", LENGTHS)
@pytest.mark.parametrize("padded", [False, True])
def test_index_float64_equals_oracle(T, padded):
    rng = np.random.default_rng(200 + T + 1000 * padded)
    iw = indexer_weights(rng)
    a, q_lat, mask = dsa_inputs(rng, 2, T, pads=[0, min(5, T - 1)] if padded else None)
    packed = odsa.index_rows(iw, a, mask)
    want = odsa.index(iw, a, q_lat, packed, mask)
    got = DSA64.index(iw, a, q_lat, packed, mask)
    assert_selection(got, want, REORDERED_SUM)
    assert got.indices.shape[-1] == TOPK + KPOOL - 1


@pytest.mark.parametrize("S", [1, 3])
def test_index_continuation_float64(S):
    """Queries are the last S of T cached rows (decode S = 1, continuation S = 3), left padding cached."""
    rng = np.random.default_rng(300 + S)
    iw = indexer_weights(rng)
    a, q_lat, mask = dsa_inputs(rng, 2, 24, pads=[0, 6])
    packed = odsa.index_rows(iw, a, mask)
    a_new, q_new, _ = dsa_inputs(rng, 2, S)
    packed_all = np.concatenate([packed, odsa.index_rows(iw, a_new)], axis=1)
    assert_selection(DSA64.index(iw, a_new, q_new, packed_all), odsa.index(iw, a_new, q_new, packed_all), REORDERED_SUM)


@pytest.mark.parametrize("T", [13, 23, 40])
def test_exact_ties_break_like_the_oracle(T):
    """weights_proj = 0 makes every candidate score exactly 0: the lowest pools must win, as the oracle."""
    rng = np.random.default_rng(400 + T)
    iw = dataclasses.replace(indexer_weights(rng), weights_proj=np.zeros((H_I, D)))
    a, q_lat, mask = dsa_inputs(rng, 2, T, pads=[0, 2])
    packed = odsa.index_rows(iw, a, mask)
    want = odsa.index(iw, a, q_lat, packed, mask)
    for impl in (DSA64, DSA32):
        assert np.array_equal(impl.index(iw, a, q_lat, packed, mask).indices, want.indices)


def test_shared_returns_prev_and_refuses_other():
    rng = np.random.default_rng(5)
    iw = indexer_weights(rng)
    a, q_lat, _ = dsa_inputs(rng, 1, 9)
    sel = tdsa.index(iw.map(torch.from_numpy), torch.from_numpy(a), torch.from_numpy(q_lat),
                     tdsa.index_rows(iw.map(torch.from_numpy), torch.from_numpy(a)))
    assert tdsa.shared(sel) is sel
    with pytest.raises(ValueError, match="prev"):
        tdsa.shared(sel.indices)


def test_index_refuses_a_mask_disagreeing_with_the_rows():
    rng = np.random.default_rng(6)
    iw = indexer_weights(rng)
    a, q_lat, mask = dsa_inputs(rng, 2, 9, pads=[0, 2])
    packed = odsa.index_rows(iw, a, mask)
    with pytest.raises(ValueError, match="mask"):
        DSA64.index(iw, a, q_lat, packed, np.ones((2, 9), dtype=np.int64))


# ----------------------------------------------------------------------------- MLA, float64 == oracle


@pytest.mark.parametrize("T", [9, 23, 65])
def test_expanded_absorbed_float64(T):
    rng = np.random.default_rng(500 + T)
    w, iw = mla_weights(rng, bias=True), indexer_weights(rng)
    a = rng.normal(size=(2, T, D))
    q, q_lat, c = omla.project(w, a)
    for g, w_ in zip(MLA64.project(w, a), (q, q_lat, c)):
        assert_close(g, w_, SAME_MATH, "project")
    idx = odsa.index(iw, a, q_lat, odsa.index_rows(iw, a)).indices
    want = omla.expanded(w, q, c, idx)
    for form in ("expanded", "absorbed"):
        o, s = getattr(MLA64, form)(w, q, c, idx)
        assert_close(o, want[0], REORDERED_SUM, f"{form} output")
        assert_close(s, want[1], REORDERED_SUM, f"{form} scores")


def _layer_pair(rng):
    return mla_weights(rng, bias=True), indexer_weights(rng)


def test_sublayer_prefill_continuation_decode_and_shared_float64():
    """Left-padded prefill, a 3-token continuation, one decode step, each followed by a shared layer."""
    rng = np.random.default_rng(7)
    (w1, iw1), (w2, _) = _layer_pair(rng), _layer_pair(rng)
    steps = [(rng.normal(size=(2, 21, D)), left_mask(2, 21, [0, 5])),
             (rng.normal(size=(2, 3, D)), None), (rng.normal(size=(2, 1, D)), np.ones((2, 1), np.int64))]
    caches = {"o": (None, None), "t": (None, None)}
    for a, mask in steps:
        (oc1, oc2), (tc1, tc2) = caches["o"], caches["t"]
        y, oc1, osel = omla.sublayer(w1, iw1, a, oc1, mask)
        g, tc1, tsel = MLA64.sublayer(w1, iw1, a, tc1, mask)
        assert_close(g, y, REORDERED_SUM, "full y")
        assert_close(tc1.latent, oc1.latent, SAME_MATH, "latent")
        assert_close(tc1.index_rows, oc1.index_rows, SAME_MATH, "index_rows")
        assert_selection(tsel, osel, REORDERED_SUM)
        y2, oc2, osel2 = omla.sublayer(w2, iw1, a, oc2, mask, osel, "shared")
        g2, tc2, tsel2 = MLA64.sublayer(w2, iw1, a, tc2, mask, osel, "shared")
        assert_close(g2, y2, REORDERED_SUM, "shared y")
        assert tc2.index_rows is None and oc2.index_rows is None
        assert_close(tc2.latent, oc2.latent, SAME_MATH, "shared latent")
        assert np.array_equal(tsel2.indices, osel.indices)
        caches = {"o": (oc1, oc2), "t": (tc1, tc2)}


def test_padded_queries_give_zero_attention_output():
    rng = np.random.default_rng(8)
    w, iw = mla_weights(rng), indexer_weights(rng)
    a, mask = rng.normal(size=(2, 10, D)), left_mask(2, 10, [0, 4])
    q, q_lat, c = MLA64.project(w, a)
    sel = DSA64.index(iw, a, q_lat, DSA64.index_rows(iw, a, mask), mask)
    o, _ = MLA64.expanded(w, q, c, sel.indices)
    assert np.all(o[1, :4] == 0) and np.isfinite(o).all()


# ----------------------------------------------------------------------------- float32 close


def test_float32_close_to_oracle():
    rng = np.random.default_rng(9)
    (w1, iw1), (w2, _) = _layer_pair(rng), _layer_pair(rng)
    a, mask = rng.normal(size=(2, 23, D)), left_mask(2, 23, [0, 3])
    y, cache, sel = omla.sublayer(w1, iw1, a, None, mask)
    g, gcache, gsel = MLA32.sublayer(w1, iw1, a, None, mask)
    f32("sublayer", "output", g, y)
    f32("sublayer", "latent", gcache.latent, cache.latent)
    f32("sublayer", "index_rows", gcache.index_rows, cache.index_rows)
    assert_selection(gsel, sel, "float32")
    y2, _, _ = omla.sublayer(w2, iw1, a, None, mask, sel, "shared")
    g2, _, _ = MLA32.sublayer(w2, iw1, a, None, mask, sel, "shared")
    f32("sublayer", "shared_output", g2, y2)
    q, q_lat, c = omla.project(w1, a)
    for form in ("expanded", "absorbed"):
        o, s = getattr(MLA32, form)(w1, q, c, sel.indices)
        want = omla.expanded(w1, q, c, sel.indices)
        f32(form, "output", o, want[0])
        f32(form, "scores", s, want[1])


def test_float32_dtypes():
    """Working dtype in, float32 indexer scores and pooled keys, int64 selection, bf16 stays bf16."""
    rng = np.random.default_rng(10)
    w, iw = mla_weights(rng), indexer_weights(rng)
    bf = torch.bfloat16
    a = torch.from_numpy(rng.normal(size=(1, 13, D))).to(bf)
    y, cache, sel = tmla.sublayer(w.map(lambda x: torch.from_numpy(x).to(bf)),
                                  iw.map(lambda x: torch.from_numpy(x).to(bf)), a)
    assert y.dtype == bf and cache.latent.dtype == bf and cache.index_rows.dtype == bf
    assert sel.scores.dtype == torch.float32 and sel.indices.dtype == torch.int64
    kbar = tdsa.pool_keys(cache.index_rows, iw.map(lambda x: torch.from_numpy(x).to(bf)).compress_ape, KPOOL)[0]
    assert kbar.dtype == torch.float32


# ----------------------------------------------------------------------------- mutants


def _dsa_probe(T, pads=None, B=1, seed=11):
    """A prefill of T tokens through index: selection (indices), scores, candidate, pool_first."""
    def probe(m):
        rng = np.random.default_rng(seed)
        iw = indexer_weights(rng)
        a, q_lat, mask = dsa_inputs(rng, B, T, pads)
        sel = m.index(iw, a, q_lat, m.index_rows(iw, a, mask), mask)
        return dict(selection=sel.indices, scores=sel.scores, candidate=sel.candidate, pool_first=sel.pool_first)
    return probe


def _attention_probe(m):
    """Absorbed attention over the full causal prefix: output and scores."""
    rng = np.random.default_rng(12)
    w = mla_weights(rng)
    a = rng.normal(size=(2, 9, D))
    q, _, c = omla.project(w, a)
    idx = np.broadcast_to(np.where(np.arange(9)[None] <= np.arange(9)[:, None], np.arange(9)[None], -1),
                          (2, 9, 9)).copy()
    o, s = m.absorbed(w, q, c, idx)
    return dict(output=o, scores=s)


def _sublayer_probe(m):
    rng = np.random.default_rng(13)
    w, iw = mla_weights(rng), indexer_weights(rng)
    a = rng.normal(size=(2, 13, D))
    y, cache, _ = m.sublayer(w, iw, a)
    return dict(output=y, latent_cache=cache.latent)


def _shared_probe(m):
    """A shared layer given an indexer whose own selection differs from prev (checked below)."""
    rng = np.random.default_rng(14)
    (w1, iw1), (w2, iw2) = _layer_pair(rng), _layer_pair(rng)
    a = rng.normal(size=(1, 23, D))
    _, _, prev = omla.sublayer(w1, iw1, a)
    y, _, sel = m.sublayer(w2, iw2, a, None, None, prev, "shared")
    return dict(shared_output=y, selection=sel.indices)


def _paged_dsa_probe(lengths, G):
    """index_paged over float64 rows paged by G (invariants.paged_checks.page_out: poison elsewhere),
    the last token of every row querying: selection and scores."""
    def probe(m):
        from invariants.paged_checks import page_out
        rng = np.random.default_rng(15)
        iw = indexer_weights(rng)
        T = max(lengths)
        a, q_lat, _ = dsa_inputs(rng, len(lengths), T)
        rows = [odsa.index_rows(iw, a[b:b + 1, T - n:])[0] for b, n in enumerate(lengths)]
        pages, table = page_out(rows, G, 1, "large", rng, flag=True)
        sel = m.index_paged(iw, a[:, -1:], q_lat[:, -1:], pages, table, G, np.array(lengths))
        return dict(selection=sel.indices, scores=sel.scores)
    return probe


def _paged_attention_probe(m):
    """absorbed_paged over two rows of latents paged by 4, every position of each row selected."""
    from invariants.paged_checks import page_out
    rng = np.random.default_rng(16)
    w = mla_weights(rng)
    lengths = (9, 6)
    q, _, c = omla.project(w, rng.normal(size=(2, 9, D)))
    pages, table = page_out([c[b, :n] for b, n in enumerate(lengths)], 4, 1, "large", rng)
    idx = np.array([[np.arange(9)], [np.r_[np.arange(6), -1, -1, -1]]])
    o, s = m.absorbed_paged(w, q[:, -1:], pages, table, 4, np.array(lengths), idx)
    return dict(output=o, scores=s)


PROBES = {
    "dsa_paged_page_past_row": _paged_dsa_probe((12, 8), 4),     # exact multiples
    "dsa_paged_whole_last_page": _paged_dsa_probe((13, 9), 4),   # last pages partly filled
    "mla_paged_first_row_table": _paged_attention_probe,
    "dsa_tail_off_by_one": _dsa_probe(6),
    "dsa_tail_omitted": _dsa_probe(6),
    "dsa_mean_pooling": _dsa_probe(13),
    "dsa_visible_by_first_token": _dsa_probe(6),
    "dsa_budget_topk": _dsa_probe(23),
    "dsa_anchor_at_zero": _dsa_probe(13, pads=[0, 2], B=2),
    "dsa_newest_pool_stale_key": _dsa_probe(13),
    "mla_scale_moved": _attention_probe,
    "mla_unnormalized_latent_cached": _sublayer_probe,
    "mla_shared_reruns_indexer": _shared_probe,
}
ORACLES = {"dsa": odsa, "mla": omla}
BASES = {"dsa": (TorchDSA, DSA64), "mla": (TorchMLA, MLA64)}
# a causality mutant is exact in float64 (its error is in float32's last bits): it has its own probe below;
# batch invariance, run-twice determinism and graph replay compare the same implementation with itself (a
# row alone, a second run, the eager step): their checks catch them (tests/test_framework_mutants.py), as
# they do the kernel-edit mutants (base triton: the bug is in our kernel, not in this torch baseline)
SELF_COMPARED = ("causal", "batch", "rerun", "vs_eager")
# a mutant that emits what the oracle emits, a position twice where the tail meets a picked pool (the
# oracle's attention takes a set; ours sums slots): no oracle probe sees it, test_tail_repeats below does
AS_THE_ORACLE = ("dsa_tail_repeats_picked_pool",)
OUR_MUTANTS = sorted(n for n, m in MUTANTS.items()
                     if m.mechanism in ("dsa", "mla") and m.base == "torch" and m.quantity not in SELF_COMPARED
                     and n not in AS_THE_ORACLE)


def test_every_dsa_mla_mutant_has_a_probe():
    assert sorted(PROBES) == OUR_MUTANTS


@pytest.mark.parametrize("name", OUR_MUTANTS)
def test_mutant_is_caught(name):
    m = get(name)
    probe = PROBES[name]
    want = probe(ORACLES[m.mechanism])
    good, bad = probe(BASES[m.mechanism][1]), probe(AsNumpy(m.factory()))
    assert max(rel(good[q], want[q]) for q in want) < CONDITIONED_PROBE, "the probe itself disagrees with the oracle"
    errs = {q: rel(bad[q], want[q]) for q in want}
    quantity = m.quantity
    assert errs[quantity] > 1e-3, f"mutant {name} escapes its probe: {errs}"


def test_shared_probe_is_meaningful():
    """The shared probe's own-indexer selection really differs from prev (else the mutant is invisible)."""
    rng = np.random.default_rng(14)
    (w1, iw1), (w2, iw2) = _layer_pair(rng), _layer_pair(rng)
    a = rng.normal(size=(1, 23, D))
    _, _, prev = omla.sublayer(w1, iw1, a)
    _, _, own = omla.sublayer(w2, iw2, a)
    assert not np.array_equal(odsa.selection_mask(own.indices, 23), odsa.selection_mask(prev.indices, 23))


def test_anchor_mutant_is_harmless_without_padding():
    """Anchoring at 0 is only wrong under left padding: unpadded rows match the oracle."""
    probe = _dsa_probe(13, B=2)
    want, bad = probe(odsa), probe(AsNumpy(get("dsa_anchor_at_zero").factory()))
    assert all(rel(bad[q], want[q]) == 0.0 or rel(bad[q], want[q]) < REORDERED_SUM for q in want)


def test_the_softmax_max_over_masked_keys_mutant_leaks_later_tokens_and_the_baseline_does_not():
    """mla_softmax_max_over_masked_keys: float32 outputs before a cut move when only later tokens
    change; the baseline's stay bitwise equal (the property mla.causal checks)."""
    rng = np.random.default_rng(17)
    w, iw = mla_weights(rng), indexer_weights(rng)
    a = rng.normal(size=(1, 13, D))
    b = a.copy()
    b[:, 7:] = rng.normal(size=(1, 6, D))
    f32 = lambda x: torch.from_numpy(np.asarray(x)).float()          # noqa: E731
    moved = {}
    for name, ns in (("baseline", TorchMLA()), ("mutant", get("mla_softmax_max_over_masked_keys").factory())):
        ya = ns.sublayer(w.map(f32), iw.map(f32), f32(a))[0]
        yb = ns.sublayer(w.map(f32), iw.map(f32), f32(b))[0]
        moved[name] = int((ya[:, :7] != yb[:, :7]).sum())
    assert moved["baseline"] == 0 and moved["mutant"] > 0, moved


def test_tail_repeats_picked_pool_mutant_repeats_what_the_baseline_gives_once():
    """Pads inside the cache (tokens 5 and 9): the baseline's selections hold the oracle's sets with each
    position once; the mutant's repeat one (as the oracle's raw rows do)."""
    rng = np.random.default_rng(5)
    iw = indexer_weights(rng)
    T = 21
    a, q_lat, _ = dsa_inputs(rng, 1, T)
    mask = np.ones((1, T))
    mask[0, [5, 9]] = 0.0
    packed = odsa.index_rows(iw, a, mask)
    ref = odsa.index(iw, a, q_lat, packed, mask).indices[0]
    good = DSA64.index(iw, a, q_lat, packed, mask).indices[0]
    bad = AsNumpy(get("dsa_tail_repeats_picked_pool").factory()).index(iw, a, q_lat, packed, mask).indices[0]

    def repeats(rows):
        return sum(int((r >= 0).sum()) - len(np.unique(r[r >= 0])) for r in rows)
    assert repeats(ref) > 0 and repeats(good) == 0 and repeats(bad) > 0
    np.testing.assert_array_equal(odsa.as_set(good[None])[0], odsa.as_set(ref[None])[0])
