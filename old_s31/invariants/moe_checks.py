"""The MoE row of the correctness matrix: router and experts (SPEC §9): cases, run functions, records.

Expert ids are compared tie-aware: groups whose oracle group score ties (within eps) at the
topk_group-th place are interchangeable, and so are experts whose biased score ties at the k-th place.
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np
from hypothesis import strategies as st

from invariants.check import BadCall, Check
from invariants.compare import Comparison, RoutingReference, to_int
from invariants.labels import label
from invariants.target import ORACLE, Target
from oracle import moe as omoe
from oracle import nvfp4 as onv
from oracle.config import Geometry
from oracle.types import MoEWeights, Routing
from strategies.tensors import (SEEDS, checkpoint_bias, far_negative_logits, moe_weights, negative_bias, significant,
                                tie_at, tie_groups)

TINY = Geometry.preset("tiny")     # the pinned examples' geometry


# ------------------------------------------------------------------------ cases


class MoECase(NamedTuple):
    """One MoE layer over `tokens` tokens; family "clamps" boosts weights so the +-10 SwiGLU clamps fire,
    "tied" gives two experts identical router rows (an exact router tie), "gates_off" puts every gate
    pre-activation (routed and shared) in [-20, -11] with up of order 1..10, where the output is all
    silu's far-negative tail (invariants/moe_checks.py: moe_inputs), "unnormalized" keeps the picked
    sigmoids as they are (norm_topk_prob false, the router kernel's other branch). The ROUTING_FAMILIES (moe.route
    only) draw the correction bias like the released checkpoint's (strategies/tensors.py):
    "checkpoint_bias" (about 7 or 11, tightly clustered, exact duplicates; logits of order 1),
    "underflow" (that bias with its k-th and (k+1)-th values equal, every logit far below zero, so
    float32 selection keys tie bit for bit at the cut), "group_tie" (the same with two groups' values
    equal across the topk_group cut) and "negative_kept" (a bias of -0.5..-3: kept experts with a
    negative biased score, groups always dropped)."""

    hidden: int
    experts: int
    top_k: int
    groups: int
    topk_group: int
    inter: int
    tokens: int
    family: str
    seed: int


MOE_FAMILIES = ("normal", "clamps", "tied", "gates_off", "unnormalized")


@st.composite
def moe_cases(draw, base) -> MoECase:
    E = base.n_routed_experts
    groups, topk_group = draw(st.sampled_from(sorted({(base.n_group, base.topk_group), (1, 1), (2, 1), (4, 2)})))
    if E % groups or E // groups < 2:
        groups, topk_group = 1, 1
    k = draw(st.integers(1, min(base.num_experts_per_tok + 1, topk_group * E // groups)))
    d = draw(st.sampled_from(sorted({base.hidden_size, 48})))
    # an expert width past one reduction tile of the interpreter's kernels (32): the down GEMM's K loop
    # runs twice, the last tile partial (invariants/kernel_paths.py)
    inter = draw(st.sampled_from(sorted({base.moe_intermediate_size, 48})))
    return MoECase(d, E, k, groups, topk_group, inter, draw(st.integers(1, 24)),
                   draw(st.sampled_from(MOE_FAMILIES)), draw(SEEDS))


ROUTING_FAMILIES = ("checkpoint_bias", "underflow", "group_tie", "negative_kept")
# routers of the released model (288 experts, top-8, one group) and DeepSeek-V3's group-limited one
# (256 experts, 8 groups, 4 kept): the router alone is cheap on the interpreter (~1.4 ms a token at E=288)
FULL_ROUTERS = ((288, 8, 1, 1), (256, 8, 8, 4))
# M = 1 (decode) and a prefill-sized M; the 4096 costs the interpreter 4-5 s at E=8 and ~6 s at
# E=288, so it is one pinned row of the tiny router, not drawn (NOTES: issue 13)
ROUTE_TOKENS = st.one_of(st.just(1), st.integers(1, 24), st.integers(64, 256))


@st.composite
def route_cases(draw, base) -> MoECase:
    """moe_cases' draws for half the cases, the ROUTING_FAMILIES for the other half: the tiny router or a
    full-size one, "group_tie" / "negative_kept" always with dropped groups (topk_group < n_group)."""
    # behind a boolean that shrinks to False: a failure the plain families show shrinks back to them
    if not draw(st.booleans()):
        return draw(moe_cases(base))
    family = draw(st.sampled_from(ROUTING_FAMILIES))
    grouped = family in ("group_tie", "negative_kept")
    E = base.n_routed_experts
    tiny = [(E, g, tg) for g, tg in sorted({(base.n_group, base.topk_group), (1, 1), (2, 1), (4, 2)})
            if E % g == 0 and E // g >= 2 and (tg < g or not grouped)]
    full = [(e, g, tg) for e, _k, g, tg in FULL_ROUTERS if tg < g or not grouped]
    E, groups, topk_group = draw(st.sampled_from(tiny + full))
    k = 8 if E > 64 else draw(st.integers(1, min(base.num_experts_per_tok + 1, topk_group * E // groups)))
    d = draw(st.sampled_from(sorted({base.hidden_size, 48})))
    return MoECase(d, E, k, groups, topk_group, base.moe_intermediate_size, draw(ROUTE_TOKENS), family,
                   draw(SEEDS))


# ---------------------------------------------------------------- run functions


def moe_inputs(case: MoECase):
    """(MoEWeights float64, x [tokens, D]) of the case's family (MoECase)."""
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
                   topk_group=case.topk_group, norm_topk_prob=case.family != "unnormalized", routed_scaling_factor=2.5,
                   swiglu_limit=10.0)
    x = n((case.tokens, D))
    if case.family == "gates_off":
        w, x = _gates_off(rng, w, x)
    if case.family in ROUTING_FAMILIES:
        w, x = _routing_family(rng, case, w, x)
    return w, x


