"""Batch invariance of the attention side (KDA, the DSA indexer, MLA): a row's result alone equals its
result among other rows (issue 13 item 2): cases, run functions, check records.

Every <mechanism>.batch check draws a Placement (strategies.sequences.placements): the row of interest,
one to three companions of drawn lengths and contents, and the row's position among them. It runs the
candidate on the whole batch and on the row alone and compares the row's outputs and states. A
function the candidate's namespace claims bitwise batch-invariant (its BATCH_INVARIANT,
impl.registry.batch_invariant) is compared `exact`; any other under the mechanism's self_consistency
contract of quantity "batch" (contracts.d/<mechanism>.toml); a selection tie-aware against the row
alone. Each comparison's `where` names the row, the batch and what was compared, so a failure says
which row moved and where (the first differing element, or the worst one, is relative to the row).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from hypothesis import strategies as st

from impl.registry import claims_batch_invariance
from invariants.check import Check
from invariants.compare import Comparison, to_int, to_numpy
from invariants.dsa_checks import _candidate_scores, _mask, _tie_exact, token_pool
from invariants.kda_checks import _core_call, call_sublayer, own_sublayer
from invariants.labels import label
from invariants.mla_checks import WIDE_KPOOL, WIDE_TOPK
from invariants.target import ORACLE, Target
from oracle import dsa as odsa
from oracle import kda as okda
from oracle import mla as omla
from oracle.config import Geometry
from oracle.types import KDAState, Selection
from strategies import tensors as tz
from strategies.geometry import DSAGeometry, KDAGeometry, dsa_geometries, kda_geometries
from strategies.sequences import cu_seqlens, placements, sequence_lengths
from strategies.tensors import SEEDS, families

TINY = Geometry.preset("tiny")     # the pinned examples' geometry


# ------------------------------------------------------------------------ shared


def claimed(t: Target, mechanism: str, function: str) -> bool:
    """Whether t's `mechanism` namespace claims `function` bitwise batch-invariant."""
    return claims_batch_invariance(getattr(t.impl, mechanism), function)


def row_comparison(t: Target, mechanism: str, function: str, in_batch, alone, where: str,
                   quantity: str = "batch", claim: str = "") -> Comparison:
    """The row's result in the batch vs alone: `exact` where t claims `claim` (default `function`)
    batch-invariant, else under the self_consistency contract (mechanism, function, quantity)."""
    kind = "exact" if claimed(t, mechanism, claim or function) else "self_consistency"
    return Comparison(function, quantity, in_batch, alone, kind=kind, where=where)


def placed(lengths, at: int, what: str) -> str:
    """"row 2 of 3 (lengths (70, 5, 130)): <what>": the words every batch comparison starts with."""
    return f"row {at} of {len(lengths)} (lengths {tuple(lengths)}): {what}"


def label_placement(lengths, at: int) -> None:
    """Events: where the row of interest sits and whether its companions differ in length."""
    label("row of interest last in the batch" if at == len(lengths) - 1 else "row of interest not last")
    if len(set(lengths)) > 1:
        label("companions of other lengths")


# ------------------------------------------------------------------------ KDA

# (function, layout): the core on [B, T] rows (every row as long as the row of interest) or on
# cu_seqlens documents (zero-length companions too); one-token decode steps of B rows; the sublayer on
# rows of different lengths left-padded to the longest (no incoming state: a prefill)
KDA_PAIRS = (("chunked", "rows"), ("chunked", "packed"), ("recurrent", "rows"), ("recurrent", "packed"),
             ("decode", "rows"), ("sublayer", "padded"))
# the interpreter's cost per token: the token loop (recurrent) ~3x the chunk kernels'; two chunks reach
# the segmented state pass (impl/kda.py SEGMENT_MIN_CHUNKS)
KDA_MAX_LEN = {"chunked": 80, "recurrent": 32, "decode": 1, "sublayer": 80}


class KDABatchCase(NamedTuple):
    """The KDA row of interest (`lengths[at]` tokens) alone vs among its companions: `function` in
    `layout` (KDA_PAIRS)."""

    geometry: KDAGeometry
    function: str
    layout: str
    lengths: tuple[int, ...]
    at: int
    initial_state: bool
    family: str
    seed: int


