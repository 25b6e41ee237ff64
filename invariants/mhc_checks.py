"""The mHC row of the correctness matrix: coefficients and write-back (SPEC §4, §13): cases, run
functions, check records.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from hypothesis import strategies as st

from invariants.check import Check
from invariants.compare import Comparison
from invariants.labels import label
from invariants.target import Target, poisoned_memory
from oracle import mhc as omhc
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


def _impl(t: Target, w, X, y):
    wt = w.map(lambda a: t.tensor(a, f32=True))
    Xt, yt = t.tensor(X), t.tensor(y)
    with poisoned_memory():
        pre, post, comb = t.impl.mhc.coefficients(wt, Xt)
        u = t.impl.mhc.collapse(pre, Xt)
        Xn = t.impl.mhc.write_back(post, comb, Xt, yt)
    return pre, post, comb, u, Xn


def _run(case: MHCCase, cand: Target, base: Target):
    if case.iters <= 3:
        label("few Sinkhorn iterations (order observable)")
    w, X, y = mhc_inputs(case)
    pre, post, comb = omhc.coefficients(w, X)
    ref = (pre, post, comb, omhc.collapse(pre, X), omhc.write_back(post, comb, X, y))
    return ref, _impl(cand, w, X, y), _impl(base, w, X, y)


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

CHECKS = (
    Check("mhc.coefficients", "mhc", MHCCase, mhc_cases, run_coefficients,
          "pre, post, Sinkhorn comb (1, 3, 20 iterations) and the collapse", examples=PINNED),
    Check("mhc.write_back", "mhc", MHCCase, mhc_cases, run_write_back,
          "X_new = post x y + C^T X with the candidate's own coefficients", examples=PINNED),
)
