"""The DSA indexer with KPool in float64 NumPy: which cached tokens each MLA query sees (SPEC §8).

Letters: B batch, S queries of this call, T cached tokens (past + current; query s sits at
pos(s) = T - S + s), D hidden size, r_q query latent rank, H_i indexer heads (j), d_i indexer
head dim (c), P_k pool size (m = member), n_p = ceil(T / P_k) pools, P kept pools (p),
k_sel pools picked per query, W = topk + P_k - 1 selection slots.

Pipeline: `index_rows` packs what one call appends to the layer's indexer cache; `pool_keys` rebuilds
the pooled keys from the whole cache (pools anchored at the first real token, per-channel softmax over
members); `scores` is the signed, ReLU'd head mix; `index` picks the top pools among the candidates,
expands them into tokens and appends the current incomplete pool (the tail). `shared` is the hand-off
to a "shared" layer. Everything is float64 (the reference runs it in f32: agreement ~1e-7).

Tie rule (STYLE 4): among equal scores the lowest pool index wins (a stable sort). transformers uses
torch.topk, which is not tie-stable and breaks exact ties differently for prefill [B,S,P] and decode
[B,1,P] shapes (SPEC §12 pitfall 1), so comparisons against it must be tie-aware.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from oracle import paged
from oracle.types import IndexerWeights, Selection

LN_EPS = 1e-6


def _f64(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float64)


def _check_shape(name: str, a, want: tuple, legend: str) -> None:
    if tuple(a.shape) != want:
        raise ValueError(f"{name}: expected shape {legend} = {want}, got {tuple(a.shape)}")


def slots(topk: int, kpool: int) -> int:
    """Selection width per query, topk + P_k - 1 (SPEC §1, §8.7): 2051 at full size, not 2048."""
    return topk + kpool - 1


# ----------------------------------------------------------------------------- per-token rows


def layernorm(x, w, b, eps: float = LN_EPS):
    """(x - mean) · (var + eps)^-1/2 · w + b over the last axis, biased variance (SPEC §2)."""
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def index_rows(w: IndexerWeights, a, mask=None):
    """What one call appends to the indexer cache: concat(kI, gsc, val) (SPEC §8.1).

    Args:
        a: [B, S, D] the attention input (NOT zeroed at padding: DSA relies on the valid flags)
        mask: [B, S] 1 = real, 0 = pad; None = all real
    Returns:
        packed: [B, S, 2·d_i + 1] = LayerNorm(a wk^T) | a G^T | mask as 0/1
    """
    a = _f64(a)
    if a.ndim != 3:
        raise ValueError(f"a: expected [B, S, D], got shape {tuple(a.shape)}")
    B, S, _ = a.shape
    val = _query_mask(mask, B, S).astype(np.float64)
    kI = layernorm(a @ w.wk.T, w.k_norm_weight, w.k_norm_bias)                   # [B, S, d_i]
    gsc = a @ w.compress_gate.T                                                  # [B, S, d_i]
    return np.concatenate([kI, gsc, val[..., None]], axis=-1)


def _query_mask(mask, B: int, S: int) -> np.ndarray:
    if mask is None:
        return np.ones((B, S), dtype=bool)
    mask = np.asarray(mask)
    _check_shape("mask", mask, (B, S), "[B, S]")
    return mask.astype(bool)


def split_rows(packed, head_dim: int):
    """packed [B, T, 2·d_i + 1] -> (kI [B,T,d_i], gsc [B,T,d_i], val [B,T] bool)."""
    if packed.ndim != 3 or packed.shape[-1] != 2 * head_dim + 1:
        raise ValueError(f"packed: expected [B, T, 2·d_i + 1] with d_i={head_dim}, "
                         f"got shape {tuple(packed.shape)}")
    return packed[..., :head_dim], packed[..., head_dim:2 * head_dim], packed[..., 2 * head_dim] > 0.5


# ----------------------------------------------------------------------------- pools


def pool_keys(packed, ape, kpool: int):
    """Pooled index keys K̄ from the whole cache (SPEC §8.3).

    Pools start at f_b = the first real token of row b: member m of pool p is token
    f_b + p·P_k + m, valid iff < T and real; a pool is valid iff all P_k members are. Per channel c,
    K̄[b,p,c] = Σ_m softmax_m(gsc[idx,c] + ape[m,c]) · kI[idx,c], invalid members at -inf (an empty
    pool gives 0, not NaN). Only pools valid in at least one batch row are kept.

    Args:
        packed: [B, T, 2·d_i + 1] the indexer cache;  ape: [P_k, d_i];  kpool: P_k
    Returns:
        kbar: [B, P, d_i];  member_idx: [B, P, P_k] int64 token of each member (may be >= T when
        invalid);  pool_valid: [B, P] bool;  first: [B] int64 f_b (T when a row has no real token);
        kept: [n_p] bool over all ceil(T / P_k) pools
    """
    packed, ape = _f64(packed), _f64(ape)
    di = ape.shape[-1]
    _check_shape("ape", ape, (kpool, di), "[P_k, d_i]")
    kI, gsc, val = split_rows(packed, di)
    B, T = val.shape
    first = np.where(val.any(axis=1), val.argmax(axis=1), T).astype(np.int64)          # [B]
    n_p = -(-T // kpool)
    member_idx = (first[:, None, None] + kpool * np.arange(n_p)[None, :, None]
                  + np.arange(kpool)[None, None, :])                                    # [B, n_p, P_k]
    safe = np.minimum(member_idx, T - 1) if T else member_idx
    rows = np.arange(B)[:, None, None]
    member_ok = (member_idx < T) & val[rows, safe]                                     # [B, n_p, P_k]
    pool_valid = member_ok.all(axis=-1)                                                # [B, n_p]
    lam = np.where(member_ok[..., None], gsc[rows, safe] + ape, -np.inf)               # [B, n_p, P_k, d_i]
    pi = _softmax_members(lam)
    kbar = np.einsum("bpmc,bpmc->bpc", pi, kI[rows, safe])                             # [B, n_p, d_i]
    kept = pool_valid.any(axis=0)                                                      # [n_p]
    return kbar[:, kept], member_idx[:, kept], pool_valid[:, kept], first, kept


def _softmax_members(lam):
    """softmax over the member axis (-2), per channel; all -inf (empty pool) -> 0 instead of NaN."""
    top = lam.max(axis=-2, keepdims=True)
    e = np.exp(lam - np.where(np.isfinite(top), top, 0.0))
    z = e.sum(axis=-2, keepdims=True)
    return np.where(z > 0, e / np.where(z > 0, z, 1.0), 0.0)


# ----------------------------------------------------------------------------- scores


def scores(w: IndexerWeights, q_lat, a, kbar, magnitude: bool = False):
    """Index scores I[b,s,p] = Σ_j w_j · relu((qI_j · K̄_p) · d_i^-1/2) (SPEC §8.4).

    w = (a WwI^T) · H_i^-1/2 is signed (no softmax); qI = q_lat wq_b^T from the normalized q_a output.

    Args:
        q_lat: [B, S, r_q];  a: [B, S, D];  kbar: [B, P, d_i]
        magnitude: also return Σ_j |w_j| ||qI_j|| ||K̄_p|| d_i^-1/2 [B, S, P], the size of the terms the
            signed head mix cancels and of the dots inside its ReLUs: what rounding errors scale with
    Returns:
        I: [B, S, P] (and the magnitude)
    """
    B, S, _ = q_lat.shape
    Hi, di = w.n_heads, w.head_dim
    qI = (q_lat @ w.wq_b.T).reshape(B, S, Hi, di)                                       # [B, S, H_i, d_i]
    sigma = np.maximum(np.einsum("bsjc,bpc->bsjp", qI, kbar) * di ** -0.5, 0.0)         # [B, S, H_i, P]
    wts = (a @ w.weights_proj.T) * Hi ** -0.5                                           # [B, S, H_i]
    I = np.einsum("bsj,bsjp->bsp", wts, sigma)
    if not magnitude:
        return I
    # Cauchy-Schwarz: a dot near 0 sits at the ReLU's kink, where its rounding (~ |q||K̄|) decides the term
    size = np.einsum("bsj,bsj,bp->bsp", np.abs(wts), np.linalg.norm(qI, axis=-1), np.linalg.norm(kbar, axis=-1))
    return I, size * di ** -0.5


# ----------------------------------------------------------------------------- selection


def index(w: IndexerWeights, a, q_lat, packed_all, mask=None) -> Selection:
    """The selection of every query: top pools among the candidates, expanded, plus the tail (SPEC §8.2-8.7).

    Candidates: valid pools whose LAST member is visible (<= pos(s) and real). k_sel = min(topk/P_k, P)
    per forward; the k_sel best scores are taken with ties to the lowest pool index (module docstring),
    picks that are not candidates are dropped, not replaced. Tail (always_select_tail and P_k > 1): with
    n_vis = real tokens <= pos(s) and τ = n_vis mod P_k, tokens f_b + n_vis - τ + o (o < τ) that are
    < T and visible. A complete current pool (τ = 0) is NOT force-included: only if it wins the top-k.

    Args:
        a: [B, S, D];  q_lat: [B, S, r_q] (mla.project's normalized q_a output)
        packed_all: [B, T, 2·d_i + 1] the whole indexer cache, this call's S rows last (T >= S)
        mask: [B, S] of the current queries (1 = real); None = the valid flags of the last S cached
            rows (all real when those rows were packed without a mask); given, it must agree with them
    Returns:
        Selection (oracle.types): indices [B, S, topk + P_k - 1] pool tokens in score order, then the
        tail, then -1; rows of padded queries all -1
    """
    w.validate()
    a, q_lat, packed_all = _f64(a), _f64(q_lat), _f64(packed_all)
    if a.ndim != 3:
        raise ValueError(f"a: expected [B, S, D], got shape {tuple(a.shape)}")
    B, S, _ = a.shape
    _check_shape("q_lat", q_lat, (B, S, w.wq_b.shape[-1]), "[B, S, r_q]")
    if packed_all.ndim != 3 or packed_all.shape[0] != B or packed_all.shape[-1] != 2 * w.head_dim + 1:
        raise ValueError(f"packed_all: expected [B={B}, T, 2·d_i + 1 = {2 * w.head_dim + 1}], "
                         f"got shape {tuple(packed_all.shape)}")
    T = packed_all.shape[1]
    if T < S:
        raise ValueError(f"packed_all: holds T={T} rows, fewer than the S={S} queries it must end with "
                         f"(append this call's index_rows first)")
    _, _, val = split_rows(packed_all, w.head_dim)
    real = val[:, T - S:]
    if mask is not None and not np.array_equal(_query_mask(mask, B, S), real):
        raise ValueError("mask: disagrees with the valid flags of the last S rows of packed_all "
                         "(index_rows must be packed with the same mask)")
    kbar, member_idx, pool_valid, first, kept = pool_keys(packed_all, w.compress_ape, w.kpool)
    pos = T - S + np.arange(S)                                                          # [S]
    cand = candidates(member_idx, pool_valid, val, pos)                                 # [B, S, P]
    I, mag = scores(w, q_lat, a, kbar, magnitude=True)
    I = np.where(cand, I, -np.inf)                                                      # [B, S, P]
    scale = np.where(cand, mag, 0.0).max(axis=-1, initial=0.0)                          # [B, S]
    k_sel = min(w.topk_pools, int(kept.sum()))
    picked = _pick_pools(I, cand, member_idx, k_sel)                                    # [B, S, k_sel·P_k]
    tail = _tail(first, val, pos, w.kpool) if w.always_select_tail and w.kpool > 1 \
        else np.full((B, S, 0), -1, dtype=np.int64)
    indices = _compact(np.concatenate([picked, tail], axis=-1), slots(w.topk, w.kpool))
    indices[~real] = -1
    return Selection(indices, I, cand, k_sel, first, kept, scale)


def index_paged(w: IndexerWeights, a, q_lat, row_pages, block_table, page_size: int, lengths,
                mask=None) -> Selection:
    """`index` over a paged indexer cache (oracle/paged.py; docs/candidates.md section 13).

    Row b's cache is its L_b = lengths[b] packed rows read through the block table, this call's S
    queries its last S (L_b >= S). Equal to `index` on the contiguous cache that left-pads every row to
    T = max L_b with zero rows (valid flag 0: pools anchor at the first real token, so padding moves
    nothing), with positions then given in each row's own frame.

    Args:
        a: [B, S, D];  q_lat: [B, S, r_q];  row_pages: [N, page_size, 2·d_i + 1] the page pool;
        block_table: [B, M] page ids;  page_size: G;  lengths: [B] cache lengths;  mask: as `index`
    Returns:
        Selection as `index`, indices in [-1, L_b) of row b, pool_first in row b's frame (L_b when it
        has no real token); scores, candidate and kept as over the left-padded rows
    """
    B = np.asarray(a).shape[0]
    if np.asarray(block_table).ndim != 2 or np.asarray(block_table).shape[0] != B:
        raise ValueError(f"block_table: expected [B={B}, M], got shape {tuple(np.asarray(block_table).shape)}")
    packed, off = paged.gather(row_pages, block_table, page_size, lengths, left=True, name="row_pages")
    S = np.asarray(a).shape[1] if np.asarray(a).ndim == 3 else 0
    if packed.shape[1] and int(np.min(lengths)) < S:
        raise ValueError(f"lengths: every row must cache at least the S={S} queries of this call, found "
                         f"{int(np.min(lengths))}")
    sel = index(w, a, q_lat, packed, mask)
    shifted = np.where(sel.indices >= 0, sel.indices - off[:, None, None], -1)
    return sel._replace(indices=shifted, pool_first=sel.pool_first - off)


def candidates(member_idx, pool_valid, val, pos):
    """[B, S, P] bool: pool valid and its last member visible, i.e. <= pos(s) and real (SPEC §8.5)."""
    T = val.shape[1]
    last = member_idx[..., -1]                                                          # [B, P]
    real_last = np.take_along_axis(val, np.minimum(last, max(T - 1, 0)), axis=1) & (last < T)
    return (pool_valid & real_last)[:, None, :] & (last[:, None, :] <= pos[None, :, None])


def _pick_pools(I, cand, member_idx, k_sel: int):
    """Top k_sel pools by I (stable: lowest pool first on ties), non-candidates dropped, expanded."""
    B, S, _ = I.shape
    kpool = member_idx.shape[-1]
    order = np.argsort(-I, axis=-1, kind="stable")[..., :k_sel]                        # [B, S, k_sel]
    ok = np.take_along_axis(cand, order, axis=-1)
    tokens = member_idx[np.arange(B)[:, None, None], order]                             # [B, S, k_sel, P_k]
    tokens = np.where(ok[..., None], tokens, -1)
    return tokens.reshape(B, S, k_sel * kpool)


def _tail(first, val, pos, kpool: int):
    """[B, S, P_k - 1] the current incomplete pool's visible tokens, -1 elsewhere (SPEC §8.7)."""
    T = val.shape[1]
    n_vis = np.cumsum(val, axis=1)[:, pos]                                              # [B, S]
    tau = n_vis % kpool
    o = np.arange(kpool - 1)
    tok = first[:, None, None] + (n_vis - tau)[..., None] + o                           # [B, S, P_k-1]
    safe = np.minimum(tok, max(T - 1, 0))
    real = np.take_along_axis(val, safe.reshape(len(first), -1), axis=1).reshape(tok.shape)
    ok = (o < tau[..., None]) & (tok < T) & (tok <= pos[None, :, None]) & real
    return np.where(ok, tok, -1)


