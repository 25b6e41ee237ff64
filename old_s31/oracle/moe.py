"""Feed-forward in float64 NumPy: clamped SwiGLU, dense MLP, and the routed + shared MoE (SPEC §9).

Letters: N tokens (every leading axis of x flattened), D hidden size, E routed experts, k experts
per token (top_k), G expert groups (n_group), E/G experts per group, I routed expert width,
F dense or shared width (intermediate_size, or I·n_shared_experts).

Pipeline: `route` turns x into a Routing (the sigmoid scores, the biased selection scores, the
group scores, the chosen experts and their mixture weights); `experts` sums the chosen experts'
clamped-SwiGLU outputs with those weights; `forward` = `experts` + `shared_expert`.

Precision: the reference computes the router in f32 even in a float64 model (SPEC §2); here it is
float64, so logits agree to ~1e-7 relative and near-tied selections must be compared tie-aware.

Tie rule (STYLE 4): among equal scores the lowest index wins (a stable sort), for groups and for
experts alike. transformers uses torch.topk, which is not tie-stable, so comparisons against it
must be tie-aware (accept either side of a tie at the k-th score, TESTING.md).

Group masking: experts outside the kept groups get a selection score of -inf, as SPEC §9.3 states.
(DeepSeek-V3-style routers in transformers/vLLM/SGLang mask with 0.0 instead; the two differ only
when a kept expert's biased score is negative.)
"""
from __future__ import annotations

import dataclasses

import numpy as np
import scipy.special

from oracle import nvfp4 as onv
from oracle.types import DenseMLPWeights, MoEWeights, Routing

NORM_EPS = 1e-20


def _f64(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float64)


def _tokens(x, hidden: int) -> np.ndarray:
    """x [..., D] -> [N, D] float64, raising when the last axis is not D."""
    x = _f64(x)
    if x.ndim < 1 or x.shape[-1] != hidden:
        raise ValueError(f"x: expected [..., D] with D={hidden}, got shape {tuple(x.shape)}")
    return x.reshape(-1, hidden)


# ----------------------------------------------------------------------------- clamped SwiGLU


def silu(x):
    return x * scipy.special.expit(x)


def swiglu(gate, up, limit: float):
    """silu(min(gate, L)) · clip(up, -L, L): gate clamped from above only, up on both sides (SPEC §9.1)."""
    if not limit > 0:
        raise ValueError(f"limit: {limit}, expected > 0 (swiglu_limit)")
    gate, up = _f64(gate), _f64(up)
    return silu(np.minimum(gate, limit)) * np.clip(up, -limit, limit)


def dense_mlp(w: DenseMLPWeights, x):
    """y = act(x Wg^T, x Wu^T) Wd^T (SPEC §9.2).

    Args:
        x: [..., D]
    Returns:
        y: [..., D]
    """
    w.validate()
    D = int(w.gate_proj.shape[-1])
    xs = _tokens(x, D)                                                            # [N, D]
    h = swiglu(xs @ _f64(w.gate_proj).T, xs @ _f64(w.up_proj).T, w.swiglu_limit)  # [N, F]
    return (h @ _f64(w.down_proj).T).reshape(np.shape(x))


def shared_expert(w: MoEWeights, x):
    """The shared expert: a dense clamped-SwiGLU MLP of width I·n_shared, added unweighted (SPEC §9.3).

    Returns zeros when the layer has no shared expert (n_shared_experts = 0).
    """
    if w.shared is None:
        return np.zeros(np.shape(x))
    return dense_mlp(w.shared, x)


# ----------------------------------------------------------------------------- routing


def route(w: MoEWeights, x, forced=None) -> Routing:
    """Sigmoid router with selection bias, group limit, top-k and renormalized weights (SPEC §9.3).

    s = sigmoid(x Wr^T);  ŝ = s + bias;  group score = sum of the top-2 ŝ of each group of E/G
    contiguous experts;  keep the topk_group best groups (ŝ = -inf elsewhere);  sel = top-k of ŝ;
    w = s[sel] (UN-biased), w / (Σ w + 1e-20) if norm_topk_prob, THEN x routed_scaling_factor.
    Ties go to the lowest group / expert id (module docstring).

    Args:
        x: [..., D]
        forced: [N, k] expert ids to use instead of the top-k (an implementation's own choice, for a
            decision-conditioned comparison): the weights are then those of the forced experts
    Returns:
        Routing (oracle.types) with N = the product of x's leading axes
    """
    w.validate()
    xs = _tokens(x, int(w.router.shape[-1]))                                      # [N, D]
    s = scipy.special.expit(xs @ _f64(w.router).T)                               # [N, E]
    biased = s + _f64(w.e_score_correction_bias)                                 # [N, E]
    groups = group_scores(biased, w.n_group)                                     # [N, G]
    biased = np.where(kept_experts(groups, w.topk_group, w.num_experts), biased, -np.inf)
    ids = _top(biased, w.top_k) if forced is None else check_expert_ids(forced, xs.shape[0], w)   # [N, k]
    weights = mixture_weights(np.take_along_axis(s, ids, axis=-1), w.norm_topk_prob,
                              w.routed_scaling_factor)
    return Routing(ids, weights, s, biased, groups)


