"""MLA (NoPE) over a DSA selection in plain torch: the "torch" baseline (mirrors oracle/mla.py).

Letters: B batch, S queries of this call, T cached tokens (past + current; query s sits at
pos(s) = T - S + s), D hidden size, H heads (h), d_n per-head q·k dim, d_v per-head value dim,
r_q / r_kv query / KV latent ranks, W selection slots (topk + P_k - 1), d_i indexer head dim.

Same names, argument order and return values as `oracle.mla`; the math is the oracle's, the
precision the reference's (SPEC §2, §7): projections, kv_b_proj, the score and value products in the
input dtype; the RMSNorm statistics and the attention softmax in float32 ("at least float32":
float64 stays float64, which is how this file is checked against the oracle to 1e-10). The indexer
is a `TorchDSA` (impl/baseline/dsa.py).

`TorchMLA` is split into small overridable pieces (`_scale`, `_cache_latent`, `_select`) because the
planted bugs of impl/mutants/ subclass it and override exactly one. `mla = TorchMLA()` and the
module-level aliases let this module be used like `oracle.mla`.
"""
from __future__ import annotations

from typing import Optional

import torch

from impl.baseline.dsa import TorchDSA, check_indices, check_paged, compute_dtype, gather_rows, selection_mask
from impl.graph import MLAAbsorbedStep
from oracle.types import DSACache, IndexerWeights, MLAWeights, Selection


def _linear(x, weight, bias=None):
    y = x @ weight.to(x.dtype).T
    return y if bias is None else y + bias.to(x.dtype)


def _masked_softmax(s, allowed):
    """softmax over t of s [B,S,H,T] (compute dtype) restricted to allowed [B,S,T]; empty row -> 0."""
    s = s.masked_fill(~allowed[:, :, None, :], float("-inf"))
    p = torch.nan_to_num(torch.softmax(s, dim=-1), nan=0.0)
    return s, p


def _append(old, new, name: str):
    if old is None:
        return new
    if old.ndim != 3 or old.shape[0] != new.shape[0] or old.shape[-1] != new.shape[-1]:
        raise ValueError(f"cache.{name}: expected [B={new.shape[0]}, T, {new.shape[-1]}], "
                         f"got shape {tuple(old.shape)}")
    return torch.cat([old.to(new.dtype), new], dim=1)


def _check_cache(cache: Optional[DSACache], kind: str):
    if cache is None:
        return None, None
    if not isinstance(cache, DSACache):
        raise ValueError(f"cache: expected a DSACache or None, got {type(cache).__name__}")
    if kind == "full":
        if cache.index_rows is None and cache.latent is not None:
            raise ValueError("cache: a full layer's cache must hold index_rows beside the latent")
        if cache.latent is not None and tuple(cache.index_rows.shape[:2]) != tuple(cache.latent.shape[:2]):
            raise ValueError(f"cache: latent {tuple(cache.latent.shape)} and index_rows "
                             f"{tuple(cache.index_rows.shape)} must cover the same [B, T]")
    cache.check_pooled()
    return cache.latent, cache.index_rows


