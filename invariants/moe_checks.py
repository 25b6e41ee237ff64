"""The MoE and NVFP4 rows of the correctness matrix as records' run functions (see kda_checks.py).

Expert ids are compared tie-aware: groups whose oracle group score ties (within eps) at the
topk_group-th place are interchangeable, and so are experts whose biased score ties at the k-th place.
NVFP4 quantization and dequantization are held bit-exact against the oracle (the honest bar: the
same codes and scales dequantize to the same numbers).
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch

from invariants.compare import RoutingReference, to_int, to_numpy
from invariants.kda_checks import Comparison
from invariants.labels import label
from invariants.target import Target, poisoned_memory
from oracle import moe as omoe
from oracle import nvfp4 as onv
from oracle.types import MoEWeights, NVFP4Tensor
from strategies import cases as sc


def moe_inputs(case: sc.MoECase):
    """(MoEWeights float64, x [tokens, D]) of the case's family (sc.MoECase)."""
    rng = np.random.default_rng(case.seed)
    E, D, I = case.experts, case.hidden, case.inter
    n = rng.standard_normal
    s = 0.02 * (40.0 if case.family == "clamps" else 1.0)
    router = n((E, D)) * D ** -0.5
    if case.family == "tied":
        router[1] = router[0]                      # experts 0 and 1 score exactly alike
    w = MoEWeights(router=router, e_score_correction_bias=0.3 * n(E), gate_up_proj=s * n((E, 2 * I, D)),
                   down_proj=0.02 * n((E, D, I)), shared_gate_proj=s * n((I, D)), shared_up_proj=s * n((I, D)),
                   shared_down_proj=0.02 * n((D, I)), top_k=case.top_k, n_group=case.groups,
                   topk_group=case.topk_group, norm_topk_prob=True, routed_scaling_factor=2.5, swiglu_limit=10.0)
    x = n((case.tokens, D))
    if case.family == "gates_off":
        w, x = _gates_off(rng, w, x)
    return w, x


def _significant(a, bits: int):
    """a rounded to `bits` significant binary digits."""
    m, e = np.frexp(a)
    return np.ldexp(np.round(m * 2.0 ** bits), e - bits)


def _gates_off(rng, w: MoEWeights, x):
    """Every gate pre-activation (routed and shared experts, every token) in [-20, -11.25], up of order
    1..10: silu(gate) is tiny and a lower clamp at -L would multiply it several-fold.

    gate = x[:, 0] * column 0 of the gate rows (their other columns are zero), with x[:, 0] in [3, 4]
    of 3 significant bits and the column in [-5, -3.75] of 5: the product has at most 8 significant
    bits, so a bf16 target holds x[:, 0], the column and every gate exactly. There silu(g) ~ g e^g: an
    absolute error d in a gate is a relative error ~d in its output, so bf16-rounded gates (half-ulp
    3e-2 in [8, 16), 6e-2 in [16, 32)) would make the baseline's error, which sets the limit, mostly
    that rounding (measured, bf16 baseline rel-L2 median / max: 2.8e-2 / 4.8e-2 with unrounded gates,
    5e-3 / 1e-2 with these).
    """
    N, D = x.shape
    E, I = w.gate_up_proj.shape[0], w.gate_up_proj.shape[1] // 2
    x = x.copy()
    x[:, 0] = _significant(rng.uniform(3.0, 4.0, N), 3)

    def gate_rows(shape):
        g = np.zeros((*shape, D))
        g[..., 0] = -_significant(rng.uniform(3.75, 5.0, shape), 5)
        return g

    up = 3.0 * D ** -0.5                          # up ~ N(0, ~4^2) with x[:, 0] ~ 3.5 in the sum
    gate_up = np.concatenate([gate_rows((E, I)), up * rng.standard_normal((E, I, D))], axis=1)
    return dataclasses.replace(w, gate_up_proj=gate_up, shared_gate_proj=gate_rows((I,)),
                               shared_up_proj=up * rng.standard_normal((I, D))), x


def _moe_target(t: Target, w):
    return w.__class__(**{f: (t.tensor(getattr(w, f), f32=f in ("router", "e_score_correction_bias"))
                             if hasattr(getattr(w, f), "shape") else getattr(w, f))
                          for f in w.__dataclass_fields__})


def _routing_reference(w, ref, case) -> RoutingReference:
    return RoutingReference(ref, w.e_score_correction_bias, case.top_k, case.topk_group, case.groups)


def _forceable(ids, w, N: int) -> bool:
    """Can the oracle route to these ids ([N, k] distinct experts in range)? Ids that are not are
    judged a failure by the routing verdict; outputs then meet the unconditioned oracle."""
    try:
        omoe.check_expert_ids(to_int(ids), N, w)
        return True
    except ValueError:
        return False


