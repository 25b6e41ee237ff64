"""The KPool/DSA and MLA rows of the correctness matrix as records' run functions (see kda_checks.py).

Selections are compared tie-aware (invariants.compare.compare_selection): the oracle's scores decide
which pools are tied at the k-th place, and any tied choice is accepted and labelled.
"""
from __future__ import annotations

import contextlib

import numpy as np
import torch

from invariants.compare import to_int
from invariants.kda_checks import Comparison
from invariants.labels import label
from invariants.target import Target, poisoned_memory
from oracle import dsa as odsa
from oracle import mla as omla
from strategies import cases as sc
from strategies import tensors as tz


def _mask(batch, length, left_pad):
    m = np.ones((batch, length))
    for r, p in enumerate(left_pad):
        m[r, :p] = 0.0
    return m


def _tie_exact(a, mask, kpool):
    """Copy each row's first pool of real tokens into its second: equal pooled keys, tied scores."""
    a = a.copy()
    for r in range(a.shape[0]):
        f = int(np.argmax(mask[r] > 0))
        if f + 2 * kpool <= a.shape[1]:
            a[r, f + kpool:f + 2 * kpool] = a[r, f:f + kpool]
            label("exact score tie made on purpose")
    return a


def index_inputs(case: sc.IndexCase):
    g = case.geometry
    rng = np.random.default_rng(case.seed)
    w = tz.indexer_weights(rng, g, case.family)
    a = rng.standard_normal((case.batch, case.length, g.hidden))
    mask = _mask(case.batch, case.length, case.left_pad)
    if case.tie == "exact":
        a = _tie_exact(a, mask, g.kpool)
    q_lat = rng.standard_normal((case.batch, case.length, g.q_rank))
    return w, a, q_lat, mask


def token_pool(packed, w) -> np.ndarray:
    """[B, T] kept-pool id of every cached token, -1 for tokens in no COMPLETE pool of their row.

    A pool kept because it is complete in another batch row is no pool in this one: its tokens are the
    row's tail (a selection holds them as raw tokens, never as a pick), so they map to -1 here.
    """
    _, member_idx, pool_valid, _, _ = odsa.pool_keys(packed, w.compress_ape, w.kpool)
    B, T = packed.shape[:2]
    out = -np.ones((B, T), dtype=np.int64)
    for b in range(B):
        for p in np.flatnonzero(pool_valid[b]):
            out[b, member_idx[b, p]] = p
    return out


def _impl_index(t: Target, w, a, q_lat, mask, S):
    wt = w.map(t.tensor)
    at, qt, mt = t.tensor(a), t.tensor(q_lat), t.tensor(mask)
    with poisoned_memory():
        packed = t.impl.dsa.index_rows(wt, at, mt)
        sel = t.impl.dsa.index(wt, at[:, -S:], qt[:, -S:], packed, mt[:, -S:])
    return packed, sel


def _candidate_scores(scores, ref):
    """Scores of candidate pools only (non-candidates are -inf in the oracle, finfo.min in kernels), in
    units of each query's score magnitude (ref.scale = max Σ_j |w_j| |qI_j| |K̄| / sqrt(d_i)): the signed head mix cancels,
    so a small score carries the rounding of large terms and a plain rel-L2 over I would call a
    correct bf16 kernel 30% off on a query whose scores nearly cancel."""
    s = np.asarray(scores.detach().float().cpu() if hasattr(scores, "detach") else scores, dtype=np.float64)
    cand = np.asarray(ref.candidate)
    if s.shape != cand.shape:
        return s    # another number of kept pools: the contract reports the shape mismatch
    size = np.asarray(ref.scale, dtype=np.float64)[..., None]
    return np.where(cand, s, 0.0) / np.where(size > 0, size, 1.0)


def run_index(case: sc.IndexCase, cand: Target, base: Target):
    _label_sparsity(case.length, case.geometry)
    if any(case.left_pad):
        label("left padding")
    if case.queries == 1:
        label("decode query after a prefix")
    w, a, q_lat, mask = index_inputs(case)
    S = case.queries
    packed = odsa.index_rows(w, a, mask)
    ref = odsa.index(w, a[:, -S:], q_lat[:, -S:], packed, mask[:, -S:])
    pc, sc_ = _impl_index(cand, w, a, q_lat, mask, S)
    pb, sb = _impl_index(base, w, a, q_lat, mask, S)
    return [Comparison("index_rows", "index_rows", pc, packed, pb),
            Comparison("scores", "scores", _candidate_scores(sc_.scores, ref), _candidate_scores(ref.scores, ref),
                       _candidate_scores(sb.scores, ref)),
            Comparison("index", "selection", sc_.indices, (ref, token_pool(packed, w)), kind="selection")]


def run_absorbed(case: sc.IndexCase, cand: Target, base: Target):
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


def _label_sparsity(length: int, g) -> None:
    label("selection really sparse (T >= topk + kpool)" if length >= g.topk + g.kpool
          else "selection covers the whole prefix (T < topk + kpool)")


def run_mla_paths(case: sc.MLACase, cand: Target, base: Target):
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
