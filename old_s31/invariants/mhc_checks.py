"""The mHC row of the correctness matrix: coefficients and write-back (SPEC §4, §13): cases, run
functions, check records.
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np
from hypothesis import strategies as st

from invariants.check import BadCall, Check
from invariants.compare import Comparison
from invariants.labels import label
from invariants.target import ORACLE, Target
from oracle.config import Geometry
from strategies import tensors as tz
from strategies.tensors import SEEDS

TINY = Geometry.preset("tiny")     # the pinned examples' geometry


# ------------------------------------------------------------------------ cases


class MHCCase(NamedTuple):
    """mHC on [batch, length] tokens of N streams of width D, with `iters` Sinkhorn iterations
    (few iterations make the row/column order observable, SPEC §13)."""

    streams: int
    hidden: int
    batch: int
    length: int
    iters: int
    family: str
    seed: int


@st.composite
def mhc_cases(draw, base) -> MHCCase:
    n = draw(st.sampled_from(sorted({base.hc_mult, 2, 4})))
    d = draw(st.sampled_from(sorted({base.hidden_size, 16, 48})))
    iters = draw(st.sampled_from(sorted({1, 3, base.hc_sinkhorn_iters})))
    return MHCCase(n, d, draw(st.integers(1, 2)), draw(st.integers(1, 9)), iters,
                   draw(st.sampled_from(("boosted", "normal"))), draw(SEEDS))


# ---------------------------------------------------------------- run functions


def mhc_inputs(case: MHCCase):
    rng = np.random.default_rng(case.seed)
    w = tz.mhc_weights(rng, case.streams, case.hidden, case.iters, case.family)
    X = rng.standard_normal((case.batch, case.length, case.streams, case.hidden))
    y = rng.standard_normal((case.batch, case.length, case.hidden))
    return w, X, y


def _on(t: Target, w, X, y):
    """(pre, post, comb, collapse, write_back) on target t, write_back from t's own coefficients."""
    wt = w.map(lambda a: t.tensor(a, f32=True))
    Xt, yt = t.tensor(X), t.tensor(y)
    with t.poisoned():
        pre, post, comb = t.impl.mhc.coefficients(wt, Xt)
        u = t.impl.mhc.collapse(pre, Xt)
        Xn = t.impl.mhc.write_back(post, comb, Xt, yt)
    return pre, post, comb, u, Xn


def _run(case: MHCCase, cand: Target, base: Target):
    if case.iters <= 3:
        label("few Sinkhorn iterations (order observable)")
    w, X, y = mhc_inputs(case)
    return tuple(_on(t, w, X, y) for t in (ORACLE, cand, base))


def run_coefficients(case: MHCCase, cand: Target, base: Target):
    ref, c, b = _run(case, cand, base)
    return [Comparison("coefficients", q, c[i], ref[i], b[i]) for i, q in enumerate(("pre", "post", "comb", "collapse"))]


def run_write_back(case: MHCCase, cand: Target, base: Target):
    """X_new = post ⊗ y + Cᵀ X, from the candidate's own coefficients (so a transposed C shows here)."""
    ref, c, b = _run(case, cand, base)
    return [Comparison("write_back", "output", c[4], ref[4], b[4])]


# ----------------------------------------------------------------------------- the records

# one Sinkhorn iteration: the row/column normalization order is observable (SPEC §13)
PINNED = (MHCCase(TINY.hc_mult, TINY.hidden_size, 2, 5, 1, "boosted", 0),)
# the full geometry's streams (N·D = 16384): the coefficient projection split into 64 chunks on the GPU
# (the drawn sizes, N·D <= 192, fit one 256-wide chunk there), decode-sized and a few tokens
FULL = Geometry.preset("full")
GPU_PINNED = (MHCCase(FULL.hc_mult, FULL.hidden_size, 1, 1, FULL.hc_sinkhorn_iters, "normal", 1),
              MHCCase(FULL.hc_mult, FULL.hidden_size, 2, 3, 3, "boosted", 2))

CHECKS = (
    Check("mhc.coefficients", "mhc", MHCCase, mhc_cases, run_coefficients,
          "pre, post, Sinkhorn comb (1, 3, 20 iterations) and the collapse", examples=PINNED,
          gpu_examples=GPU_PINNED),
    Check("mhc.write_back", "mhc", MHCCase, mhc_cases, run_write_back,
          "X_new = post x y + C^T X with the candidate's own coefficients", examples=PINNED,
          cpu_examples=10, gpu_examples=GPU_PINNED),
)


# ----------------------------------------------------------------------------- calls to refuse

B, S, N, D = 2, 5, 4, 32


