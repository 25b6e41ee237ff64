"""My paged MLA absorbed attention, written from docs/candidates.md sections 5 and 13 only: it gathers
each row's latents through the block table (my code, the part under test) and attends them with my
dense absorbed attention (mla_mine.py beside this file). `TableStride` is the same with the block table
read as if each row held page_size entries (the flat offset b·page_size instead of b·M): a stride bug
that reads another row's (or a stale) page whenever the table is not page_size wide."""
import torch

from mla_mine import _absorbed


def _latents(pages, block_table, page_size, lengths, stride_bug=False):
    """[B, T, R] row b's latents at [0, L_b), zeros after; T = max L_b."""
    lengths = lengths.long()
    B, M = block_table.shape
    T = int(lengths.max())
    t = torch.arange(T, device=pages.device)[None, :].expand(B, T)
    real = t < lengths[:, None]
    t = torch.where(real, t, 0)
    flat = block_table.long().reshape(-1)
    stride = page_size if stride_bug else M                        # BUG variant: the wrong row stride
    page = flat[(torch.arange(B, device=pages.device)[:, None] * stride + t // page_size).clamp(max=flat.numel() - 1)]
    rows = pages[page, t % page_size]
    return torch.where(real[..., None], rows, torch.zeros((), dtype=pages.dtype, device=pages.device))


def _absorbed_paged(w, q, latent_pages, block_table, page_size, lengths, indices, return_scores=False,
                    splits=None, stride_bug=False):
    if latent_pages.ndim != 3 or latent_pages.shape[1] != page_size:
        raise ValueError(f"latent_pages: expected [N, page_size={page_size}, R], got {tuple(latent_pages.shape)}")
    if block_table.ndim != 2 or block_table.shape[0] != q.shape[0]:
        raise ValueError(f"block_table: expected [B={q.shape[0]}, M], got {tuple(block_table.shape)}")
    latent = _latents(latent_pages, block_table, page_size, lengths, stride_bug)
    return _absorbed(w, q, latent, indices, lengths, return_scores)


class Paged:
    class mla:
        absorbed_paged = staticmethod(_absorbed_paged)


class TableStride:
    class mla:
        absorbed_paged = staticmethod(lambda *args, **kw: _absorbed_paged(*args, **kw, stride_bug=True))