def oracle_given(w, x, ids, own):
    """The oracle's Routing for an implementation's expert choice: its own when the sets agree, else
    re-run with those experts forced (their weights from the oracle's scores)."""
    ids = to_int(ids)
    if ids.shape == to_int(own.expert_ids).shape and all(
            set(a) == set(b) for a, b in zip(ids.tolist(), to_int(own.expert_ids).tolist())):
        return own
    if not _forceable(ids, w, ids.shape[0] if ids.ndim == 2 else -1):
        return own
    label("expert choice differs from the oracle's: judged against the oracle re-run on it")
    return omoe.route(w, x, forced=ids)


def _keyed(r, order):
    """Mixture weights [N, k] reordered to the expert order `order` [N, k] (per token, by expert id)."""
    ids = to_int(r.expert_ids)
    wts = np.asarray(r.weights.detach().float().cpu() if hasattr(r.weights, "detach") else r.weights, np.float64)
    return np.array([[dict(zip(ids[t], wts[t])).get(e, np.nan) for e in order[t]] for t in range(len(order))])


def run_route(case: sc.MoECase, cand: Target, base: Target):
    """Expert ids tie-aware against the oracle's scores; mixture weights against the oracle's weights
    for the implementation's OWN experts (a legal flip changes which weights exist)."""
    if case.family == "tied":
        label("router tie made on purpose")
    w, x = moe_inputs(case)
    ref = omoe.route(w, x)
    outs = []
    for t in (cand, base):
        with poisoned_memory():
            outs.append(t.impl.moe.route(_moe_target(t, w), t.tensor(x)))
    rc, rb = (oracle_given(w, x, o.expert_ids, ref) for o in outs)
    oc, ob = (np.sort(to_int(r.expert_ids), axis=-1) for r in (rc, rb))
    return [Comparison("route", "expert_ids", outs[0].expert_ids, _routing_reference(w, ref, case), kind="routing"),
            Comparison("route", "weights", _keyed(outs[0], oc), _keyed(rc, oc), _keyed(outs[1], ob),
                       baseline_reference=_keyed(rb, ob))]


def run_forward(case: sc.MoECase, cand: Target, base: Target):
    """The layer's output against the oracle routed like the implementation (its own `route` decides;
    that choice is judged by moe.route)."""
    if case.family == "clamps":
        label("SwiGLU clamps firing")
    w, x = moe_inputs(case)
    own = omoe.route(w, x)
    outs, refs = [], []
    for t in (cand, base):
        wt, xt = _moe_target(t, w), t.tensor(x)
        with poisoned_memory():
            outs.append(t.impl.moe.forward(wt, xt))
            r = t.impl.moe.route(wt, xt)
        used = oracle_given(w, x, r.expert_ids, own)
        refs.append(omoe.experts(w, x, used) + omoe.shared_expert(w, x))
    return [Comparison("forward", "output", outs[0], refs[0], outs[1], baseline_reference=refs[1])]


def nvfp4_weights(case: sc.NVFP4Case):
    rng = np.random.default_rng(case.seed)
    w = rng.standard_normal((case.rows, case.cols)) * np.exp(rng.uniform(-3, 3, (case.rows, 1)))
    if case.family == "zero_blocks":
        # zero blocks, never the whole tensor (a zero amax has no global scale: refused on purpose)
        if case.cols >= 32:
            w[:, :16] = 0.0
        elif case.rows > 1:
            w[0] = 0.0
        label("all-zero block")
    elif case.family == "subnormal_scales":
        w[0] *= 1e-6                                # block scales fall into the fp8 subnormals
        label("fp8-subnormal block scales")
    elif case.family == "ties":
        # exact e2m1 rounding ties: with the tensor amax 6 the global scale is 2688/6 = 448 (an fp8
        # value) and a block of amax 6 gets scale exactly 448, so v = x lands on 0.25, 0.75, ... exactly
        w = w / np.abs(w).max() * 5.5
        w[:, :16] = np.array([6.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0] * 2)
        label("exact rounding ties")
    return w


def _nv_target(t: Target, q: NVFP4Tensor) -> NVFP4Tensor:
    dev = t.device
    return NVFP4Tensor(torch.as_tensor(np.asarray(q.packed), device=dev),
                       torch.as_tensor(np.asarray(q.block_scale).view(np.uint8), device=dev).view(torch.float8_e4m3fn),
                       torch.as_tensor(np.asarray(q.global_decode, np.float32), device=dev), None)


