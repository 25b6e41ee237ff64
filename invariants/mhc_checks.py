"""The mHC row of the correctness matrix as records' run functions (see kda_checks.py)."""
from __future__ import annotations

import numpy as np

from invariants.kda_checks import Comparison
from invariants.labels import label
from invariants.target import Target, poisoned_memory
from oracle import mhc as omhc
from strategies import cases as sc
from strategies import tensors as tz


def mhc_inputs(case: sc.MHCCase):
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


def _run(case: sc.MHCCase, cand: Target, base: Target):
    if case.iters <= 3:
        label("few Sinkhorn iterations (order observable)")
    w, X, y = mhc_inputs(case)
    pre, post, comb = omhc.coefficients(w, X)
    ref = (pre, post, comb, omhc.collapse(pre, X), omhc.write_back(post, comb, X, y))
    return ref, _impl(cand, w, X, y), _impl(base, w, X, y)


def run_coefficients(case: sc.MHCCase, cand: Target, base: Target):
    ref, c, b = _run(case, cand, base)
    return [Comparison("coefficients", q, c[i], ref[i], b[i]) for i, q in enumerate(("pre", "post", "comb", "collapse"))]


def run_write_back(case: sc.MHCCase, cand: Target, base: Target):
    """X_new = post ⊗ y + Cᵀ X, from the candidate's own coefficients (so a transposed C shows here)."""
    ref, c, b = _run(case, cand, base)
    return [Comparison("write_back", "output", c[4], ref[4], b[4])]
