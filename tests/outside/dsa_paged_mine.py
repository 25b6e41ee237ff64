"""My paged DSA indexer, written from docs/candidates.md sections 4 and 13 only: it reads each row's
pages through the block table into contiguous rows (my code, the part under test) and runs the
project's contiguous indexer (impl.dsa.index, public API) over them, then moves positions into each
row's own frame. `PagePastRow` is the same with the page count as len // page_size + 1 and the last
page's fill as "len % page_size, or a full page when that is 0": one page too many at exact multiples."""
import torch

from impl import dsa as contiguous


def _read_rows(pages, block_table, page_size, lengths, past_row):
    """[B, T, F] rows left-padded with zero rows (valid flag 0) to the longest, and each row's offset."""
    F = pages.shape[-1]
    rows = []
    for b in range(block_table.shape[0]):
        n = int(lengths[b])
        if past_row:                                  # BUG variant: one page past the row at n % G == 0
            count, last = n // page_size + 1, (n % page_size) or page_size
        else:
            count = -(-n // page_size)
            last = n - (count - 1) * page_size
        mine = pages[block_table[b, :count].long()].reshape(-1, F)
        rows.append(mine[:(count - 1) * page_size + last])
    T = max(len(r) for r in rows)
    out = pages.new_zeros(len(rows), T, F)
    offsets = torch.tensor([T - len(r) for r in rows], device=pages.device)
    for b, r in enumerate(rows):
        out[b, T - len(r):] = r
    return out, offsets


def _index_paged(w, a, q_lat, row_pages, block_table, page_size, lengths, mask=None, past_row=False):
    if a.ndim != 3:
        raise ValueError(f"a: expected [B, S, D], got shape {tuple(a.shape)}")
    if row_pages.ndim != 3 or row_pages.shape[1] != page_size:
        raise ValueError(f"row_pages: expected [N, page_size={page_size}, 2K + 1], got {tuple(row_pages.shape)}")
    if block_table.ndim != 2 or block_table.shape[0] != a.shape[0]:
        raise ValueError(f"block_table: expected [B={a.shape[0]}, M], got {tuple(block_table.shape)}")
    packed, off = _read_rows(row_pages, block_table, page_size, lengths, past_row)
    sel = contiguous.index(w, a, q_lat, packed, mask)
    return sel._replace(indices=torch.where(sel.indices >= 0, sel.indices - off[:, None, None], -1),
                        pool_first=sel.pool_first - off)


class Paged:
    class dsa:
        index_paged = staticmethod(_index_paged)


class PagePastRow:
    class dsa:
        index_paged = staticmethod(lambda *args, **kw: _index_paged(*args, **kw, past_row=True))
