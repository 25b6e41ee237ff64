"""The "torch" KDA baseline (impl/baseline/kda.py) against the float64 oracle, and the mutant zoo.

float64 TorchKDA is the oracle's math (invariants/contracts.d/defaults.toml [float64]); float32 and bf16
are held to the kda.*[baseline_unit] contracts (invariants/contracts.d/kda.toml); bf16 keeps SPEC §2's dtypes.
Every mutant in impl/mutants/kda.py is caught by a hand-built probe on which the correct baseline agrees
with the oracle (so the probe, not noise, is what tells them apart).
"""
from __future__ import annotations


import numpy as np
import pytest
import torch

from impl.baseline import kda as tkda
from impl.baseline.kda import TorchKDA, compute_dtype
from impl.mutants import MUTANTS, get
from invariants.contracts import assert_contract, float64_tolerance
from oracle import kda as okda
from oracle.types import KDAState, KDAWeights

H, K, D, W = 2, 8, 16, 4
C = 3 * H * K
# float64 TorchKDA against the oracle: the same math reordered (contracts.d/defaults.toml [float64])
SAME_MATH, REORDERED_SUM = float64_tolerance("same_math"), float64_tolerance("reordered_sum")
CONDITIONED_PROBE = float64_tolerance("conditioned_probe")


# ----------------------------------------------------------------------------- data


def weights(rng, *, lower_bound=-5.0, f_shift=0.0) -> KDAWeights:
    """Non-trivial float64 parameters (SPEC §13: A_log, norms, dt_bias randomised)."""
    n, s = rng.standard_normal, D ** -0.5
    return KDAWeights(
        q_proj=s * n((H * K, D)), k_proj=s * n((H * K, D)), v_proj=s * n((H * K, D)),
        conv1d=0.5 * n((C, W)), f_a_proj=s * n((K, D)), f_b_proj=K ** -0.5 * n((H * K, K)),
        dt_bias=f_shift + 0.5 * n(H * K), A_log=0.5 * n(H), b_proj=s * n((H, D)),
        g_a_proj=s * n((K, D)), g_b_proj=K ** -0.5 * n((H * K, K)),
        o_norm=1.0 + 0.1 * n(K), o_proj=(H * K) ** -0.5 * n((D, H * K)), lower_bound=lower_bound)


def core(rng, B, T, *, gate_shift=0.0) -> dict:
    """q, k (normalised, q scaled), v, g, beta in float64 for the core."""
    q = okda.l2norm(rng.standard_normal((B, T, H, K))) * K ** -0.5
    k = okda.l2norm(rng.standard_normal((B, T, H, K)))
    v = rng.standard_normal((B, T, H, K))
    g = okda.gate(gate_shift + rng.standard_normal((B, T, H, K)), 0.5 * rng.standard_normal(H), -5.0)
    beta = 1.0 / (1.0 + np.exp(-rng.standard_normal((B, T, H))))
    return dict(q=q, k=k, v=v, g=g, beta=beta)


def recurrent_state(rng, rows):
    return 0.5 * rng.standard_normal((rows, H, K, K))


def kda_state(rng, rows) -> KDAState:
    return KDAState(recurrent_state(rng, rows), rng.standard_normal((rows, C, W)))


class AsNumpy:
    """A TorchKDA-like object called with float64 NumPy (as the oracle is): tensors of `dtype` in,
    float64 NumPy out. States go in as the contract has them (recurrent float32, conv in `dtype`)."""

    def __init__(self, impl, dtype=torch.float64):
        self.impl, self.dtype = impl, dtype

    def __getattr__(self, name):
        fn = getattr(self.impl, name)
        return lambda *a, **kw: self._out(fn(*map(self._in, a), **{k: self._in(v) for k, v in kw.items()}))

    def _in(self, a):
        if isinstance(a, KDAWeights):
            return a.map(self._in)
        if isinstance(a, KDAState):
            return KDAState(torch.from_numpy(a.recurrent).to(compute_dtype(self.dtype)), self._in(a.conv))
        if isinstance(a, np.ndarray):
            return torch.from_numpy(a).to(self.dtype)
        return a

    def _out(self, r):
        if isinstance(r, torch.Tensor):
            return r.detach().to(torch.float64).numpy()
        if isinstance(r, tuple):
            return type(r)(*map(self._out, r)) if isinstance(r, KDAState) else tuple(map(self._out, r))
        return r