@st.composite
def kda_batch_cases(draw, base, *, max_rows: int = 3) -> KDABatchCase:
    """KDA_PAIRS, half the time chunked on [B, T] rows of two chunks with gates near 0: where the state
    pass cuts a row into segments, and where a state that outlives a chunk shows how it was cut (under
    the other families' gates, ~-2.5 a token, a chunk forgets its incoming state entirely)."""
    g = draw(kda_geometries(base))
    segmented = draw(st.booleans())
    fn, layout = ("chunked", "rows") if segmented else draw(st.sampled_from(KDA_PAIRS))
    n = st.integers(65, KDA_MAX_LEN[fn]) if segmented else sequence_lengths(max_len=KDA_MAX_LEN[fn])
    p = draw({"rows": placements(n, max_rows=max_rows),
              "packed": placements(n, companion_lengths=st.one_of(n, st.just(0)), max_rows=max_rows),
              "padded": placements(n, companion_lengths=n, max_rows=max_rows)}[layout])
    family = "gate_high" if segmented else draw(families())
    return KDABatchCase(g, fn, layout, p.lengths, p.at, draw(st.booleans()) and layout != "padded", family,
                        draw(SEEDS))


def _core_rows(case: KDABatchCase, cand: Target):
    """[B, T] rows: row `at` of the batch vs the row alone."""
    g, B, T, at = case.geometry, len(case.lengths), case.lengths[case.at], case.at
    rng = np.random.default_rng(case.seed)
    x = tz.core_tensors(rng, g.heads, g.head_dim, B, T, case.family, g.lower_bound)
    state = tz.initial_state(rng, B, g.heads, g.head_dim) if case.initial_state else None
    one = {n: a[at:at + 1] for n, a in x.items()}
    fn = case.function
    kw = {"chunk": 64} if fn == "chunked" else {}
    full = _core_call(cand, fn, x, state, None, **kw)
    alone = _core_call(cand, fn, one, None if state is None else state[at:at + 1], None, **kw)
    return [row_comparison(cand, "kda", fn, full[i][at:at + 1], alone[i], placed(case.lengths, at, f"{fn} {what}"))
            for i, what in enumerate(("output [1, T, H, V]", "final state [1, H, K, V]", "boundary states"))
            if i < len(alone) and alone[i] is not None and full[i] is not None]


