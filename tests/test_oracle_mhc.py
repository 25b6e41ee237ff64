"""The mHC oracle (oracle/mhc.py) on hand-built inputs, the torch baseline (impl/baseline/mhc.py) against
it, and the planted mHC mutants (impl/mutants/mhc.py, mechanism "mhc").

Formulas are checked against closed forms and against a per-element scalar loop (the arbiter);
the Sinkhorn order is made observable with 3 iterations and strong weights (SPEC §13); the row sums
are bounded by what the last column step had to correct, never asserted to be exactly 1.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from impl.baseline import mhc as tmhc
from impl.baseline.mhc import TorchMHC
from impl.mutants import MUTANTS, get
from invariants.contracts import assert_contract, float64_tolerance
from oracle import mhc as omhc
from oracle.types import MHCWeights

# SPEC §13 tiny config: hidden_size 32, hc_mult 4, hc_sinkhorn_iters 20 (second run 3)
N, D, ITERS, HC_EPS, RMS_EPS = 4, 32, 20, 1e-6, 1e-5
ELEMENTWISE, SHORT_FORMULA = float64_tolerance("elementwise"), float64_tolerance("short_formula")
SAME_MATH, REORDERED_SUM = float64_tolerance("same_math"), float64_tolerance("reordered_sum")


# ----------------------------------------------------------------------------- data


def weights(rng, *, n=N, d=D, iters=ITERS, fn_gain=20.0) -> MHCWeights:
    """Non-trivial parameters (SPEC §13): fn at 20x its init std 0.02, random base, scale around 1."""
    m = (2 + n) * n
    return MHCWeights(fn=fn_gain * 0.02 * rng.standard_normal((m, n * d)), base=0.5 * rng.standard_normal(m),
                      scale=1.0 + 0.5 * rng.standard_normal(3), hc_mult=n, sinkhorn_iters=iters,
                      hc_eps=HC_EPS, rms_eps=RMS_EPS)


def streams(rng, B=2, S=3, n=N, d=D):
    return rng.standard_normal((B, S, n, d))


def rel(got, want) -> float:
    """max |got - want| / max |want|."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, f"shape {got.shape}, oracle {want.shape}"
    scale = np.max(np.abs(want), initial=0.0)
    return float(np.max(np.abs(got - want), initial=0.0) / (scale if scale > 0 else 1.0))


def sig(v):
    return 1.0 / (1.0 + math.exp(-v))


def scalar_coefficients(w: MHCWeights, x):
    """SPEC §4 for ONE token x [N, D], element by element in Python floats (the arbiter)."""
    n = w.hc_mult
    flat = [float(v) for v in np.asarray(x).reshape(-1)]
    rstd = 1.0 / math.sqrt(sum(v * v for v in flat) / len(flat) + w.rms_eps)
    y = [sum(float(w.fn[j, k]) * flat[k] * rstd for k in range(len(flat))) for j in range(w.rows)]
    pre = [sig(y[i] * w.scale[0] + w.base[i]) + w.hc_eps for i in range(n)]
    post = [2.0 * sig(y[n + i] * w.scale[1] + w.base[n + i]) for i in range(n)]
    lg = [[y[2 * n + a * n + b] * w.scale[2] + w.base[2 * n + a * n + b] for b in range(n)] for a in range(n)]
    C = []
    for row in lg:
        e = [math.exp(v - max(row)) for v in row]
        C.append([v / sum(e) + w.hc_eps for v in e])

    def cols(C):
        s = [sum(C[a][b] for a in range(n)) for b in range(n)]
        return [[C[a][b] / (s[b] + w.hc_eps) for b in range(n)] for a in range(n)]

    def rows(C):
        return [[v / (sum(r) + w.hc_eps) for v in r] for r in C]

    C = cols(C)
    for _ in range(w.sinkhorn_iters - 1):
        C = cols(rows(C))
    return np.array(pre), np.array(post), np.array(C)


