"""A DSA candidate over a paged indexer cache: `index_paged` (docs/candidates.md section 13).

An engine keeps the indexer's packed rows in fixed-size pages: a pool [N, page_size, 2K + 1] plus a
block table [B, M] of page ids per sequence and the sequence lengths. This candidate reads each row's
pages through its block table in one vectorised gather (`read_pages`, the part that stands in for your
kernel), left-pads the rows to the longest with zero rows (valid flag 0: pools anchor at a row's first
real token, so the padding moves nothing), runs the project's contiguous indexer `impl.dsa.index` over
them and moves the positions back into each row's own frame.

Only `index_paged` is provided: `index_rows` and `index` are ours (their checks say NOT COVERED).

Gate it from this directory:  glmgate gate --candidate dsa_paged:Candidate --check dsa.index_paged
"""
from __future__ import annotations

import torch

from impl import dsa as contiguous


def read_pages(pages, block_table, page_size: int, lengths):
    """pages [N, G, F], block_table [B, M] int, lengths [B] int -> (rows [B, T, F] with row b at
    [T - L_b, T) after zero rows, offsets [B] = T - L_b), T = max L_b.

    Row b's token t is pages[block_table[b, t // G], t % G]; only t < L_b is looked up, so neither a
    block-table entry past the row's ceil(L_b / G) pages nor its last page's unwritten tail is read.
    """
    lengths = lengths.to(pages.device, torch.int64)
    block_table = block_table.to(pages.device, torch.int64)
    # refuse a table that cannot hold the rows, or names pages outside the pool, before reading
    need = -(-lengths // page_size)                                          # pages each row reads
    if int(need.max()) > block_table.shape[1]:
        raise ValueError(f"lengths: up to {int(lengths.max())} tokens, more than the block table's "
                         f"{block_table.shape[1]} pages of {page_size} hold")
    used = torch.arange(block_table.shape[1], device=pages.device)[None, :] < need[:, None]
    if bool((used & ((block_table < 0) | (block_table >= pages.shape[0]))).any()):
        raise ValueError(f"block_table: a row's page id lies outside the pool of {pages.shape[0]} pages")
    T = int(lengths.max())
    offsets = T - lengths                                                    # [B]
    t = torch.arange(T, device=pages.device)[None, :] - offsets[:, None]    # [B, T] row-frame position
    real = t >= 0
    t = t.clamp(min=0)                     # padding reads the row's token 0, then is zeroed
    page = torch.gather(block_table, 1, t // page_size)
    rows = pages[page, t % page_size]                                        # [B, T, F]
    return torch.where(real[..., None], rows, torch.zeros((), dtype=pages.dtype, device=pages.device)), offsets


class DSA:
    """The dsa namespace: `index_paged` only."""

    @staticmethod
    def index_paged(w, a, q_lat, row_pages, block_table, page_size, lengths, mask=None):
        """impl.dsa.index_paged: Selection with indices in [-1, lengths[b]) of row b."""
        if row_pages.ndim != 3 or row_pages.shape[1] != page_size:
            raise ValueError(f"row_pages: expected [N, page_size={page_size}, 2K + 1], got "
                             f"{tuple(row_pages.shape)}")
        if int(lengths.min()) < a.shape[1]:
            raise ValueError(f"lengths: every row must cache this call's {a.shape[1]} queries")
        packed, offsets = read_pages(row_pages, block_table, page_size, lengths)
        sel = contiguous.index(w, a, q_lat, packed, mask)
        shift = offsets[:, None, None]
        return sel._replace(indices=torch.where(sel.indices >= 0, sel.indices - shift, -1),
                            pool_first=sel.pool_first - offsets)


class Candidate:
    dsa = DSA