def _coefficients(ns, t: Target, X=None, ints: bool = False, **w_changes):
    """ns.coefficients on 4 streams of width 32 (3 iterations); X: float64 streams in place of the
    drawn ones (ints: handed over as integers); w_changes: MHCWeights fields replaced."""
    rng = np.random.default_rng(700)
    w = dataclasses.replace(tz.mhc_weights(rng, N, D, 3, "boosted"), **w_changes)
    X = rng.standard_normal((B, S, N, D)) if X is None else X
    return ns.coefficients(w.map(lambda a: t.tensor(a, f32=True)), t.index(X) if ints else t.tensor(X))


def _write_back(ns, t: Target, **changes):
    """ns.write_back on [2, 5] tokens of 4 streams of width 32; `changes` replaces float64 arguments."""
    rng = np.random.default_rng(8)
    args = dict(post=rng.random((B, S, N)), comb=rng.random((B, S, N, N)), X=rng.standard_normal((B, S, N, D)),
                y=rng.standard_normal((B, S, D)))
    args.update(changes)
    return ns.write_back(*(t.tensor(args[k]) for k in ("post", "comb", "X", "y")))


BAD_CALLS = (
    BadCall("coefficients(X [B, S, N - 1, D])", lambda ns, t: _coefficients(ns, t, np.zeros((B, S, 3, D))), "X"),
    BadCall("coefficients(X [B, S, N + 1, D])", lambda ns, t: _coefficients(ns, t, np.zeros((B, S, N + 1, D))), "X"),
    BadCall("coefficients(X 3-D)", lambda ns, t: _coefficients(ns, t, np.zeros((B, N, D))), "X"),
    # integer streams: the oracle and the baseline compute on them as numbers
    BadCall("coefficients(X int)", lambda ns, t: _coefficients(ns, t, np.zeros((B, S, N, D)), ints=True), "X",
            targets=("triton",)),
    BadCall("coefficients(X [B, S, N, 40])", lambda ns, t: _coefficients(ns, t, np.zeros((B, S, N, 40))),
            "MHCWeights.fn"),
    BadCall("coefficients(hc_mult 3, X of 4 streams)", lambda ns, t: _coefficients(ns, t, hc_mult=3), "X"),
    BadCall("coefficients(fn [25, 128])", lambda ns, t: _coefficients(ns, t, fn=np.zeros((25, 128))), "MHCWeights.fn"),
    BadCall("coefficients(base [23])", lambda ns, t: _coefficients(ns, t, base=np.zeros(23)), "MHCWeights.base"),
    BadCall("coefficients(scale [2])", lambda ns, t: _coefficients(ns, t, scale=np.zeros(2)), "MHCWeights.scale"),
    BadCall("coefficients(sinkhorn_iters=0)", lambda ns, t: _coefficients(ns, t, sinkhorn_iters=0),
            "MHCWeights.sinkhorn_iters"),
    BadCall("coefficients(hc_eps=0)", lambda ns, t: _coefficients(ns, t, hc_eps=0.0), "MHCWeights.hc_eps"),
    BadCall("write_back(X [B, S, 3, D])", lambda ns, t: _write_back(ns, t, X=np.zeros((B, S, 3, D))), "X"),
    # the oracle and the baseline check write_back's and collapse's shapes only by broadcasting (an
    # error naming no argument), and take N=0 copies in expand: these rows hold the Triton side alone
    BadCall("write_back(comb not square)", lambda ns, t: _write_back(ns, t, comb=np.zeros((B, S, N, 3))), "comb",
            targets=("triton",)),
    BadCall("write_back(comb of another batch)", lambda ns, t: _write_back(ns, t, comb=np.zeros((B, S + 1, N, N))),
            "comb", targets=("triton",)),
    BadCall("write_back(post 4-D)", lambda ns, t: _write_back(ns, t, post=np.zeros((B, S, N, 1))), "post",
            targets=("triton",)),
    BadCall("write_back(y [B, S, 48])", lambda ns, t: _write_back(ns, t, y=np.zeros((B, S, 48))), "y",
            targets=("triton",)),
    BadCall("collapse(pre of 3 streams, X of 4)",
            lambda ns, t: ns.collapse(t.tensor(np.zeros((B, S, 3))), t.tensor(np.zeros((B, S, N, D)))), "X"),
    BadCall("collapse(pre of another batch)",
            lambda ns, t: ns.collapse(t.tensor(np.zeros((B, S + 1, N))), t.tensor(np.zeros((B, S, N, D)))), "pre",
            targets=("triton",)),
    BadCall("expand(N=0)", lambda ns, t: ns.expand(t.tensor(np.zeros((B, S, D))), 0), "N", targets=("triton",)),
    BadCall("reduce(X 3-D)", lambda ns, t: ns.reduce(t.tensor(np.zeros((B, S, D)))), "X"),
)
