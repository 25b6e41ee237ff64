"""The KDA row of the correctness matrix: its cases, run functions and check records (SPEC §6, §10).

Each `run(case, cand, base)` draws its float64 inputs from the case's seed, runs the oracle (the target
ORACLE; `cand.held_oracle()` for the held reference), the candidate and the baseline (the "torch"
implementation in the candidate's dtype and device) through the same calls, and returns the
comparisons; `invariants.matrix.evaluate` judges them under invariants/contracts.d/kda.toml. BAD_CALLS:
the calls the kda namespace must refuse (tests/test_bad_calls.py).

The path checks (kda.paths, kda.packed) hold the prefix/chunk/continuation invariant: one token stream,
several execution paths; each path's output AND state (recurrent + conv window) is held to the oracle's
ONE-PREFILL result (kernel_replacement, the baseline running the same path) and to the candidate's own
one-prefill result (self_consistency). Paths: chunked_prefill (calls cut at drawn splits), token_decode
(prefill of the first part, then one token per call: the fused decode kernel), continuation (prefill,
snapshot -> serialize -> restore into fresh tensors -> continue in one call), packed (documents in one
cu_seqlens call vs each alone; a NaN poisoned into one document's state must stay in that document).
"""
from __future__ import annotations

import re
from typing import NamedTuple, Optional

import numpy as np
import torch
from hypothesis import strategies as st
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from impl.host_sync import format_syncs, record_host_syncs
from invariants.check import BadCall, Check
from invariants.compare import Comparison
from invariants.labels import label
from invariants.target import ORACLE, Target
from oracle import kda as okda
from oracle.config import Geometry
from oracle.types import KDAState
from strategies import tensors as tz
from strategies.geometry import KDAGeometry, kda_geometries
from strategies.sequences import (
    chunk_splits,
    cu_seqlens,
    left_pads,
    packed_lengths,
    sequence_lengths,
)
from strategies.tensors import SEEDS, families

TINY = Geometry.preset("tiny")     # the pinned examples' geometry
# what a message names an element by: core outputs [B, T, H, V], a recurrent state's [H, K, V] after its row
OUT_AXES, STATE_AXES = ("batch", "token", "head", "dim"), ("head", "key", "value")


# ------------------------------------------------------------------------ cases


class CoreCase(NamedTuple):
    """The KDA core on [batch, length] rows, or (docs set) one packed row of documents."""

    heads: int
    head_dim: int
    batch: int
    length: int
    docs: Optional[tuple[int, ...]]
    initial_state: bool
    family: str
    seed: int
    # the gate g is drawn from (the geometry's): None is the softplus gate, whose decays are unbounded
    # (strong ones leave the intra kernel's factorised range); cases recorded before it was a field are -5
    lower_bound: Optional[float] = -5.0


class CausalCase(NamedTuple):
    """The KDA core run twice, the second time with `changed` ("g", "k", "v", "beta", "q" or "all")
    redrawn at every token position >= `cut` of the (packed) time axis."""

    core: CoreCase
    cut: int
    changed: str


class SublayerCase(NamedTuple):
    """One token stream through the KDA sublayer, cut into calls by `splits`."""

    geometry: KDAGeometry
    batch: int
    length: int
    left_pad: tuple[int, ...]
    splits: tuple[int, ...]
    initial_state: bool
    family: str
    seed: int


class PackedCase(NamedTuple):
    """Documents run packed (cu_seqlens) vs alone; `poison` (doc index or None) gets a NaN state."""

    geometry: KDAGeometry
    docs: tuple[int, ...]
    poison: Optional[int]
    family: str
    seed: int


class DeviceReportCase(NamedTuple):
    """The KDA core through `chunked_ex` (no host read) and `chunked`; `nan` ("g", "beta" or None) puts a
    NaN into that input at flat position floor(at / 1000 * its size)."""

    core: CoreCase
    nan: Optional[str]
    at: int


class DecodeCase(NamedTuple):
    """`steps` consecutive one-token decode calls per sequence from a non-zero state."""

    geometry: KDAGeometry
    batch: int
    steps: int
    family: str
    seed: int


@st.composite
def core_cases(draw, base, *, max_len: int = 160, packed: Optional[bool] = None) -> CoreCase:
    g = draw(kda_geometries(base))
    use_docs = draw(st.booleans()) if packed is None else packed
    if use_docs:
        docs = draw(packed_lengths(max_len=max_len))
        batch, length = 1, sum(docs)
    else:
        docs, batch, length = None, draw(st.integers(1, 2)), draw(sequence_lengths(max_len=max_len))
    return CoreCase(g.heads, g.head_dim, batch, length, docs, draw(st.booleans()),
                    draw(families()), draw(SEEDS), g.lower_bound)