def rel(got, want) -> float:
    """max |got - want| / max |want| (the probe and tolerance metric of this file)."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, f"shape {got.shape}, oracle {want.shape}"
    scale = np.max(np.abs(want), initial=0.0)
    return float(np.max(np.abs(got - want), initial=0.0) / (scale if scale > 0 else 1.0))


def assert_matches(path, got, want, tol):
    """Every array of `got` (tuples / KDAState flattened) against the oracle's: within the float64
    tolerance `tol`, or, for `tol` a dtype name, under kda.<path>.<result>[baseline_unit]."""
    flat = lambda r: [x for y in r for x in flat(y)] if isinstance(r, tuple) else [r]
    names = ("output", "final_state", "boundary_states" if path == "chunked" else "conv_state")
    for i, (a, b) in enumerate(zip(flat(got), flat(want), strict=True)):
        if isinstance(tol, str):
            assert_contract("kda", path, names[i], "baseline_unit", tol, a, b)
            continue
        err = rel(a, b)
        assert err <= tol, f"kda.{path} result {i}: rel err {err:.3g} > {tol:g}"


BASE64 = AsNumpy(TorchKDA())


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """Tiny tensors: OpenMP thread hand-offs cost 100x the math on a busy CPU."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# ----------------------------------------------------------------------------- float64: same math


@pytest.mark.parametrize("with_state", [False, True], ids=["zero_state", "initial_state"])
def test_recurrent(with_state):
    rng = np.random.default_rng(1)
    x = core(rng, 2, 13)
    s = recurrent_state(rng, 2) if with_state else None
    assert_matches("recurrent", BASE64.recurrent(**x, state=s), okda.recurrent(**x, state=s), REORDERED_SUM)


# chunk 1 divides every length, so one length is enough for it
@pytest.mark.parametrize("chunk, T", [(1, 67), (7, 64), (7, 67), (16, 64), (16, 67), (64, 64), (64, 67),
                                      (64, 130)], ids=lambda v: str(v))
