"""My DSA indexer rows, from docs/candidates.md section 4 only."""
import torch


def _rows(w, a, mask=None, ignore_mask=False, eps=1e-6):
    if a.ndim != 3:
        raise ValueError(f"a: expected [B, S, D], got shape {tuple(a.shape)}")
    if mask is not None and tuple(mask.shape) != tuple(a.shape[:2]):
        raise ValueError(f"mask: expected shape {tuple(a.shape[:2])}, got {tuple(mask.shape)}")
    af = a.float()
    key = torch.nn.functional.layer_norm(af @ w.wk.float().t(), (w.wk.shape[0],),
                                         w.k_norm_weight.float(), w.k_norm_bias.float(), eps)
    gate = af @ w.compress_gate.float().t()
    if mask is None or ignore_mask:                                        # BUG variant: pads flagged valid
        valid = torch.ones(a.shape[:2], dtype=torch.float32, device=a.device)
    else:
        valid = (mask != 0).float()
    return torch.cat([key, gate, valid[..., None]], -1).to(a.dtype)


class Rows:
    class dsa:
        index_rows = staticmethod(_rows)


class RowsIgnoreMask:
    class dsa:
        index_rows = staticmethod(lambda w, a, mask=None: _rows(w, a, mask, ignore_mask=True))
