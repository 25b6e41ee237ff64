"""MLA (multi-head latent attention, NoPE) over a DSA selection in float64 NumPy (SPEC §7, §10).

Letters: B batch, S queries of this call, T cached tokens (past + current; query s sits at
pos(s) = T - S + s), D hidden size, H heads (h), d_n per-head q·k dim, d_v per-head value dim,
r_q / r_kv query / KV latent ranks, W selection slots (topk + P_k - 1), d_i indexer head dim.

Ladder (STYLE 3): `expanded` is the definition (what transformers computes: kv_b_proj applied to the
whole latent cache); `absorbed` folds W_UK into the query and W_UV after the sum, and must give the
same scores (not proportional ones) and outputs. `sublayer` is §7 end to end with the §10 cache
protocol: append this call's normalized latent and indexer rows, then attend over all T tokens.

There is no RoPE and no causal mask: causality comes only from the selection, and the softmax scale
is exactly d_n^-1/2 (1/16 at full size). A query whose selection is empty (a padded query) gets
output 0, as torch's SDPA gives (SPEC §7), not NaN.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from oracle import dsa, paged
from oracle.types import DSACache, IndexerWeights, MLAWeights, Selection


def _f64(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float64)


def rmsnorm(x, w, eps: float):
    """w · x · (mean(x²) + eps)^-1/2 over the last axis (SPEC §2)."""
    return w * (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps))


def _linear(x, weight, bias=None):
    y = x @ weight.T
    return y if bias is None else y + bias


def project(w: MLAWeights, a):
    """Queries and the latent to cache from the attention input (SPEC §7).

    Args:
        a: [B, S, D] (post input_layernorm; not zeroed at padding)
    Returns:
        q: [B, S, H, d_n];  q_lat: [B, S, r_q] = RMSNorm(q_a(a)) (also the indexer's query input);
        c: [B, S, r_kv] = RMSNorm(kv_a(a)), the NORMALIZED latent that is cached (SPEC §12 pitfall 9)
    """
    a = _f64(a)
    if a.ndim != 3:
        raise ValueError(f"a: expected [B, S, D], got shape {tuple(a.shape)}")
    B, S, _ = a.shape
    q_lat = rmsnorm(_linear(a, w.q_a_proj, w.q_a_bias), w.q_a_layernorm, w.eps)          # [B, S, r_q]
    q = (q_lat @ w.q_b_proj.T).reshape(B, S, w.num_heads, w.nope_dim)                   # [B, S, H, d_n]
    c = rmsnorm(_linear(a, w.kv_a_proj_with_mqa, w.kv_a_bias), w.kv_a_layernorm, w.eps)  # [B, S, r_kv]
    return q, q_lat, c


def _split_kv_b(w: MLAWeights):
    """kv_b_proj [H·(d_n+d_v), r_kv] -> (W_UK [H, d_n, r_kv], W_UV [H, d_v, r_kv]): per head, keys first."""
    Wkv = _f64(w.kv_b_proj).reshape(w.num_heads, w.nope_dim + w.v_dim, -1)
    return Wkv[:, :w.nope_dim], Wkv[:, w.nope_dim:]


def _check_attention(w: MLAWeights, q, latent, indices):
    q, latent = _f64(q), _f64(latent)
    if q.ndim != 4 or q.shape[2:] != (w.num_heads, w.nope_dim):
        raise ValueError(f"q: expected [B, S, H={w.num_heads}, d_n={w.nope_dim}], "
                         f"got shape {tuple(q.shape)}")
    B, S = q.shape[:2]
    if latent.ndim != 3 or latent.shape[0] != B or latent.shape[-1] != w.kv_rank:
        raise ValueError(f"latent: expected [B={B}, T, r_kv={w.kv_rank}], got shape {tuple(latent.shape)}")
    T = latent.shape[1]
    indices = dsa.check_indices(indices, B, S, T)
    return q, latent, dsa.selection_mask(indices, T)


def _masked_softmax(s, allowed):
    """softmax over t of s [B,S,H,T] restricted to allowed [B,S,T]; an empty row gives all 0."""
    s = np.where(allowed[:, :, None, :], s, -np.inf)
    top = s.max(axis=-1, keepdims=True)
    e = np.exp(s - np.where(np.isfinite(top), top, 0.0))
    z = e.sum(axis=-1, keepdims=True)
    return s, np.where(z > 0, e / np.where(z > 0, z, 1.0), 0.0)


def expanded(w: MLAWeights, q, latent, indices):
    """Attention over the selected cached tokens, kv_b_proj applied to every latent (SPEC §7).

    k_h(t), v_h(t) = the first d_n / next d_v rows of head h of kv_b_proj times c_t;
    score_h(s, t) = (q_h(s) · k_h(t)) · d_n^-1/2 for t in Sel(b, s), -inf elsewhere.

    Args:
        q: [B, S, H, d_n];  latent: [B, T, r_kv] the normalized cache;  indices: [B, S, W] (-1 = none)
    Returns:
        o: [B, S, H, d_v];  scores: [B, S, H, T] (-inf outside the selection)
    """
    q, latent, allowed = _check_attention(w, q, latent, indices)
    W_UK, W_UV = _split_kv_b(w)
    k = np.einsum("btr,hnr->bthn", latent, W_UK)                                         # [B, T, H, d_n]
    v = np.einsum("btr,hvr->bthv", latent, W_UV)                                         # [B, T, H, d_v]
    s = np.einsum("bshn,bthn->bsht", q, k) * w.nope_dim ** -0.5                          # [B, S, H, T]
    s, p = _masked_softmax(s, allowed)
    return np.einsum("bsht,bthv->bshv", p, v), s


def absorbed(w: MLAWeights, q, latent, indices):
    """The same attention with W_UK folded into the query and W_UV applied after the sum (SPEC §7).

    q̃_h = W_UK,h^T q_h;  score_h(s, t) = (q̃_h · c_t) · d_n^-1/2;  o_h = W_UV,h Σ_t p_h(s, t) c_t.
    Same arguments and returns as `expanded`; equal to it up to rounding (scores too).
    """
    q, latent, allowed = _check_attention(w, q, latent, indices)
    W_UK, W_UV = _split_kv_b(w)
    q_abs = np.einsum("bshn,hnr->bshr", q, W_UK)                                         # [B, S, H, r_kv]
    s = np.einsum("bshr,btr->bsht", q_abs, latent) * w.nope_dim ** -0.5                  # [B, S, H, T]
    s, p = _masked_softmax(s, allowed)
    lat = np.einsum("bsht,btr->bshr", p, latent)                                         # [B, S, H, r_kv]
    return np.einsum("bshr,hvr->bshv", lat, W_UV), s


def absorbed_paged(w: MLAWeights, q, latent_pages, block_table, page_size: int, lengths, indices):
    """`absorbed` over a paged latent cache (oracle/paged.py; docs/candidates.md section 13).

    Row b's cache is its L_b = lengths[b] latents read through the block table; indices are positions
    in that row, [-1, L_b). Equal to `absorbed` on the contiguous cache holding row b at [0, L_b) (the
    selection never reaches past it).

    Args:
        q: [B, S, H, d_n];  latent_pages: [N, page_size, r_kv];  block_table: [B, M];  page_size: G;
        lengths: [B];  indices: [B, S, W] (-1 = none)
    Returns:
        o: [B, S, H, d_v];  scores: [B, S, H, T = max L_b] (-inf outside the selection)
    """
    q = _f64(q)
    B = q.shape[0] if q.ndim == 4 else 0
    if np.asarray(block_table).ndim != 2 or np.asarray(block_table).shape[0] != B:
        raise ValueError(f"block_table: expected [B={B}, M], got shape {tuple(np.asarray(block_table).shape)}")
    latent, _ = paged.gather(latent_pages, block_table, page_size, lengths, left=False, name="latent_pages")
    idx = np.asarray(indices)
    if idx.ndim == 3 and idx.shape[0] == B and np.issubdtype(idx.dtype, np.integer) and idx.size:
        over = idx >= np.asarray(lengths)[:, None, None]
        if over.any():
            b, s, j = np.argwhere(over)[0]
            raise ValueError(f"indices: entry [{b}, {s}, {j}] = {idx[b, s, j]} outside [-1, lengths[{b}] = "
                             f"{np.asarray(lengths)[b]})")
    return absorbed(w, q, latent, indices)


def _append(old, new, name: str):
    if old is None:
        return new
    old = _f64(old)
    if old.ndim != 3 or old.shape[0] != new.shape[0] or old.shape[-1] != new.shape[-1]:
        raise ValueError(f"cache.{name}: expected [B={new.shape[0]}, T, {new.shape[-1]}], "
                         f"got shape {tuple(old.shape)}")
    return np.concatenate([old, new], axis=1)


def _check_cache(cache: Optional[DSACache], kind: str):
    if cache is None:
        return None, None
    if not isinstance(cache, DSACache):
        raise ValueError(f"cache: expected a DSACache or None, got {type(cache).__name__}")
    if kind == "full":
        if cache.index_rows is None and cache.latent is not None:
            raise ValueError("cache: a full layer's cache must hold index_rows beside the latent")
        if cache.latent is not None and cache.index_rows.shape[:2] != cache.latent.shape[:2]:
            raise ValueError(f"cache: latent {tuple(cache.latent.shape)} and index_rows "
                             f"{tuple(cache.index_rows.shape)} must cover the same [B, T]")
    return cache.latent, cache.index_rows


def sublayer(w: MLAWeights, iw: Optional[IndexerWeights], a, cache: Optional[DSACache] = None,
             mask=None, prev: Optional[Selection] = None, kind: str = "full", forced=None, trace=None):
    """The MLA + DSA sublayer from the post-norm input a to o_proj (SPEC §7, §8, cache protocol §10).

    Appends this call's normalized latent (and, on "full" layers, its packed indexer rows) to the
    cache, selects over all T cached tokens (queries are the last S), attends, projects:
    y = concat_h(o_h) o_proj^T (+ o_bias). Padded inputs are NOT zeroed (the valid flags carry the
    padding); a padded query selects nothing and its o is 0.

    Args:
        iw: the layer's indexer ("full"); on "shared" layers None, or the model's indexer whose
            topk / kpool fix the width that `prev` must have
        a: [B, S, D];  cache: DSACache or None (empty);  mask: [B, S] 1 = real, 0 = pad (None = all real)
        prev: the Selection of the full DSA layer directly before ("shared" layers only)
        kind: "full" runs the indexer, "shared" reuses `prev` (SPEC §8.8)
        forced: [B, S, W] token indices a "full" layer attends instead of its own selection (an
            implementation's choice, for a decision-conditioned comparison); the indexer still runs
        trace: a list; a "full" layer appends its OWN Selection (what `forced` is judged against)
    Returns:
        y: [B, S, D];  cache: DSACache with T rows (index_rows stays None on "shared" layers);
        selection: the Selection used (what a following "shared" layer receives): the forced indices
            with the oracle's own scores when `forced` is given
    """
    if kind not in ("full", "shared"):
        raise ValueError(f'kind: {kind!r}, expected "full" or "shared"')
    w.validate()
    a = _f64(a)
    q, q_lat, c = project(w, a)
    B, S, _ = a.shape
    old_latent, old_rows = _check_cache(cache, kind)
    latent = _append(old_latent, c, "latent")                                            # [B, T, r_kv]
    if kind == "full":
        if iw is None:
            raise ValueError('iw: a "full" layer needs its IndexerWeights')
        rows = _append(old_rows, dsa.index_rows(iw, a, mask), "index_rows")              # [B, T, 2·d_i+1]
        sel = dsa.index(iw, a, q_lat, rows, mask)
        if trace is not None:
            trace.append(sel)
        if forced is not None:
            forced = dsa.check_indices(forced, B, S, latent.shape[1], iw.slots)
            sel = sel._replace(indices=forced)
    else:
        if prev is None:
            raise ValueError('prev: a "shared" layer needs the Selection of the layer directly before')
        rows = old_rows
        sel = dsa.shared(prev)
        dsa.check_indices(sel.indices, B, S, latent.shape[1], None if iw is None else iw.slots)
    o, _ = expanded(w, q, latent, sel.indices)                                           # [B, S, H, d_v]
    y = _linear(o.reshape(B, S, w.num_heads * w.v_dim), w.o_proj, w.o_bias)               # [B, S, D]
    return y, DSACache(latent, rows), sel