def _routing_family(rng, case: MoECase, w: MoEWeights, x):
    """The router and bias of a ROUTING_FAMILIES case (MoECase); the experts stay as drawn."""
    E, router = case.experts, w.router
    if case.family == "negative_kept":
        bias = negative_bias(rng, E)
    else:
        bias = checkpoint_bias(rng, E)
    if case.family == "underflow":
        bias = tie_at(bias, case.top_k)
    if case.family == "group_tie":
        bias = tie_groups(bias, case.groups, case.topk_group, rng)
    if case.family in ("underflow", "group_tie"):
        router, x = far_negative_logits(rng, router, x)
    return dataclasses.replace(w, router=router, e_score_correction_bias=bias), x


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
    x[:, 0] = significant(rng.uniform(3.0, 4.0, N), 3)

    def gate_rows(shape):
        g = np.zeros((*shape, D))
        g[..., 0] = -significant(rng.uniform(3.75, 5.0, shape), 5)
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


def route_on(t: Target, w, x):
    """The router of target t on float64 weights and tokens."""
    with t.poisoned():
        return t.impl.moe.route(_moe_target(t, w), t.tensor(x))


def run_route(case: MoECase, cand: Target, base: Target):
    """Expert ids tie-aware against the oracle's scores; mixture weights against the oracle's weights
    for the implementation's OWN experts (a legal flip changes which weights exist)."""
    if case.family == "tied":
        label("router tie made on purpose")
    if case.family in ROUTING_FAMILIES:
        label(f"adversarial routing: {case.family}")
    w, x = moe_inputs(case)
    ref, *outs = (route_on(t, w, x) for t in (ORACLE, cand, base))
    rc, rb = (oracle_given(w, x, o.expert_ids, ref) for o in outs)
    oc, ob = (np.sort(to_int(r.expert_ids), axis=-1) for r in (rc, rb))
    return [Comparison("route", "expert_ids", outs[0].expert_ids, _routing_reference(w, ref, case), kind="routing"),
            Comparison("route", "weights", _keyed(outs[0], oc), _keyed(rc, oc), _keyed(outs[1], ob),
                       baseline_reference=_keyed(rb, ob))]


def run_forward(case: MoECase, cand: Target, base: Target):
    """The layer's output against the oracle routed like the implementation (its own `route` decides;
    that choice is judged by moe.route)."""
    if case.family == "clamps":
        label("SwiGLU clamps firing")
    w, x = moe_inputs(case)
    own = route_on(ORACLE, w, x)
    outs, refs = [], []
    for t in (cand, base):
        wt, xt = _moe_target(t, w), t.tensor(x)
        with t.poisoned():
            outs.append(t.impl.moe.forward(wt, xt))
            r = t.impl.moe.route(wt, xt)
        used = oracle_given(w, x, r.expert_ids, own)
        refs.append(omoe.experts(w, x, used) + omoe.shared_expert(w, x))
    return [Comparison("forward", "output", outs[0], refs[0], outs[1], baseline_reference=refs[1])]


# ----------------------------------------------------------------------------- the records

