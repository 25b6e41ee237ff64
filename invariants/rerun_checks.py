"""Run-twice determinism of the DSA indexer, MLA, MoE, mHC and NVFP4 (issue 13 item 2; kda.rerun is in
invariants/kda_checks.py): cases, run functions, check records.

Each check calls the candidate's functions twice on the same inputs and holds every output to
bit-equality (kind `exact`, quantity "rerun"): a kernel that races (atomics summing partials in
arrival order) or breaks an exact tie in a run-dependent order differs between the runs. The inputs
include exact ties on purpose, where a tie-break that is not a pure function of the scores shows: the
indexer's tie families (`exact`: one pool copied into the next; `pools`: every pool of a row the same
tokens, so every candidate pool scores alike and the top-k cut falls inside a tie), and the router's
(strategies/tensors.py tie_at / tie_groups through moe_checks.route_cases: selection keys equal bit for
bit at the k-th place; "tied": two experts' router rows equal).
"""
from __future__ import annotations

import numpy as np
import torch
from hypothesis import strategies as st

from invariants.check import Check
from invariants.compare import Comparison
from invariants.dsa_checks import IndexCase, index_cases, index_inputs
from invariants.labels import label
from invariants.mhc_checks import MHCCase, mhc_cases, mhc_inputs
from invariants.mla_checks import absorbed_cases
from invariants.moe_checks import MoECase, _moe_target, moe_inputs, route_cases
from invariants.nvfp4_checks import NVFP4Case, nvfp4_cases, nvfp4_weights
from invariants.target import Target
from oracle import dsa as odsa
from oracle import mla as omla
from oracle import nvfp4 as onv
from oracle.config import Geometry
from strategies import tensors as tz
from strategies.geometry import DSAGeometry

TINY = Geometry.preset("tiny")     # the pinned examples' geometry


def twice(t: Target, call):
    """`call()` run twice on target t, each in poisoned memory: (first, second)."""
    out = []
    for _ in range(2):
        with t.poisoned():
            out.append(call())
    return out


def reruns(path: str, pairs) -> list:
    """One exact "rerun" comparison per (what, first, second); `what` leads its message."""
    return [Comparison(path, "rerun", b, a, kind="exact", where=what) for what, a, b in pairs]


# ------------------------------------------------------------------------ DSA indexer


@st.composite
def dsa_rerun_cases(draw, base) -> IndexCase:
    """index_cases with a tie drawn half the time as `pools` (every pool of a row alike)."""
    case = draw(index_cases(base))
    return case._replace(tie=draw(st.sampled_from(("pools", case.tie))))


def _tie_pools(a, mask, kpool: int):
    """Every pool of real tokens in each row a copy of its first: all candidate pools score alike."""
    a = a.copy()
    for r in range(a.shape[0]):
        f = int(np.argmax(mask[r] > 0))
        for s in range(f + kpool, a.shape[1] - kpool + 1, kpool):
            a[r, s:s + kpool] = a[r, f:f + kpool]
    label("every pool of a row tied on purpose")
    return a


def run_dsa_rerun(case: IndexCase, cand: Target, base: Target):
    w, a, q_lat, mask = index_inputs(case)
    if case.tie == "pools":
        a = _tie_pools(a, mask, case.geometry.kpool)
    S, wt = case.queries, w.map(cand.tensor)

    def call():
        rows = cand.impl.dsa.index_rows(wt, cand.tensor(a), cand.tensor(mask))
        return rows, cand.impl.dsa.index(wt, cand.tensor(a[:, -S:]), cand.tensor(q_lat[:, -S:]), rows,
                                         cand.tensor(mask[:, -S:]))
    (r1, s1), (r2, s2) = twice(cand, call)
    return (reruns("index_rows", [("index rows", r1, r2)]) +
            reruns("index", [("selection indices", s1.indices, s2.indices), ("pool scores", s1.scores, s2.scores)]))


# ------------------------------------------------------------------------ MLA


def run_mla_rerun(case: IndexCase, cand: Target, base: Target):
    """project and absorbed (over the oracle's selection), twice."""
    g = case.geometry
    w, a, q_lat, mask = index_inputs(case)
    mw = tz.mla_weights(np.random.default_rng(case.seed + 1), g)
    S = case.queries
    q, _, c = omla.project(mw, a)
    sel = odsa.index(w, a[:, -S:], q_lat[:, -S:], odsa.index_rows(w, a, mask), mask[:, -S:])
    wt = mw.map(cand.tensor)
    (p1, o1), (p2, o2) = twice(cand, lambda: (cand.impl.mla.project(wt, cand.tensor(a)),
                                              cand.impl.mla.absorbed(wt, cand.tensor(q[:, -S:]), cand.tensor(c),
                                                                     cand.index(sel.indices, long=True))[0]))
    return (reruns("project", [(f"project {n}", x, y) for n, x, y in zip(("q", "q_lat", "latent"), p1, p2)]) +
            reruns("absorbed", [("absorbed output", o1, o2)]))


# ------------------------------------------------------------------------ MoE


@st.composite
def moe_rerun_cases(draw, base, *, max_tokens: int = 16) -> MoECase:
    """route_cases (the plain families and the adversarial routing ones, through the tiny router or a
    released one) at most max_tokens tokens: a race shows on a few tied tokens as well as on many."""
    case = draw(route_cases(base))
    return case._replace(tokens=min(case.tokens, max_tokens))