class TorchMLA:
    """Plain-torch MLA + DSA sublayer; every public method matches the oracle.mla function of the same name."""

    # the decoder composing this baseline keeps its own norm in torch ops too (impl.model.TorchDecoder._rmsnorm)
    PLAIN_TORCH = True

    def __init__(self, indexer: Optional[TorchDSA] = None):
        self.dsa = TorchDSA() if indexer is None else indexer

    # ------------------------------------------------------------------------- projections

    def rmsnorm(self, x, w, eps: float):
        """SPEC §2: u = f32(x); u·(mean(u²)+eps)^-1/2; cast back to x's dtype; then times w."""
        u = x.to(compute_dtype(x.dtype))
        y = (u * torch.rsqrt(torch.mean(u * u, dim=-1, keepdim=True) + eps)).to(x.dtype)
        return w.to(x.dtype) * y

    def project(self, w: MLAWeights, a):
        """oracle.mla.project: q [B,S,H,d_n], q_lat [B,S,r_q], c [B,S,r_kv] (normalized), a's dtype."""
        if a.ndim != 3:
            raise ValueError(f"a: expected [B, S, D], got shape {tuple(a.shape)}")
        B, S, _ = a.shape
        q_lat = self.rmsnorm(_linear(a, w.q_a_proj, w.q_a_bias), w.q_a_layernorm, w.eps)
        q = _linear(q_lat, w.q_b_proj).reshape(B, S, w.num_heads, w.nope_dim)
        c = self.rmsnorm(_linear(a, w.kv_a_proj_with_mqa, w.kv_a_bias), w.kv_a_layernorm, w.eps)
        return q, q_lat, c

    def _split_kv_b(self, w: MLAWeights, dtype):
        """kv_b_proj -> (W_UK [H, d_n, r_kv], W_UV [H, d_v, r_kv]) in `dtype`: per head, keys first."""
        Wkv = w.kv_b_proj.to(dtype).reshape(w.num_heads, w.nope_dim + w.v_dim, -1)
        return Wkv[:, :w.nope_dim], Wkv[:, w.nope_dim:]

    def _scale(self, w: MLAWeights) -> float:
        """Softmax scale d_qk^-1/2 with d_qk = d_n + 0 (no rope part): 1/16 at full size (SPEC §7)."""
        return w.nope_dim ** -0.5

    def _check_attention(self, w: MLAWeights, q, latent, indices):
        if q.ndim != 4 or tuple(q.shape[2:]) != (w.num_heads, w.nope_dim):
            raise ValueError(f"q: expected [B, S, H={w.num_heads}, d_n={w.nope_dim}], "
                             f"got shape {tuple(q.shape)}")
        B, S = q.shape[:2]
        if latent.ndim != 3 or latent.shape[0] != B or latent.shape[-1] != w.kv_rank:
            raise ValueError(f"latent: expected [B={B}, T, r_kv={w.kv_rank}], got shape {tuple(latent.shape)}")
        T = latent.shape[1]
        indices = check_indices(torch.as_tensor(indices, device=q.device), B, S, T)
        return latent.to(q.dtype), selection_mask(indices, T)

    # ------------------------------------------------------------------------- attention

    def expanded(self, w: MLAWeights, q, latent, indices):
        """oracle.mla.expanded: o [B,S,H,d_v] (q's dtype), scores [B,S,H,T] float32 (-inf off Sel)."""
        latent, allowed = self._check_attention(w, q, latent, indices)
        dt, acc = q.dtype, compute_dtype(q.dtype)
        W_UK, W_UV = self._split_kv_b(w, dt)
        k = torch.einsum("btr,hnr->bthn", latent, W_UK)                                   # [B, T, H, d_n]
        v = torch.einsum("btr,hvr->bthv", latent, W_UV)                                   # [B, T, H, d_v]
        s = torch.einsum("bshn,bthn->bsht", q, k).to(acc) * self._scale(w)                # [B, S, H, T]
        s, p = _masked_softmax(s, allowed)
        return torch.einsum("bsht,bthv->bshv", p.to(dt), v), s

    def absorbed(self, w: MLAWeights, q, latent, indices):
        """oracle.mla.absorbed: W_UK folded into the query, W_UV after the sum; same returns as expanded."""
        latent, allowed = self._check_attention(w, q, latent, indices)
        dt, acc = q.dtype, compute_dtype(q.dtype)
        W_UK, W_UV = self._split_kv_b(w, dt)
        q_abs = torch.einsum("bshn,hnr->bshr", q, W_UK)                                   # [B, S, H, r_kv]
        s = torch.einsum("bshr,btr->bsht", q_abs, latent).to(acc) * self._scale(w)        # [B, S, H, T]
        s, p = _masked_softmax(s, allowed)
        lat = torch.einsum("bsht,btr->bshr", p.to(dt), latent)                            # [B, S, H, r_kv]
        return torch.einsum("bshr,hvr->bshv", lat, W_UV), s

    def absorbed_paged(self, w: MLAWeights, q, latent_pages, block_table, page_size: int, lengths, indices):
        """oracle.mla.absorbed_paged: `absorbed` over the rows read through the block table (row b at
        [0, lengths[b]), zero rows after); indices in [-1, lengths[b]); scores [B, S, H, max(lengths)]."""
        if q.ndim != 4:
            raise ValueError(f"q: expected [B, S, H={w.num_heads}, d_n={w.nope_dim}], got shape {tuple(q.shape)}")
        bt, ln = check_paged(latent_pages, block_table, page_size, lengths, q.shape[0], "latent_pages")
        latent, _ = gather_rows(latent_pages, bt, page_size, ln.tolist(), left=False,
                                table_rows=self._table_rows(bt))
        idx = torch.as_tensor(indices, device=q.device)
        over = idx >= ln[:, None, None]
        if idx.ndim == 3 and idx.shape[0] == q.shape[0] and bool(over.any()):
            b, s, j = (int(v) for v in over.nonzero()[0])
            raise ValueError(f"indices: entry [{b}, {s}, {j}] = {int(idx[b, s, j])} outside [-1, lengths[{b}] = "
                             f"{int(ln[b])})")
        return self.absorbed(w, q, latent, indices)

    def absorbed_graph(self, w: MLAWeights, latent, max_batch: int, width: int):
        """impl.mla.absorbed_graph over this namespace's `absorbed` (its selection bounds all the lengths
        say: a row's positions past its length are never selected): an MLAAbsorbedStep (impl/graph.py)."""
        return MLAAbsorbedStep(self._attend_rows, w, latent, max_batch, width)

    def _attend_rows(self, w: MLAWeights, q, latent, indices, lengths):
        """`absorbed`'s output for a graph step (impl/graph.py): no selection reaches past its row's length."""
        return self.absorbed(w, q, latent, indices)[0]

    def _table_rows(self, block_table):
        """The block-table row each batch row reads its pages through: its own."""
        return block_table

    # ------------------------------------------------------------------------- sublayer

    def _cache_latent(self, w: MLAWeights, a, c):
        """What this call appends to the latent cache: the kv_a_layernorm-NORMALIZED c (pitfall 9)."""
        return c

    def _select(self, iw: Optional[IndexerWeights], a, q_lat, old_rows, mask, prev, kind: str, T: int):
        """(index_rows cache, Selection): "full" layers append and run the indexer, "shared" reuse prev."""
        B, S, _ = a.shape
        if kind == "full":
            if iw is None:
                raise ValueError('iw: a "full" layer needs its IndexerWeights')
            rows = _append(old_rows, self.dsa.index_rows(iw, a, mask), "index_rows")       # [B, T, 2·d_i+1]
            return rows, self.dsa.index(iw, a, q_lat, rows, mask)
        if prev is None:
            raise ValueError('prev: a "shared" layer needs the Selection of the layer directly before')
        sel = self.dsa.shared(prev)
        check_indices(torch.as_tensor(sel.indices), B, S, T, None if iw is None else iw.slots)
        return old_rows, sel

    def sublayer(self, w: MLAWeights, iw: Optional[IndexerWeights], a, cache: Optional[DSACache] = None,
                 mask=None, prev: Optional[Selection] = None, kind: str = "full"):
        """oracle.mla.sublayer: (y [B,S,D] in a's dtype, DSACache(latent, index_rows, pooled), Selection)."""
        if kind not in ("full", "shared"):
            raise ValueError(f'kind: {kind!r}, expected "full" or "shared"')
        w.validate()
        q, q_lat, c = self.project(w, a)
        B, S, _ = a.shape
        old_latent, old_rows = _check_cache(cache, kind)
        latent = _append(old_latent, self._cache_latent(w, a, c), "latent")               # [B, T, r_kv]
        rows, sel = self._select(iw, a, q_lat, old_rows, mask, prev, kind, latent.shape[1])
        # the pooled-key cache as oracle.mla.sublayer keeps it: pooled whole from all T rows
        pooled = self.dsa.pooled_rows(rows, iw.compress_ape, iw.kpool) if kind == "full" else None
        o, _ = self.expanded(w, q, latent, sel.indices)                                   # [B, S, H, d_v]
        y = _linear(o.reshape(B, S, w.num_heads * w.v_dim), w.o_proj, w.o_bias)            # [B, S, D]
        return y, DSACache(latent, rows, pooled), sel


mla = TorchMLA()


def __getattr__(name: str):
    # the module's functions are the namespace's methods (PEP 562): `from impl.baseline.mla import x`
    return getattr(mla, name)