# the routing boundaries of issue 13, each replayed first: M = 1 through the released router (288 experts,
# top-8) with a bit-for-bit tie at the top-8 cut and every logit far below zero; groups tied across the
# topk_group cut; kept experts with negative biased scores; the bias at ~7 or 11 over 256 tokens of the
# released router; and M = 4096 through the tiny router (the CPU's largest; NOTES: issue 13)
ROUTE_PINS = (MoECase(32, 288, 8, 1, 1, 16, 1, "underflow", 3), MoECase(32, 8, 2, 4, 2, 16, 24, "group_tie", 4),
              MoECase(32, 8, 2, 2, 1, 16, 16, "negative_kept", 5),
              MoECase(32, 288, 8, 1, 1, 16, 256, "checkpoint_bias", 6),
              MoECase(32, 8, 2, 2, 1, 16, 4096, "checkpoint_bias", 7))

CHECKS = (
    Check("moe.route", "moe", MoECase, route_cases, run_route,
          "expert ids tie-aware (groups and experts), weights from the raw sigmoid per expert",
          examples=(MoECase(32, 8, 2, 2, 1, 16, 7, "tied", 0), MoECase(32, 8, 4, 4, 2, 16, 5, "normal", 1),
                    MoECase(32, 8, 2, 2, 1, 16, 9, "gates_off", 2),
                    *ROUTE_PINS),
          # M = 4096 tokens through the released router (288 experts, top-8): ~6 s on the interpreter, cheap on a GPU
          gpu_examples=(MoECase(32, 288, 8, 1, 1, 16, 4096, "checkpoint_bias", 6),)),
    Check("moe.forward", "moe", MoECase, moe_cases, run_forward,
          "routed experts + shared expert with the clamps firing",
          examples=(MoECase(32, 8, 2, 2, 1, 16, 9, "clamps", 0), MoECase(48, 8, 1, 1, 1, 16, 1, "normal", 1),
                    MoECase(32, 8, 2, 2, 1, 16, 9, "gates_off", 2)), cpu_examples=10,
          # D = 1024 spans 8 of the GPU's 128-wide K steps (the drawn sizes fit one): a K loop of many steps,
          # and a candidate that splits the K loop (issue 14 step 7, docs/optimization_log.md) meets every range
          gpu_examples=(MoECase(1024, 8, 2, 2, 1, 64, 9, "clamps", 3),)),
)


# ----------------------------------------------------------------------------- calls to refuse

D = 32


def _routing(t: Target, ids):
    """A Routing of expert ids [N, k], each of weight 1, on target t."""
    ids = np.asarray(ids)
    return Routing(t.index(ids, long=True), t.tensor(np.ones(ids.shape), f32=True), None, None, None)


def _route(ns, t: Target, x_shape, **layer):
    """ns.route of zero tokens of `x_shape` through a tiny layer (moe_weights(**layer))."""
    return ns.route(_moe_target(t, moe_weights(np.random.default_rng(5), **layer)), t.tensor(np.zeros(x_shape)))


def _experts(ns, t: Target, ids=((0, 1), (2, 3)), nvfp4=None):
    """ns.experts on 2 zero tokens of the tiny layer routed to `ids`; nvfp4: an edit of the oracle's
    NVFP4 experts of that layer (NumPy, before the conversion), None for the unquantized path."""
    w = moe_weights(np.random.default_rng(50))
    kw = {}
    if nvfp4 is not None:
        scale = (1.0 + np.arange(w.num_experts))[:, None, None]      # a distinct global scale per expert
        kw["nvfp4"] = t.nvfp4_experts(nvfp4(onv.quantize_experts(w.gate_up_proj, w.down_proj * scale)))
    return ns.experts(_moe_target(t, w), t.tensor(np.zeros((2, D))), _routing(t, ids), **kw)


def _edit(proj: str, **fields):
    """An edit of NVFP4Experts: `fields` of projection `proj` replaced by fn(old value)."""
    def edit(nv):
        tensor = getattr(nv, proj)
        return nv._replace(**{proj: tensor._replace(**{k: f(getattr(tensor, k)) for k, f in fields.items()})})
    return edit


def _nan_scale(s):
    """An E4M3 scale array with one NaN byte (0x7F)."""
    s = np.array(s, copy=True)
    s.view(np.uint8)[1, 2, 0] = 0x7F
    return s


def _set(i: int, value):
    """An edit setting entry i of an array (a copy) to `value`."""
    def f(g):
        g = np.array(g, copy=True)
        g[i] = value
        return g
    return f


# the baseline's experts take no NVFP4 experts (it dequantizes up front), and the oracle's checks name the
# NVFP4Tensor field, not the projection (nor do they catch a short global_decode before indexing it)
NVFP4 = ("triton",)

