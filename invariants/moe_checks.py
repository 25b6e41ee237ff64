"""The MoE and NVFP4 rows of the correctness matrix as records' run functions (see kda_checks.py).

Expert ids are compared tie-aware: groups whose oracle group score ties (within eps) at the
topk_group-th place are interchangeable, and so are experts whose biased score ties at the k-th place.
NVFP4 quantization and dequantization are held bit-exact against the oracle (the honest bar: the
same codes and scales dequantize to the same numbers).
"""
from __future__ import annotations

import numpy as np
import torch

from invariants.compare import to_int
from invariants.kda_checks import Comparison
from invariants.labels import label
from invariants.target import Target, poisoned_memory
from oracle import moe as omoe
from oracle import nvfp4 as onv
from oracle.types import MoEWeights, NVFP4Tensor
from strategies import cases as sc


def moe_inputs(case: sc.MoECase):
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
    return w, n((case.tokens, D))


def _moe_target(t: Target, w):
    return w.__class__(**{f: (t.tensor(getattr(w, f), f32=f in ("router", "e_score_correction_bias"))
                             if hasattr(getattr(w, f), "shape") else getattr(w, f))
                          for f in w.__dataclass_fields__})


def expert_sets_agree(cand_ids, ref, bias, top_k: int, topk_group: int, n_group: int, eps: float):
    """(ok, tie_tokens, reason): tie-aware expert sets (groups, then experts, tied within eps)."""
    ids = to_int(cand_ids)
    E = ref.scores.shape[-1]
    full = ref.scores + bias                                                     # unmasked biased scores
    ties = 0
    for t in range(ids.shape[0]):
        c = set(ids[t].tolist())
        if len(c) != top_k or min(c) < 0 or max(c) >= E:
            return False, ties, f"token {t}: ids {sorted(c)} not {top_k} distinct experts in [0, {E})"
        if c == set(to_int(ref.expert_ids)[t].tolist()):
            continue
        gs = np.sort(ref.group_scores[t])[::-1]
        gk = gs[topk_group - 1]
        per = E // n_group
        ok_groups = {g for g in range(n_group) if ref.group_scores[t, g] >= gk - eps}
        allowed = np.array([e // per in ok_groups for e in range(E)])
        sc_ = np.where(allowed, full[t], -np.inf)
        kth = np.sort(sc_)[::-1][top_k - 1]
        must = {e for e in range(E) if sc_[e] > kth + eps and ref.group_scores[t, e // per] > gk + eps}
        free = {e for e in range(E) if sc_[e] >= kth - eps}
        if must <= c <= must | free:
            ties += 1
            continue
        return False, ties, f"token {t}: experts {sorted(c)} vs oracle {sorted(to_int(ref.expert_ids)[t].tolist())}"
    return True, ties, ""


def run_route(case: sc.MoECase, cand: Target, base: Target):
    if case.family == "tied":
        label("router tie made on purpose")
    w, x = moe_inputs(case)
    ref = omoe.route(w, x)
    outs = []
    for t in (cand, base):
        with poisoned_memory():
            outs.append(t.impl.moe.route(_moe_target(t, w), t.tensor(x)))
    ok, ties, reason = expert_sets_agree(outs[0].expert_ids, ref, w.e_score_correction_bias, case.top_k,
                                         case.topk_group, case.groups, eps=1e-4)
    if ties:
        label("tie at expert selection boundary")
    # weights keyed by expert id, on tokens whose sets agree (a tied choice changes the weights)
    same = [t for t in range(case.tokens)
            if set(to_int(outs[0].expert_ids)[t].tolist()) == set(ref.expert_ids[t].tolist())]

    def keyed(r):
        ids, wts = to_int(r.expert_ids), np.asarray(r.weights.detach().float().cpu() if hasattr(r.weights, "detach")
                                                    else r.weights, np.float64)
        return np.array([[dict(zip(ids[t], wts[t]))[e] for e in sorted(ref.expert_ids[t])] for t in same])
    res = [Comparison("route", "weights", keyed(outs[0]), keyed(ref), keyed(outs[1]))]
    res.append(Comparison("route", "expert_ids", np.zeros(1) if ok else np.full(1, np.inf), np.zeros(1),
                          kind="exact"))
    if not ok:
        label(f"expert ids differ: {reason}")
    return res


def run_forward(case: sc.MoECase, cand: Target, base: Target):
    if case.family == "clamps":
        label("SwiGLU clamps firing")
    w, x = moe_inputs(case)
    y = omoe.forward(w, x)
    outs = []
    for t in (cand, base):
        with poisoned_memory():
            outs.append(t.impl.moe.forward(_moe_target(t, w), t.tensor(x)))
    return [Comparison("forward", "output", outs[0], y, outs[1])]


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
