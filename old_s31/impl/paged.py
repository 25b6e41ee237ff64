"""Paged caches on torch + Triton, mirroring oracle/paged.py by name: validation, and reading the pages
through the block table into the equivalent contiguous rows (docs/candidates.md section 13).

Letters: B batch, N pages, G page size, M block-table width, L_b row b's cache length, T = max L_b.

`gather` is a Triton kernel reading through the block table (impl/kernels/paged.py); the DSA indexer
(impl.dsa.index_paged) runs its contiguous path over what it returns, the MLA kernel reads the pages
itself (impl.mla.absorbed_paged). Under the interpreter the pool is read as float32 (the interpreter's
bf16 memory ops are not trusted, NOTES.md); a copy is exact, so the rows come back bit-identical.
"""
from __future__ import annotations

import torch
import triton

import impl  # noqa: F401  (selects the interpreter on CPU-only machines before triton runs a kernel)
from impl import interpreted
from impl.kernels.paged import paged_gather_fwd_kernel


def pages_of(lengths, page_size: int):
    """Block-table entries each row reads: ceil(L_b / G) (an int or a tensor of them)."""
    return -(-lengths // page_size)


def check_paged(pages, block_table, page_size, lengths, B: int, name: str = "pages"):
    """Validate a paged cache of B rows; returns (block_table [B, M] int64, lengths [B] int64) on the
    pool's device. Raises ValueError naming page_size, `name`, block_table or lengths (oracle.paged)."""
    if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size < 1:
        raise ValueError(f"page_size: expected an int >= 1, got {page_size!r}")
    if not isinstance(pages, torch.Tensor) or pages.ndim < 2 or pages.shape[1] != page_size:
        raise ValueError(f"{name}: expected a tensor [N, page_size={page_size}, ...], got shape "
                         f"{tuple(getattr(pages, 'shape', ()))}")
    if (not isinstance(block_table, torch.Tensor) or block_table.ndim != 2 or block_table.shape[0] != B
            or block_table.dtype not in (torch.int32, torch.int64)):
        raise ValueError(f"block_table: expected an int32/int64 tensor [B={B}, M], got "
                         f"{getattr(block_table, 'dtype', type(block_table))} {tuple(getattr(block_table, 'shape', ()))}")
    if (not isinstance(lengths, torch.Tensor) or tuple(lengths.shape) != (B,)
            or lengths.dtype not in (torch.int32, torch.int64)):
        raise ValueError(f"lengths: expected an int32/int64 tensor [B={B}], got "
                         f"{getattr(lengths, 'dtype', type(lengths))} {tuple(getattr(lengths, 'shape', ()))}")
    dev = pages.device
    bt, ln = block_table.to(dev, torch.int64), lengths.to(dev, torch.int64)
    M = bt.shape[1]
    if B and (int(ln.min()) < 0 or int(ln.max()) > M * page_size):
        raise ValueError(f"lengths: expected in [0, M·page_size = {M * page_size}] (the block table holds "
                         f"M={M} pages a row), found [{int(ln.min())}, {int(ln.max())}]")
    used = torch.arange(M, device=dev)[None, :] < pages_of(ln, page_size)[:, None]           # [B, M]
    bad = used & ((bt < 0) | (bt >= pages.shape[0]))
    if bool(bad.any()):
        b = int(bad.nonzero()[0, 0])
        raise ValueError(f"block_table: row {b} names pages {sorted(set(bt[b][used[b]].tolist()))} of a pool "
                         f"of N={pages.shape[0]} (its first ceil(lengths[{b}] / page_size) entries are read)")
    return bt.contiguous(), ln.contiguous()


def gather(pages, block_table, page_size: int, lengths, left: bool):
    """The equivalent contiguous cache [B, T, ...] in the pool's dtype and each row's offset [B] int64
    (arguments validated by check_paged). left True: row b at [T - L_b, T) after zero rows (the DSA
    indexer's rows: zero rows carry valid flag 0); False: at [0, L_b), zero rows after (MLA's ragged rows)."""
    B = block_table.shape[0]
    T = int(lengths.max()) if B else 0
    offsets = (T - lengths) if left else torch.zeros_like(lengths)
    tail = tuple(pages.shape[2:])
    F = 1
    for n in tail:
        F *= n
    src = pages.float() if interpreted() else pages
    out = torch.empty((B, T) + tail, dtype=src.dtype, device=pages.device)
    if out.numel():
        BT = 16 if interpreted() else 64
        # the interpreter's feature block is narrower: the indexer rows (2K + 1 = 17 wide) span two there
        BF = min(triton.next_power_of_2(max(F, 16)), 16 if interpreted() else 256)
        paged_gather_fwd_kernel[(triton.cdiv(T, BT), B)](
            src.contiguous(), block_table, lengths, offsets, out, T, block_table.shape[1], F,
            PAGE=page_size, BT=BT, BF=BF, num_warps=4)
    return out.to(pages.dtype), offsets
