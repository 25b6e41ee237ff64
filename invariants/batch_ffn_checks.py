"""Batch invariance of the per-token side (MoE, its NVFP4 GEMMs, mHC around every sublayer): a row of
tokens alone equals the same tokens among others (issue 13 item 2): cases, run functions, records.

As invariants/batch_checks.py: a drawn Placement, the candidate on the batch and on the row alone, a
claimed function (BATCH_INVARIANT) compared `exact`, any other under its mechanism's self_consistency
contract of quantity "batch"; an expert choice tie-aware against the row alone, and the outputs that
follow from it only where the row's choice agrees (a legal flip changes which experts run).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch
from hypothesis import strategies as st

from invariants.batch_checks import label_placement, claimed, placed, row_comparison
from invariants.check import Check
from invariants.compare import Comparison, RoutingReference, to_int, to_numpy
from invariants.labels import label
from invariants.mhc_checks import mhc_cases
from invariants.moe_checks import MoECase, _moe_target, moe_cases, moe_inputs
from invariants.nvfp4_checks import _calibrated_scales, _candidate_experts, require_nvfp4_form
from invariants.target import Target
from oracle import moe as omoe
from oracle import nvfp4 as onv
from oracle.config import Geometry
from oracle.types import Routing
from strategies import tensors as tz
from strategies.sequences import placements
from strategies.tensors import SEEDS

TINY = Geometry.preset("tiny")     # the pinned examples' geometry
TOKENS = st.integers(1, 8)         # tokens of a row: a decode step (1) up to a short prefill


def _span(lengths, at: int) -> slice:
    """Row `at`'s tokens on the flattened token axis (rows concatenated in order)."""
    s = sum(lengths[:at])
    return slice(s, s + lengths[at])


# ------------------------------------------------------------------------ MoE


class MoEBatchCase(NamedTuple):
    """One MoE layer (MoECase's fields but its token count) over rows of `lengths` tokens, concatenated
    on the token axis; the row of interest is row `at`."""

    hidden: int
    experts: int
    top_k: int
    groups: int
    topk_group: int
    inter: int
    lengths: tuple[int, ...]
    at: int
    family: str
    seed: int

    def moe_case(self) -> MoECase:
        """The MoECase of the whole batch (its tokens: every row's)."""
        return MoECase(*self[:6], sum(self.lengths), self.family, self.seed)


@st.composite
def moe_batch_cases(draw, base) -> MoEBatchCase:
    """moe_cases' layer and family, rows of 1-8 tokens."""
    m = draw(moe_cases(base))
    p = draw(placements(TOKENS, companion_lengths=TOKENS, max_rows=3))
    return MoEBatchCase(*m[:6], p.lengths, p.at, m.family, m.seed)


def _host_routing(r) -> Routing:
    """A candidate's Routing as host NumPy (what the tie-aware comparison reads)."""
    return Routing(to_int(r.expert_ids), to_numpy(r.weights), to_numpy(r.scores),
                   None if r.biased is None else to_numpy(r.biased), to_numpy(r.group_scores))


def _same_experts(a, b) -> np.ndarray:
    """[n] bool: token t chose the same set of experts in both expert-id arrays [n, k]."""
    a, b = np.sort(to_int(a), -1), np.sort(to_int(b), -1)
    return (a == b).all(-1)