def _bits(t: NVFP4Tensor):
    """The quantized tensor as integers (codes, scale bytes, global-scale bits), for exact comparison."""
    if hasattr(t.packed, "detach"):
        packed = t.packed.cpu().numpy()
        scale = t.block_scale.cpu().view(torch.uint8).numpy()
        g = t.global_decode.cpu().numpy().astype(np.float32)
    else:
        packed, scale = np.asarray(t.packed), np.asarray(t.block_scale).view(np.uint8)
        g = np.asarray(t.global_decode, np.float32)
    return np.concatenate([packed.ravel().astype(np.int64), scale.ravel().astype(np.int64),
                           np.atleast_1d(g).view(np.int32).astype(np.int64)])


def run_quantize(case: sc.NVFP4Case, cand: Target, base: Target):
    w = nvfp4_weights(case)
    ref = onv.quantize(w)
    with poisoned_memory():
        q = cand.impl.nvfp4.quantize(torch.as_tensor(w, dtype=torch.float32, device=cand.device))
    return [Comparison("quantize", "codes", _bits(q), _bits(ref), kind="exact")]


def run_dequantize(case: sc.NVFP4Case, cand: Target, base: Target):
    """Dequantization of the oracle's codes and scales, from linear and from 128x4-swizzled scales."""
    w = nvfp4_weights(case)
    ref = onv.quantize(w)
    want = onv.dequantize(ref).astype(np.float32)
    qt = _nv_target(cand, ref)
    sw = onv.swizzle_scales(np.asarray(ref.block_scale))
    sw_t = torch.as_tensor(np.asarray(sw).view(np.uint8), device=cand.device).view(torch.float8_e4m3fn)
    with poisoned_memory():
        got = cand.impl.nvfp4.dequantize(qt)
        got_sw = cand.impl.nvfp4.dequantize_swizzled(qt.packed, sw_t, qt.global_decode)
    return [Comparison("dequantize", "weights", got.float(), torch.as_tensor(want), kind="exact"),
            Comparison("dequantize", "weights_from_swizzled", got_sw.float(), torch.as_tensor(want), kind="exact")]


# ----------------------------------------------------------------------------- the quantization gate


def _calibrated_scales(w, nv, x_cal):
    """Static W4A4 input scales per expert (ENCODE, [E] each) from a calibration batch, as a static
    min-max observer would: x's amax over the tokens routed to e, h's over e's W4A16 hidden rows;
    an expert no calibration token reaches gets the whole batch's amax."""
    r = omoe.route(w, x_cal)
    gu, _ = onv.dequantize_experts(nv)
    I = gu.shape[1] // 2
    ax, ah = [], []
    for e in range(w.num_experts):
        n = np.nonzero((r.expert_ids == e).any(axis=1))[0]
        xe = x_cal[n] if len(n) else x_cal
        g = xe @ gu[e].T
        ax.append(np.abs(xe.astype(np.float32)).max())
        ah.append(np.abs(omoe.swiglu(g[:, :I], g[:, I:], w.swiglu_limit).astype(np.float32)).max())
    return onv.global_scale_encode(np.array(ax)), onv.global_scale_encode(np.array(ah))


def gate_inputs(case: sc.QuantGateCase):
    """(MoE weights float64, x [N, D], oracle NVFP4Experts with or without static input scales)."""
    w, x = moe_inputs(case.moe_case())
    rng = np.random.default_rng([case.seed, 1])
    nv = onv.quantize_experts(w.gate_up_proj, w.down_proj)
    if case.input_scales == "static":
        nv = onv.with_input_scales(nv, *_calibrated_scales(w, nv, rng.standard_normal((64, case.hidden))))
        label("static W4A4 input scales")
    if case.family == "outliers":
        x[::3] *= 8.0                         # past the calibration: the 448 clamp and ±6 saturation fire
        label("activation outliers")
    return w, x, nv


