"""Paged caches in float64 NumPy: the block-table reading that oracle.dsa.index_paged and
oracle.mla.absorbed_paged share (the calling convention of docs/candidates.md section 13).

Letters: B batch, N pages in the pool, G page size (tokens per page), M block-table width (pages a row
may hold), L_b row b's cache length.

A paged cache is a pool `pages` [N, G, ...] of fixed-size pages plus a block table [B, M] of page ids
per row: token t of row b (0 <= t < L_b) lives at pages[block_table[b, t // G], t % G]. Row b reads
exactly its first ceil(L_b / G) block-table entries, and of the last one only L_b - (ceil(L_b / G) - 1)·G
slots; every other entry and slot is never read (engines leave stale page ids and garbage there, and
several rows may point at one page). Rows are in their own frame: position t of row b is its t-th
cached token, whatever the other rows' lengths.
"""
from __future__ import annotations

import numpy as np


def pages_of(length: int, page_size: int) -> int:
    """Block-table entries a row of `length` tokens reads: ceil(length / page_size)."""
    return -(-int(length) // int(page_size))


def check_paged(pages, block_table, page_size, lengths, name: str = "pages"):
    """Validate a paged cache; returns (block_table [B, M] int64, lengths [B] int64).

    Raises ValueError naming `page_size` (not an int >= 1, or not the pool's second axis), `block_table`
    (not [B, M] integers, or a used entry outside [0, N)) or `lengths` (not [B], negative, or longer
    than M pages hold). Entries past a row's ceil(L_b / G) are not checked: they are never read.
    """
    if isinstance(page_size, bool) or not isinstance(page_size, (int, np.integer)) or page_size < 1:
        raise ValueError(f"page_size: expected an int >= 1, got {page_size!r}")
    if pages.ndim < 2 or pages.shape[1] != page_size:
        raise ValueError(f"{name}: expected [N, page_size={page_size}, ...], got shape {tuple(pages.shape)}")
    bt, ln = np.asarray(block_table), np.asarray(lengths)
    if bt.ndim != 2 or not np.issubdtype(bt.dtype, np.integer):
        raise ValueError(f"block_table: expected an integer [B, M] array, got {bt.dtype} {tuple(bt.shape)}")
    B, M = bt.shape
    if ln.shape != (B,) or not np.issubdtype(ln.dtype, np.integer):
        raise ValueError(f"lengths: expected integers [B={B}], got {ln.dtype} {tuple(ln.shape)}")
    if ln.size and (ln.min() < 0 or ln.max() > M * page_size):
        raise ValueError(f"lengths: expected in [0, M·page_size = {M * page_size}] (the block table holds "
                         f"M={M} pages a row), found [{ln.min()}, {ln.max()}]")
    N = pages.shape[0]
    for b in range(B):
        used = bt[b, :pages_of(ln[b], page_size)]
        if used.size and (used.min() < 0 or used.max() >= N):
            raise ValueError(f"block_table: row {b} names pages {sorted(set(used.tolist()))} of a pool of "
                             f"N={N} (its first ceil(lengths[{b}] / page_size) entries are read)")
    return bt.astype(np.int64), ln.astype(np.int64)


def row(pages, block_table, page_size: int, length: int, b: int) -> np.ndarray:
    """Row b's cache [L_b, ...] in its own frame: token t from pages[block_table[b, t // G], t % G]."""
    t = np.arange(int(length))
    return np.asarray(pages)[block_table[b, t // page_size], t % page_size]


def gather(pages, block_table, page_size, lengths, left: bool, name: str = "pages"):
    """The equivalent contiguous cache [B, T = max L_b, ...] and each row's offset in it [B].

    left True: row b at [T - L_b, T) after zero rows (the DSA indexer's convention: the queries are
    every row's last tokens; zero rows carry valid flag 0); False: at [0, L_b) before zero rows (MLA's
    ragged convention, positions beyond L_b never selected). Offsets are what a row-frame position adds.
    """
    pages = np.asarray(pages, dtype=np.float64)
    bt, ln = check_paged(pages, block_table, page_size, lengths, name)
    T = int(ln.max(initial=0))
    out = np.zeros((len(ln), T) + pages.shape[2:])
    off = (T - ln) if left else np.zeros_like(ln)
    for b, n in enumerate(ln):
        out[b, off[b]:off[b] + n] = row(pages, bt, page_size, n, b)
    return out, off
