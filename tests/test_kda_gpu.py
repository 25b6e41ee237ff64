"""KDA kernels (impl/kda.py) against the float64 oracle (oracle/kda.py).

Two groups:
  * `gpu`-marked tests: bf16 on a CUDA device. Each bound is K_MULT times the error the SAME math makes
    when only its bf16 roundings are applied to the oracle (inputs q, k, v rounded to bf16, float64
    everywhere else), measured in the test itself on the same draw (the "baseline" below).
  * test_interpreter_smoke_*: float32 in the Triton interpreter on tiny shapes (CPU CI), bounds the
    kda.*[kernel_unit] contracts of invariants/contracts.d/kda.toml (rel-L2).

Letters as in oracle/kda.py.
"""
from __future__ import annotations


import numpy as np
import pytest
import torch

import impl
from impl import kda as ik
from invariants.contracts import assert_contract
from oracle import kda as ok
from oracle.types import KDAState, KDAWeights

CUDA = torch.cuda.is_available()
requires_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA device: torch.cuda.is_available() is False")
smoke = pytest.mark.skipif(
    not impl.interpreted(),
    reason="interpreter smoke tests: float32 bounds of the CPU interpreter; on a GPU the gpu tests cover it")

# a bf16 kernel rounds more than its inputs (W, U, q e^Γ, k e^(Γ_last-Γ), Aqk and the state operand of
# the chunk dots are bf16 too). Measured: the inputs-only baseline is 1.7e-3..2.9e-3 (output) and
# 0.5e-3..2.4e-3 (states) on these draws (T = 1, 65, 1000); the kernel alone (oracle fed the same bf16
# inputs) is 3.3e-3 (output) / 2.1e-3 (state) at the benchmark shapes on an H200. 4x is the contracts' k.
K_MULT = 4.0


def _rel(a, b) -> float:
    a = np.asarray(a.detach().float().cpu() if isinstance(a, torch.Tensor) else a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300))


def _f64(t):
    return t.detach().float().cpu().numpy().astype(np.float64)


def _smoke(path, quantity, ours, ref, what=""):
    """A float32 interpreter result against the oracle under kda.<path>.<quantity>[kernel_unit]."""
    assert_contract("kda", path, quantity, "kernel_unit", "float32", ours, ref, what=what)