def run_moe_batch(case: MoEBatchCase, cand: Target, base: Target):
    """route, experts (given the batch's own routing: the GEMMs alone) and forward: row `at` vs alone."""
    label_placement(case.lengths, case.at)
    w, x = moe_inputs(case.moe_case())
    sl, lengths, at = _span(case.lengths, case.at), case.lengths, case.at
    wt = _moe_target(cand, w)
    with cand.poisoned():
        r = cand.impl.moe.route(wt, cand.tensor(x))
        r1 = cand.impl.moe.route(wt, cand.tensor(x[sl]))
        given = Routing(*(None if a is None else a[sl] for a in r))
        ye, ye1 = cand.impl.moe.experts(wt, cand.tensor(x), r), cand.impl.moe.experts(wt, cand.tensor(x[sl]), given)
        y, y1 = cand.impl.moe.forward(wt, cand.tensor(x)), cand.impl.moe.forward(wt, cand.tensor(x[sl]))
    where = lambda what: placed(lengths, at, what)  # noqa: E731
    res = [row_comparison(cand, "moe", "experts", ye[sl], ye1, where("experts output, the batch's routing"))]
    if claimed(cand, "moe", "route"):
        res += [Comparison("route", "batch", a[sl], b, kind="exact", where=where(f"route {what}"))
                for a, b, what in ((r.expert_ids, r1.expert_ids, "expert ids"), (r.weights, r1.weights, "weights"),
                                   (r.scores, r1.scores, "scores"))]
        same = np.ones(len(x[sl]), dtype=bool)
    else:
        ref = RoutingReference(_host_routing(r1), w.e_score_correction_bias, case.top_k, case.topk_group, case.groups)
        same = _same_experts(r.expert_ids[sl], r1.expert_ids)
        if not same.all():
            label("legal expert flip between the row in the batch and alone: its outputs not compared")
        res += [Comparison("route", "batch", r.expert_ids[sl], ref, kind="routing",
                           where=where("route expert ids, tie-aware against the row alone")),
                Comparison("route", "batch", r.scores[sl], r1.scores, kind="self_consistency", where=where("route scores")),
                Comparison("route", "batch", to_numpy(r.weights[sl])[same], to_numpy(r1.weights)[same],
                           kind="self_consistency", where=where("route weights of the tokens choosing alike"))]
    # a claim of forward makes every token's output exact (its routing must then agree too)
    every = claimed(cand, "moe", "forward")
    keep = np.ones_like(same) if every else same
    res.append(row_comparison(cand, "moe", "forward", to_numpy(y[sl])[keep], to_numpy(y1)[keep],
                              where("forward output" + ("" if every else " of the tokens routed alike"))))
    return res


# ------------------------------------------------------------------------ mHC


class MHCBatchCase(NamedTuple):
    """mHC on rows of `lengths` tokens each (every row as long: mHC has no mask) of N streams of width
    D, `iters` Sinkhorn iterations; the row of interest is batch row `at`."""

    streams: int
    hidden: int
    iters: int
    lengths: tuple[int, ...]
    at: int
    family: str
    seed: int


@st.composite
def mhc_batch_cases(draw, base) -> MHCBatchCase:
    """mhc_cases' streams, width, iterations and family, rows of 1-5 tokens."""
    m = draw(mhc_cases(base))
    p = draw(placements(st.integers(1, 5), max_rows=3))
    return MHCBatchCase(m.streams, m.hidden, m.iters, p.lengths, p.at, m.family, m.seed)


def run_mhc_batch(case: MHCBatchCase, cand: Target, base: Target):
    """coefficients, collapse and write_back (the last two from the batch's own coefficients): batch
    row `at` vs the row alone."""
    label_placement(case.lengths, case.at)
    rng = np.random.default_rng(case.seed)
    B, S, at = len(case.lengths), case.lengths[case.at], case.at
    w = tz.mhc_weights(rng, case.streams, case.hidden, case.iters, case.family)
    X = rng.standard_normal((B, S, case.streams, case.hidden))
    y = rng.standard_normal((B, S, case.hidden))
    wt = w.map(lambda a: cand.tensor(a, f32=True))
    Xt, yt = cand.tensor(X), cand.tensor(y)
    one = slice(at, at + 1)
    with cand.poisoned():
        pre, post, comb = cand.impl.mhc.coefficients(wt, Xt)
        pre1, post1, comb1 = cand.impl.mhc.coefficients(wt, Xt[one])
        u, u1 = cand.impl.mhc.collapse(pre, Xt), cand.impl.mhc.collapse(pre[one], Xt[one])
        xn = cand.impl.mhc.write_back(post, comb, Xt, yt)
        xn1 = cand.impl.mhc.write_back(post[one], comb[one], Xt[one], yt[one])
    res = [row_comparison(cand, "mhc", "coefficients", a[one], b, placed(case.lengths, at, f"coefficients {what}"))
           for a, b, what in ((pre, pre1, "pre"), (post, post1, "post"), (comb, comb1, "comb"))]
    res += [row_comparison(cand, "mhc", "collapse", u[one], u1, placed(case.lengths, at, "collapse u")),
            row_comparison(cand, "mhc", "write_back", xn[one], xn1, placed(case.lengths, at, "write_back X_new"))]
    return res