@st.composite
def device_report_cases(draw, base, *, max_len: int = 160) -> DeviceReportCase:
    core = draw(core_cases(base, max_len=max_len))
    return DeviceReportCase(core, draw(st.sampled_from((None, "g", "beta"))), draw(st.integers(0, 999)))


@st.composite
def causal_cases(draw, base, *, max_len: int = 160) -> CausalCase:
    core = draw(core_cases(base, max_len=max_len))
    # half the time at rows 1-7 of a 16-token sub-chunk: where an anchor row below the sub-chunk's
    # first makes the rows above it depend on gates after the cut
    inside = st.integers(0, (core.length - 2) // 16).flatmap(
        lambda m: st.integers(16 * m + 1, min(16 * m + 7, core.length - 1)))
    cut = draw(st.one_of(st.integers(0, core.length - 1), inside)) if core.length > 1 else 0
    return CausalCase(core, cut, draw(st.sampled_from(CAUSAL_INPUTS)))


@st.composite
def sublayer_cases(draw, base, *, max_len: int = 140, padded: bool = True) -> SublayerCase:
    # the draws that set an example's cost first (the shrinker simplifies in draw order), the pads last
    g = draw(kda_geometries(base))
    length, batch = draw(sequence_lengths(max_len=max_len)), draw(st.integers(1, 2))
    splits = draw(chunk_splits(length))
    initial_state, family, seed = draw(st.booleans()), draw(families()), draw(SEEDS)
    pad = draw(left_pads(batch, length)) if padded else (0,) * batch
    return SublayerCase(g, batch, length, pad, splits, initial_state, family, seed)


@st.composite
def packed_cases(draw, base, *, max_len: int = 140) -> PackedCase:
    g = draw(kda_geometries(base))
    docs = draw(packed_lengths(max_len=max_len))
    poison = draw(st.one_of(st.none(), st.integers(0, len(docs) - 1)))
    return PackedCase(g, docs, poison, draw(families()), draw(SEEDS))


@st.composite
def decode_cases(draw, base, *, max_steps: int = 6) -> DecodeCase:
    g = draw(kda_geometries(base))
    # no gate lower bound (the softplus gate: the decode kernel's other branch); decode only: the chunked
    # prefill's decay factors overflow float32 once a token's gate falls below -5.9 (NOTES: issue 13 item 11)
    g = g._replace(lower_bound=None) if g.lower_bound is not None and draw(st.booleans()) else g
    return DecodeCase(g, draw(st.integers(1, 3)), draw(st.integers(1, max_steps)), draw(families()),
                      draw(SEEDS))


# ---------------------------------------------------------------- run functions


def _label(length: int, docs=None):
    if length > 64:
        label("crossed chunk boundary")
    if length % 64:
        label("partial tail chunk")
    if docs is not None and any(n == 0 for n in docs):
        label("zero-length document")


def core_inputs(case: CoreCase):
    """float64 q, k, v, g, beta, state, cu_seqlens for a CoreCase."""
    rng = np.random.default_rng(case.seed)
    x = tz.core_tensors(rng, case.heads, case.head_dim, case.batch, case.length, case.family, case.lower_bound)
    rows = len(case.docs) if case.docs is not None else case.batch
    state = tz.initial_state(rng, rows, case.heads, case.head_dim) if case.initial_state else None
    cu = cu_seqlens(case.docs) if case.docs is not None else None
    return x, state, cu


def _core_args(t: Target, x, state, cu):
    """q, k, v, g, beta, state, cu_seqlens on target t from float64 inputs (g and the state in float32)."""
    args = [t.tensor(x[n]) for n in ("q", "k", "v")] + [t.tensor(x["g"], f32=True), t.tensor(x["beta"])]
    return (*args, t.tensor(state, f32=True) if state is not None else None, t.index(cu) if cu is not None else None)


def _core_call(t: Target, fn: str, x, state, cu, **kw):
    """The KDA core function `fn` on target t with float64 inputs (g and the state in float32)."""
    *args, cu_t = _core_args(t, x, state, cu)
    with t.poisoned():
        return getattr(t.impl.kda, fn)(*args, cu_seqlens=cu_t, **kw)


def _boundary_axes(docs):
    """The axes of `chunked`'s boundary states: per document-major boundary with packed documents, else
    per (batch row, chunk)."""
    return ("boundary",) + STATE_AXES if docs is not None else ("batch", "chunk") + STATE_AXES


