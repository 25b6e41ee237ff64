"""The mHC Triton kernels (impl/mhc.py, impl/kernels/mhc.py) against the float64 oracle (oracle/mhc.py),
in the interpreter (float32).

N = 4 streams with D = 32 (SPEC §13, one power-of-two block) and D = 48 (masked tail lanes), and N = 3
(padded stream lanes of the [BN, BN] comb tile); Sinkhorn iterations 1, 3 and 20. Weights are the
SPEC §13 non-trivial ones (fn x20, random base and scale), so comb is far from uniform. Bounds: the
mhc.*[kernel_unit] contracts of invariants/contracts.d/mhc.toml.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from impl import mhc as imhc
from invariants.contracts import assert_contract
from oracle import mhc as omhc
from oracle.types import MHCWeights

B, S = 2, 5


def weights(rng, n, d, iters) -> MHCWeights:
    m = (2 + n) * n
    return MHCWeights(fn=20 * 0.02 * rng.standard_normal((m, n * d)), base=0.5 * rng.standard_normal(m),
                      scale=1.0 + 0.5 * rng.standard_normal(3), hc_mult=n, sinkhorn_iters=iters)


def t32(a):
    return torch.from_numpy(np.array(a, dtype=np.float64)).float()


def within(path, quantity, got, want, dtype="float32", what=""):
    """got against the oracle's want under mhc.<path>.<quantity>[kernel_unit] (max |d| / max |want|)."""
    assert_contract("mhc", path, quantity, "kernel_unit", dtype, got, want, what=what)


def case(seed, n, d, iters):
    rng = np.random.default_rng(seed)
    w = weights(rng, n, d, iters)
    X = rng.standard_normal((B, S, n, d))
    y = rng.standard_normal((B, S, d))
    return w, X, y


GEOMETRIES = [(4, 32), (4, 48), (3, 20)]


@pytest.mark.parametrize("iters", [1, 3, 20])
@pytest.mark.parametrize("n, d", GEOMETRIES, ids=lambda v: str(v))
def test_fused_coefficients_collapse(n, d, iters):
    w, X, _ = case(100 + d + iters, n, d, iters)
    pre, post, comb = omhc.coefficients(w, X)
    want = dict(pre=pre, post=post, comb=comb, collapse=omhc.collapse(pre, X))
    got = imhc.fused_coefficients_collapse(w.map(t32), t32(X))
    for (name, ref), g in zip(want.items(), got):
        assert g.dtype == torch.float32 and not torch.isnan(g).any(), name
        within("coefficients", name, g, ref, what=f"(N={n}, D={d}, iters={iters})")
    again = imhc.fused_coefficients_collapse(w.map(t32), t32(X))
    assert all(torch.equal(a, b) for a, b in zip(got, again)), "non-deterministic rerun"


@pytest.mark.parametrize("n, d", GEOMETRIES, ids=lambda v: str(v))
def test_sub_blocks_of_a_chunk(n, d):
    """A chunk reduced in 16-wide sub-blocks (the GPU runs its 256-wide chunks in 64-wide ones; the
    interpreter a chunk in one): the same values under the same contract, from 8 rows a program."""
    w, X, _ = case(120 + d, n, d, 3)
    pre, post, comb = omhc.coefficients(w, X)
    want = dict(pre=pre, post=post, comb=comb, collapse=omhc.collapse(pre, X))
    got = imhc.fused_coefficients_collapse(w.map(t32), t32(X), bk=64, bks=16, br=8)
    for (name, ref), g in zip(want.items(), got):
        within("coefficients", name, g, ref, what=f"(N={n}, D={d}, 16-wide sub-blocks)")


