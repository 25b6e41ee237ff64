"""The MLA row of the correctness matrix: sparse absorbed attention and the full + shared DSA layers over
split calls (SPEC §7, §8.8): cases, run functions, check records.
"""
from __future__ import annotations

import contextlib
from typing import NamedTuple

import numpy as np
import torch
from hypothesis import strategies as st

from invariants.check import Check
from invariants.compare import Comparison, to_int
from invariants.dsa_checks import IndexCase, _label_sparsity, _mask, dsa_lengths, index_cases, index_inputs, token_pool
from invariants.labels import label
from invariants.target import Target, poisoned_memory
from oracle import dsa as odsa
from oracle import mla as omla
from oracle.config import Geometry
from strategies import tensors as tz
from strategies.geometry import DSAGeometry, dsa_geometries
from strategies.sequences import chunk_splits
from strategies.tensors import SEEDS

TINY = Geometry.preset("tiny")     # the pinned examples' geometry


# ------------------------------------------------------------------------ cases


class MLACase(NamedTuple):
    """A full DSA layer then a shared one over one token stream, cut into calls by `splits`."""

    geometry: DSAGeometry
    batch: int
    length: int
    left_pad: tuple[int, ...]
    splits: tuple[int, ...]
    family: str
    seed: int


@st.composite
def mla_cases(draw, base, *, max_len: int = 70) -> MLACase:
    g = draw(dsa_geometries(base))
    length = draw(dsa_lengths(g, max_len=max_len))
    batch = draw(st.integers(1, 2))
    pad = tuple(draw(st.integers(0, min(length - 1, 9))) for _ in range(batch))
    return MLACase(g, batch, length, pad, draw(chunk_splits(length)), draw(st.sampled_from(("normal", "large"))),
                   draw(SEEDS))


# a selection wider than two kernel blocks of 64 rows: few query rows then split it across programs
# (flash-decoding) on a GPU; the tiny geometry's topk 8 never does
WIDE_TOPK, WIDE_KPOOL = 256, 4


@st.composite
def absorbed_cases(draw, base, *, max_len: int = 80) -> IndexCase:
    """index_cases, plus (a drawn boolean) a wide selection: topk 256 over up to ~300 cached tokens with
    1-2 decode queries, the shape whose selection a GPU splits across programs and merges."""
    if not draw(st.booleans()):
        return draw(index_cases(base, max_len=max_len))
    g = draw(dsa_geometries(base, vary=False))._replace(topk=WIDE_TOPK, kpool=WIDE_KPOOL)
    length = draw(st.integers(1, g.topk + g.kpool + 40))
    batch = draw(st.integers(1, 2))
    pad = tuple(draw(st.integers(0, min(length - 1, 9))) for _ in range(batch))
    return IndexCase(g, batch, length, draw(st.integers(1, min(2, length))), pad, "none",
                     draw(st.sampled_from(("normal", "large"))), draw(SEEDS))


# ---------------------------------------------------------------- run functions


def run_absorbed(case: IndexCase, cand: Target, base: Target):
    """Sparse absorbed attention over the oracle's selection vs the oracle; baseline: torch expanded."""
    g = case.geometry
    if g.slots > 256:
        label("wide selection: split across programs on a GPU")
    _label_sparsity(case.length, g)
    w, a, q_lat, mask = index_inputs(case)
    mw = tz.mla_weights(np.random.default_rng(case.seed + 1), g)
    S = case.queries
    q, _, c = omla.project(mw, a)
    packed = odsa.index_rows(w, a, mask)
    sel = odsa.index(w, a[:, -S:], q_lat[:, -S:], packed, mask[:, -S:])
    o_ref, _ = omla.absorbed(mw, q[:, -S:], c, sel.indices)
    outs = []
    for t, fn in ((cand, "absorbed"), (base, "expanded")):
        with poisoned_memory():
            o, _ = getattr(t.impl.mla, fn)(mw.map(t.tensor), t.tensor(q[:, -S:]), t.tensor(c),
                                           t.index(sel.indices).long())
        outs.append(o)
    return [Comparison("absorbed", "output", outs[0], o_ref, outs[1])]


def _mla_layers(t, mw, iw, iw_shared, a, mask, splits, forced=None):
    """A full DSA layer then a shared one, the stream cut into calls:
    (y_full, y_shared, full layer's cache, its selection indices over all calls [B, S, W]).

    The shared layer is handed an indexer of its own (same topk and kpool) that it must NOT run:
    were it to, its selection would differ from the hand-off. forced (oracle only): the selection to
    attend instead of the oracle's own (the oracle re-run with an implementation's decisions).
    """
    conv = (lambda x: x) if t is None else t.tensor
    mod = omla if t is None else t.impl.mla
    mw_, iw_, iws_ = (mw, iw, iw_shared) if t is None else \
        (mw.map(t.tensor), iw.map(t.tensor), iw_shared.map(t.tensor))
    cache1 = cache2 = None
    y1s, y2s, sels, start = [], [], [], 0
    for n in splits:
        sl = slice(start, start + n)
        kw = {} if forced is None else {"forced": forced[:, sl]}
        with poisoned_memory() if t is not None else contextlib.nullcontext():
            y1, cache1, sel = mod.sublayer(mw_, iw_, conv(a[:, sl]), cache1, conv(mask[:, sl]), **kw)
            y2, cache2, _ = mod.sublayer(mw_, iws_, conv(a[:, sl]), cache2, conv(mask[:, sl]), prev=sel,
                                         kind="shared")
        y1s.append(y1)
        y2s.append(y2)
        sels.append(to_int(sel.indices))
        start += n
    cat = np.concatenate if t is None else torch.cat
    return cat(y1s, 1), cat(y2s, 1), cache1, _cat_selections(sels)