def row_first(C, iters, eps):
    """The mirrored order (row, then (iters-1) x (column, row)): what the oracle must NOT do."""
    C = C / (C.sum(-1, keepdims=True) + eps)
    for _ in range(iters - 1):
        C = C / (C.sum(-2, keepdims=True) + eps)
        C = C / (C.sum(-1, keepdims=True) + eps)
    return C


def softmax_plus_eps(rng, shape, gain=4.0):
    """A positive starting matrix as the oracle builds it: row softmax of strong logits, + hc_eps."""
    lg = gain * rng.standard_normal(shape)
    e = np.exp(lg - lg.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True) + HC_EPS


# ----------------------------------------------------------------------------- formulas


def test_coefficients_closed_form_zero_projection():
    """fn = 0: pre = sigmoid(base) + hc_eps (sums to 1.25, not 1), post = 2·sigmoid(base), C uniform."""
    n, d = 2, 3
    base = np.zeros(8)
    base[:2] = [0.0, math.log(3.0)]                                         # sigmoid: 0.5, 0.75
    base[2:4] = [0.0, -math.log(3.0)]                                       # sigmoid: 0.5, 0.25
    w = MHCWeights(fn=np.zeros((8, n * d)), base=base, scale=np.ones(3), hc_mult=n, sinkhorn_iters=1)
    X = np.arange(1.0, 1.0 + n * d).reshape(1, 1, n, d)
    pre, post, C = omhc.coefficients(w, X)
    np.testing.assert_allclose(pre[0, 0], [0.5 + HC_EPS, 0.75 + HC_EPS], rtol=0, atol=ELEMENTWISE)
    np.testing.assert_allclose(post[0, 0], [1.0, 0.5], rtol=0, atol=ELEMENTWISE)
    a = 1.0 / n + HC_EPS                                                    # softmax of equal logits, + eps
    np.testing.assert_allclose(C[0, 0], np.full((n, n), a / (n * a + HC_EPS)), rtol=ELEMENTWISE)


def test_coefficients_input_norm_is_unweighted_rms_with_rms_eps():
    """fn picks single inputs: y_j = x_k · (mean(x²) + rms_eps)^-1/2 over all N·D values (not hc_eps)."""
    n, d = 2, 2
    fn = np.zeros((8, n * d))
    fn[0, 0] = fn[1, 3] = 1.0                                               # pre logits read x[0,0], x[1,1]
    w = MHCWeights(fn=fn, base=np.zeros(8), scale=np.ones(3), hc_mult=n, sinkhorn_iters=1)
    X = np.array([3.0, 4.0, 0.0, -1e-3]).reshape(1, 1, n, d)
    rstd = 1.0 / math.sqrt((9 + 16 + 1e-6) / 4 + RMS_EPS)
    pre, _, _ = omhc.coefficients(w, X)
    np.testing.assert_allclose(pre[0, 0], [sig(3 * rstd) + HC_EPS, sig(-1e-3 * rstd) + HC_EPS], rtol=SHORT_FORMULA)


@pytest.mark.parametrize("iters", [1, 2, 3, 20])
def test_coefficients_match_the_scalar_arbiter(iters):
    rng = np.random.default_rng(10 + iters)
    w = weights(rng, d=8, iters=iters)
    X = streams(rng, 1, 2, d=8)
    pre, post, C = omhc.coefficients(w, X)
    for s in range(2):
        want = scalar_coefficients(w, X[0, s])
        for got, ref in zip((pre[0, s], post[0, s], C[0, s]), want):
            np.testing.assert_allclose(got, ref, rtol=SAME_MATH, atol=ELEMENTWISE)


def test_pre_is_not_normalized():
    rng = np.random.default_rng(4)
    pre, _, _ = omhc.coefficients(weights(rng), streams(rng))
    assert np.all(pre > HC_EPS) and np.all(pre < 1 + HC_EPS)
    assert np.max(np.abs(pre.sum(-1) - 1.0)) > 0.1


