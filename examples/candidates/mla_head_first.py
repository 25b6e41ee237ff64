"""An MLA candidate: a sparse latent-attention kernel with other conventions, wrapped as `absorbed`.

`sparse_latent_attention` stands in for your kernel (plain torch here: it gathers the selected latent
rows and runs a masked softmax over them). Its conventions differ from the protocol's `absorbed`
(impl/mla.py) in three ways the wrapper undoes:

  absorption  it attends in latent space: it takes q already folded through W_UK ([.., R], R = r_kv)
              and returns the latent-space mixture; ours takes q [B, S, H, d_n] and returns the
              value-space output [B, S, H, d_v], so the wrapper folds W_UK in and applies W_UV
  scale       it takes the softmax scale as an argument; the right one is d_n^-1/2 (the q.k dim of
              the un-absorbed heads), NOT r_kv^-1/2, though its dots run over r_kv
  layout      head-first [B, H, S, R]; ours are [B, S, H, *]

Only `absorbed` is provided: our Triton `sublayer` (projections, indexer, o_proj) calls it, so
mla.paths and the whole decoder run it too.

Gate it from this directory:  glmgate gate --candidate mla_head_first:Candidate --mechanism mla
"""
from __future__ import annotations

import torch

from impl.mla import check_selection


def sparse_latent_attention(q_lat, latent, indices, softmax_scale):
    """The stand-in kernel. q_lat [B, H, S, R], latent [B, T, R], indices [B, S, W] (-1 = none).

    Returns:
        [B, H, S, R] float32: per head, softmax_t(scale · q·c_t) over the selected t of c_t; 0 where a
        query selects nothing
    """
    B, T = latent.shape[:2]
    rows = torch.arange(B, device=latent.device)[:, None, None]
    picked = latent.float()[rows, indices.clamp(min=0)]                        # [B, S, W, R]
    s = torch.einsum("bhsr,bswr->bhsw", q_lat.float(), picked) * softmax_scale
    s = s.masked_fill((indices < 0)[:, None], float("-inf"))
    p = torch.nan_to_num(torch.softmax(s, dim=-1), nan=0.0)                   # an empty row gives 0
    return torch.einsum("bhsw,bswr->bhsr", p, picked)


def _dense_scores(q_abs, latent, indices, scale):
    """[B, S, H, T] float32 scores, -inf outside the selection (what return_scores asks for)."""
    B, S, _ = indices.shape
    T = latent.shape[1]
    allowed = torch.zeros(B, S, T + 1, dtype=torch.bool, device=latent.device)
    allowed.scatter_(2, torch.where(indices < 0, T, indices), True)
    s = torch.einsum("bshr,btr->bsht", q_abs.float(), latent.float()) * scale
    return s.masked_fill(~allowed[:, :, None, :T], float("-inf"))


class MLA:
    """The mla namespace: `absorbed` only; `project` and `sublayer` are ours."""

    @staticmethod
    def absorbed(w, q, latent, indices, lengths=None, return_scores=False, splits=None):
        """impl.mla.absorbed: q [B, S, H, d_n], latent [B, T, r_kv], indices [B, S, W] int (-1 = none),
        lengths [B] or None -> (o [B, S, H, d_v] in q's dtype, scores [B, S, H, T] float32 or None).
        `splits` is a launch hint of ours (flash-decoding splits): this kernel has none."""
        H, N, V = w.num_heads, w.nope_dim, w.v_dim
        if q.ndim != 4 or tuple(q.shape[2:]) != (H, N):
            raise ValueError(f"q: expected [B, S, H={H}, d_n={N}], got shape {tuple(q.shape)}")
        if latent.ndim != 3 or latent.shape[0] != q.shape[0] or latent.shape[2] != w.kv_rank:
            raise ValueError(f"latent: expected [B, T, r_kv={w.kv_rank}], got shape {tuple(latent.shape)}")
        # our validation: in range of each row's length, no position twice (a selection is a set)
        idx, _ = check_selection(indices, lengths, q.shape[0], q.shape[1], latent.shape[1])
        kv = w.kv_b_proj.float().view(H, N + V, -1)
        W_UK, W_UV = kv[:, :N], kv[:, N:]                                       # [H, N, R], [H, V, R]
        q_abs = torch.einsum("bshn,hnr->bshr", q.float(), W_UK)
        scale = N ** -0.5
        lat = sparse_latent_attention(q_abs.transpose(1, 2), latent, idx, scale)   # [B, H, S, R]
        o = torch.einsum("bhsr,hvr->bshv", lat, W_UV).to(q.dtype)
        return o, (_dense_scores(q_abs, latent, idx, scale) if return_scores else None)


class Candidate:
    mla = MLA
