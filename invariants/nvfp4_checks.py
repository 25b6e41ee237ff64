"""The NVFP4 row of the correctness matrix: quantization, dequantization and the quantization gate
(NVFP4 format and the MoE layer read through a vocabulary projection): cases, run functions, records.

NVFP4 quantization and dequantization are held bit-exact against the oracle (the honest bar: the same
codes and scales dequantize to the same numbers).
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np
import torch
from hypothesis import strategies as st

from invariants import quant_gate as qg
from invariants.check import Check, NotRunnable
from invariants.compare import Comparison, to_numpy
from invariants.labels import label
from invariants.moe_checks import MoECase, _moe_target, moe_cases, moe_inputs
from invariants.target import ORACLE, Target
from oracle import moe as omoe
from oracle import nvfp4 as onv
from oracle.config import Geometry
from oracle.types import NVFP4Tensor, Routing
from strategies.tensors import SEEDS

TINY = Geometry.preset("tiny")     # the pinned examples' geometry


# ------------------------------------------------------------------------ cases


class NVFP4Case(NamedTuple):
    """One [rows, cols] weight to quantize; families put values on the format's edges."""

    rows: int
    cols: int
    family: str
    seed: int


@st.composite
def nvfp4_cases(draw, base) -> NVFP4Case:
    return NVFP4Case(draw(st.sampled_from((1, 3, 128, 130))), 16 * draw(st.integers(1, 9)),
                     draw(st.sampled_from(("normal", "zero_blocks", "subnormal_scales", "ties"))), draw(SEEDS))


# MoECase's fields but its seed, then the gate's own: one declaration of the MoE layer's shape
_GATE_FIELDS = [(f, MoECase.__annotations__[f]) for f in MoECase._fields[:-1]] + \
    [("input_scales", str), ("scale_layout", str), ("vocab", int), ("seed", int)]


class QuantGateCase(NamedTuple("QuantGateFields", _GATE_FIELDS)):
    """One NVFP4 MoE layer read through a fixed vocabulary projection (invariants/quant_gate.py).

    The MoE fields are MoECase's (`moe_case` gives it back); input_scales "static" calibrates one W4A4
    input scale per expert on another batch, "dynamic" takes them from the activations at call time;
    family "outliers" scales some tokens x8 past the static calibration (448 clamp, ±6 saturation);
    scale_layout "linear" or "swizzled" (the experts' block scales as a CUTLASS loader leaves them).
    Every case gives gate and up their own global scales, ratios up to 10x (`gate_inputs`).
    """

    __slots__ = ()

    def moe_case(self) -> MoECase:
        return MoECase(*self[:7], self.family if self.family in ("normal", "clamps") else "normal", self.seed)


@st.composite
def quant_gate_cases(draw, base) -> QuantGateCase:
    # its own families, not moe_cases': "tied" is the router's business, and under "gates_off" each
    # gate is ONE weight times x[:, 0] and the output ~e^gate, so the fp8 block scale's rounding of
    # that weight (up to ~6%, ~1 in a gate of -15) moves it up to ~2x: a quantization effect the
    # quantization_* bands (measured on ordinary weights) do not describe (W4A4 mean KL 1.5-1.9x its
    # bound there). moe.forward holds that family's kernels.
    m = draw(moe_cases(base))
    return QuantGateCase(*m[:7], draw(st.sampled_from(("normal", "clamps", "outliers"))),
                         draw(st.sampled_from(("dynamic", "static"))), draw(st.sampled_from(onv.SCALE_LAYOUTS)),
                         draw(st.sampled_from(sorted({base.vocab_size, 256}))), m.seed)


# ---------------------------------------------------------------- run functions


def require_nvfp4_form(check: str, hidden: int, inter: int) -> None:
    """NotRunnable when an MoE layer's widths have no NVFP4 form: one FP8 scale per 16 elements along K, and K
    is the hidden size for gate / up and the expert width for down. A geometry whose width is not a multiple
    of 16 cannot have an NVFP4 checkpoint, so its drawn cases say so instead of ending in the quantizer's
    ValueError (which read as glmgate's own error)."""
    bad = [f"{name} {n}" for name, n in (("hidden size", hidden), ("expert width", inter)) if n % onv.BLOCK]
    if bad:
        raise NotRunnable(f"{check}: this geometry's {' and '.join(bad)} {'is' if len(bad) == 1 else 'are'} not a "
                          f"multiple of {onv.BLOCK}; NVFP4 keeps one FP8 scale per {onv.BLOCK} elements along K, so "
                          f"no NVFP4 checkpoint of this geometry can exist (the check's pinned cases, whose widths "
                          f"are multiples of {onv.BLOCK}, ran before this)")


def nvfp4_weights(case: NVFP4Case):
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