# ------------------------------------------------------------------------ NVFP4


def run_nvfp4_batch(case: MoEBatchCase, cand: Target, base: Target):
    """qdq_activation under a fixed static scale, and the NVFP4 expert GEMMs (W4A4 with static input
    scales, whose kernels are W4A16's plus the activations' quantization in their prologue; the
    oracle's routing of the batch): row `at` vs the row alone.

    The dynamic W4A4 scale is the amax of the whole call's activations by definition (oracle.nvfp4
    dynamic_input_scale): a row under it depends on its companions, so it is not drawn here."""
    require_nvfp4_form("nvfp4.batch", case.hidden, case.inter)
    label_placement(case.lengths, case.at)
    w, x = moe_inputs(case.moe_case())
    sl, lengths, at = _span(case.lengths, case.at), case.lengths, case.at
    rng = np.random.default_rng([case.seed, 1])
    nv = onv.quantize_experts(w.gate_up_proj, w.down_proj)
    nv = onv.with_input_scales(nv, *_calibrated_scales(w, nv, rng.standard_normal((64, case.hidden))))
    G = float(onv.dynamic_input_scale(rng.standard_normal((64, case.hidden))))
    r = omoe.route(w, x)
    wt, xt = _moe_target(cand, w), cand.tensor(x)
    routing = Routing(torch.as_tensor(r.expert_ids, device=cand.device),
                      torch.as_tensor(r.weights, dtype=torch.float32, device=cand.device), None, None, None)
    given = Routing(routing.expert_ids[sl], routing.weights[sl], None, None, None)
    g = torch.tensor(G, dtype=torch.float32, device=cand.device)
    with cand.poisoned():
        q, q1 = cand.impl.nvfp4.qdq_activation(xt, g), cand.impl.nvfp4.qdq_activation(xt[sl], g)
    res = [row_comparison(cand, "nvfp4", "qdq_activation", q[sl], q1, placed(lengths, at, "qdq_activation"))]
    with cand.poisoned():
        ye = _candidate_experts(cand, wt, xt, routing, nv, True)
        ye1 = _candidate_experts(cand, wt, xt[sl], given, nv, True)
    kind = "exact" if claimed(cand, "moe", "experts") else "self_consistency"
    res.append(Comparison("experts_w4a4", "batch", ye[sl], ye1, kind=kind,
                          where=placed(lengths, at, "NVFP4 W4A4 experts output (static input scales)")))
    return res


@st.composite
def nvfp4_batch_cases(draw, base) -> MoEBatchCase:
    """moe_cases' layer (families normal and clamps: the quantization gate's), rows of 1-8 tokens."""
    m = draw(moe_cases(base))
    p = draw(placements(TOKENS, companion_lengths=TOKENS, max_rows=3))
    return MoEBatchCase(*m[:6], p.lengths, p.at, "clamps" if m.family == "clamps" else "normal", m.seed)


# ----------------------------------------------------------------------------- the records

CHECKS = (
    Check("moe.batch", "moe", MoEBatchCase, moe_batch_cases, run_moe_batch,
          "a row of tokens alone == among other tokens: routing (tie-aware), experts on the same routing, "
          "the layer's output",
          examples=(MoEBatchCase(32, 8, 2, 2, 1, 16, (5, 8, 3), 1, "normal", 0),), cpu_examples=1),
    Check("mhc.batch", "mhc", MHCBatchCase, mhc_batch_cases, run_mhc_batch,
          "a row's coefficients, collapse and write-back alone == among other rows",
          examples=(MHCBatchCase(4, 32, 3, (4, 4, 4), 1, "boosted", 0),), cpu_examples=2),
    Check("nvfp4.batch", "nvfp4", MoEBatchCase, nvfp4_batch_cases, run_nvfp4_batch,
          "a row's NVFP4 activation quantization and W4A4 (static scales) expert GEMMs alone == among "
          "other rows",
          examples=(MoEBatchCase(32, 8, 2, 2, 1, 16, (6, 5), 0, "normal", 0),), cpu_examples=1,
          needs=("nvfp4", "moe")),
)