def run_moe_rerun(case: MoECase, cand: Target, base: Target):
    """route, experts (on the first run's routing) and forward, twice; through a released router
    (E > 64: hundreds of experts the interpreter would run one by one) route alone, where its ties are."""
    if case.family in ("tied", "underflow", "group_tie"):
        label(f"exact router tie: {case.family}")
    w, x = moe_inputs(case)
    wt, xt = _moe_target(cand, w), cand.tensor(x)
    if case.experts > 64:
        r1, r2 = twice(cand, lambda: cand.impl.moe.route(wt, xt))
        return reruns("route", [(f"route {n}", getattr(r1, n), getattr(r2, n)) for n in ("expert_ids", "weights", "scores")])
    r0 = cand.impl.moe.route(wt, xt)
    (r1, e1, y1), (r2, e2, y2) = twice(cand, lambda: (cand.impl.moe.route(wt, xt), cand.impl.moe.experts(wt, xt, r0),
                                                      cand.impl.moe.forward(wt, xt)))
    return (reruns("route", [(f"route {n}", getattr(r1, n), getattr(r2, n)) for n in ("expert_ids", "weights", "scores")]) +
            reruns("experts", [("experts output", e1, e2)]) + reruns("forward", [("forward output", y1, y2)]))


# ------------------------------------------------------------------------ mHC


def run_mhc_rerun(case: MHCCase, cand: Target, base: Target):
    """coefficients, collapse and write_back, twice."""
    w, X, y = mhc_inputs(case)
    wt = w.map(lambda a: cand.tensor(a, f32=True))
    Xt, yt = cand.tensor(X), cand.tensor(y)

    def call():
        pre, post, comb = cand.impl.mhc.coefficients(wt, Xt)
        return pre, post, comb, cand.impl.mhc.collapse(pre, Xt), cand.impl.mhc.write_back(post, comb, Xt, yt)
    first, second = twice(cand, call)
    names = ("coefficients pre", "coefficients post", "coefficients comb", "collapse u", "write_back X_new")
    return [Comparison(n.split()[0], "rerun", b, a, kind="exact", where=n) for n, a, b in zip(names, first, second)]


# ------------------------------------------------------------------------ NVFP4


def _bits(q) -> np.ndarray:
    """An NVFP4Tensor's codes and scale bytes as integers (what bit-equality compares)."""
    return np.concatenate([q.packed.cpu().numpy().ravel().astype(np.int64),
                           q.block_scale.cpu().view(torch.uint8).numpy().ravel().astype(np.int64),
                           np.atleast_1d(q.global_decode.cpu().numpy().astype(np.float32)).view(np.int32).astype(np.int64)])


def run_nvfp4_rerun(case: NVFP4Case, cand: Target, base: Target):
    """quantize, dequantize (of the first run's codes) and qdq_activation under the tensor's own scale,
    twice."""
    w = nvfp4_weights(case)
    G = torch.tensor(float(onv.dynamic_input_scale(w)), dtype=torch.float32, device=cand.device)
    wt = cand.tensor(w, f32=True)
    q0 = cand.impl.nvfp4.quantize(wt)
    (q1, d1, a1), (q2, d2, a2) = twice(cand, lambda: (cand.impl.nvfp4.quantize(wt), cand.impl.nvfp4.dequantize(q0),
                                                      cand.impl.nvfp4.qdq_activation(wt, G)))
    return [Comparison("quantize", "rerun", _bits(q2), _bits(q1), kind="exact", where="codes and scales"),
            Comparison("dequantize", "rerun", d2, d1, kind="exact", where="dequantized values"),
            Comparison("qdq_activation", "rerun", a2, a1, kind="exact", where="quantize-dequantized activations")]


# ----------------------------------------------------------------------------- the records

D0 = DSAGeometry.from_geometry(TINY)

CHECKS = (
    Check("dsa.rerun", "dsa", IndexCase, dsa_rerun_cases, run_dsa_rerun,
          "run-twice determinism of index_rows and index, exact pool-score ties included",
          examples=(IndexCase(D0, 1, 24, 24, (0,), "pools", "normal", 0),
                    IndexCase(D0, 2, 23, 1, (0, 3), "exact", "normal", 1)), cpu_examples=1),
    Check("mla.rerun", "mla", IndexCase, absorbed_cases, run_mla_rerun,
          "run-twice determinism of project and absorbed (wide selections split on a GPU)",
          examples=(IndexCase(D0, 2, 30, 1, (0, 2), "none", "normal", 0),), cpu_examples=1),
    Check("moe.rerun", "moe", MoECase, moe_rerun_cases, run_moe_rerun,
          "run-twice determinism of route, experts and forward, exact router ties at the cut included",
          examples=(MoECase(32, 8, 2, 1, 1, 16, 12, "underflow", 0),
                    # 16 experts, top 4, tied at the cut: a run-dependent tie order among more experts (the
                    # first pin alone let moe_router_ties_raced escape 1 zoo run in 8 in stop 46, and 5 of 60
                    # torch seeds; with this one, none of 60)
                    MoECase(32, 16, 4, 1, 1, 16, 12, "underflow", 2)), cpu_examples=1),
    Check("mhc.rerun", "mhc", MHCCase, mhc_cases, run_mhc_rerun,
          "run-twice determinism of coefficients, collapse and write_back",
          examples=(MHCCase(4, 16, 1, 3, 2, "boosted", 0),), cpu_examples=1),
    Check("nvfp4.rerun", "nvfp4", NVFP4Case, nvfp4_cases, run_nvfp4_rerun,
          "run-twice determinism of quantize, dequantize and qdq_activation, exact rounding ties included",
          examples=(NVFP4Case(3, 32, "ties", 0),), cpu_examples=2),
)