def _core_inputs(B, T, H, K, V, seed, g_scale=5.0):
    """float32 CPU tensors: q, k L2-normalised (q scaled), g in (-g_scale, 0), beta in (0, 1), a state."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, H, K, generator=gen)
    k = torch.randn(B, T, H, K, generator=gen)
    q = q / q.norm(dim=-1, keepdim=True) * K ** -0.5
    k = k / k.norm(dim=-1, keepdim=True)
    v = torch.randn(B, T, H, V, generator=gen)
    g = -g_scale * torch.rand(B, T, H, K, generator=gen)
    beta = torch.rand(B, T, H, generator=gen)
    h0 = torch.randn(B, H, K, V, generator=gen)
    return q, k, v, g, beta, h0


def _bf16(t):
    return t.bfloat16().float()


def _assert_within(name, ours, ref, base):
    err = _rel(ours, ref)
    bound = K_MULT * base
    assert err <= bound, f"{name}: rel-L2 {err:.3e} > {K_MULT} x baseline {base:.3e} = {bound:.3e}"


def _gpu_chunked_case(B, T, H, K, V, seed, cu_seqlens=None, nan_doc=None, heads=None, g_scale=5.0):
    q, k, v, g, beta, h0 = _core_inputs(B, T, H, K, V, seed, g_scale)
    n = B if cu_seqlens is None else len(cu_seqlens) - 1
    if cu_seqlens is not None:
        h0 = torch.randn(n, H, K, V, generator=torch.Generator().manual_seed(seed + 1))
    if nan_doc is not None:
        h0[nan_doc, 0, 1, 2] = float("nan")
    cu = None if cu_seqlens is None else torch.tensor(cu_seqlens, dtype=torch.int32, device="cuda")
    dev = [a.cuda() for a in (q, k, v)]
    o, M, hb = ik.chunked(*(a.bfloat16() for a in dev), g.cuda(), beta.cuda(), h0.cuda(), 64, cu)
    sel = slice(None) if heads is None else heads
    sub = lambda a: a[:, :, sel] if a.ndim >= 3 else a                       # noqa: E731
    args = dict(state=_f64(h0[:, sel]), cu_seqlens=cu_seqlens)
    ref = ok.chunked(_f64(sub(q)), _f64(sub(k)), _f64(sub(v)), _f64(sub(g)), _f64(beta[:, :, sel]), **args)
    base = ok.chunked(_f64(_bf16(sub(q))), _f64(_bf16(sub(k))), _f64(_bf16(sub(v))), _f64(sub(g)),
                      _f64(beta[:, :, sel]), **args)
    ours = (o[:, :, sel], M[:, sel], hb[:, :, sel] if cu_seqlens is None else hb[:, sel])
    return ours, ref, base


# ----------------------------------------------------------------------------- GPU, bf16


@pytest.mark.gpu
@requires_cuda
@pytest.mark.parametrize("T", [1, 63, 64, 65, 129, 1000])
def test_chunked(T):
    ours, ref, base = _gpu_chunked_case(2, T, 4, 128, 128, seed=T)
    for name, a, r, b in zip(("output", "final_state", "boundary_states"), ours, ref, base):
        if r.size:
            _assert_within(f"chunked T={T} {name}", a, r, _rel(b, r))



@pytest.mark.gpu
@requires_cuda
@pytest.mark.parametrize("T", [1, 65, 1000])
def test_recurrent(T):
    q, k, v, g, beta, h0 = _core_inputs(2, T, 4, 128, 128, seed=T)
    o, M = ik.recurrent(*(a.cuda().bfloat16() for a in (q, k, v)), g.cuda(), beta.cuda(), h0.cuda())
    ref = ok.recurrent(*(_f64(a) for a in (q, k, v, g, beta, h0)))
    base = ok.recurrent(*(_f64(_bf16(a)) for a in (q, k, v)), *(_f64(a) for a in (g, beta, h0)))
    for name, a, r, b in zip(("output", "final_state"), (o, M), ref, base):
        _assert_within(f"recurrent T={T} {name}", a, r, _rel(b, r))



@pytest.mark.gpu
@requires_cuda
def test_chunked_varlen():
    """Zero-length and 1-token documents mid-batch; a NaN in one document's state stays in it."""
    lens = [100, 0, 1, 64, 300, 1, 129]
    cu = np.concatenate([[0], np.cumsum(lens)]).tolist()
    nan_doc = 4
    (o, M, hb), ref, base = _gpu_chunked_case(1, cu[-1], 4, 128, 128, seed=7, cu_seqlens=cu, nan_doc=nan_doc)
    o, M, hb = (_f64(a) for a in (o, M, hb))
    for name, a, r in (("output", o, ref[0]), ("final_state", M, ref[1]), ("boundary_states", hb, ref[2])):
        assert np.array_equal(np.isnan(a), np.isnan(r)), f"chunked varlen {name}: NaN pattern differs"
    # the NaN sits in one state entry (head 0, value column 2): that column of that document goes NaN
    assert np.isnan(o[0, cu[nan_doc]:cu[nan_doc + 1]]).any(), "chunked varlen: the poisoned document stayed finite"
    assert not np.isnan(np.delete(o[0], np.s_[cu[nan_doc]:cu[nan_doc + 1]], 0)).any(), "chunked varlen: NaN leaked"
    keep_t = np.ones(cu[-1], bool)
    keep_t[cu[nan_doc]:cu[nan_doc + 1]] = False
    keep_n = np.arange(len(lens)) != nan_doc
    rows = ok.boundary_positions(lens, 64)
    keep_b = np.array([d != nan_doc for d, _ in rows])
    for name, a, r, b in (("output", o[:, keep_t], ref[0][:, keep_t], base[0][:, keep_t]),
                          ("final_state", M[keep_n], ref[1][keep_n], base[1][keep_n]),
                          ("boundary_states", hb[keep_b], ref[2][keep_b], base[2][keep_b])):
        _assert_within(f"chunked varlen {name}", a, r, _rel(b, r))