def composed_experts(nv_ns, w, x, routing, nv, w4a4: bool):
    """The NVFP4 routed mixture in plain torch from an nvfp4 namespace's primitives (dequantize,
    qdq_activation, global_scale_encode): the baseline when the moe namespace has no fused NVFP4 path.
    Same math and scale conventions as oracle.moe.experts(nvfp4=..., w4a4=...), in float32."""
    D = x.shape[-1]
    xs = x.reshape(-1, D).float()
    gu, dn = nv_ns.dequantize(nv.gate_up), nv_ns.dequantize(nv.down)               # [E, 2I, D], [E, D, I]
    I, E = gu.shape[1] // 2, gu.shape[0]

    def scales(t, acts):
        if t.input_global_scale is not None:
            return t.input_global_scale.float()
        amax = acts.abs().amax() if acts.numel() else acts.new_zeros(())
        return (nv_ns.global_scale_encode(amax) if amax > 0 else torch.ones((), device=acts.device)).expand(E)

    ids, wts = routing.expert_ids, routing.weights.float()
    gx = scales(nv.gate_up, xs) if w4a4 else None
    rows = {}
    for e in torch.unique(ids).tolist():
        n, slot = torch.nonzero(ids == e, as_tuple=True)
        a = nv_ns.qdq_activation(xs[n], gx[e]).float() if w4a4 else xs[n]
        g = a @ gu[e].T
        h = torch.nn.functional.silu(g[:, :I].clamp(max=w.swiglu_limit)) * g[:, I:].clamp(-w.swiglu_limit,
                                                                                          w.swiglu_limit)
        rows[e] = (n, slot, h)
    gh = scales(nv.down, torch.cat([h for _, _, h in rows.values()])) if w4a4 and rows else None
    y = torch.zeros_like(xs)
    for e, (n, slot, h) in rows.items():
        hq = nv_ns.qdq_activation(h, gh[e]).float() if w4a4 else h
        y.index_add_(0, n, wts[n, slot, None] * (hq @ dn[e].T))
    return y.to(x.dtype).reshape(x.shape)


def _candidate_experts(t: Target, w, x, routing, nv, w4a4: bool):
    """The candidate's fused NVFP4 path (moe.experts(..., nvfp4=, w4a4=)) if it has one, else composed."""
    import inspect

    from impl.nvfp4 import experts_to
    nvt = experts_to(nv, t.device)
    if "w4a4" in inspect.signature(t.impl.moe.experts).parameters:
        return t.impl.moe.experts(w, x, routing, nvfp4=nvt, w4a4=w4a4)
    return composed_experts(t.impl.nvfp4, w, x, routing, nvt, w4a4)


EVAL_TOKENS = 256
SHARED_FIELDS = ("shared_gate_proj", "shared_up_proj", "shared_down_proj")


def run_gate(case: sc.QuantGateCase, cand: Target, base: Target):
    """The NVFP4 MoE layer through a fixed vocabulary projection (invariants/quant_gate.py), W4A16 and W4A4.

    kernel_*: the candidate vs the oracle's NVFP4 math on the case's tokens (routing = the oracle's, so
    the gate sees the experts only). quantization_*: the oracle's NVFP4 math vs the oracle unquantized
    on EVAL_TOKENS fresh N(0, 1) tokens (oracle only, cheap; enough tokens for p99 and top-1 to mean
    something; no outliers: a static scale's saturation is unbounded by construction).
    """
    from invariants import quant_gate as qg
    from oracle.types import Routing

    if case.family == "clamps":
        label("SwiGLU clamps firing")
    w, x, nv = gate_inputs(case)
    P = qg.projection(case.hidden, case.vocab, case.seed)
    r = omoe.route(w, x)
    wt, xt = _moe_target(cand, w), cand.tensor(x)
    rt = Routing(torch.as_tensor(r.expert_ids, device=cand.device),
                 torch.as_tensor(r.weights, dtype=torch.float32, device=cand.device), None, None, None)
    x_eval = np.random.default_rng([case.seed, 2]).standard_normal((EVAL_TOKENS, case.hidden))
    exact = qg.layer_logits(omoe.forward(w, x_eval), P)
    # the kernel gate's reference sees what the candidate sees: x and the shared expert's weights as
    # the target dtype holds them (bf16 on a GPU), so the gate measures the kernels, not the inputs'
    # rounding (identity in float32 up to the float32 rounding of float64 draws)
    x_t = to_numpy(xt)
    w_t = dataclasses.replace(w, **{f: to_numpy(getattr(wt, f)) for f in SHARED_FIELDS if getattr(w, f) is not None})
    shared_t = omoe.shared_expert(w_t, x_t)
    out = []
    for w4a4, tag in ((False, "w4a16"), (True, "w4a4")):
        ref = qg.layer_logits(omoe.experts(w, x_t, r, nvfp4=nv, w4a4=w4a4) + shared_t, P)
        with poisoned_memory():
            y = _candidate_experts(cand, wt, xt, rt, nv, w4a4) + cand.impl.moe.shared_expert(wt, xt)
        out.append(Comparison("gate", f"kernel_{tag}", qg.layer_logits(y, P), ref, kind="quantization_gate"))
        quant = qg.layer_logits(omoe.forward(w, x_eval, nvfp4=nv, w4a4=w4a4), P)
        out.append(Comparison("gate", f"quantization_{tag}", quant, exact, kind="quantization_gate"))
    return out