def check_expert_ids(ids, N: int, w: MoEWeights) -> np.ndarray:
    """Validate forced expert ids [N, k]: integers in [0, E), distinct per token; int64."""
    ids = np.asarray(ids)
    if ids.shape != (N, w.top_k) or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"forced: expected integer expert ids [N, k] = {(N, w.top_k)}, got {ids.dtype} {ids.shape}")
    if ids.size and (ids.min() < 0 or ids.max() >= w.num_experts):
        raise ValueError(f"forced: expert ids must lie in [0, E={w.num_experts}), found [{ids.min()}, {ids.max()}]")
    if any(len(set(row)) != len(row) for row in ids.tolist()):
        raise ValueError("forced: a token names the same expert twice")
    return ids.astype(np.int64)


def group_scores(biased, n_group: int):
    """[N, E] -> [N, G]: the sum of the top-2 biased scores in each group of E/G contiguous experts."""
    N, E = biased.shape
    per = np.sort(biased.reshape(N, n_group, E // n_group), axis=-1)             # [N, G, E/G]
    return per[..., -1] + per[..., -2]


def kept_experts(groups, topk_group: int, num_experts: int):
    """[N, G] group scores -> [N, E] bool: the expert lies in one of the topk_group best groups."""
    N, G = groups.shape
    keep = np.zeros((N, G), dtype=bool)
    np.put_along_axis(keep, _top(groups, topk_group), True, axis=-1)
    return np.repeat(keep, num_experts // G, axis=-1)


def _top(scores, k: int):
    """[N, M] -> [N, k] int64 indices of the k largest, best first, lowest index first on ties."""
    return np.argsort(-scores, axis=-1, kind="stable")[:, :k].astype(np.int64)


def mixture_weights(picked, norm_topk_prob: bool, routed_scaling_factor: float):
    """[N, k] un-biased sigmoid of the chosen experts -> weights: w / (Σ w + 1e-20), then x factor."""
    if norm_topk_prob:
        picked = picked / (picked.sum(axis=-1, keepdims=True) + NORM_EPS)
    return picked * routed_scaling_factor


# ----------------------------------------------------------------------------- experts


def expert(w: MoEWeights, e: int, x):
    """Routed expert e on x [N, D]: act(x gu[:I]^T, x gu[I:]^T) down^T -> [N, D] (SPEC §9.3)."""
    I = w.expert_dim
    gu = x @ _f64(w.gate_up_proj[e]).T                                           # [N, 2I]
    return swiglu(gu[:, :I], gu[:, I:], w.swiglu_limit) @ _f64(w.down_proj[e]).T


def experts(w: MoEWeights, x, routing: Routing, nvfp4=None, w4a4: bool = False):
    """The routed mixture y = Σ_{e∈sel} w_e · expert_e(x) (SPEC §9.3), each expert run on its tokens.

    Args:
        x: [..., D];  routing: from `route` on the same x (N = the product of x's leading axes)
        nvfp4: None (w.gate_up_proj / w.down_proj as they are), or NVFP4 routed experts
            (oracle.nvfp4.NVFP4Experts or a checkpoint's NVFP4ExpertWeights): the weights are then
            their exact float64 dequantization (W4A16), gate and up halves each by its own global
            scale (global_decode [E, 2]), block scales in either layout (scale_layout)
        w4a4: also quantize-dequantize each GEMM input to NVFP4 (`nvfp4` required): see `_w4a4_experts`
    Returns:
        y: [..., D]
    """
    w.validate()
    xs = _tokens(x, int(w.router.shape[-1]))                                     # [N, D]
    ids, wts = np.asarray(routing.expert_ids), _f64(routing.weights)
    N = xs.shape[0]
    if ids.shape != (N, w.top_k) or wts.shape != (N, w.top_k):
        raise ValueError(f"routing: expected expert_ids and weights [N, k] = {(N, w.top_k)}, "
                         f"got {ids.shape} and {wts.shape}")
    if ids.size and (ids.min() < 0 or ids.max() >= w.num_experts):
        raise ValueError(f"routing.expert_ids: expected ids in [0, E={w.num_experts}), "
                         f"found [{ids.min()}, {ids.max()}]")
    if w4a4 and nvfp4 is None:
        raise ValueError("w4a4: needs the NVFP4 experts (nvfp4=...): W4A4 has no bf16-weight form")
    if nvfp4 is not None:
        w = _dequantized(w, nvfp4)
    if w4a4:
        return _w4a4_experts(w, xs, ids, wts, onv.fused_experts(nvfp4)).reshape(np.shape(x))
    y = np.zeros_like(xs)                                                        # [N, D]
    for e in np.unique(ids):
        n, slot = np.nonzero(ids == e)
        # top-k ids are distinct per token, so each row appears once here and += cannot collide
        y[n] += wts[n, slot, None] * expert(w, int(e), xs[n])
    return y.reshape(np.shape(x))


def _dequantized(w: MoEWeights, nvfp4) -> MoEWeights:
    """w with gate_up_proj / down_proj replaced by the exact float64 dequantization of `nvfp4`."""
    gu, dn = onv.dequantize_experts(nvfp4)
    E, D = w.num_experts, int(w.router.shape[-1])
    if gu.shape[0] != E or gu.shape[2] != D or dn.shape != (E, D, gu.shape[1] // 2):
        raise ValueError(f"nvfp4: gate_up {gu.shape} / down {dn.shape} do not fit E={E}, D={D}")
    return dataclasses.replace(w, gate_up_proj=gu, down_proj=dn)


def _input_scales(t, acts) -> np.ndarray:
    """[E] ENCODE scales of one GEMM's input: the static input_global_scale, else one dynamic value."""
    if t.input_global_scale is not None:
        return np.asarray(t.input_global_scale, dtype=np.float32).reshape(-1)
    return np.full(np.asarray(t.global_decode).shape[0], onv.dynamic_input_scale(acts), dtype=np.float32)


def _w4a4_experts(w: MoEWeights, xs, ids, wts, nv):
    """W4A4 emulation (NVFP4.md A6): y = Σ w_e · qdq(h_e, G_h[e]) down_e^T with
    h_e = act(qdq(x, G_x[e]) gate_up_e^T), qdq per token row and 16-element block along K, weights
    the exact dequantization (so each half carries its own weight scale: a kernel's alpha per half is
    g_half / G_x; x is quantized once, with the one G_x[e] of the fused gate_up). G from the checkpoint's input_global_scale or `dynamic_input_scale`
    (x: all N tokens; h: every routed row of every expert, so all h first, then one amax)."""
    I = w.expert_dim
    gx = _input_scales(nv.gate_up, xs)
    rows = {}
    for e in np.unique(ids):
        n, slot = np.nonzero(ids == e)
        gu = onv.qdq_activation(xs[n], gx[e]) @ _f64(w.gate_up_proj[e]).T          # [n, 2I]
        rows[int(e)] = (n, slot, swiglu(gu[:, :I], gu[:, I:], w.swiglu_limit))    # h [n, I]
    hs = np.concatenate([h for _, _, h in rows.values()]) if rows else np.zeros((0, I))
    gh = _input_scales(nv.down, hs)
    y = np.zeros_like(xs)
    for e, (n, slot, h) in rows.items():
        y[n] += wts[n, slot, None] * (onv.qdq_activation(h, gh[e]) @ _f64(w.down_proj[e]).T)
    return y


def forward(w: MoEWeights, x, nvfp4=None, w4a4: bool = False, forced=None):
    """The MoE layer: routed mixture + shared expert (SPEC §9.3); `nvfp4` / `w4a4` quantize the routed
    experts only (the shared expert stays unquantized, as in GLM-5.3-Flash-NVFP4: NVFP4.md A5).

    Args:
        x: [..., D];  forced: [N, k] expert ids to route to instead of the top-k (see `route`)
    Returns:
        y: [..., D]
    """
    return experts(w, x, route(w, x, forced), nvfp4, w4a4) + shared_expert(w, x)