@pytest.mark.gpu
@requires_cuda
def test_chunked_full_heads():
    """H=64, K=V=128, T=4096 (the serving shape; segments off, V-blocks of 32): 2 heads checked."""
    ours, ref, base = _gpu_chunked_case(1, 4096, 64, 128, 128, seed=3, heads=[0, 37])
    for name, a, r, b in zip(("output", "final_state", "boundary_states"), ours, ref, base):
        _assert_within(f"chunked H=64 T=4096 {name}", a, r, _rel(b, r))



@pytest.mark.gpu
@requires_cuda
@pytest.mark.parametrize("nseg", [1, 5])
def test_chunked_segments(nseg):
    """The two-level scan (segments of chunks) against one pass; weak decay so the carried state matters."""
    q, k, v, g, beta, h0 = _core_inputs(1, 1500, 2, 128, 128, seed=11, g_scale=0.05)
    dev = [a.cuda() for a in (q, k, v)]
    o, M, hb = ik._chunked(*(a.bfloat16() for a in dev), g.cuda(), beta.cuda(), h0.cuda(), nseg=nseg, bv=32)
    ref = ok.chunked(*(_f64(a) for a in (q, k, v, g, beta, h0)))
    base = ok.chunked(*(_f64(_bf16(a)) for a in (q, k, v)), *(_f64(a) for a in (g, beta, h0)))
    for name, a, r, b in zip(("output", "final_state", "boundary_states"), (o, M, hb), ref, base):
        _assert_within(f"chunked nseg={nseg} {name}", a, r, _rel(b, r))



def _weights(H, K, D, W=4, seed=0, dtype=torch.float32, device="cpu", lower_bound=-5.0):
    gen = torch.Generator().manual_seed(seed)

    def r(*s, scale=1.0):
        return (torch.randn(*s, generator=gen) * scale).to(device=device, dtype=dtype)
    return KDAWeights(r(H * K, D, scale=D ** -0.5), r(H * K, D, scale=D ** -0.5), r(H * K, D, scale=D ** -0.5),
                      r(3 * H * K, W, scale=0.5), r(K, D, scale=D ** -0.5), r(H * K, K, scale=K ** -0.5),
                      r(H * K), r(H).float(), r(H, D, scale=D ** -0.5), r(K, D, scale=D ** -0.5),
                      r(H * K, K, scale=K ** -0.5), 1 + r(K, scale=0.1), r(D, H * K, scale=(H * K) ** -0.5),
                      lower_bound=lower_bound)


@pytest.mark.gpu
@requires_cuda
@pytest.mark.parametrize("lower_bound", [-5.0, None])
def test_decode(lower_bound):
    B, H, K, W = 8, 4, 128, 4
    w = _weights(H, K, 64, W, dtype=torch.bfloat16, device="cuda", lower_bound=lower_bound)
    gen = torch.Generator().manual_seed(5)
    z = torch.randn(B, 3 * H * K, generator=gen).bfloat16().cuda()
    f = torch.randn(B, H * K, generator=gen).cuda()
    b = torch.randn(B, H, generator=gen).bfloat16().cuda()
    st = KDAState(torch.randn(B, H, K, K, generator=gen).cuda(),
                  torch.randn(B, 3 * H * K, W, generator=gen).bfloat16().cuda())
    o, new = ik.decode(w, z, f, b, st)
    wn = w.map(_f64)
    o_ref, st_ref = ok.decode(wn, _f64(z), _f64(f), _f64(b), st.map(_f64))
    # inputs are exact in both; the only bf16 rounding of the same math is the output cast
    _assert_within("decode output", o, o_ref, _rel(_f64(torch.from_numpy(o_ref).bfloat16()), o_ref))
    assert _rel(new.recurrent, st_ref.recurrent) <= 1e-5, "decode final_state: float32 math vs float64"
    assert np.array_equal(_f64(new.conv), st_ref.conv), "decode conv_state: a copy of bf16 values"
    st2 = st.map(torch.clone)
    o2, new2 = ik.decode(w, z, f, b, st2, inplace=True)
    assert new2.recurrent.data_ptr() == st2.recurrent.data_ptr() and new2.conv.data_ptr() == st2.conv.data_ptr()
    assert torch.equal(o2, o) and torch.equal(st2.recurrent, new.recurrent) and torch.equal(st2.conv, new.conv)