def test_sinkhorn_order_is_observable_with_three_iterations():
    """Column first, then (row, column): the mirrored row-first order differs by far more than eps."""
    rng = np.random.default_rng(5)
    C0 = softmax_plus_eps(rng, (16, N, N))
    got = omhc.sinkhorn(C0, 3, HC_EPS)
    cols = lambda C: C / (C.sum(-2, keepdims=True) + HC_EPS)
    rows = lambda C: C / (C.sum(-1, keepdims=True) + HC_EPS)
    np.testing.assert_allclose(got, cols(rows(cols(rows(cols(C0))))), rtol=ELEMENTWISE)
    np.testing.assert_allclose(omhc.sinkhorn(C0, 1, HC_EPS), cols(C0), rtol=ELEMENTWISE)
    assert np.max(np.abs(got - row_first(C0, 3, HC_EPS))) > 1e-2


def test_sinkhorn_order_is_observable_through_coefficients():
    rng = np.random.default_rng(6)
    w = weights(rng, iters=3)
    X = streams(rng)
    _, _, C = omhc.coefficients(w, X)
    B, S = X.shape[:2]
    z = omhc.rmsnorm_unweighted(X.reshape(B, S, -1), RMS_EPS)
    lg = ((z @ w.fn.T)[..., 2 * N:] * w.scale[2] + w.base[2 * N:]).reshape(B, S, N, N)
    e = np.exp(lg - lg.max(-1, keepdims=True))
    C0 = e / e.sum(-1, keepdims=True) + HC_EPS
    np.testing.assert_allclose(C, omhc.sinkhorn(C0, 3, HC_EPS), rtol=SHORT_FORMULA)
    assert np.max(np.abs(C - row_first(C0, 3, HC_EPS))) > 1e-2


@pytest.mark.parametrize("iters", [2, 3, 20])
def test_comb_sums_within_what_the_iterations_reach(iters):
    """Columns end within O(eps) of 1 (the last step is a column step). Rows are bounded by the
    correction the last column step made: with rows r ≈ 1 and column sums c_n ∈ [1 - δ, 1 + δ] just
    before it, every row sum ends within δ / (1 - δ) (+ O(N·eps)) of 1, where δ is measured."""
    rng = np.random.default_rng(7)
    w = weights(rng, iters=iters)
    X = streams(rng, 4, 8)
    _, _, C = omhc.coefficients(w, X)
    col_err = np.abs(C.sum(-2) - 1.0).max()
    assert col_err <= 2 * N * HC_EPS, f"column sums off by {col_err:.3g}"

    # rebuild the last two steps from the oracle's own (iters - 1)-step result
    B, S = X.shape[:2]
    z = omhc.rmsnorm_unweighted(X.reshape(B, S, -1), RMS_EPS)
    lg = ((z @ w.fn.T)[..., 2 * N:] * w.scale[2] + w.base[2 * N:]).reshape(B, S, N, N)
    e = np.exp(lg - lg.max(-1, keepdims=True))
    C_prev = omhc.sinkhorn(e / e.sum(-1, keepdims=True) + HC_EPS, iters - 1, HC_EPS)
    C_row = C_prev / (C_prev.sum(-1, keepdims=True) + HC_EPS)               # the last row step
    np.testing.assert_allclose(C, C_row / (C_row.sum(-2, keepdims=True) + HC_EPS), rtol=SHORT_FORMULA)
    delta = np.abs(C_row.sum(-2) - 1.0).max()                               # the last column correction
    row_err = np.abs(C.sum(-1) - 1.0).max()
    bound = delta / (1.0 - delta) + 4 * N * HC_EPS
    assert row_err <= bound, f"row sums off by {row_err:.3g} > {bound:.3g} (delta {delta:.3g})"
    if iters <= 3:
        # not converged: an "exactly 1" assertion would be wrong here, and this test must not be one
        assert row_err > 1e-4, f"row sums unexpectedly converged ({row_err:.3g}) at iters={iters}"


def test_comb_row_residual_shrinks_with_iterations():
    rng = np.random.default_rng(8)
    C0 = softmax_plus_eps(rng, (64, N, N))
    res = [np.abs(omhc.sinkhorn(C0, it, HC_EPS).sum(-1) - 1).max() for it in (2, 3, 5, 20)]
    assert all(b <= a for a, b in zip(res, res[1:])), res
    assert res[-1] < res[0] / 10, res