def run_recurrent(case: CoreCase, cand: Target, base: Target):
    _label(case.length, case.docs)
    x, state, cu = core_inputs(case)
    o, s = _core_call(ORACLE, "recurrent", x, state, cu)
    oh, shh = _core_call(cand.held_oracle(), "recurrent", x, state, cu)
    oc, scand = _core_call(cand, "recurrent", x, state, cu)
    ob, sb = _core_call(base, "recurrent", x, state, cu)
    rows = ("document",) if case.docs is not None else ("batch",)
    return [Comparison("recurrent", "output", oc, o, ob, held_reference=oh, axes=OUT_AXES),
            Comparison("recurrent", "final_state", scand, s, sb, held_reference=shh, axes=rows + STATE_AXES)]


def run_chunked(case: CoreCase, cand: Target, base: Target):
    _label(case.length, case.docs)
    x, state, cu = core_inputs(case)
    o, s, bnd = _core_call(ORACLE, "chunked", x, state, cu, chunk=64)
    oh, shh, bh = _core_call(cand.held_oracle(), "chunked", x, state, cu, chunk=64)
    oc, scand, bc = _core_call(cand, "chunked", x, state, cu, chunk=64)
    ob, sb, bb = _core_call(base, "chunked", x, state, cu, chunk=64)
    rows = ("document",) if case.docs is not None else ("batch",)
    return [Comparison("chunked", "output", oc, o, ob, held_reference=oh, axes=OUT_AXES),
            Comparison("chunked", "final_state", scand, s, sb, held_reference=shh, axes=rows + STATE_AXES),
            Comparison("chunked", "boundary_states", bc, bnd, bb, held_reference=bh, axes=_boundary_axes(case.docs))]


CAUSAL_INPUTS = ("g", "k", "v", "beta", "q", "all")


def _spliced(case: CausalCase):
    """The case's inputs, and the same with `changed` redrawn (seed + 1) at time positions >= cut."""
    x, state, cu = core_inputs(case.core)
    c = case.core
    other = tz.core_tensors(np.random.default_rng(c.seed + 1), c.heads, c.head_dim, c.batch, c.length, c.family,
                            c.lower_bound)
    y = {n: a.copy() for n, a in x.items()}
    for n in (CAUSAL_INPUTS[:-1] if case.changed == "all" else (case.changed,)):
        y[n][:, case.cut:] = other[n][:, case.cut:]
    return x, y, state, cu