def _sublayer_bf16_math(wn, x, state, mask, cu_seqlens):
    """oracle.kda.sublayer with the bf16 roundings of impl.kda.sublayer applied (the baseline)."""
    r = lambda a: _f64(torch.from_numpy(np.asarray(a, dtype=np.float32)).bfloat16())   # noqa: E731
    if mask is not None:
        x = x * mask[..., None]
    B, S, _ = x.shape
    z = r(np.concatenate([r(x @ wn.q_proj.T), r(x @ wn.k_proj.T), r(x @ wn.v_proj.T)], -1))
    f = r(r(x @ wn.f_a_proj.T) @ wn.f_b_proj.T) + wn.dt_bias
    b = r(x @ wn.b_proj.T)
    zg = r(r(x @ wn.g_a_proj.T) @ wn.g_b_proj.T)
    c, conv_state = ok.conv(z, wn.conv1d, None if state is None else state.conv, cu_seqlens)
    q, k, v, g, beta = ok.core_inputs(wn, r(c), f, b)
    o, M, _ = ok.chunked(r(q), r(k), r(v), g, beta, None if state is None else state.recurrent, 64, cu_seqlens)
    o = r(ok.gated_rmsnorm(r(o), zg.reshape(o.shape), wn.o_norm, wn.eps))
    return r(o.reshape(B, S, -1) @ wn.o_proj.T), KDAState(M, conv_state)


@pytest.mark.gpu
@requires_cuda
@pytest.mark.parametrize("S, with_state, varlen", [(1, True, False), (65, False, False), (130, True, False),
                                                   (0, True, True)])
def test_sublayer(S, with_state, varlen):
    H, K, D, W = 4, 128, 256, 4
    w = _weights(H, K, D, W, dtype=torch.bfloat16, device="cuda")
    gen = torch.Generator().manual_seed(S)
    cu = None
    if varlen:
        lens = [70, 0, 1, 130]
        cu = np.concatenate([[0], np.cumsum(lens)]).tolist()
        B, S, n = 1, cu[-1], len(lens)
    else:
        B, n = 3, 3
    x = torch.randn(B, S, D, generator=gen).bfloat16().cuda()
    mask = None if varlen else (torch.rand(B, S, generator=gen) > 0.2).bfloat16().cuda()
    st = None
    if with_state:
        st = KDAState(torch.randn(n, H, K, K, generator=gen).cuda() * 0.1,
                      torch.randn(n, 3 * H * K, W, generator=gen).bfloat16().cuda())
    cu_t = None if cu is None else torch.tensor(cu, device="cuda")
    y, new = ik.sublayer(w, x, st, mask, cu_t)
    wn = w.map(_f64)
    args = (_f64(x), None if st is None else st.map(_f64), None if mask is None else _f64(mask), cu)
    y_ref, st_ref = ok.sublayer(wn, *args)
    y_base, st_base = _sublayer_bf16_math(wn, *args)
    _assert_within(f"sublayer S={S} output", y, y_ref, _rel(y_base, y_ref))
    _assert_within(f"sublayer S={S} final_state", new.recurrent, st_ref.recurrent,
                   _rel(st_base.recurrent, st_ref.recurrent))
    _assert_within(f"sublayer S={S} conv_state", new.conv, st_ref.conv,
                   max(_rel(st_base.conv, st_ref.conv), 2 ** -9))



