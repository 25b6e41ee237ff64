"""My MLA absorbed attention, written from docs/candidates.md section 5 only (dense gather form)."""
import torch


def _check(w, q, latent, indices, lengths):
    H, N = w.num_heads, w.nope_dim
    if q.ndim != 4 or tuple(q.shape[2:]) != (H, N):
        raise ValueError(f"q: expected [B, S, H={H}, d_n={N}], got shape {tuple(q.shape)}")
    R = int(w.kv_b_proj.shape[-1])
    if latent.ndim != 3 or latent.shape[0] != q.shape[0] or latent.shape[2] != R:
        raise ValueError(f"latent: expected [B, T, R={R}], got shape {tuple(latent.shape)}")
    B, S, T = q.shape[0], q.shape[1], latent.shape[1]
    if indices.dtype.is_floating_point or indices.dtype == torch.bool:
        raise ValueError(f"indices: expected an integer tensor, got {indices.dtype}")
    if indices.ndim != 3 or tuple(indices.shape[:2]) != (B, S):
        raise ValueError(f"indices: expected [B={B}, S={S}, W], got {tuple(indices.shape)}")
    idx = indices.long()
    if lengths is None:
        lens = torch.full((B,), T, dtype=torch.long, device=q.device)
    else:
        lens = torch.as_tensor(lengths, device=q.device).long().reshape(-1)
        if lens.numel() != B or bool((lens > T).any()) or bool((lens < 0).any()):
            raise ValueError(f"lengths: expected [B={B}] values in [0, T={T}], got {lens.tolist()}")
    if bool((idx < -1).any()) or bool((idx >= lens[:, None, None]).any()):
        raise ValueError("indices: expected positions in [-1, length)")
    srt = torch.sort(idx, dim=-1).values
    if bool(((srt[..., 1:] == srt[..., :-1]) & (srt[..., 1:] >= 0)).any()):
        raise ValueError("indices: a position appears twice in a row (a selection is a set)")
    return idx


def _absorbed(w, q, latent, indices, lengths=None, return_scores=False, splits=None, scale=None, drop_last=False):
    idx = _check(w, q, latent, indices, lengths)
    H, N, V = w.num_heads, w.nope_dim, w.v_dim
    B, S, T = q.shape[0], q.shape[1], latent.shape[1]
    kv = w.kv_b_proj.float().view(H, N + V, -1)
    W_UK, W_UV = kv[:, :N], kv[:, N:]
    q_abs = torch.einsum("bshn,hnr->bshr", q.float(), W_UK)               # [B, S, H, R]
    dense = torch.einsum("bshr,btr->bsht", q_abs, latent.float())          # [B, S, H, T]
    sel = torch.zeros(B, S, T + 1, dtype=torch.bool, device=q.device)
    sel.scatter_(2, torch.where(idx < 0, T, idx), True)
    sel = sel[..., :T]
    if drop_last:                                                         # BUG variant: last selected dropped
        last = torch.where(idx < 0, -1, idx).max(-1).values                # [B, S]
        sel.scatter_(2, last.clamp(min=0)[..., None], False)
    sc = (N ** -0.5) if scale is None else scale
    scores = (dense * sc).masked_fill(~sel[:, :, None, :], float("-inf"))
    anysel = sel.any(-1)[:, :, None, None]
    p = torch.softmax(torch.where(anysel, scores, torch.zeros_like(scores)), -1) * anysel
    lat = torch.einsum("bsht,btr->bshr", p, latent.float())
    o = torch.einsum("bshr,hvr->bshv", lat, W_UV).to(q.dtype)
    return o, (scores if return_scores else None)


class Correct:
    class mla:
        absorbed = staticmethod(_absorbed)


class WrongScale:        # R^-1/2 instead of d_n^-1/2: the classic bug
    class mla:
        @staticmethod
        def absorbed(w, q, latent, indices, lengths=None, return_scores=False, splits=None):
            return _absorbed(w, q, latent, indices, lengths, return_scores,
                             scale=int(w.kv_b_proj.shape[-1]) ** -0.5)


class DropsLast:         # forgets the newest selected position (off by one at the end of the window)
    class mla:
        @staticmethod
        def absorbed(w, q, latent, indices, lengths=None, return_scores=False, splits=None):
            return _absorbed(w, q, latent, indices, lengths, return_scores, drop_last=True)