def _core_packed(case: KDABatchCase, cand: Target):
    """cu_seqlens documents: document `at` packed among the others vs packed alone (cu_seqlens [0, n]),
    and vs the same document run as a plain [1, n] row (never bitwise: a declared bound)."""
    g, docs, at = case.geometry, case.lengths, case.at
    rng = np.random.default_rng(case.seed)
    x = tz.core_tensors(rng, g.heads, g.head_dim, 1, sum(docs), case.family, g.lower_bound)
    state = tz.initial_state(rng, len(docs), g.heads, g.head_dim) if case.initial_state else None
    s0, n = sum(docs[:at]), docs[at]
    one = {k: a[:, s0:s0 + n] for k, a in x.items()}
    st0 = None if state is None else state[at:at + 1]
    b0, nb = sum(d // 64 for d in docs[:at]), n // 64
    fn, res = case.function, []
    kw = {"chunk": 64} if fn == "chunked" else {}
    full = _core_call(cand, fn, x, state, cu_seqlens(docs), **kw)
    alone = _core_call(cand, fn, one, st0, [0, n], **kw)
    plain = _core_call(cand, fn, one, st0, None, **kw)
    parts = [(full[0][:, s0:s0 + n], alone[0], plain[0], "output [1, n, H, V]"),
             (full[1][at:at + 1], alone[1], plain[1], "final state [1, H, K, V]")]
    if fn == "chunked" and all(r[2] is not None for r in (full, alone, plain)):
        parts.append((full[2][b0:b0 + nb], alone[2], plain[2].reshape(-1, *plain[2].shape[2:]),
                      "boundary states [n // 64, H, K, V]"))
    for got, want, row, what in parts:
        where = placed(docs, at, f"packed document, {fn} {what}")
        res += [row_comparison(cand, "kda", fn, got, want, where),
                Comparison(fn, "packed_row", got, row, kind="self_consistency",
                           where=where + " vs the document as a plain row")]
    return res


def _decode_rows(case: KDABatchCase, cand: Target):
    """One fused decode step of B rows from their own states: row `at` vs the row alone."""
    g, B, at = case.geometry, len(case.lengths), case.at
    rng = np.random.default_rng(case.seed)
    w = tz.kda_weights(rng, g.heads, g.head_dim, g.hidden, g.conv_width, case.family, g.lower_bound)
    z, f, b, _ = okda.project(w, tz.hidden_states(rng, B, 1, g.hidden, case.family))
    s0 = tz.kda_state(rng, B, g.heads, g.head_dim, g.conv_width)
    wt = cand.weights(w)

    def step(rows):
        st_ = cand.state(KDAState(s0.recurrent[rows], s0.conv[rows]))
        with cand.poisoned():
            return cand.impl.kda.decode(wt, cand.tensor(z[rows, 0]), cand.tensor(f[rows, 0], f32=True),
                                        cand.tensor(b[rows, 0]), st_)
    full, alone = step(slice(None)), step(slice(at, at + 1))
    pairs = ((full[0], alone[0], "output [1, H, V]"), (full[1].recurrent, alone[1].recurrent, "recurrent state"),
             (full[1].conv, alone[1].conv, "conv window"))
    return [row_comparison(cand, "kda", "decode", a[at:at + 1], o, placed(case.lengths, at, f"decode {what}"))
            for a, o, what in pairs]


def _sublayer_padded(case: KDABatchCase, cand: Target):
    """Sublayer rows left-padded to the longest: row `at` in the batch vs alone with its padding
    (a claim of "sublayer" makes it exact), and vs alone unpadded (never bitwise: the chunks fall
    elsewhere; a declared bound, floored by the row's own rounding sensitivity: Comparison.conditioning)."""
    g, lengths, at = case.geometry, case.lengths, case.at
    T, n = max(lengths), lengths[at]
    rng = np.random.default_rng(case.seed)
    w = tz.kda_weights(rng, g.heads, g.head_dim, g.hidden, g.conv_width, case.family, g.lower_bound)
    x = tz.hidden_states(rng, len(lengths), T, g.hidden, case.family)
    mask = _mask(len(lengths), T, tuple(T - m for m in lengths))
    full = own_sublayer(cand, w, x, None, mask)
    same = own_sublayer(cand, w, x[at:at + 1], None, mask[at:at + 1])
    bare = own_sublayer(cand, w, x[at:at + 1, T - n:], None, None)
    # the row alone unpadded in float64, on its inputs as the working dtype holds them and on the exact ones
    held = call_sublayer(cand.held_oracle(), w, x[at:at + 1, T - n:], None)
    exact = call_sublayer(ORACLE, w, x[at:at + 1, T - n:], None)
    res = []
    for i, (a, b_, c, what, cond) in enumerate((
            (full[0], same[0], bare[0], "output", (held[0], exact[0])),
            (full[1].recurrent, same[1].recurrent, bare[1].recurrent, "recurrent state",
             (held[1].recurrent, exact[1].recurrent)),
            (full[1].conv, same[1].conv, bare[1].conv, "conv window", (held[1].conv, exact[1].conv)))):
        where = placed(lengths, at, f"sublayer {what}, left-padded by {T - n}")
        res.append(row_comparison(cand, "kda", "sublayer", a[at:at + 1], b_, where))
        res.append(Comparison("sublayer", "padded", a[at:at + 1, T - n:] if i == 0 else a[at:at + 1], c,
                              kind="self_consistency", where=where + " vs the row alone unpadded",
                              conditioning=cond))
    return res


def run_kda_batch(case: KDABatchCase, cand: Target, base: Target):
    """The case's function in its layout (KDA_PAIRS): the row of interest in the batch vs alone."""
    label_placement(case.lengths, case.at)
    label(f"{case.function} on {case.layout}")
    if case.lengths[case.at] > 64:
        label("row of interest crosses a chunk boundary")
    if (case.function, case.layout) not in KDA_PAIRS:
        raise ValueError(f"KDABatchCase: ({case.function!r}, {case.layout!r}) is not one of {KDA_PAIRS}")
    run = {"decode": _decode_rows, "sublayer": _sublayer_padded}.get(case.function)
    return (run or {"rows": _core_rows, "packed": _core_packed}[case.layout])(case, cand)


# ------------------------------------------------------------------------ DSA indexer


class DSABatchCase(NamedTuple):
    """Indexer rows of `lengths` real tokens, left-padded to the longest; every row's last `queries`
    positions query (the row of interest holds that many real tokens). tie "exact" copies each row's
    first pool into its second (tied pool scores)."""

    geometry: DSAGeometry
    lengths: tuple[int, ...]
    at: int
    queries: int
    tie: str
    family: str
    seed: int


@st.composite
def dsa_batch_cases(draw, base, *, max_len: int = 30) -> DSABatchCase:
    """Rows of drawn lengths (left-padded to the longest), 1 or more queries, with and without a tie."""
    g = draw(dsa_geometries(base))
    n = sequence_lengths(max_len=max_len)
    p = draw(placements(n, companion_lengths=n, max_rows=3))
    S = draw(st.one_of(st.just(1), st.integers(1, p.lengths[p.at])))
    return DSABatchCase(g, p.lengths, p.at, S, draw(st.sampled_from(("none", "exact"))),
                        draw(st.sampled_from(("normal", "large"))), draw(SEEDS))


def _host_selection(sel, scale) -> Selection:
    """A candidate's Selection as host NumPy (what the tie-aware comparison reads), with the oracle's
    score magnitude per query `scale` (what its tie tolerance scales with)."""
    return Selection(to_int(sel.indices), to_numpy(sel.scores), to_int(sel.candidate).astype(bool), int(sel.k_sel),
                     to_int(sel.pool_first), to_int(sel.kept).astype(bool), scale)


def run_dsa_batch(case: DSABatchCase, cand: Target, base: Target):
    """index_rows and index: row `at` of the left-padded batch (positions moved into its own frame) vs
    the row alone, unpadded."""
    label_placement(case.lengths, case.at)
    g, lengths, at, S = case.geometry, case.lengths, case.at, case.queries
    B, T, n = len(lengths), max(lengths), lengths[case.at]
    rng = np.random.default_rng(case.seed)
    w = tz.indexer_weights(rng, g, case.family)
    a = rng.standard_normal((B, T, g.hidden))
    mask = _mask(B, T, tuple(T - m for m in lengths))
    if case.tie == "exact":
        a = _tie_exact(a, mask, g.kpool)
    q_lat = rng.standard_normal((B, T, g.q_rank))
    wt, pad = w.map(cand.tensor), T - n
    with cand.poisoned():
        rows = cand.impl.dsa.index_rows(wt, cand.tensor(a), cand.tensor(mask))
        sel = cand.impl.dsa.index(wt, cand.tensor(a[:, -S:]), cand.tensor(q_lat[:, -S:]), rows,
                                  cand.tensor(mask[:, -S:]))
        rows1 = cand.impl.dsa.index_rows(wt, cand.tensor(a[at:at + 1, pad:]))
        sel1 = cand.impl.dsa.index(wt, cand.tensor(a[at:at + 1, -S:]), cand.tensor(q_lat[at:at + 1, -S:]), rows1)
    where = lambda what: placed(lengths, at, f"{what}, left-padded by {pad}")  # noqa: E731
    idx = to_int(sel.indices)[at:at + 1]
    idx = np.where(idx >= 0, idx - pad, -1)
    scores = to_numpy(sel.scores)[at:at + 1, :, :sel1.scores.shape[-1]]
    res = [row_comparison(cand, "dsa", "index_rows", rows[at:at + 1, pad:], rows1, where("index rows"))]
    if claimed(cand, "dsa", "index"):
        return res + [Comparison("scores", "batch", scores, sel1.scores, kind="exact", where=where("pool scores")),
                      Comparison("index", "batch", idx, sel1.indices, kind="exact", where=where("selection"))]
    # the row alone through the oracle: each query's score magnitude, the unit of its scores' rounding
    # (a signed head mix cancels: relative to the score itself a correct bf16 run can be 30% off)
    a1, q1 = a[at:at + 1, pad:], q_lat[at:at + 1, pad:]
    ref = odsa.index(w, a1[:, -S:], q1[:, -S:], odsa.index_rows(w, a1), None)
    host = _host_selection(sel1, ref.scale)
    return res + [Comparison("scores", "batch", _candidate_scores(scores, ref), _candidate_scores(sel1.scores, ref),
                             kind="self_consistency", where=where("pool scores in units of each query's score magnitude")),
                  Comparison("index", "batch", idx, (host, token_pool(to_numpy(rows1), w)), kind="selection",
                             where=where("selection, tie-aware against the row alone"))]


# ------------------------------------------------------------------------ MLA


class MLABatchCase(NamedTuple):
    """Absorbed sparse attention of rows caching `lengths` latents each (a shorter row's cache padded
    with stale rows to the longest), `queries` decode queries a row, over random selections; `wide`
    selects topk 256 (the width a GPU splits across programs)."""

    geometry: DSAGeometry
    lengths: tuple[int, ...]
    at: int
    queries: int
    wide: bool
    family: str
    seed: int


@st.composite
def mla_batch_cases(draw, base) -> MLABatchCase:
    """Rows of drawn cache lengths, 1-2 decode queries, the tiny selection or (half the time) a wide one."""
    g = draw(dsa_geometries(base, vary=False))
    wide = draw(st.booleans())
    if wide:
        g = g._replace(topk=WIDE_TOPK, kpool=WIDE_KPOOL)
    n = st.integers(1, g.slots + 20) if wide else sequence_lengths(max_len=40)
    p = draw(placements(n, companion_lengths=n, max_rows=3))
    return MLABatchCase(g, p.lengths, p.at, draw(st.integers(1, 2)), wide,
                        draw(st.sampled_from(("normal", "large"))), draw(SEEDS))


def mla_batch_inputs(case: MLABatchCase):
    """(MLA weights, q [B, S, H, d_n], latent [B, T, r_kv] with stale rows past each row's length,
    indices [B, S, W] of distinct positions below each row's length, -1 padded)."""
    g, lengths = case.geometry, case.lengths
    B, T, W = len(lengths), max(lengths), case.geometry.slots
    rng = np.random.default_rng(case.seed)
    mw = tz.mla_weights(rng, g)
    scale = 30.0 if case.family == "large" else 1.0
    q = omla.project(mw, scale * rng.standard_normal((B, case.queries, g.hidden)))[0]
    latent = omla.project(mw, rng.standard_normal((B, T, g.hidden)))[2]
    idx = -np.ones((B, case.queries, W), dtype=np.int64)
    for b, m in enumerate(lengths):
        # what a cache slot past a row's length holds: another request's stale latents, never read
        latent[b, m:] = 4.0 * rng.standard_normal((T - m, g.kv_rank))
        for s in range(case.queries):
            pick = rng.permutation(m)[:W]
            idx[b, s, :len(pick)] = pick
    return mw, q, latent, idx


def run_mla_batch(case: MLABatchCase, cand: Target, base: Target):
    """absorbed (the decode attention) and project: row `at` vs the row alone (its cache cut to its
    own length)."""
    label_placement(case.lengths, case.at)
    if case.wide:
        label("wide selection: split across programs on a GPU")
    mw, q, latent, idx = mla_batch_inputs(case)
    at, n, lengths = case.at, case.lengths[case.at], case.lengths
    wt = mw.map(cand.tensor)
    a = np.random.default_rng([case.seed, 1]).standard_normal((len(lengths), case.queries, mw.q_a_proj.shape[1]))
    with cand.poisoned():
        o = cand.impl.mla.absorbed(wt, cand.tensor(q), cand.tensor(latent), cand.index(idx, long=True))[0]
        o1 = cand.impl.mla.absorbed(wt, cand.tensor(q[at:at + 1]), cand.tensor(latent[at:at + 1, :n]),
                                    cand.index(idx[at:at + 1], long=True))[0]
        pr = cand.impl.mla.project(wt, cand.tensor(a))
        pr1 = cand.impl.mla.project(wt, cand.tensor(a[at:at + 1]))
    res = [row_comparison(cand, "mla", "absorbed", o[at:at + 1], o1, placed(lengths, at, "absorbed output [1, S, H, d_v]"))]
    res += [row_comparison(cand, "mla", "project", u[at:at + 1], v, placed(lengths, at, f"project {what}"))
            for u, v, what in zip(pr, pr1, ("q", "q_lat", "latent"))]
    return res


# ----------------------------------------------------------------------------- the records

K0 = KDAGeometry.from_geometry(TINY)
D0 = DSAGeometry.from_geometry(TINY)

CHECKS = (
    Check("kda.batch", "kda", KDABatchCase, kda_batch_cases, run_kda_batch,
          "a row alone == the same row among companions ([B, T] rows, packed documents, decode rows, "
          "left-padded sublayer rows): bitwise where the namespace claims it (BATCH_INVARIANT)",
          # the segmented state pass: a lone row of two chunks is cut in two (the interpreter), the same
          # row among a companion must be too; gates near 0 carry the state across the cut
          examples=(KDABatchCase(K0, "chunked", "rows", (70, 70), 1, True, "gate_high", 0),
                    KDABatchCase(K0, "chunked", "packed", (70, 1, 0), 0, True, "gate_high", 1),
                    KDABatchCase(K0, "decode", "rows", (1, 1, 1), 2, False, "normal", 2),
                    KDABatchCase(K0, "sublayer", "padded", (9, 66), 0, False, "normal", 3)), cpu_examples=1,
          # a GPU segments a lone row of >= 32 chunks when few programs run: at H = 16, K = 64 a row of 4096
          # tokens alone takes 4 segments, and a batch rule (programs counted over 4 rows) would take 1
          gpu_examples=(KDABatchCase(K0._replace(heads=16, head_dim=64), "chunked", "rows", (4096,) * 4, 1, True,
                                     "gate_high", 5),)),
    Check("dsa.batch", "dsa", DSABatchCase, dsa_batch_cases, run_dsa_batch,
          "a row's indexer rows, pool scores and selection alone == among left-padded companions",
          examples=(DSABatchCase(D0, (13, 30, 5), 0, 5, "none", "normal", 0),
                    DSABatchCase(D0, (23, 9), 1, 1, "exact", "normal", 1)), cpu_examples=2),
    Check("mla.batch", "mla", MLABatchCase, mla_batch_cases, run_mla_batch,
          "absorbed decode attention and the projections of a row alone == among companions with "
          "ragged caches (stale rows past each row's length); wide selections split on a GPU",
          examples=(MLABatchCase(D0, (30, 7, 40), 2, 1, False, "normal", 0),
                    MLABatchCase(D0._replace(topk=WIDE_TOPK, kpool=WIDE_KPOOL), (259, 100), 0, 2, True,
                                 "normal", 1)),
          # a wide row alone (2 and 1 query rows) against the row among 9 (18 query rows) and 8 (8): the GPU's
          # launch changes with B·S (16 heads a program and entry blocks of 64 below impl.mla.ROWS_64 = 7 rows,
          # 64 heads and blocks of 32 from there, other split counts), which the drawn batches (up to 3 rows
          # of 1-2 queries) never cross; the row of interest selects all 259 slots, so every split holds
          # entries (a short row would sit in the first block of either launch)
          gpu_examples=(MLABatchCase(D0._replace(topk=WIDE_TOPK, kpool=WIDE_KPOOL),
                                     (259, 100, 37, 200, 5, 180, 64, 120, 90), 0, 2, True, "normal", 2),
                        MLABatchCase(D0._replace(topk=WIDE_TOPK, kpool=WIDE_KPOOL),
                                     (259, 7, 40, 12, 25, 3, 38, 19), 0, 1, True, "large", 3)),
          cpu_examples=1),
)