def test_chunked(chunk, T):
    rng = np.random.default_rng(2)
    x = core(rng, 2, T)
    s = recurrent_state(rng, 2)
    got = BASE64.chunked(**x, state=s, chunk=chunk)
    assert got[2].shape == (2, T // chunk, H, K, K)
    assert_matches("chunked", got, okda.chunked(**x, state=s, chunk=chunk), REORDERED_SUM)


@pytest.mark.parametrize("chunk", [16, 64])
def test_chunked_varlen(chunk):
    rng = np.random.default_rng(3)
    cu = [0, 5, 5, 70, 77]                                                  # an empty document
    x = core(rng, 1, 77)
    s = recurrent_state(rng, 4)
    got = BASE64.chunked(**x, state=s, chunk=chunk, cu_seqlens=cu)
    assert got[2].shape == (65 // chunk, H, K, K)
    assert_matches("chunked", got, okda.chunked(**x, state=s, chunk=chunk, cu_seqlens=cu), REORDERED_SUM)
    assert_matches("recurrent", BASE64.recurrent(**x, state=s, cu_seqlens=cu),
                   okda.recurrent(**x, state=s, cu_seqlens=cu), REORDERED_SUM)


def test_chunked_without_boundary_states():
    rng = np.random.default_rng(4)
    x = core(rng, 1, 40)
    o, s, b = BASE64.chunked(**x, chunk=16, boundary_states=False)
    assert b is None
    assert_matches("chunked", (o, s), okda.chunked(**x, chunk=16)[:2], REORDERED_SUM)


def test_chunked_strong_decay():
    """g near -5 over a 64-chunk: Γ reaches -300, beyond exp's range (the difference form)."""
    rng = np.random.default_rng(5)
    x = core(rng, 1, 130, gate_shift=8.0)
    want = okda.chunked(**x, chunk=64)
    assert_matches("chunked", BASE64.chunked(**x, chunk=64), want, REORDERED_SUM)
    assert_matches("chunked", AsNumpy(TorchKDA(), torch.float32).chunked(**x, chunk=64), want, "float32")


def test_decode():
    rng = np.random.default_rng(6)
    w = weights(rng)
    z, f, b, _ = okda.project(w, rng.standard_normal((3, 4, D)))
    s_o = s_t = kda_state(rng, 3)
    for i in range(4):
        o_o, s_o = okda.decode(w, z[:, i], f[:, i], b[:, i], s_o)
        o_t, s_t = BASE64.decode(w, z[:, i], f[:, i], b[:, i], s_t)
        assert_matches("decode", (o_t, s_t), (o_o, s_o), REORDERED_SUM)


@pytest.mark.parametrize("lower_bound", [-5.0, None], ids=["bounded_gate", "softplus_gate"])
def test_sublayer(lower_bound):
    rng = np.random.default_rng(7)
    w = weights(rng, lower_bound=lower_bound)
    x = rng.standard_normal((2, 70, D))
    mask = np.ones((2, 70))
    mask[1, :9] = 0.0                                                       # left padding
    s = kda_state(rng, 2)
    assert_matches("sublayer", BASE64.sublayer(w, x, s, mask), okda.sublayer(w, x, s, mask), REORDERED_SUM)
    assert_matches("sublayer", BASE64.sublayer(w, x), okda.sublayer(w, x), REORDERED_SUM)


def test_sublayer_varlen():
    rng = np.random.default_rng(8)
    w = weights(rng)
    cu = [0, 5, 5, 70]
    x = rng.standard_normal((1, 70, D))
    s = kda_state(rng, 3)
    assert_matches("sublayer", BASE64.sublayer(w, x, s, cu_seqlens=cu),
                   okda.sublayer(w, x, s, cu_seqlens=cu), REORDERED_SUM)


def test_pieces():
    rng = np.random.default_rng(9)
    w = weights(rng)
    x = rng.standard_normal((2, 5, D))
    assert_matches("project", BASE64.project(w, x), okda.project(w, x), SAME_MATH)
    z, f, b, zg = okda.project(w, x)
    cs = rng.standard_normal((2, C, W))
    assert_matches("conv", BASE64.conv(z, w.conv1d, cs), okda.conv(z, w.conv1d, cs), SAME_MATH)
    c, _ = okda.conv(z, w.conv1d, cs)
    assert_matches("core_inputs", BASE64.core_inputs(w, c, f, b), okda.core_inputs(w, c, f, b), SAME_MATH)
    o = rng.standard_normal((2, 5, H, K))
    zg = zg.reshape(o.shape)
    assert_matches("gated_rmsnorm", BASE64.gated_rmsnorm(o, zg, w.o_norm, 1e-5),
                   okda.gated_rmsnorm(o, zg, w.o_norm, 1e-5), SAME_MATH)
    tiny = 1e-3 * rng.standard_normal((4, K))
    assert_matches("l2norm", BASE64.l2norm(tiny), okda.l2norm(tiny), SAME_MATH)
    zs = tkda.zero_state(w.map(torch.from_numpy), 3, dtype=torch.bfloat16)
    assert (zs.recurrent.shape, zs.recurrent.dtype) == ((3, H, K, K), torch.float32)
    assert (zs.conv.shape, zs.conv.dtype) == ((3, C, W), torch.bfloat16)


# ----------------------------------------------------------------------------- low precision


def test_float32():
    rng = np.random.default_rng(10)
    f32 = AsNumpy(TorchKDA(), torch.float32)
    x = core(rng, 2, 67)
    s = recurrent_state(rng, 2)
    assert_matches("recurrent", f32.recurrent(**x, state=s), okda.recurrent(**x, state=s), "float32")
    assert_matches("chunked", f32.chunked(**x, state=s, chunk=16), okda.chunked(**x, state=s, chunk=16), "float32")
    w = weights(rng)
    xs = rng.standard_normal((2, 70, D))
    ks = kda_state(rng, 2)
    assert_matches("sublayer", f32.sublayer(w, xs, ks), okda.sublayer(w, xs, ks), "float32")
    z, f, b, _ = okda.project(w, xs[:, :1])
    assert_matches("decode", f32.decode(w, z[:, 0], f[:, 0], b[:, 0], ks),
                   okda.decode(w, z[:, 0], f[:, 0], b[:, 0], ks), "float32")


def test_bfloat16_keeps_the_spec_dtypes():
    """Outputs in bf16, recurrent state in f32, conv window in bf16; error at bf16 level."""
    rng = np.random.default_rng(11)
    w = weights(rng)
    x = rng.standard_normal((2, 70, D))
    wt = w.map(lambda a: torch.from_numpy(a).to(torch.bfloat16))
    wt = KDAWeights(**{**wt.__dict__, "conv1d": torch.from_numpy(w.conv1d).float(),
                       "dt_bias": torch.from_numpy(w.dt_bias).float(), "A_log": torch.from_numpy(w.A_log).float()})
    y, s = tkda.sublayer(wt, torch.from_numpy(x).to(torch.bfloat16))
    assert (y.dtype, s.recurrent.dtype, s.conv.dtype) == (torch.bfloat16, torch.float32, torch.bfloat16)
    y_o, _ = okda.sublayer(w, x)
    # rel-L2, not max (kda.sublayer.output_l2): the gated norm rescales heads whose core output is tiny
    assert_contract("kda", "sublayer", "output_l2", "baseline_unit", "bfloat16", y, y_o)
    xc = core(rng, 1, 67)
    q, k, v, beta = (torch.from_numpy(xc[n]).to(torch.bfloat16) for n in ("q", "k", "v", "beta"))
    o, M, bnd = tkda.chunked(q, k, v, torch.from_numpy(xc["g"]).float(), beta, chunk=16)
    assert (o.dtype, M.dtype, bnd.dtype) == (torch.bfloat16, torch.float32, torch.float32)


# ----------------------------------------------------------------------------- mutants


def _sublayer_default(m, *, scale=1.0, f_shift=0.0):
    rng = np.random.default_rng(20)
    w = weights(rng, f_shift=f_shift)
    x = scale * rng.standard_normal((2, 70, D))
    return {"output": m.sublayer(w, x)[0]}


def _recurrent_probe(m):
    rng = np.random.default_rng(21)
    x = core(rng, 2, 20)
    o, s = m.recurrent(**x, state=recurrent_state(rng, 2))
    return {"output": o, "final_state": s}


def _chunked_probe(T, chunk, cu=None, gate_shift=0.0):
    def probe(m):
        rng = np.random.default_rng(22)
        x = core(rng, 1, T, gate_shift=gate_shift)
        o, s, b = m.chunked(**x, chunk=chunk, cu_seqlens=cu)
        return {"output": o, "final_state": s, "boundary_states": b}
    return probe


def _two_calls_probe(m):
    """Prefill 5 tokens, continue with 3, then one decode step: every call after the first."""
    rng = np.random.default_rng(23)
    w = weights(rng)
    x = rng.standard_normal((2, 9, D))
    _, s = m.sublayer(w, x[:, :5])
    y, s = m.sublayer(w, x[:, 5:8], s)
    z, f, b, _ = okda.project(w, x[:, 8])
    return {"output": y, "decode": m.decode(w, z, f, b, s)[0]}


def _packed_sublayer_probe(m):
    rng = np.random.default_rng(24)
    w = weights(rng)
    return {"output": m.sublayer(w, rng.standard_normal((1, 70, D)), cu_seqlens=[0, 5, 70])[0]}


def _decode_twice_probe(m):
    """Two chained decode steps: the second reads the window the first one wrote."""
    rng = np.random.default_rng(25)
    w = weights(rng)
    s = KDAState(recurrent_state(rng, 2), rng.standard_normal((2, 3 * H * K, w.conv_width)))
    x = rng.standard_normal((2, 2, D))
    outs = []
    for i in range(2):
        z, f, b, _ = okda.project(w, x[:, i])
        o, s = m.decode(w, z, f, b, s)
        outs.append(o)
    return {"output": outs[1], "conv_state": s.conv}


def _left_padded_probe(m):
    rng = np.random.default_rng(26)
    w = weights(rng)
    x = rng.standard_normal((2, 12, D))
    mask = np.ones((2, 12))
    mask[0, :5] = 0
    return {"output": m.sublayer(w, x, None, mask)[0]}


def _rerun_probe(m):
    """Any run-to-run difference, amplified 1e6x onto the output (the oracle's is exactly zero)."""
    rng = np.random.default_rng(27)
    w = weights(rng)
    x = rng.standard_normal((1, 9, D))
    y1, y2 = (np.asarray(m.sublayer(w, x)[0]) for _ in range(2))
    return {"output": y1 + 1e6 * (y2 - y1)}


# the baseline's planted bugs (a kernel-option mutant over our Triton namespace has its check instead:
# tests/test_kda.py, tests/test_framework_mutants.py)
# float64 probes judge outputs against the oracle; the exact properties (bitwise causality, inputs left
# unwritten, in-place margins) are caught by their checks (tests/test_framework_mutants.py) and probed in
# tests/test_kda_causal.py and tests/test_integrity.py; batch invariance and graph replay compare the same
# implementation with itself (a row alone, the eager step), which no call against the oracle sees; a
# checkpoint's state (quantity "state") is judged by kda.checkpoint (tests/test_kda_checkpoint.py)
EXACT_PROPERTIES = ("causal", "inputs_unchanged", "in_bounds", "batch", "vs_eager", "per_sample", "state")
KDA_MUTANTS = sorted(n for n, m in MUTANTS.items() if m.mechanism == "kda" and m.base == "torch"
                     and m.quantity not in EXACT_PROPERTIES)

PROBES = {
    "kda_decode_window_not_shifted": _decode_twice_probe,
    "kda_mask_ignored": _left_padded_probe,
    "kda_nondeterministic_output": _rerun_probe,
    "kda_decay_after_correction": _recurrent_probe,
    "kda_output_before_update": _recurrent_probe,
    "kda_tail_chunk_dropped": _chunked_probe(65, 64),
    "kda_padded_steps_update_state": _chunked_probe(70, 64),
    "kda_conv_state_not_carried": _two_calls_probe,
    # weak decay (g near 0): what leaks from the first document is still there in the second
    "kda_state_leak_across_cu_seqlens": _chunked_probe(70, 64, cu=[0, 5, 70], gate_shift=-4.0),
    "kda_conv_slides_across_documents": _packed_sublayer_probe,
    # f around 3: the bounded gate saturates near -5, softplus keeps growing
    "kda_softplus_gate": lambda m: _sublayer_default(m, f_shift=3.0),
    # x ~7e-4 gives pre-norm q, k of norm ~1e-3, where sqrt(Σx² + eps) and max(‖x‖, sqrt(eps)) part
    "kda_l2_eps_outside_sqrt": lambda m: _sublayer_default(m, scale=7e-4),
    # weak decay and many boundaries: the bf16 roundings accumulate instead of decaying away
    "kda_state_bf16_across_chunks": _chunked_probe(96, 1, gate_shift=-4.0),
    "kda_q_not_scaled": _sublayer_default,
    "kda_silu_gate_norm": _sublayer_default,
}


@pytest.mark.parametrize("name", KDA_MUTANTS)
def test_mutant_is_caught(name):
    probe = PROBES[name]
    want = probe(okda)
    good, bad = probe(BASE64), probe(AsNumpy(get(name).factory()))
    errs = {q: rel(bad[q], want[q]) for q in want}
    assert max(rel(good[q], want[q]) for q in want) < CONDITIONED_PROBE, "the probe itself disagrees with the oracle"
    quantity = get(name).quantity
    assert errs.get(quantity, max(errs.values())) > 1e-3, f"mutant {name} escapes its probe: {errs}"


def test_every_mutant_has_a_probe():
    assert sorted(PROBES) == KDA_MUTANTS


def test_get_unknown_mutant_lists_the_names():
    with pytest.raises(KeyError, match="kda_tail_chunk_dropped"):
        get("kda_no_such_bug")


@pytest.mark.parametrize("name", ["kda_state_leak_across_cu_seqlens", "kda_conv_slides_across_documents"])
def test_packing_mutants_leave_batch_rows_alone(name):
    """The bug is across cu_seqlens documents only: unpacked batch rows stay independent."""
    rng = np.random.default_rng(25)
    w = weights(rng)
    x = rng.standard_normal((2, 20, D))
    s = kda_state(rng, 2)
    assert_matches("sublayer", AsNumpy(get(name).factory()).sublayer(w, x, s), okda.sublayer(w, x, s), REORDERED_SUM)