def _bits(t: NVFP4Tensor) -> tuple:
    """The quantized tensor as integers, for exact comparison: codes [rows, cols / 2] (packed bytes),
    block scales [rows, cols / 16] (fp8 bytes), the global scale's float32 bits [1]."""
    if hasattr(t.packed, "detach"):
        packed = t.packed.cpu().numpy()
        scale = t.block_scale.cpu().view(torch.uint8).numpy()
        g = t.global_decode.cpu().numpy().astype(np.float32)
    else:
        packed, scale = np.asarray(t.packed), np.asarray(t.block_scale).view(np.uint8)
        g = np.asarray(t.global_decode, np.float32)
    return packed.astype(np.int64), scale.astype(np.int64), np.atleast_1d(g).view(np.int32).astype(np.int64)


# what each part of _bits is, and its dimensions, for messages ("first at row 2, byte 5")
_BITS = (("packed codes", ("row", "byte")), ("block scales", ("row", "block")), ("global scale", ("value",)))


def run_quantize(case: NVFP4Case, cand: Target, base: Target):
    w = nvfp4_weights(case)
    ref, q = (quantize_on(t, w) for t in (ORACLE, cand))
    return [Comparison("quantize", "codes", c, r, kind="exact", where=what, axes=axes)
            for (what, axes), c, r in zip(_BITS, _bits(q), _bits(ref))]


def quantize_on(t: Target, w):
    """Target t's NVFP4 quantization of float64 `w`, handed over in float32 (the oracle: float64)."""
    with t.poisoned():
        return t.impl.nvfp4.quantize(t.tensor(w, f32=True))


def run_dequantize(case: NVFP4Case, cand: Target, base: Target):
    """Dequantization of the oracle's codes and scales, from linear and from 128x4-swizzled scales."""
    w = nvfp4_weights(case)
    ref = onv.quantize(w)
    want = onv.dequantize(ref).astype(np.float32)
    qt = _nv_target(cand, ref)
    sw = onv.swizzle_scales(np.asarray(ref.block_scale))
    sw_t = torch.as_tensor(np.asarray(sw).view(np.uint8), device=cand.device).view(torch.float8_e4m3fn)
    with cand.poisoned():
        got = cand.impl.nvfp4.dequantize(qt)
        got_sw = cand.impl.nvfp4.dequantize_swizzled(qt.packed, sw_t, qt.global_decode)
    return [Comparison("dequantize", "weights", got.float(), torch.as_tensor(want), kind="exact",
                       axes=("row", "column")),
            Comparison("dequantize", "weights_from_swizzled", got_sw.float(), torch.as_tensor(want), kind="exact",
                       axes=("row", "column"))]


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


UP_RATIO_MAX = 10.0      # the widest gate/up global-scale ratio seen on a published checkpoint (NVFP4.md)
EQUAL_SHARE = 0.3        # ~31% of that checkpoint's pairs had equal scales


def up_ratios(rng, E: int) -> np.ndarray:
    """[E] factors for each expert's up half: 1 for ~30% of the experts, else log-uniform in [1/10, 10]."""
    r = np.exp(rng.uniform(-np.log(UP_RATIO_MAX), np.log(UP_RATIO_MAX), E))
    return np.where(rng.uniform(size=E) < EQUAL_SHARE, 1.0, r)


def unequal_halves(w, rng):
    """w with each expert's up rows scaled by up_ratios and its down matrix by the inverse: the exact
    layer is unchanged (up enters linearly; only the +-L clamp of up sees the factor), while gate and
    up get global scales up to 10x apart, as in real checkpoints (NVFP4.md, "MoE gate/up fusion")."""
    I = w.expert_dim
    r = up_ratios(rng, w.num_experts)
    gate_up = w.gate_up_proj.copy()
    gate_up[:, I:] *= r[:, None, None]
    return dataclasses.replace(w, gate_up_proj=gate_up, down_proj=w.down_proj / r[:, None, None])


def gate_inputs(case: QuantGateCase):
    """(MoE weights float64, x [N, D], oracle NVFP4Experts with or without static input scales): gate
    and up quantized each with its own global scale (ratios up to 10x), block scales in case.scale_layout."""
    w, x = moe_inputs(case.moe_case())
    rng = np.random.default_rng([case.seed, 1])
    w = unequal_halves(w, np.random.default_rng([case.seed, 3]))
    nv = onv.quantize_experts(w.gate_up_proj, w.down_proj)
    g = np.asarray(nv.gate_up.global_decode)
    ratio = float(np.max(np.maximum(g[:, 0] / g[:, 1], g[:, 1] / g[:, 0])))
    label("gate/up global scales over 3x apart" if ratio > 3 else "gate/up global scales within 3x")
    if case.input_scales == "static":
        nv = onv.with_input_scales(nv, *_calibrated_scales(w, nv, rng.standard_normal((64, case.hidden))))
        label("static W4A4 input scales")
    if case.scale_layout == onv.SWIZZLED:
        nv = onv.swizzle_experts(nv)
        label("128x4-swizzled expert block scales")
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
    """The candidate's fused NVFP4 path (moe.experts(..., nvfp4=, w4a4=)) if it has one; else the mixture
    composed from its nvfp4 functions when it brings some (our fused kernel would never call them);
    else our fused path."""
    import inspect

    from impl.compose import from_candidate, provides
    from impl.nvfp4 import experts_to
    nvt = experts_to(nv, t.device)
    fused = "w4a4" in inspect.signature(t.impl.moe.experts).parameters
    if fused and (from_candidate(t.impl.moe, "experts") or not provides(t.impl.nvfp4)):
        return t.impl.moe.experts(w, x, routing, nvfp4=nvt, w4a4=w4a4)
    return composed_experts(t.impl.nvfp4, w, x, routing, nvt, w4a4)