BAD_CALLS = (
    BadCall("route(x [N, D + 1])", lambda ns, t: _route(ns, t, (3, D + 1)), "x"),
    # at most 8 experts a token is the Triton router's limit; the oracle and the baseline take any top_k
    BadCall("route(top_k 9 of 32 experts in 1 group: past 8)",
            lambda ns, t: _route(ns, t, (2, D), experts=32, top_k=9, n_group=1), "top_k", targets=("triton",)),
    BadCall("experts(expert id 8 of 8 experts)", lambda ns, t: _experts(ns, t, ids=((0, 8), (1, 2))),
            r"routing\.expert_ids"),
    BadCall("experts(routing of 1 token for 2)", lambda ns, t: _experts(ns, t, ids=((0, 1),)), "routing"),
    BadCall("experts(nvfp4 gate_up packed of K=24)",
            lambda ns, t: _experts(ns, t, nvfp4=_edit("gate_up", packed=lambda p: p[..., :12],
                                                      block_scale=lambda s: s[..., :1])),
            r"nvfp4\.gate_up\.packed: K=24 is not a multiple of 16", targets=NVFP4),
    BadCall("experts(nvfp4 gate_up block_scale of one row fewer)",
            lambda ns, t: _experts(ns, t, nvfp4=_edit("gate_up", block_scale=lambda s: s[:, :-1])),
            r"nvfp4\.gate_up\.block_scale", targets=NVFP4),
    BadCall("experts(nvfp4 down block_scale NaN)",
            lambda ns, t: _experts(ns, t, nvfp4=_edit("down", block_scale=_nan_scale)),
            r"nvfp4\.down\.block_scale", targets=NVFP4),
    BadCall("experts(nvfp4 down global_decode inf)",
            lambda ns, t: _experts(ns, t, nvfp4=_edit("down", global_decode=_set(3, np.inf))),
            r"nvfp4\.down\.global_decode", targets=NVFP4),
    BadCall("experts(nvfp4 gate_up global_decode 0)",
            lambda ns, t: _experts(ns, t, nvfp4=_edit("gate_up", global_decode=_set(5, 0.0))),
            r"nvfp4\.gate_up\.global_decode", targets=NVFP4),
    BadCall("experts(nvfp4 down global_decode of E - 1)",
            lambda ns, t: _experts(ns, t, nvfp4=_edit("down", global_decode=lambda g: g[:-1])),
            r"nvfp4\.down\.global_decode", targets=NVFP4),
    # gate_up's global_decode is [E, 2] (gate, up): a bad UP half alone must be refused too
    BadCall("experts(nvfp4 gate_up global_decode up half of expert 2 NaN)",
            lambda ns, t: _experts(ns, t, nvfp4=_edit("gate_up", global_decode=_set((2, 1), np.nan))),
            r"nvfp4\.gate_up\.global_decode.*expert 2 \(up half\)", targets=NVFP4),
    BadCall("experts(nvfp4 gate_up global_decode up half of expert 6 0)",
            lambda ns, t: _experts(ns, t, nvfp4=_edit("gate_up", global_decode=_set((6, 1), 0.0))),
            r"nvfp4\.gate_up\.global_decode.*expert 6 \(up half\)", targets=NVFP4),
    BadCall("experts(nvfp4 gate_up global_decode [E, 3])",
            lambda ns, t: _experts(ns, t, nvfp4=_edit("gate_up", global_decode=lambda g: g[:, [0, 1, 1]])),
            r"nvfp4\.gate_up\.global_decode: expected a float32 tensor \[E\]", targets=NVFP4),
    # down has one matrix per expert: a pair of scales there is no layout
    BadCall("experts(nvfp4 down global_decode [E, 2])",
            lambda ns, t: _experts(ns, t, nvfp4=_edit("down", global_decode=lambda g: np.stack([g, g], -1))),
            r"nvfp4\.down\.global_decode", targets=NVFP4),
    # the layout marker, not the shape, says how to read the scales; a mismatch is refused by shape
    BadCall("experts(nvfp4 gate_up scale_layout swizzled on linear scales)",
            lambda ns, t: _experts(ns, t, nvfp4=_edit("gate_up", scale_layout=lambda _: "swizzled")),
            r"nvfp4\.gate_up\.block_scale: shape .* \[E, Mp, Kp\]", targets=NVFP4),
    BadCall("experts(nvfp4 down swizzled scales marked linear)",
            lambda ns, t: _experts(ns, t, nvfp4=lambda nv: onv.swizzle_experts(nv)._replace(
                down=onv.swizzle_experts(nv).down._replace(scale_layout="linear"))),
            r"nvfp4\.down\.block_scale: shape .* \[E, N, K/16\]", targets=NVFP4),
    BadCall("experts(nvfp4 gate_up scale_layout 'tiled')",
            lambda ns, t: _experts(ns, t, nvfp4=_edit("gate_up", scale_layout=lambda _: "tiled")),
            r"nvfp4\.gate_up\.scale_layout", targets=NVFP4),
)