def _compact(idx, width: int):
    """Move every -1 to the end, keeping the order of the rest; pad or cut to `width`."""
    order = np.argsort(idx < 0, axis=-1, kind="stable")
    idx = np.take_along_axis(idx, order, axis=-1)
    pad = width - idx.shape[-1]
    if pad < 0:
        if (idx[..., width:] >= 0).any():
            raise ValueError(f"selection overflows its {width} slots")
        return idx[..., :width].astype(np.int64)
    return np.concatenate([idx, np.full(idx.shape[:-1] + (pad,), -1)], axis=-1).astype(np.int64)


def as_set(indices):
    """[B, S, W] positions with each row's repeats (SPEC §8.7: "duplicates harmless", Sel is a set) made
    -1 and the row compacted, first occurrences in order: the form a slot-summing attention takes."""
    idx = np.array(indices, dtype=np.int64)
    for row in idx.reshape(-1, idx.shape[-1]):
        seen = set()
        for j, t in enumerate(row):
            if t >= 0 and t in seen:
                row[j] = -1
            seen.add(int(t))
    return _compact(idx, idx.shape[-1])


def shared(prev: Selection) -> Selection:
    """A "shared" layer's selection: the previous layer's, unchanged (SPEC §8.8).

    transformers hands `topk_out` from a "full" DSA layer to the layer directly after it; every layer
    overwrites the hand-off (KDA layers with None), so it only works between adjacent DSA layers
    (SPEC §12 pitfall 21). Both layers cache the same T tokens, so the positions stay valid.
    """
    if not isinstance(prev, Selection):
        raise ValueError(f"prev: expected the Selection of the full DSA layer directly before, "
                         f"got {type(prev).__name__}")
    return prev