def _cat_selections(parts) -> np.ndarray:
    """Per-call selections [B, S_i, W_i] -> [B, S, W] (-1 padded to the widest call)."""
    W = max(p.shape[-1] for p in parts)
    return np.concatenate([np.pad(p, ((0, 0), (0, 0), (0, W - p.shape[-1])), constant_values=-1)
                           for p in parts], axis=1)


def attendable(indices, T: int) -> bool:
    """Can the oracle attend this selection (each entry in [-1, T))? A selection that is not is judged
    a failure by its selection verdict; its outputs are then compared with the unconditioned oracle."""
    idx = to_int(indices)
    return idx.size == 0 or (idx.min() >= -1 and idx.max() < T)


def same_sets(a, b) -> bool:
    """Two selections [B, S, W] pick the same set of tokens for every query."""
    return odsa.selected_sets(to_int(a)) == odsa.selected_sets(to_int(b))


def conditioned(run, own, indices, T: int):
    """The oracle's outputs given an implementation's selection: its own run when the sets agree
    (the common case, no re-run), else `run(indices)`; the unconditioned run when unattendable."""
    if same_sets(indices, own) or not attendable(indices, T):
        return None
    return run(indices)


def run_mla_paths(case: MLACase, cand: Target, base: Target):
    """Prefix/chunk/continuation on MLA + DSA: outputs, the latent cache and the indexer rows of a
    stream cut into calls equal the oracle's one prefill; a shared layer reuses the selection."""
    if len(case.splits) > 1:
        label("prefill cut into calls")
    if any(n % case.geometry.kpool for n in case.splits[:-1]):
        label("split not on a pool boundary")
    _label_sparsity(case.length, case.geometry)
    g = case.geometry
    rng = np.random.default_rng(case.seed)
    iw, mw = tz.indexer_weights(rng, g, case.family), tz.mla_weights(rng, g)
    iw2 = tz.indexer_weights(rng, g, case.family)
    a = rng.standard_normal((case.batch, case.length, g.hidden))
    mask = _mask(case.batch, case.length, case.left_pad)
    y1, y2, c1, own = _mla_layers(None, mw, iw, iw2, a, mask, (case.length,))
    yc1, yc2, cc1, csel = _mla_layers(cand, mw, iw, iw2, a, mask, case.splits)
    yb1, yb2, cb1, bsel = _mla_layers(base, mw, iw, iw2, a, mask, case.splits)
    ref = odsa.index(iw, a, omla.project(mw, a)[1], c1.index_rows, mask)

    def oracle_given(indices):
        label("selection differs from the oracle's: outputs judged against the oracle re-run on it")
        return _mla_layers(None, mw, iw, iw2, a, mask, (case.length,), forced=indices)[:2]
    (y1c, y2c), (y1b, y2b) = ((conditioned(oracle_given, own, s, case.length) or (y1, y2)) for s in (csel, bsel))
    return [Comparison("chunked_prefill", "selection", csel, (ref, token_pool(c1.index_rows, iw)), kind="selection"),
            Comparison("chunked_prefill", "output", yc1, y1c, yb1, baseline_reference=y1b),
            Comparison("chunked_prefill", "shared_output", yc2, y2c, yb2, baseline_reference=y2b),
            Comparison("chunked_prefill", "latent_cache", cc1.latent, c1.latent, cb1.latent),
            Comparison("chunked_prefill", "index_rows", cc1.index_rows, c1.index_rows, cb1.index_rows)]


# ----------------------------------------------------------------------------- the records

G0 = DSAGeometry.from_geometry(TINY)

CHECKS = (
    Check("mla.absorbed", "mla", IndexCase, absorbed_cases, run_absorbed,
          "sparse absorbed attention over a selection vs the oracle (baseline: expanded form); wide "
          "selections (topk 256) that a GPU splits across programs",
          examples=(IndexCase(G0, 2, 13, 13, (0, 2), "none", "normal", 0),
                    IndexCase(G0, 1, 65, 1, (0,), "none", "normal", 1))),
    Check("mla.paths", "mla", MLACase, mla_cases, run_mla_paths,
          "full + shared DSA layers over split calls: outputs, latent cache, indexer rows",
          examples=(MLACase(G0, 1, 13, (0,), (5, 8), "normal", 0),
                    MLACase(G0, 2, 9, (3, 0), (4, 1, 4), "normal", 1))),
)