def test_collapse_is_pre_weighted_sum_of_streams():
    rng = np.random.default_rng(9)
    pre = rng.uniform(0.1, 1.0, (2, 3, N))
    X = streams(rng)
    want = sum(pre[..., n, None] * X[:, :, n] for n in range(N))
    np.testing.assert_allclose(omhc.collapse(pre, X), want, rtol=SHORT_FORMULA)


def test_write_back_uses_comb_transposed():
    """C non-symmetric (a cyclic shift, C[m, n] = 1 for n = m + 1): stream n receives stream n - 1."""
    n, d = 3, 2
    C = np.roll(np.eye(n), 1, axis=1)[None, None]                           # C[0,1] = C[1,2] = C[2,0] = 1
    X = np.arange(n * d, dtype=np.float64).reshape(1, 1, n, d) + 1
    post = np.array([0.5, 1.0, 2.0])[None, None]
    y = np.array([10.0, -10.0])[None, None]
    got = omhc.write_back(post, C, X, y)
    for k in range(n):
        np.testing.assert_array_equal(got[0, 0, k], post[0, 0, k] * y[0, 0] + X[0, 0, (k - 1) % n])
    assert not np.allclose(got, omhc.write_back(post, np.swapaxes(C, -1, -2), X, y))


def test_write_back_no_separate_residual():
    """post = 0 and C = I give back X exactly: the Cᵀ X term is the whole residual path."""
    rng = np.random.default_rng(10)
    X = streams(rng)
    got = omhc.write_back(np.zeros((2, 3, N)), np.broadcast_to(np.eye(N), (2, 3, N, N)), X,
                          rng.standard_normal((2, 3, D)))
    np.testing.assert_array_equal(got, X)


def test_expand_copies_and_reduce_is_plain_mean():
    rng = np.random.default_rng(11)
    e = rng.standard_normal((2, 3, D))
    X = omhc.expand(e, N)
    assert X.shape == (2, 3, N, D)
    for n in range(N):
        np.testing.assert_array_equal(X[:, :, n], e)
    np.testing.assert_allclose(omhc.reduce(X), e, rtol=ELEMENTWISE)
    Y = np.stack([np.full((1, 1, 2), v) for v in (1.0, 2.0, 3.0, 6.0)], axis=2)
    np.testing.assert_array_equal(omhc.reduce(Y), np.full((1, 1, 2), 3.0))


# ----------------------------------------------------------------------------- torch baseline


def t(a, dtype=torch.float64):
    return torch.from_numpy(np.asarray(a)).to(dtype)


@pytest.mark.parametrize("iters", [1, 3, 20])
def test_baseline_float64_is_the_oracle(iters):
    rng = np.random.default_rng(20 + iters)
    w, X = weights(rng, iters=iters), streams(rng)
    y = rng.standard_normal((2, 3, D))
    want = omhc.coefficients(w, X)
    got = tmhc.coefficients(w.map(t), t(X))
    for a, b in zip(got, want):
        assert a.dtype == torch.float64 and rel(a, b) < REORDERED_SUM
    assert rel(tmhc.collapse(got[0], t(X)), omhc.collapse(want[0], X)) < REORDERED_SUM
    assert rel(tmhc.write_back(got[1], got[2], t(X), t(y)), omhc.write_back(*want[1:], X, y)) < REORDERED_SUM
    assert rel(tmhc.sinkhorn(t(want[2]), 2, HC_EPS), omhc.sinkhorn(want[2], 2, HC_EPS)) < SAME_MATH
    e = rng.standard_normal((2, 3, D))
    assert rel(tmhc.expand(t(e), N), omhc.expand(e, N)) == 0
    assert rel(tmhc.reduce(t(X)), omhc.reduce(X)) < ELEMENTWISE


