"""The KDA row of the correctness matrix as records: name, case strategy, run (STYLE 2).

Each `run(case, cand, base)` draws its float64 inputs from the case's seed, runs the oracle, the
candidate and the baseline (the "torch" implementation in the candidate's dtype and device), and
returns the comparisons; `matrix.evaluate` judges them under contracts.toml.
"""
from __future__ import annotations

import numpy as np
from invariants.labels import label as event

from invariants.target import Target, poisoned_memory
from oracle import kda as okda
from strategies import cases as sc
from strategies import tensors as tz
from strategies.sequences import cu_seqlens


from invariants.compare import Comparison  # noqa: E402,F401  (re-exported: the checks modules import it here)


def _label(length: int, docs=None):
    if length > 64:
        event("crossed chunk boundary")
    if length % 64:
        event("partial tail chunk")
    if docs is not None and any(n == 0 for n in docs):
        event("zero-length document")


# ----------------------------------------------------------------------------- core


def core_inputs(case: sc.CoreCase):
    """float64 q, k, v, g, beta, state, cu_seqlens for a CoreCase."""
    rng = np.random.default_rng(case.seed)
    x = tz.core_tensors(rng, case.heads, case.head_dim, case.batch, case.length, case.family)
    rows = len(case.docs) if case.docs is not None else case.batch
    state = tz.initial_state(rng, rows, case.heads, case.head_dim) if case.initial_state else None
    cu = cu_seqlens(case.docs) if case.docs is not None else None
    return x, state, cu


def _core_call(t: Target, fn: str, x, state, cu, **kw):
    args = [t.tensor(x[n]) for n in ("q", "k", "v")] + [t.tensor(x["g"], f32=True), t.tensor(x["beta"])]
    st = t.tensor(state, f32=True) if state is not None else None
    cu_t = t.index(cu) if cu is not None else None
    with poisoned_memory():
        return getattr(t.impl.kda, fn)(*args, st, cu_seqlens=cu_t, **kw)


def held_core(t: Target, x, state):
    """The core inputs as t's working dtype holds them (q, k, v, beta rounded; g and the state float32)."""
    held = {n: t.held(x[n], f32=n == "g") for n in x}
    return held, None if state is None else t.held(state, f32=True)


def run_recurrent(case: sc.CoreCase, cand: Target, base: Target):
    _label(case.length, case.docs)
    x, state, cu = core_inputs(case)
    o, s = okda.recurrent(**x, state=state, cu_seqlens=cu)
    xh, sh = held_core(cand, x, state)
    oh, shh = okda.recurrent(**xh, state=sh, cu_seqlens=cu)
    oc, scand = _core_call(cand, "recurrent", x, state, cu)
    ob, sb = _core_call(base, "recurrent", x, state, cu)
    return [Comparison("recurrent", "output", oc, o, ob, held_reference=oh),
            Comparison("recurrent", "final_state", scand, s, sb, held_reference=shh)]


def run_chunked(case: sc.CoreCase, cand: Target, base: Target):
    _label(case.length, case.docs)
    x, state, cu = core_inputs(case)
    o, s, bnd = okda.chunked(**x, state=state, chunk=64, cu_seqlens=cu)
    xh, sh = held_core(cand, x, state)
    oh, shh, bh = okda.chunked(**xh, state=sh, chunk=64, cu_seqlens=cu)
    oc, scand, bc = _core_call(cand, "chunked", x, state, cu, chunk=64)
    ob, sb, bb = _core_call(base, "chunked", x, state, cu, chunk=64)
    return [Comparison("chunked", "output", oc, o, ob, held_reference=oh),
            Comparison("chunked", "final_state", scand, s, sb, held_reference=shh),
            Comparison("chunked", "boundary_states", bc, bnd, bb, held_reference=bh)]


# ----------------------------------------------------------------------------- decode


def decode_inputs(case: sc.DecodeCase):
    g = case.geometry
    rng = np.random.default_rng(case.seed)
    w = tz.kda_weights(rng, g.heads, g.head_dim, g.hidden, g.conv_width, case.family, g.lower_bound)
    x = tz.hidden_states(rng, case.batch, case.steps, g.hidden, case.family)
    z, f, b, _ = okda.project(w, x)
    state = tz.kda_state(rng, case.batch, g.heads, g.head_dim, g.conv_width)
    return w, z, f, b, state