EVAL_TOKENS = 256


SHARED_FIELDS = ("shared_gate_proj", "shared_up_proj", "shared_down_proj")


def run_gate(case: QuantGateCase, cand: Target, base: Target):
    """The NVFP4 MoE layer through a fixed vocabulary projection (invariants/quant_gate.py), W4A16 and W4A4.

    kernel_*: the candidate vs the oracle's NVFP4 math on the case's tokens (routing = the oracle's, so
    the gate sees the experts only). quantization_*: the oracle's NVFP4 math vs the oracle unquantized
    on EVAL_TOKENS fresh N(0, 1) tokens (oracle only, cheap; enough tokens for p99 and top-1 to mean
    something; no outliers: a static scale's saturation is unbounded by construction).
    """

    require_nvfp4_form("nvfp4.gate", case.hidden, case.inter)
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
        with cand.poisoned():
            y = _candidate_experts(cand, wt, xt, rt, nv, w4a4) + cand.impl.moe.shared_expert(wt, xt)
        out.append(Comparison("gate", f"kernel_{tag}", qg.layer_logits(y, P), ref, kind="quantization_gate"))
        quant = qg.layer_logits(omoe.forward(w, x_eval, nvfp4=nv, w4a4=w4a4), P)
        out.append(Comparison("gate", f"quantization_{tag}", quant, exact, kind="quantization_gate"))
    return out


# ----------------------------------------------------------------------------- the records

CHECKS = (
    Check("nvfp4.quantize", "nvfp4", NVFP4Case, nvfp4_cases, run_quantize,
          "codes, block scales and global scale bit-exact (ties to even, zero blocks, fp8 subnormals)",
          examples=(NVFP4Case(3, 32, "ties", 0), NVFP4Case(130, 48, "subnormal_scales", 1))),
    Check("nvfp4.dequantize", "nvfp4", NVFP4Case, nvfp4_cases, run_dequantize,
          "dequantization bit-exact, from linear and from 128x4-swizzled scales",
          examples=(NVFP4Case(130, 144, "zero_blocks", 2),)),
    Check("nvfp4.gate", "nvfp4", QuantGateCase, quant_gate_cases, run_gate,
          "MoE layer + fixed vocab projection, W4A16 and W4A4, gate/up global scales up to 10x apart, linear "
          "and swizzled block scales: KL / top-1 vs oracle NVFP4 and vs unquantized",
          examples=(QuantGateCase(32, 8, 2, 2, 1, 16, 24, "normal", "dynamic", "linear", 64, 1),
                    QuantGateCase(48, 8, 3, 4, 2, 16, 17, "clamps", "static", "swizzled", 256, 2),
                    QuantGateCase(32, 8, 2, 2, 1, 16, 13, "outliers", "static", "linear", 64, 3),
                    QuantGateCase(32, 8, 2, 2, 1, 16, 11, "normal", "dynamic", "swizzled", 64, 4)),
          # ~2 s an example on the interpreter (four pins cover both scale layouts and input scales): three
          # drawn on the CPU (CI's 15-minute budget, stop 41; 6 before)
          needs=("nvfp4", "moe"), cpu_examples=3,
          # D = 1024, I = 256: K loops of 8 and 2 steps of the GPU's 128-wide decode tiles, where the split
          # tiles' two-codes-per-instruction dequantization (PAIRS, CUDA only) runs
          gpu_examples=(QuantGateCase(1024, 8, 2, 2, 1, 256, 5, "normal", "dynamic", "swizzled", 256, 5),
                        QuantGateCase(1024, 8, 2, 2, 1, 256, 3, "clamps", "static", "linear", 256, 6),
                        # 160 tokens, 40 pairs an expert: the prefill tiles (impl.moe._tiles: > 16 pairs an
                        # expert, 128-row blocks) that the drawn sizes (<= 24 tokens) never reach
                        QuantGateCase(1024, 8, 2, 2, 1, 256, 160, "normal", "dynamic", "linear", 256, 7),
                        QuantGateCase(1024, 8, 2, 2, 1, 256, 160, "clamps", "static", "swizzled", 256, 8))),
)
