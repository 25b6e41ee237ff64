"""The KDA row of the correctness matrix (TESTING.md), on the Triton implementation.

On CPU the kernels run in the Triton interpreter in float32; on a GPU (`-m gpu` file
tests/test_kda_gpu.py) in bf16. Properties go through the same records as `glmgate run`
(invariants/matrix.py), so a failure here and a failure in the CLI are the same failure.
"""
from __future__ import annotations

import numpy as np
from hypothesis import example, given
from hypothesis import strategies as st

from invariants import kda_checks as kc
from invariants.contracts import float64_tolerance
from oracle import kda as okda
from oracle.config import Geometry
from strategies import tensors as tz
from strategies.geometry import KDAGeometry

TINY = Geometry.preset("tiny")
G0 = KDAGeometry.from_geometry(TINY)
# the oracle's own identities (invariants/contracts.d/defaults.toml [float64])
SHORT_FORMULA, SAME_MATH = float64_tolerance("short_formula"), float64_tolerance("same_math")
REORDERED_SUM = float64_tolerance("reordered_sum")


# ----------------------------------------------------------------------------- oracle ladder


@given(kc.core_cases(TINY), st.sampled_from([1, 5, 16, 63, 64, 100]))
@example(kc.CoreCase(2, 8, 1, 130, None, True, "gate_low", 0), 64)
@example(kc.CoreCase(2, 8, 1, 129, (65, 0, 1, 63), True, "normal", 1), 16)
def test_oracle_chunked_equals_recurrent(case, chunk):
    """Output, final state and EVERY boundary state, chunk sizes that do and do not divide."""
    x = tz.core_tensors(np.random.default_rng(case.seed), case.heads, case.head_dim, case.batch,
                        case.length, case.family)
    rows = len(case.docs) if case.docs else case.batch
    state = tz.initial_state(np.random.default_rng(case.seed + 1), rows, case.heads, case.head_dim) \
        if case.initial_state else None
    cu = np.cumsum((0,) + case.docs) if case.docs else None
    o1, s1 = okda.recurrent(**x, state=state, cu_seqlens=cu)
    o2, s2, bnd = okda.chunked(**x, state=state, chunk=chunk, cu_seqlens=cu)
    scale = max(1.0, np.abs(o1).max())
    assert np.abs(o1 - o2).max() <= REORDERED_SUM * scale
    assert np.abs(s1 - s2).max() <= REORDERED_SUM * max(1.0, np.abs(s1).max())
    traj = okda.recurrent_trajectory(**x, state=state, cu_seqlens=cu)
    lengths = case.docs if case.docs else (case.length,) * case.batch
    starts = np.cumsum((0,) + tuple(lengths))[:-1] if case.docs else [0] * case.batch
    want = [traj[0 if case.docs else d, starts[d] + n - 1] for d, n in okda.boundary_positions(lengths, chunk)]
    got = bnd.reshape(-1, *bnd.shape[-3:])
    assert got.shape[0] == len(want)
    for a, b in zip(got, want):
        assert np.abs(a - b).max() <= REORDERED_SUM * max(1.0, np.abs(b).max())


def test_oracle_operator_order_decay_then_correct():
    """M_t = (I - b k k^T) D M + b k v^T, not D (I - b k k^T) M; the output reads M_t (after)."""
    rng = np.random.default_rng(3)
    K = 4
    M0 = rng.standard_normal((1, 1, K, K))
    q, k = okda.l2norm(rng.standard_normal((2, 1, 1, 1, K)))
    v = rng.standard_normal((1, 1, 1, K))
    g = -rng.random((1, 1, 1, K))
    b = np.array([[[0.7]]])
    o, M = okda.recurrent(q, k, v, g, b, M0)
    D = np.diag(np.exp(g[0, 0, 0]))
    kk = k[0, 0, 0][:, None]
    want = (np.eye(K) - 0.7 * kk @ kk.T) @ D @ M0[0, 0] + 0.7 * kk @ v[0, 0, 0][None]
    wrong = D @ (np.eye(K) - 0.7 * kk @ kk.T) @ M0[0, 0] + 0.7 * kk @ v[0, 0, 0][None]
    np.testing.assert_allclose(M[0, 0], want, atol=SHORT_FORMULA)
    assert np.abs(M[0, 0] - wrong).max() > 1e-3
    np.testing.assert_allclose(o[0, 0, 0], want.T @ q[0, 0, 0], atol=SHORT_FORMULA)


def test_oracle_l2_eps_inside_sqrt_and_bounded_gate():
    x = np.full((1, 4), 5e-4)                         # sum x^2 = 1e-6 = eps
    np.testing.assert_allclose(okda.l2norm(x), x / np.sqrt(2e-6), rtol=SHORT_FORMULA)
    f, a = np.array([[0.3, -2.0]]), np.array([0.5])
    np.testing.assert_allclose(okda.gate(f, a, -5.0), -5.0 / (1 + np.exp(-np.exp(0.5) * f)), rtol=SHORT_FORMULA)
    np.testing.assert_allclose(okda.gate(f, a, None), -np.exp(0.5) * np.log1p(np.exp(f)), rtol=SHORT_FORMULA)


def test_oracle_conv_window_carried_across_calls():
    rng = np.random.default_rng(5)
    z, w = rng.standard_normal((2, 11, 6)), rng.standard_normal((6, 4))
    c_all, s_all = okda.conv(z, w)
    c1, s1 = okda.conv(z[:, :3], w)
    c2, s2 = okda.conv(z[:, 3:], w, s1)
    np.testing.assert_allclose(np.concatenate([c1, c2], 1), c_all, atol=SHORT_FORMULA)
    np.testing.assert_allclose(s2, s_all, atol=0)
    np.testing.assert_array_equal(s_all, np.swapaxes(z[:, -4:], 1, 2))


def test_oracle_packed_equals_alone():
    rng = np.random.default_rng(9)
    w = tz.kda_weights(rng, 2, 8, 32, 4)
    docs = (5, 0, 70, 1)
    x = rng.standard_normal((1, sum(docs), 32))
    st0 = tz.kda_state(rng, len(docs), 2, 8, 4)
    y, s = okda.sublayer(w, x, st0, cu_seqlens=np.cumsum((0,) + docs))
    a = 0
    for i, n in enumerate(docs):
        yi, si = okda.sublayer(w, x[:, a:a + n], type(st0)(st0.recurrent[i:i + 1], st0.conv[i:i + 1]))
        np.testing.assert_allclose(y[:, a:a + n], yi, atol=SAME_MATH)
        np.testing.assert_allclose(s.recurrent[i], si.recurrent[0], atol=SAME_MATH)
        np.testing.assert_allclose(s.conv[i], si.conv[0], atol=0)
        a += n