def test_baseline_float32_is_close():
    rng = np.random.default_rng(30)
    w, X = weights(rng), streams(rng)
    y = rng.standard_normal((2, 3, D))
    want = omhc.coefficients(w, X)
    got = tmhc.coefficients(w.map(lambda a: t(a, torch.float32)), t(X, torch.float32))
    for name, a, b in zip(("pre", "post", "comb"), got, want, strict=True):
        assert a.dtype == torch.float32
        assert_contract("mhc", "coefficients", name, "baseline_unit", "float32", a, b)
    u = tmhc.collapse(got[0], t(X, torch.float32))
    assert_contract("mhc", "coefficients", "collapse", "baseline_unit", "float32", u, omhc.collapse(want[0], X))
    Xn = tmhc.write_back(got[1], got[2], t(X, torch.float32), t(y, torch.float32))
    assert_contract("mhc", "write_back", "output", "baseline_unit", "float32", Xn, omhc.write_back(*want[1:], X, y))


def test_baseline_bfloat16_keeps_the_dtype_contract():
    """Coefficients float32 even for bf16 streams (SPEC §2); u and X_new in the streams' dtype."""
    rng = np.random.default_rng(31)
    w, X = weights(rng), t(streams(rng), torch.bfloat16)
    pre, post, C = tmhc.coefficients(w.map(lambda a: t(a, torch.bfloat16)), X)
    assert pre.dtype == post.dtype == C.dtype == torch.float32
    assert tmhc.collapse(pre, X).dtype == torch.bfloat16
    assert tmhc.write_back(post, C, X, X[:, :, 0]).dtype == torch.bfloat16


# ----------------------------------------------------------------------------- mutants


class AsNumpy:
    """A TorchMHC called like the oracle: float64 NumPy in, float64 NumPy out."""

    def __init__(self, impl):
        self.impl = impl

    def __getattr__(self, name):
        fn = getattr(self.impl, name)

        def call(*args):
            args = [a.map(t) if isinstance(a, MHCWeights) else t(a) if isinstance(a, np.ndarray) else a
                    for a in args]
            r = fn(*args)
            return tuple(x.numpy() for x in r) if isinstance(r, tuple) else r.numpy()
        return call


def _write_back_probe(m):
    """A strongly non-symmetric comb from real coefficients, distinct streams."""
    rng = np.random.default_rng(40)
    w, X = weights(rng), streams(rng)
    _, post, C = omhc.coefficients(w, X)
    return {"output": m.write_back(post, C, X, rng.standard_normal((2, 3, D)))}


def _coefficients_probe(iters):
    def probe(m):
        rng = np.random.default_rng(41)
        pre, post, comb = m.coefficients(weights(rng, iters=iters), streams(rng))
        return {"pre": pre, "post": post, "comb": comb}
    return probe


# batch invariance and run-twice determinism compare the same implementation with itself (a row alone, a
# second run): their checks catch those mutants (tests/test_framework_mutants.py)
MHC_MUTANTS = sorted(n for n, m in MUTANTS.items() if m.mechanism == "mhc" and m.quantity not in ("batch", "rerun"))

PROBES = {
    "mhc_comb_not_transposed": _write_back_probe,
    # 3 iterations: with 20 the two orders converge to nearly the same doubly-stochastic matrix
    "mhc_row_first_sinkhorn": _coefficients_probe(3),
    "mhc_pre_normalized": _coefficients_probe(ITERS),
    "mhc_last_chunk_dropped": _coefficients_probe(ITERS),
}


def test_every_mutant_has_a_probe():
    assert sorted(PROBES) == MHC_MUTANTS == ["mhc_comb_not_transposed", "mhc_last_chunk_dropped",
                                             "mhc_pre_normalized", "mhc_row_first_sinkhorn"]


@pytest.mark.parametrize("name", MHC_MUTANTS)
def test_mutant_is_caught(name):
    probe = PROBES[name]
    want = probe(omhc)
    good, bad = probe(AsNumpy(TorchMHC())), probe(AsNumpy(get(name).factory()))
    assert max(rel(good[q], want[q]) for q in want) < REORDERED_SUM, "the probe itself disagrees with the oracle"
    errs = {q: rel(bad[q], want[q]) for q in want}
    quantity = get(name).quantity
    assert errs[quantity] > 1e-2, f"mutant {name} escapes its probe: {errs}"