@pytest.mark.parametrize("precision", ["ieee", "tf32x3"])
@pytest.mark.parametrize("n, d", GEOMETRIES, ids=lambda v: str(v))
def test_the_gpus_dot_partial(n, d, precision, monkeypatch):
    """The GPU's partial projection (a tl.dot over 16 token rows; impl.mhc._PARTIAL_DOT, off on the
    interpreter) run here anyway: the same values under the same contract. Its bitwise claim (a row's bits
    do not follow its neighbours) holds only on the GPU and is checked there (mhc.batch)."""
    monkeypatch.setattr(imhc, "_PARTIAL_DOT", True)
    monkeypatch.setattr(imhc, "_DOT_PRECISION", precision)
    w, X, _ = case(140 + d, n, d, 3)
    pre, post, comb = omhc.coefficients(w, X)
    want = dict(pre=pre, post=post, comb=comb, collapse=omhc.collapse(pre, X))
    got = imhc.fused_coefficients_collapse(w.map(t32), t32(X), br=16)
    for (name, ref), g in zip(want.items(), got):
        within("coefficients", name, g, ref, what=f"(N={n}, D={d}, tl.dot partial, {precision})")


def test_eps_placements():
    """Where each eps decides the value, element by element: streams of RMS 1e-3 (rms_eps 1e-5 dominates
    mean(x²)), pre logits at -30 (pre = hc_eps + 1e-13), comb logits spread by ±100 (softmax entries
    of 0 become hc_eps, and stay that small through Sinkhorn)."""
    n, d = 4, 48
    w, X, _ = case(150, n, d, 3)
    w = dataclasses.replace(w, fn=w.fn * np.r_[np.ones(2 * n), np.full(n * n, 10.0)][:, None],
                            base=np.r_[np.full(n, -30.0), w.base[n:]])
    X = 1e-3 * X
    pre, post, comb = omhc.coefficients(w, X)
    assert pre.max() < 2e-6 and comb.min() < 1e-5
    got = imhc.fused_coefficients_collapse(w.map(t32), t32(X))
    for name, g, ref in zip(("pre", "post", "comb", "collapse"), got, (pre, post, comb, omhc.collapse(pre, X))):
        within("coefficients_at_eps", name, g, ref)


@pytest.mark.parametrize("n, d", GEOMETRIES[:2], ids=lambda v: str(v))
def test_coefficients(n, d):
    w, X, _ = case(200 + d, n, d, 3)
    got = imhc.coefficients(w.map(t32), t32(X))
    for name, g, ref in zip(("pre", "post", "comb"), got, omhc.coefficients(w, X), strict=True):
        within("coefficients", name, g, ref)


@pytest.mark.parametrize("n, d", GEOMETRIES, ids=lambda v: str(v))
def test_write_back(n, d):
    w, X, y = case(300 + d, n, d, 20)
    _, post, comb = omhc.coefficients(w, X)
    want = omhc.write_back(post, comb, X, y)
    got = imhc.write_back(t32(post), t32(comb), t32(X), t32(y))
    assert got.dtype == torch.float32
    within("write_back", "output", got, want)


def test_write_back_float64_streams():
    """float64 streams are written back in float64 (the reference's model-dtype arithmetic)."""
    w, X, y = case(310, 4, 48, 20)
    _, post, comb = omhc.coefficients(w, X)
    got = imhc.write_back(torch.from_numpy(post), torch.from_numpy(comb), torch.from_numpy(X), torch.from_numpy(y))
    assert got.dtype == torch.float64
    within("write_back", "output", got, omhc.write_back(post, comb, X, y), "float64")


def test_write_back_uses_comb_transposed():
    """A cyclic-shift C (C[m, m+1] = 1): output stream n is stream n - 1 plus post[n]·y."""
    n, d = 4, 48
    C = np.broadcast_to(np.roll(np.eye(n), 1, axis=1), (B, S, n, n))
    rng = np.random.default_rng(4)
    X, y, post = rng.standard_normal((B, S, n, d)), rng.standard_normal((B, S, d)), rng.uniform(0, 2, (B, S, n))
    got = imhc.write_back(t32(post), t32(C), t32(X), t32(y)).double().numpy()
    want = post[..., None] * y[:, :, None, :] + np.roll(X, 1, axis=2)
    within("write_back", "cyclic_shift", got, want)