# ----------------------------------------------------------------------------- selection helpers


def check_indices(indices, B: int, S: int, T: int, width: Optional[int] = None) -> np.ndarray:
    """Validate a selection [B, S, W] of positions in [-1, T) (and W == width if given); int64."""
    indices = np.asarray(indices)
    if indices.ndim != 3 or indices.shape[:2] != (B, S):
        raise ValueError(f"indices: expected [B={B}, S={S}, W], got shape {tuple(indices.shape)}")
    if width is not None and indices.shape[-1] != width:
        raise ValueError(f"indices: width {indices.shape[-1]}, expected topk + P_k - 1 = {width}")
    if not np.issubdtype(indices.dtype, np.integer):
        raise ValueError(f"indices: expected an integer array, got dtype {indices.dtype}")
    if indices.size and (indices.min() < -1 or indices.max() >= T):
        raise ValueError(f"indices: entries must lie in [-1, T={T}), found "
                         f"[{indices.min()}, {indices.max()}]")
    return indices.astype(np.int64)


def selection_mask(indices, T: int):
    """[B, S, W] positions (-1 = none, duplicates harmless) -> [B, S, T] bool: Sel(b, s) as a mask."""
    B, S, _ = indices.shape
    out = np.zeros((B, S, T + 1), dtype=bool)
    np.put_along_axis(out, np.where(indices < 0, T, indices), True, axis=-1)
    return out[..., :T]


def selected_sets(sel) -> list[list[set[int]]]:
    """Sel(b, s) as Python sets, [B][S] (a Selection or its indices array)."""
    indices = np.asarray(sel.indices if isinstance(sel, Selection) else sel)
    return [[{int(t) for t in row if t >= 0} for row in batch] for batch in indices]