def _settled(case: CausalCase):
    """(boundary-state rows, final-state rows) that end at or before the cut: they must not move."""
    c = case.core
    docs = c.docs if c.docs is not None else (c.length,) * c.batch
    starts = np.cumsum((0,) + docs)[:-1] if c.docs is not None else np.zeros(c.batch, dtype=int)
    bounds, finals, row = [], [], 0
    for n, (s0, length) in enumerate(zip(starts, docs)):
        for j in range(length // 64):
            if s0 + 64 * (j + 1) <= case.cut:
                bounds.append(row)
            row += 1
        if s0 + length <= case.cut:
            finals.append(n)
    return bounds, finals


def run_causal(case: CausalCase, cand: Target, base: Target):
    """Bitwise causality of the same implementation: outputs before the cut, and the states of every
    chunk and document that ends at or before it, must not change AT ALL when only later inputs do."""
    c = case.core
    _label(c.length, c.docs)
    label(f"cut at rows 1-7 of a sub-chunk: {1 <= case.cut % 16 <= 7}")
    x, y, state, cu = _spliced(case)
    bounds, finals = _settled(case)
    res = []
    for fn in ("chunked", "recurrent"):
        kw = {"chunk": 64} if fn == "chunked" else {}
        a = _core_call(cand, fn, x, state, cu, **kw)
        b = _core_call(cand, fn, y, state, cu, **kw)
        res += [Comparison(fn, "causal", b[0][:, :case.cut], a[0][:, :case.cut], kind="exact", axes=OUT_AXES),
                Comparison(fn, "causal", b[1][finals], a[1][finals], kind="exact", axes=("sequence", *STATE_AXES))]
        if fn == "chunked" and b[2] is not None:
            flat = (lambda s: s.reshape(-1, *s.shape[2:])) if c.docs is None else (lambda s: s)
            res.append(Comparison(fn, "causal", flat(b[2])[bounds], flat(a[2])[bounds], kind="exact",
                                  axes=("boundary", *STATE_AXES)))
    return res


def decode_inputs(case: DecodeCase):
    g = case.geometry
    rng = np.random.default_rng(case.seed)
    w = tz.kda_weights(rng, g.heads, g.head_dim, g.hidden, g.conv_width, case.family, g.lower_bound)
    x = tz.hidden_states(rng, case.batch, case.steps, g.hidden, case.family)
    z, f, b, _ = okda.project(w, x)
    state = tz.kda_state(rng, case.batch, g.heads, g.head_dim, g.conv_width)
    return w, z, f, b, state


def decode_steps(t: Target, w, z, f, b, s0):
    """One decode call per token of z, f, b [B, steps, ...] on target t from float64 state s0:
    (the outputs of every step, the final state)."""
    s, wt, os_ = t.state(s0), t.weights(w), []
    steps = z.shape[1]
    for i in range(steps):
        # the last step in place where the implementation offers it (impl.registry.IN_PLACE): the harness
        # then hands the state over inside sentinel margins (invariants/integrity.py, kda.decode.in_bounds)
        opt = {"inplace": True} if i == steps - 1 and _takes(t.impl.kda.decode, "inplace") else {}
        with t.poisoned():
            o, s = t.impl.kda.decode(wt, t.tensor(z[:, i]), t.tensor(f[:, i], f32=True), t.tensor(b[:, i]), s,
                                     **opt)
        os_.append(o)
    return os_, s


def _takes(fn, parameter: str) -> bool:
    """`fn` has a parameter of that name (our launch options are optional for a candidate)."""
    import inspect
    try:
        return parameter in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def run_decode(case: DecodeCase, cand: Target, base: Target):
    w, z, f, b, s0 = decode_inputs(case)
    outs = {name: decode_steps(t, w, z, f, b, s0)
            for name, t in (("oracle", ORACLE), ("held", cand.held_oracle()), ("cand", cand), ("base", base))}
    res = []
    for i in range(case.steps):
        res.append(Comparison("decode", "output", outs["cand"][0][i], outs["oracle"][0][i], outs["base"][0][i],
                              held_reference=outs["held"][0][i]))
    for q, j in (("final_state", 0), ("conv_state", 1)):
        res.append(Comparison("decode", q, outs["cand"][1][j], outs["oracle"][1][j], outs["base"][1][j],
                              held_reference=outs["held"][1][j]))
    return res


def sublayer_inputs(case: SublayerCase):
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
    """One sublayer call on target t with float64 x/mask/weights and a float64 state (None: zeros)."""
    return own_sublayer(t, w, x, t.state(state), mask, cu)


def own_sublayer(t: Target, w, x, state, mask=None, cu=None):
    """One sublayer call on target t from t's OWN state (None: zeros), carried across calls untouched,
    which is the point of the paths."""
    with t.poisoned():
        return t.impl.kda.sublayer(t.weights(w), t.tensor(x), state,
                                   None if mask is None else t.tensor(mask),
                                   None if cu is None else t.index(cu))


def run_sublayer(case: SublayerCase, cand: Target, base: Target):
    _label(case.length)
    if any(case.left_pad):
        label("left padding")
    w, x, mask, state = sublayer_inputs(case)
    y, s = call_sublayer(ORACLE, w, x, state, mask)
    yh, sh = call_sublayer(cand.held_oracle(), w, x, state, mask)
    yc, sc_ = call_sublayer(cand, w, x, state, mask)
    yb, sb = call_sublayer(base, w, x, state, mask)
    return [Comparison("sublayer", "output", yc, y, yb, held_reference=yh),
            Comparison("sublayer", "final_state", sc_.recurrent, s.recurrent, sb.recurrent, held_reference=sh.recurrent),
            Comparison("sublayer", "conv_state", sc_.conv, s.conv, sb.conv, held_reference=sh.conv)]


def run_rerun(case: SublayerCase, cand: Target, base: Target):
    """Run-twice determinism of the prefill (chunked kernel) and one decode step."""
    w, x, mask, state = sublayer_inputs(case)
    res = []
    for path, xs, s0 in (("sublayer", x, state), ("decode", x[:, :1], call_sublayer(ORACLE, w, x, state, mask)[1])):
        a = call_sublayer(cand, w, xs, s0)
        b = call_sublayer(cand, w, xs, s0)
        res += [Comparison(path, "rerun", a[0], b[0], kind="exact", axes=("batch", "token", "channel")),
                Comparison(path, "rerun", a[1].recurrent, b[1].recurrent, kind="exact", axes=("batch", *STATE_AXES))]
    return res


# ------------------------------------------------------------------------ paths


def serialize(state: KDAState) -> bytes:
    """A KDA state as safetensors bytes (what a prefix cache would persist), each array in its dtype
    (f32 recurrent kept f32; the oracle's float64 too)."""
    return st_save({k: torch.as_tensor(a).contiguous().cpu() for k, a in state._asdict().items()})


def restore(blob: bytes, t: Target) -> KDAState:
    """serialize's bytes back as t's own state, bit for bit."""
    d = st_load(blob)
    return KDAState(*(t.from_host(d[k]) for k in KDAState._fields))


def chunked_prefill(t, w, x, mask, state, splits):
    """The stream in calls cut at `splits`, from float64 `state`: (output, t's final state)."""
    ys, a, state = [], 0, t.state(state)
    for n in splits:
        y, state = own_sublayer(t, w, x[:, a:a + n], state, mask[:, a:a + n])
        ys.append(y)
        a += n
    return t.cat(ys, 1), state


def token_decode(t, w, x, mask, state, splits):
    """A prefill of the first split, then one call per token, from float64 `state`."""
    first = splits[0]
    y, state = call_sublayer(t, w, x[:, :first], state, mask[:, :first])
    ys = [y]
    for i in range(first, x.shape[1]):
        y, state = own_sublayer(t, w, x[:, i:i + 1], state, mask[:, i:i + 1])
        ys.append(y)
    return t.cat(ys, 1), state


def continuation(t, w, x, mask, state, splits):
    """A prefill of the first split, its state serialized and restored into fresh arrays, then the
    rest in one call, from float64 `state`."""
    first = splits[0]
    y, state = call_sublayer(t, w, x[:, :first], state, mask[:, :first])
    if first == x.shape[1]:
        return y, state
    blob = serialize(state)
    state = None
    state = restore(blob, t)
    y2, state = own_sublayer(t, w, x[:, first:], state, mask[:, first:])
    return t.cat([y, y2], 1), state


PATHS = {"chunked_prefill": chunked_prefill, "token_decode": token_decode, "continuation": continuation}


def run_paths(case: SublayerCase, cand: Target, base: Target):
    if len(case.splits) > 1:
        label("prefill cut into calls")
    if any(n % 64 for n in case.splits[:-1]):
        label("split not on a chunk boundary")
    w, x, mask, state = sublayer_inputs(case)
    y_ref, s_ref = call_sublayer(ORACLE, w, x, state, mask)
    y_held, s_held = call_sublayer(cand.held_oracle(), w, x, state, mask)
    y_one, s_one = call_sublayer(cand, w, x, state, mask)
    res = []
    for path, fn in PATHS.items():
        yc, scand = fn(cand, w, x, mask, state, case.splits)
        yb, sb = fn(base, w, x, mask, state, case.splits)
        res += [Comparison(path, "output", yc, y_ref, yb, held_reference=y_held),
                Comparison(path, "final_state", scand.recurrent, s_ref.recurrent, sb.recurrent,
                           held_reference=s_held.recurrent),
                Comparison(path, "conv_state", scand.conv, s_ref.conv, sb.conv, held_reference=s_held.conv),
                Comparison(path, "output_vs_prefill", yc, y_one, kind="self_consistency",
                           conditioning=(y_held, y_ref)),
                Comparison(path, "state_vs_prefill", scand.recurrent, s_one.recurrent,
                           kind="self_consistency", conditioning=(s_held.recurrent, s_ref.recurrent))]
    return res


def packed_inputs(case: PackedCase):
    g = case.geometry
    rng = np.random.default_rng(case.seed)
    w = tz.kda_weights(rng, g.heads, g.head_dim, g.hidden, g.conv_width, case.family, g.lower_bound)
    T = sum(case.docs)
    x = tz.hidden_states(rng, 1, T, g.hidden, case.family)
    state = tz.kda_state(rng, len(case.docs), g.heads, g.head_dim, g.conv_width)
    if case.poison is not None:
        state.recurrent[case.poison, 0, 0, 0] = np.nan
    return w, x, state


def _alone(t: Target, w, x, state, docs):
    """Target t on every document alone, packed back into the cu_seqlens layout."""
    own = t.state(state)
    ys, rec, conv, a = [], [], [], 0
    for i, n in enumerate(docs):
        s = KDAState(own.recurrent[i:i + 1], own.conv[i:i + 1])
        if n:
            y, s = own_sublayer(t, w, x[:, a:a + n], s)
            ys.append(y)
        rec.append(s.recurrent)
        conv.append(s.conv)
        a += n
    return t.cat(ys, 1), KDAState(t.cat(rec, 0), t.cat(conv, 0))


def run_packed(case: PackedCase, cand: Target, base: Target):
    if case.poison is not None:
        label("NaN poisoned into one document")
    if any(n == 1 for n in case.docs):
        label("1-token document")
    if any(n == 0 for n in case.docs):
        label("zero-length document")
    w, x, state = packed_inputs(case)
    cu = cu_seqlens(case.docs)
    y_ref, s_ref = _alone(ORACLE, w, x, state, case.docs)
    y_held, s_held = _alone(cand.held_oracle(), w, x, state, case.docs)
    yc, scand = call_sublayer(cand, w, x, state, None, cu)
    yb, sb = call_sublayer(base, w, x, state, None, cu)
    return [Comparison("packed", "output", yc, y_ref, yb, held_reference=y_held),
            Comparison("packed", "final_state", scand.recurrent, s_ref.recurrent, sb.recurrent,
                       held_reference=s_held.recurrent),
            Comparison("packed", "conv_state", scand.conv, s_ref.conv, sb.conv, held_reference=s_held.conv)]


def _refused(t: Target, x, state, cu):
    """t's `chunked` on the inputs: ([g refused, beta refused] as int32 (its ValueError naming the input), its
    results or None when it refused)."""
    try:
        out = _core_call(t, "chunked", x, state, cu, chunk=64)
    except ValueError as e:
        return np.array([str(e).startswith("g:"), str(e).startswith("beta:")], dtype=np.int32), None
    return np.zeros(2, dtype=np.int32), out


def run_device_report(case: DeviceReportCase, cand: Target, base: Target):
    """`chunked_ex` is `chunked` without its host read: the same bits on finite inputs; its info flags a NaN
    in g or beta wherever it sits, as `chunked` refuses it; on dense rows it reads nothing back."""
    c = case.core
    _label(c.length, c.docs)
    x, state, cu = core_inputs(c)
    want = np.zeros(2, dtype=np.int32)
    if case.nan is not None and x[case.nan].size:
        label(f"NaN in {case.nan}")
        a = x[case.nan].copy()
        a.flat[case.at * a.size // 1000] = np.nan
        x = {**x, case.nan: a}
        want[("g", "beta").index(case.nan)] = 1
    # the inputs made first: their host -> device copies are not chunked_ex's
    args = _core_args(cand, x, state, cu)
    with cand.poisoned(), record_host_syncs() as syncs:
        oe, se, be, info = cand.impl.kda.chunked_ex(*args[:6], 64, args[6], True)
    refused, checked = _refused(cand, x, state, cu)
    res = [Comparison("chunked_ex", "nan_report", info, want, kind="exact", axes=("input",)),
           Comparison("chunked", "nan_report", refused, want, kind="exact", axes=("input",))]
    if c.docs is None:
        # cu_seqlens are read back to validate and index them (as chunked does): judged on dense rows only
        res.append(Comparison("chunked_ex", "host_syncs", np.array([len(syncs)]), np.zeros(1, dtype=np.int64),
                              kind="exact", where="read back: " + format_syncs(syncs).replace("\n", "; ")
                              if syncs else "", axes=("count",)))
    if checked is not None and not want.any():
        oc, sc, bc = checked
        rows = ("document",) if c.docs is not None else ("batch",)
        res += [Comparison("chunked_ex", "output", oe, oc, kind="exact", axes=OUT_AXES),
                Comparison("chunked_ex", "final_state", se, sc, kind="exact", axes=rows + STATE_AXES),
                Comparison("chunked_ex", "boundary_states", be, bc, kind="exact", axes=_boundary_axes(c.docs))]
    return res


# ----------------------------------------------------------------------------- the records

G0 = KDAGeometry.from_geometry(TINY)

CHECKS = (
    Check("kda.recurrent", "kda", CoreCase, core_cases, run_recurrent,
          "token loop vs oracle: output and final state (varlen, initial state)",
          examples=(CoreCase(2, 8, 1, 65, None, True, "normal", 0),
                    CoreCase(2, 8, 1, 68, (64, 1, 0, 3), True, "gate_low", 1))),
    Check("kda.chunked", "kda", CoreCase, core_cases, run_chunked,
          "chunk-64 kernel vs oracle: output, final state, EVERY boundary state",
          examples=(CoreCase(2, 8, 1, 64, None, False, "normal", 0),
                    CoreCase(2, 8, 2, 129, None, True, "gate_high", 2),
                    CoreCase(2, 8, 1, 129, (63, 65, 0, 1), True, "beta_extreme", 3),
                    # one head over 3 chunks: the interpreter cuts it into 3 segments, combined from zero;
                    # head dim 32 spans two K tiles of the interpreter's 16
                    CoreCase(1, 32, 1, 140, None, False, "normal", 4),
                    # the softplus gate at g ~ -16 a token: past the factorised products' range in every
                    # 16-row block (the intra kernel's _intra_pairs), a partial chunk and packed documents
                    CoreCase(2, 8, 1, 150, None, True, "gate_low", 5, None),
                    CoreCase(2, 8, 1, 140, (60, 0, 80), True, "gate_low", 6, None)), cpu_examples=10,
          # the GPU's tiles: head dim 128 (two K tiles of the diagonal kernel's 64), a partial chunk, packed
          # documents with an empty one, strong decays; the flushed exps (FTZ, a GPU compile only) on each
          gpu_examples=(CoreCase(4, 128, 1, 300, None, True, "normal", 7),
                        CoreCase(2, 128, 1, 300, (100, 0, 200), True, "gate_low", 8, None))),
    Check("kda.causal", "kda", CausalCase, causal_cases, run_causal,
          "bitwise causality: outputs before a cut and the states settled by then do not change when "
          "only later g, k, v, beta or q do (chunked and recurrent)",
          examples=(CausalCase(CoreCase(2, 8, 1, 64, None, False, "normal", 0), 53, "g"),
                    CausalCase(CoreCase(2, 8, 2, 129, None, True, "gate_low", 1), 115, "all"),
                    CausalCase(CoreCase(2, 8, 1, 140, (64, 9, 67), True, "normal", 2), 83, "g"),
                    CausalCase(CoreCase(2, 8, 1, 70, None, True, "gate_high", 3), 64, "k"),
                    # strong softplus decays: which path a product takes must not see the later gates
                    CausalCase(CoreCase(2, 8, 1, 100, None, True, "gate_low", 7, None), 37, "g")), cpu_examples=5),
    Check("kda.decode", "kda", DecodeCase, decode_cases, run_decode,
          "fused decode step: conv window, SiLU, L2, gate, delta step, output",
          examples=(DecodeCase(G0, 2, 5, "tiny_qk", 0),), cpu_examples=10),
    Check("kda.sublayer", "kda", SublayerCase, sublayer_cases, run_sublayer,
          "projections..o_proj with left padding and an incoming state",
          examples=(SublayerCase(G0, 2, 65, (0, 3), (65,), True, "normal", 0),
                    # no incoming state over 3 chunks: segments that start from zero, and the segment-local
                    # pass over a second V block (V + K = 32: two of the interpreter's 16 columns). kernel_paths
                    # claims them; drawn cases reach them only by chance, and Hypothesis' draws move when the
                    # project's modules change (it mixes the constants of imported local modules into them)
                    SublayerCase(G0._replace(heads=1, head_dim=16), 1, 140, (0,), (140,), False, "normal", 1))),
    Check("kda.paths", "kda", SublayerCase, sublayer_cases, run_paths,
          "prefix/chunk/continuation invariant: split prefill, token decode, serialize+restore",
          examples=(SublayerCase(G0, 1, 70, (0,), (64, 1, 5), True, "normal", 0),
                    SublayerCase(G0, 2, 9, (2, 0), (3, 6), False, "gate_low", 1)), cpu_examples=6),
    Check("kda.packed", "kda", PackedCase, packed_cases, run_packed,
          "cu_seqlens packing == each document alone; a NaN stays in its document",
          examples=(PackedCase(G0, (65, 1, 0, 7), 0, "normal", 0),), cpu_examples=10),
    Check("kda.rerun", "kda", SublayerCase, lambda g: sublayer_cases(g, padded=False), run_rerun,
          "run-twice determinism of prefill and decode", cpu_examples=3),
    Check("kda.device_report", "kda", DeviceReportCase, device_report_cases, run_device_report,
          "chunked_ex (the prefill without a host read) is chunked bit for bit; its on-device NaN report "
          "names a NaN in g or beta wherever it sits, as chunked refuses it; on dense rows it reads nothing "
          "back to the host",
          examples=(DeviceReportCase(CoreCase(2, 8, 2, 129, None, True, "normal", 0), None, 0),
                    # the NaN in the last row of a partial chunk, and in a packed row's later document
                    DeviceReportCase(CoreCase(2, 8, 1, 70, None, False, "normal", 1), "g", 999),
                    DeviceReportCase(CoreCase(2, 8, 1, 140, (60, 0, 80), True, "gate_low", 2), "beta", 700)),
          cpu_examples=4, optional=("kda.chunked_ex",)),
)


# ----------------------------------------------------------------------------- calls to refuse


def _core(t: Target, B: int = 1, T: int = 5, **change):
    """q, k, v, g, beta of a small core call on target t; `change` maps a name to an edit of its
    float64 array made before the conversion."""
    x = tz.core_tensors(np.random.default_rng(0), 2, 8, B, T, "normal")
    x = {n: change[n](a) if n in change else a for n, a in x.items()}
    return [t.tensor(x[n]) for n in ("q", "k", "v")] + [t.tensor(x["g"], f32=True), t.tensor(x["beta"])]


def _nan_at(a, at):
    """A copy of `a` with a NaN at `at`."""
    a = a.copy()
    a[at] = np.nan
    return a


def _sublayer_weights(t: Target):
    """The tiny geometry's KDA sublayer weights on target t."""
    return t.weights(tz.kda_weights(np.random.default_rng(0), G0.heads, G0.head_dim, G0.hidden, G0.conv_width))


# the oracle and the baseline take any positive chunk, the Triton kernel only 64: each refuses in its terms
BAD_CHUNK = r"^chunk: expected (a positive integer|64 \(the only supported chunk length\))"

BAD_CALLS = (
    BadCall("chunked(chunk=0)", lambda ns, t: ns.chunked(*_core(t, T=6), None, 0), BAD_CHUNK),
    BadCall("chunked(chunk=1.5)", lambda ns, t: ns.chunked(*_core(t, T=6), chunk=1.5), BAD_CHUNK),
    BadCall("chunked(chunk=True)", lambda ns, t: ns.chunked(*_core(t, T=6), chunk=True), BAD_CHUNK),
    BadCall("chunked(k shorter than q)", lambda ns, t: ns.chunked(*_core(t, k=lambda k: k[:, :4])), "k"),
    BadCall("chunked(beta wrong heads)", lambda ns, t: ns.chunked(*_core(t, beta=lambda b: b[..., :1])), "beta"),
    BadCall("chunked(NaN in g)", lambda ns, t: ns.chunked(*_core(t, g=lambda g: _nan_at(g, (0, 1, 0, 0)))), "g"),
    BadCall("chunked(cu_seqlens=[0, 3, 2, 5])",
            lambda ns, t: ns.chunked(*_core(t), cu_seqlens=t.index([0, 3, 2, 5])), "cu_seqlens"),
    BadCall("chunked(cu_seqlens=[0, 4, 2, 6])",
            lambda ns, t: ns.chunked(*_core(t, T=6), cu_seqlens=t.index([0, 4, 2, 6])),
            re.escape("cu_seqlens: expected non-decreasing offsets")),
    BadCall("chunked(cu_seqlens=[0, 3]): not ending at T",
            lambda ns, t: ns.chunked(*_core(t), cu_seqlens=t.index([0, 3])), "cu_seqlens"),
    BadCall("chunked(cu_seqlens=[0])", lambda ns, t: ns.chunked(*_core(t, T=6), cu_seqlens=t.index([0])),
            re.escape("cu_seqlens: expected 1-D")),
    BadCall("recurrent(cu_seqlens=[1, 6])", lambda ns, t: ns.recurrent(*_core(t, T=6), cu_seqlens=t.index([1, 6])),
            re.escape("cu_seqlens: expected to start at 0 and end at T=6")),
    BadCall("recurrent(cu_seqlens=[0, 5])", lambda ns, t: ns.recurrent(*_core(t, T=6), cu_seqlens=t.index([0, 5])),
            re.escape("cu_seqlens: expected to start at 0 and end at T=6")),
    BadCall("recurrent(B=2, cu_seqlens)", lambda ns, t: ns.recurrent(*_core(t, B=2, T=6), cu_seqlens=t.index([0, 6])),
            re.escape("cu_seqlens given: expected batch 1")),
    BadCall("recurrent(k wrong shape)", lambda ns, t: ns.recurrent(*_core(t, T=6, k=lambda k: k[..., :4])),
            re.escape("k: expected shape")),
    BadCall("recurrent(state [1, H, K, K + 1])",
            lambda ns, t: ns.recurrent(*_core(t), t.tensor(np.zeros((1, 2, 8, 9)), f32=True)), "state"),
    BadCall("recurrent(state of 2 rows for 1 document)",
            lambda ns, t: ns.recurrent(*_core(t, T=6), t.tensor(np.zeros((2, 2, 8, 8)), f32=True),
                                       cu_seqlens=t.index([0, 6])),
            re.escape("state: expected shape (1, ")),
    BadCall("sublayer(x 2-D)", lambda ns, t: ns.sublayer(_sublayer_weights(t), t.tensor(np.zeros((5, G0.hidden)))),
            re.escape("x: expected [B, S, D]")),
)