def test_collapse():
    w, X, _ = case(400, 4, 48, 20)
    pre = omhc.coefficients(w, X)[0]
    within("coefficients", "collapse", imhc.collapse(t32(pre), t32(X)), omhc.collapse(pre, X))


def test_expand_and_reduce():
    e = np.random.default_rng(5).standard_normal((B, S, 32))
    X = imhc.expand(t32(e), 4)
    assert X.shape == (B, S, 4, 32) and X.is_contiguous()
    assert all(torch.equal(X[:, :, k], t32(e)) for k in range(4))
    within("reduce", "expanded_copies", imhc.reduce(X), e)
    within("reduce", "output", imhc.reduce(t32(np.random.default_rng(6).standard_normal((B, S, 4, 32)))),
           omhc.reduce(np.random.default_rng(6).standard_normal((B, S, 4, 32))))


def test_bfloat16_streams():
    """Coefficients stay float32 (SPEC §2); u and X_new in bf16 within bf16 rounding of the oracle."""
    w, X, y = case(500, 4, 32, 20)
    Xb = torch.from_numpy(X).bfloat16()
    pre, post, comb, u = imhc.fused_coefficients_collapse(w.map(t32), Xb)
    assert pre.dtype == post.dtype == comb.dtype == torch.float32 and u.dtype == torch.bfloat16
    Xr = Xb.double().numpy()                                                 # the oracle sees the rounded X
    opre, opost, ocomb = omhc.coefficients(w, Xr)
    within("coefficients", "comb", comb, ocomb, "bfloat16")
    within("coefficients", "pre", pre, opre, "bfloat16")
    within("coefficients", "collapse", u, omhc.collapse(opre, Xr), "bfloat16")
    Xn = imhc.write_back(post, comb, Xb, torch.from_numpy(y).bfloat16())
    assert Xn.dtype == torch.bfloat16
    within("write_back", "output", Xn, omhc.write_back(opost, ocomb, Xr, y), "bfloat16")


def test_empty_batch():
    w, _, _ = case(600, 4, 32, 3)
    pre, post, comb, u = imhc.fused_coefficients_collapse(w.map(t32), torch.zeros(0, 3, 4, 32))
    assert pre.shape == (0, 3, 4) and comb.shape == (0, 3, 4, 4) and u.shape == (0, 3, 32)


@pytest.mark.parametrize("n, d", GEOMETRIES, ids=lambda v: str(v))
def test_a_row_computes_the_same_bits_in_any_block_of_rows(n, d, monkeypatch):
    """Token rows per program (impl.mhc._BR_*: 32 on the interpreter, 1 on the GPU) change no bit of any
    output: 18 rows one per program, 4 per program (five blocks, the last partial) and 32 per program
    (one block, 14 rows masked). Holds the interpreter's row blocks to the GPU's one-row programs."""
    rng = np.random.default_rng(700)
    wt = weights(rng, n, d, 3).map(t32)
    X, y = t32(rng.standard_normal((2, 9, n, d))), t32(rng.standard_normal((2, 9, d)))
    outs = {br: imhc.fused_coefficients_collapse(wt, X, br=br) for br in (1, 4, 32)}
    backs = {}
    for br in (1, 4, 32):
        monkeypatch.setattr(imhc, "_BR_WRITE", br)             # write_back's rows per program (no override)
        backs[br] = imhc.write_back(outs[1][1], outs[1][2], X, y)
    for br in (4, 32):
        assert all(torch.equal(a, b) for a, b in zip(outs[br], outs[1])), f"coefficients differ at {br} rows a program"
        assert torch.equal(backs[br], backs[1]), f"write_back differs at {br} rows a program"