def run_decode(case: sc.DecodeCase, cand: Target, base: Target):
    w, z, f, b, s0 = decode_inputs(case)
    outs = {}
    for name, t in (("oracle", None), ("held", None), ("cand", cand), ("base", base)):
        s = s0 if t is None else t.state(s0)
        wt = w if t is None else t.weights(w)
        if name == "held":             # the oracle on the inputs as the candidate's dtype holds them
            s, wt = cand.held_state(s0), cand.held_weights(w)
        os_ = []
        for i in range(case.steps):
            zi, fi, bi = z[:, i], f[:, i], b[:, i]
            if name == "held":
                o, s = okda.decode(wt, cand.held(zi), cand.held(fi, f32=True), cand.held(bi), s)
            elif t is None:
                o, s = okda.decode(wt, zi, fi, bi, s)
            else:
                with poisoned_memory():
                    o, s = t.impl.kda.decode(wt, t.tensor(zi), t.tensor(fi, f32=True), t.tensor(bi), s)
            os_.append(o)
        outs[name] = (os_, s)
    res = []
    for i in range(case.steps):
        res.append(Comparison("decode", "output", outs["cand"][0][i], outs["oracle"][0][i], outs["base"][0][i],
                              held_reference=outs["held"][0][i]))
    for q, j in (("final_state", 0), ("conv_state", 1)):
        res.append(Comparison("decode", q, outs["cand"][1][j], outs["oracle"][1][j], outs["base"][1][j],
                              held_reference=outs["held"][1][j]))
    return res


# ----------------------------------------------------------------------------- sublayer


def sublayer_inputs(case: sc.SublayerCase):
    g = case.geometry
    rng = np.random.default_rng(case.seed)
    w = tz.kda_weights(rng, g.heads, g.head_dim, g.hidden, g.conv_width, case.family, g.lower_bound)
    x = tz.hidden_states(rng, case.batch, case.length, g.hidden, case.family)
    mask = np.ones((case.batch, case.length))
    for r, p in enumerate(case.left_pad):
        mask[r, :p] = 0.0
    state = tz.kda_state(rng, case.batch, g.heads, g.head_dim, g.conv_width) if case.initial_state else None
    return w, x, mask, state


def call_sublayer(t: Target, w, x, state, mask=None, cu=None):
    """One sublayer call on target t (None = the oracle) with float64 x/mask/weights.

    `state` is None, a float64 KDAState (converted to t's dtypes) or t's own KDAState (carried
    across calls untouched, which is the point of the continuation paths).
    """
    if t is None:
        return okda.sublayer(w, x, state, mask, cu)
    if state is not None and isinstance(state.recurrent, np.ndarray):
        state = t.state(state)
    with poisoned_memory():
        return t.impl.kda.sublayer(t.weights(w), t.tensor(x), state,
                                   None if mask is None else t.tensor(mask),
                                   None if cu is None else t.index(cu))


def run_sublayer(case: sc.SublayerCase, cand: Target, base: Target):
    _label(case.length)
    if any(case.left_pad):
        event("left padding")
    w, x, mask, state = sublayer_inputs(case)
    y, s = okda.sublayer(w, x, state, mask)
    yh, sh = held_sublayer(cand, w, x, state, mask)
    yc, sc_ = call_sublayer(cand, w, x, state, mask)
    yb, sb = call_sublayer(base, w, x, state, mask)
    return [Comparison("sublayer", "output", yc, y, yb, held_reference=yh),
            Comparison("sublayer", "final_state", sc_.recurrent, s.recurrent, sb.recurrent, held_reference=sh.recurrent),
            Comparison("sublayer", "conv_state", sc_.conv, s.conv, sb.conv, held_reference=sh.conv)]


def held_sublayer(t: Target, w, x, state, mask=None, cu=None):
    """The oracle sublayer on weights, x and state as t's working dtype holds them."""
    return okda.sublayer(t.held_weights(w), t.held(x), t.held_state(state), mask, cu)


def run_rerun(case: sc.SublayerCase, cand: Target, base: Target):
    """Run-twice determinism of the prefill (chunked kernel) and one decode step."""
    w, x, mask, state = sublayer_inputs(case)
    res = []
    for path, xs, st in (("sublayer", x, state), ("decode", x[:, :1], okda.sublayer(w, x, state, mask)[1])):
        a = call_sublayer(cand, w, xs, st)
        b = call_sublayer(cand, w, xs, st)
        res += [Comparison(path, "rerun", a[0], b[0], kind="exact"),
                Comparison(path, "rerun", a[1].recurrent, b[1].recurrent, kind="exact")]
    return res