# ----------------------------------------------------------------------------- CPU interpreter smoke


def _smoke_core(B, T, H, K, V, seed, g_scale=5.0, cu_seqlens=None):
    q, k, v, g, beta, h0 = _core_inputs(B, T, H, K, V, seed, g_scale)
    if cu_seqlens is not None:
        h0 = torch.randn(len(cu_seqlens) - 1, H, K, V, generator=torch.Generator().manual_seed(seed))
    return q, k, v, g, beta, h0


@smoke
@pytest.mark.parametrize("T", [1, 2, 5, 9, 63, 64, 65, 129])
def test_interpreter_smoke_chunked(T):
    q, k, v, g, beta, h0 = _smoke_core(2, T, 2, 16, 32, seed=T, g_scale=5.0 if T % 2 else 0.1)
    ref = ok.chunked(*(_f64(a) for a in (q, k, v, g, beta, h0)))
    ours = ik.chunked(q, k, v, g, beta, h0)
    for name, a, r in zip(("output", "final_state", "boundary_states"), ours, ref):
        assert tuple(a.shape) == r.shape, f"chunked T={T} {name}: shape {tuple(a.shape)} != {r.shape}"
        assert a.dtype == (torch.float32 if name != "output" else q.dtype)
        if r.size:
            _smoke("chunked", name, a, r, f"T={T}")
    o, M = ik.recurrent(q, k, v, g, beta, h0)
    _smoke("recurrent", "output", o, ref[0])
    _smoke("recurrent", "final_state", M, ref[1])
    _, _, hb = ik.chunked(q, k, v, g, beta, None, boundary_states=False)
    assert hb is None


@smoke
def test_interpreter_smoke_segments():
    """Two-level scan: 5 chunks in 3 segments; weak decay so the carried state matters."""
    q, k, v, g, beta, h0 = _smoke_core(2, 300, 2, 16, 16, seed=1, g_scale=0.05)
    ref = ok.chunked(*(_f64(a) for a in (q, k, v, g, beta, h0)))
    ours = ik._chunked(q, k, v, g, beta, h0, nseg=3, bv=16)
    for name, a, r in zip(("output", "final_state", "boundary_states"), ours, ref):
        _smoke("chunked", name, a, r, "segments")


@smoke
def test_interpreter_smoke_varlen():
    lens = [70, 0, 1, 64, 3]
    cu = np.concatenate([[0], np.cumsum(lens)]).tolist()
    q, k, v, g, beta, h0 = _smoke_core(1, cu[-1], 2, 16, 16, seed=2, g_scale=0.5, cu_seqlens=cu)
    h0[3, 1, 0, 0] = float("nan")
    ref = ok.chunked(*(_f64(a) for a in (q, k, v, g, beta, h0)), cu_seqlens=cu)
    cu_t = torch.tensor(cu, dtype=torch.int64)
    for name, ours in (("chunked", ik.chunked(q, k, v, g, beta, h0, 64, cu_t)),
                       ("recurrent", ik.recurrent(q, k, v, g, beta, h0, cu_t))):
        for quantity, a, r in zip(("output", "final_state", "boundary_states"), ours, ref):
            a = _f64(a)
            assert np.array_equal(np.isnan(a), np.isnan(r)), f"{name} varlen: NaN pattern differs"
            _smoke(name, quantity, np.nan_to_num(a), np.nan_to_num(r), "varlen")


@smoke
@pytest.mark.parametrize("lower_bound", [-5.0, None])
def test_interpreter_smoke_decode(lower_bound):
    H, K, W, B = 2, 16, 4, 3
    w = _weights(H, K, 24, W, seed=1, lower_bound=lower_bound)
    gen = torch.Generator().manual_seed(3)
    z = torch.randn(B, 3 * H * K, generator=gen)
    f, b = torch.randn(B, H * K, generator=gen), torch.randn(B, H, generator=gen)
    st = KDAState(torch.randn(B, H, K, K, generator=gen), torch.randn(B, 3 * H * K, W, generator=gen))
    o_ref, st_ref = ok.decode(w.map(_f64), _f64(z), _f64(f), _f64(b), st.map(_f64))
    o, new = ik.decode(w, z, f, b, st)
    _smoke("decode", "output", o, o_ref)
    _smoke("decode", "final_state", new.recurrent, st_ref.recurrent)
    assert np.array_equal(_f64(new.conv), st_ref.conv.astype(np.float32))
    st2 = st.map(torch.clone)
    o2, _ = ik.decode(w, z, f, b, st2, inplace=True)
    assert torch.equal(o2, o) and torch.equal(st2.recurrent, new.recurrent) and torch.equal(st2.conv, new.conv)


@smoke
@pytest.mark.parametrize("S, with_state", [(1, True), (7, False), (66, True)])
def test_interpreter_smoke_sublayer(S, with_state):
    H, K, D, W, B = 2, 16, 24, 4, 2
    w = _weights(H, K, D, W, seed=4)
    gen = torch.Generator().manual_seed(S)
    x = torch.randn(B, S, D, generator=gen)
    mask = (torch.rand(B, S, generator=gen) > 0.2).float()
    st = KDAState(torch.randn(B, H, K, K, generator=gen), torch.randn(B, 3 * H * K, W, generator=gen)) \
        if with_state else None
    y, new = ik.sublayer(w, x, st, mask)
    y_ref, st_ref = ok.sublayer(w.map(_f64), _f64(x), None if st is None else st.map(_f64), _f64(mask))
    _smoke("sublayer", "output", y, y_ref)
    _smoke("sublayer", "final_state", new.recurrent, st_ref.recurrent)
    _smoke("sublayer", "conv_state", new.conv, st_ref.conv)


@pytest.mark.parametrize("call, match", [
    (lambda a: ik.chunked(*a, chunk=32), "chunk"),
    (lambda a: ik.chunked(*a, chunk=0), "chunk"),
    (lambda a: ik.chunked(a[0], a[1][:, :, :1], *a[2:]), "k: expected shape"),
    (lambda a: ik.chunked(a[0], a[1].double(), *a[2:]), "k: expected dtype"),
    (lambda a: ik.chunked(*a[:4], a[4][..., None]), "beta: expected shape"),
    (lambda a: ik.chunked(*a, cu_seqlens=torch.tensor([0, 3], dtype=torch.int32)), "cu_seqlens"),
    (lambda a: ik.chunked(*(t[:1] for t in a), cu_seqlens=torch.tensor([[0, 5]])), "cu_seqlens"),
    (lambda a: ik.chunked(*(t[:1] for t in a), cu_seqlens=torch.tensor([1, 5])), "cu_seqlens"),
    (lambda a: ik.chunked(*(t[:1] for t in a), cu_seqlens=torch.tensor([0, 4, 2, 5])), "cu_seqlens"),
    (lambda a: ik.chunked(*(t[:1] for t in a), cu_seqlens=torch.tensor([0.0, 5.0])), "cu_seqlens"),
    (lambda a: ik.chunked(*a, state=torch.zeros(2, 2, 16, 8)), "state: expected shape"),
    (lambda a: ik.chunked(*a[:3], torch.full_like(a[3], float("nan")), a[4]), "g: contains NaN"),
    (lambda a: ik.recurrent(*a[:4], torch.full_like(a[4], float("nan"))), "beta: contains NaN"),
])
def test_interpreter_smoke_validation(call, match):
    q, k, v, g, beta, _ = _core_inputs(2, 5, 2, 16, 16, seed=0)
    with pytest.raises(ValueError, match=match):
        call((q, k, v, g, beta))
