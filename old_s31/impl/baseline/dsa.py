"""The DSA indexer with KPool in plain torch: the "torch" baseline (mirrors oracle/dsa.py).

Letters: B batch, S queries of this call, T cached tokens (past + current; query s sits at
pos(s) = T - S + s), D hidden size, r_q query latent rank, H_i indexer heads (j), d_i indexer
head dim (c), P_k pool size (m = member), n_p = ceil(T / P_k) pools, P kept pools (p),
k_sel pools picked per query, W = topk + P_k - 1 selection slots.

Same names, argument order and return containers as `oracle.dsa`; the math is the oracle's, the
precision the reference's (SPEC §2, §8): the packed per-token rows (LayerNorm'd key, gate vector,
valid flag) in the input dtype, the pool softmax, the pooled keys, the head weights and the scores
in float32 ("at least float32": float64 inputs stay float64, which is how this file is checked
against the oracle to 1e-10).

Tie rule: as the oracle, among equal scores the lowest pool index wins. The picks come from a
STABLE sort, not torch.topk, so this baseline is deterministic and shape-independent (SPEC §12
pitfall 1); a candidate using torch.topk must be compared tie-aware.

`TorchDSA` is split into small overridable pieces (`_anchor`, `_pool_softmax`, `_visible_member`,
`_tail`, `_width`) because the planted bugs of impl/mutants/ subclass it and override exactly
one. `dsa = TorchDSA()` and the module-level aliases let this module be used like `oracle.dsa`.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from impl.graph import capturing
from oracle.types import IndexerWeights, Selection

LN_EPS = 1e-6


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 for every working dtype except float64, which stays float64 (SPEC §2 "f32")."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def _check_shape(name: str, a, want: tuple, legend: str) -> None:
    if tuple(a.shape) != tuple(want):
        raise ValueError(f"{name}: expected shape {legend} = {tuple(want)}, got {tuple(a.shape)}")


def _query_mask(mask, B: int, S: int, device) -> torch.Tensor:
    """[B, S] bool (all True for None) from a bool / int / float mask (tensor or array)."""
    if mask is None:
        return torch.ones(B, S, dtype=torch.bool, device=device)
    mask = torch.as_tensor(mask, device=device)
    _check_shape("mask", mask, (B, S), "[B, S]")
    return mask != 0


def split_rows(packed, head_dim: int):
    """packed [B, T, 2·d_i + 1] -> (kI [B,T,d_i], gsc [B,T,d_i], val [B,T] bool)."""
    if packed.ndim != 3 or packed.shape[-1] != 2 * head_dim + 1:
        raise ValueError(f"packed: expected [B, T, 2·d_i + 1] with d_i={head_dim}, "
                         f"got shape {tuple(packed.shape)}")
    return packed[..., :head_dim], packed[..., head_dim:2 * head_dim], packed[..., 2 * head_dim] > 0.5


def _compact(idx: torch.Tensor, width: int) -> torch.Tensor:
    """Move every -1 to the end keeping the order of the rest (stable); pad with -1 or cut to width."""
    order = torch.sort((idx < 0).to(torch.int8), dim=-1, stable=True).indices
    idx = torch.gather(idx, -1, order)
    pad = width - idx.shape[-1]
    if pad < 0:
        return idx[..., :width].contiguous()
    return torch.cat([idx, idx.new_full((*idx.shape[:-1], pad), -1)], dim=-1)


class TorchDSA:
    """Plain-torch DSA indexer; every public method matches the oracle.dsa function of the same name."""

    # ------------------------------------------------------------------------- per-token rows

    def index_rows(self, w: IndexerWeights, a, mask=None):
        """oracle.dsa.index_rows: packed [B, S, 2·d_i + 1] = LayerNorm(a wk^T) | a G^T | mask, a's dtype."""
        if a.ndim != 3:
            raise ValueError(f"a: expected [B, S, D], got shape {tuple(a.shape)}")
        B, S, _ = a.shape
        dt, di = a.dtype, w.head_dim
        val = _query_mask(mask, B, S, a.device).to(dt)
        kI = F.layer_norm(a @ w.wk.to(dt).T, (di,), w.k_norm_weight.to(dt), w.k_norm_bias.to(dt), LN_EPS)
        gsc = a @ w.compress_gate.to(dt).T
        return torch.cat([kI, gsc, val[..., None]], dim=-1)

    # ------------------------------------------------------------------------- pools

    def pool_keys(self, packed, ape, kpool: int):
        """oracle.dsa.pool_keys: (kbar [B,P,d_i] float32, member_idx [B,P,P_k] int64,
        pool_valid [B,P] bool, first [B] int64, kept [n_p] bool)."""
        di = ape.shape[-1]
        _check_shape("ape", ape, (kpool, di), "[P_k, d_i]")
        kI, gsc, val = split_rows(packed, di)
        acc = compute_dtype(packed.dtype)
        kI, gsc = kI.to(acc), gsc.to(acc)
        B, T = val.shape
        dev = packed.device
        first = self._anchor(val)                                                          # [B]
        n_p = -(-T // kpool)
        member_idx = (first[:, None, None] + kpool * torch.arange(n_p, device=dev)[None, :, None]
                      + torch.arange(kpool, device=dev)[None, None, :])                    # [B, n_p, P_k]
        safe = member_idx.clamp(0, max(T - 1, 0))
        rows = torch.arange(B, device=dev)[:, None, None]
        member_ok = (member_idx < T) & (member_idx >= 0)
        if T:
            member_ok = member_ok & val[rows, safe]
        pool_valid = member_ok.all(dim=-1)                                                 # [B, n_p]
        if T:
            lam = gsc[rows, safe] + ape.to(acc)                                            # [B, n_p, P_k, d_i]
            k_m = kI[rows, safe]
        else:
            lam = k_m = gsc.new_zeros(B, 0, kpool, di)
        lam = lam.masked_fill(~member_ok[..., None], float("-inf"))
        pi = self._pool_softmax(lam)
        kbar = (pi * k_m).sum(dim=-2)                                                      # [B, n_p, d_i]
        kept = pool_valid.any(dim=0)                                                       # [n_p]
        return kbar[:, kept], member_idx[:, kept], pool_valid[:, kept], first, kept

    def _anchor(self, val):
        """f_b: the first real token of each row (T for a row with none), SPEC §8.3."""
        T = val.shape[1]
        return torch.where(val.any(dim=1), val.to(torch.int8).argmax(dim=1),
                           torch.full_like(val[:, 0], T, dtype=torch.int64)).to(torch.int64)

    def _pool_softmax(self, lam):
        """Per-channel softmax over the members (axis -2); invalid members are -inf; empty pool -> 0."""
        return torch.nan_to_num(torch.softmax(lam, dim=-2), nan=0.0)

    # ------------------------------------------------------------------------- scores

    def scores(self, w: IndexerWeights, q_lat, a, kbar):
        """oracle.dsa.scores: I [B, S, P] = Σ_j w_j · relu((qI_j · K̄_p) · d_i^-1/2), float32."""
        B, S, _ = q_lat.shape
        Hi, di = w.n_heads, w.head_dim
        acc = compute_dtype(q_lat.dtype)
        qI = (q_lat @ w.wq_b.to(q_lat.dtype).T).to(acc).reshape(B, S, Hi, di)              # [B, S, H_i, d_i]
        sigma = torch.relu(torch.einsum("bsjc,bpc->bsjp", qI, kbar.to(acc)) * di ** -0.5)  # [B, S, H_i, P]
        wts = (a @ w.weights_proj.to(a.dtype).T).to(acc) * Hi ** -0.5                     # [B, S, H_i]
        return torch.einsum("bsj,bsjp->bsp", wts, sigma)

    # ------------------------------------------------------------------------- selection

    def index(self, w: IndexerWeights, a, q_lat, packed_all, mask=None) -> Selection:
        """oracle.dsa.index: Selection(indices [B,S,W] int64, scores [B,S,P] float32 (-inf off the
        candidates), candidate [B,S,P] bool, k_sel, pool_first [B] int64, kept [n_p] bool)."""
        w.validate()
        if a.ndim != 3:
            raise ValueError(f"a: expected [B, S, D], got shape {tuple(a.shape)}")
        B, S, _ = a.shape
        _check_shape("q_lat", q_lat, (B, S, w.wq_b.shape[-1]), "[B, S, r_q]")
        if packed_all.ndim != 3 or packed_all.shape[0] != B or packed_all.shape[-1] != 2 * w.head_dim + 1:
            raise ValueError(f"packed_all: expected [B={B}, T, 2·d_i + 1 = {2 * w.head_dim + 1}], "
                             f"got shape {tuple(packed_all.shape)}")
        T = packed_all.shape[1]
        if T < S:
            raise ValueError(f"packed_all: holds T={T} rows, fewer than the S={S} queries it must end with "
                             f"(append this call's index_rows first)")
        dev = a.device
        _, _, val = split_rows(packed_all, w.head_dim)
        real = val[:, T - S:]
        if mask is not None and not torch.equal(_query_mask(mask, B, S, dev), real):
            raise ValueError("mask: disagrees with the valid flags of the last S rows of packed_all "
                             "(index_rows must be packed with the same mask)")
        kbar, member_idx, pool_valid, first, kept = self.pool_keys(packed_all, w.compress_ape, w.kpool)
        pos = torch.arange(T - S, T, device=dev)                                           # [S]
        cand = self.candidates(member_idx, pool_valid, val, pos)                           # [B, S, P]
        I = self.scores(w, q_lat, a, kbar).masked_fill(~cand, float("-inf"))               # [B, S, P]
        k_sel = min(w.topk_pools, int(kept.sum()))
        picked = self._pick_pools(I, cand, member_idx, k_sel)                              # [B, S, k_sel·P_k]
        if w.always_select_tail and w.kpool > 1:
            tail = self._tail_not_picked(self._tail(first, val, pos, w.kpool), picked, w.kpool)
        else:
            tail = torch.full((B, S, 0), -1, dtype=torch.int64, device=dev)
        indices = _compact(torch.cat([picked, tail], dim=-1), self._width(w))
        indices = indices.masked_fill(~real[..., None], -1)
        return Selection(indices, I, cand, k_sel, first, kept)

    # ------------------------------------------------------------------------- paged cache

    def index_paged(self, w: IndexerWeights, a, q_lat, row_pages, block_table, page_size: int, lengths,
                    mask=None) -> Selection:
        """oracle.dsa.index_paged: `index` over the rows read through the block table, left-padded to
        the longest with zero rows (valid flag 0), positions in each row's own frame."""
        if a.ndim != 3:
            raise ValueError(f"a: expected [B, S, D], got shape {tuple(a.shape)}")
        bt, ln = check_paged(row_pages, block_table, page_size, lengths, a.shape[0], "row_pages")
        if ln.numel() and int(ln.min()) < a.shape[1]:
            raise ValueError(f"lengths: every row must cache at least the S={a.shape[1]} queries of this "
                             f"call, found {int(ln.min())}")
        extents = [self._row_extent(int(n), page_size) for n in ln.tolist()]
        packed, off = gather_rows(row_pages, bt, page_size, [k for _, k in extents], left=True)
        sel = self.index(w, a, q_lat, packed, mask)
        shifted = torch.where(sel.indices >= 0, sel.indices - off[:, None, None], -1)
        return sel._replace(indices=shifted, pool_first=sel.pool_first - off)

    def _row_extent(self, length: int, page_size: int) -> tuple[int, int]:
        """(block-table entries, tokens) a row of `length` cached tokens reads: ceil(length / G), length."""
        return -(-length // page_size), length

    def candidates(self, member_idx, pool_valid, val, pos):
        """[B, S, P] bool: pool valid and its deciding member visible, i.e. <= pos(s) and real (§8.5)."""
        T = val.shape[1]
        last = self._visible_member(member_idx)                                            # [B, P]
        real_last = (last < T) & (last >= 0)
        if T:
            real_last = real_last & torch.gather(val, 1, last.clamp(0, T - 1))
        return (pool_valid & real_last)[:, None, :] & (last[:, None, :] <= pos[None, :, None])

    def _visible_member(self, member_idx):
        """The member whose visibility makes a pool a candidate: the LAST one (SPEC §12 pitfall 4)."""
        return member_idx[..., -1]

    def _pick_pools(self, I, cand, member_idx, k_sel: int):
        """Top k_sel pools by I (stable sort: lowest pool first on ties), non-candidates dropped, expanded."""
        B, S, _ = I.shape
        kpool = member_idx.shape[-1]
        order = torch.sort(-I, dim=-1, stable=True).indices[..., :k_sel]                   # [B, S, k_sel]
        ok = torch.gather(cand, -1, order)
        tokens = member_idx[torch.arange(B, device=I.device)[:, None, None], order]        # [B, S, k_sel, P_k]
        tokens = torch.where(ok[..., None], tokens, torch.full_like(tokens, -1))
        return tokens.reshape(B, S, k_sel * kpool)

    def _tail(self, first, val, pos, kpool: int):
        """[B, S, P_k - 1] the current incomplete pool's visible tokens, -1 elsewhere (SPEC §8.7)."""
        B, T = val.shape
        n_vis = torch.cumsum(val.to(torch.int64), dim=1)[:, pos]                           # [B, S]
        tau = n_vis % kpool
        o = torch.arange(kpool - 1, device=val.device)
        tok = first[:, None, None] + (n_vis - tau)[..., None] + o                          # [B, S, P_k-1]
        safe = tok.clamp(0, max(T - 1, 0))
        real = torch.gather(val, 1, safe.reshape(B, -1)).reshape(tok.shape) if T else tok >= 0
        ok = (o < tau[..., None]) & (tok >= 0) & (tok < T) & (tok <= pos[None, :, None]) & real
        return torch.where(ok, tok, torch.full_like(tok, -1))

    def _tail_not_picked(self, tail, picked, kpool: int):
        """The tail without the tokens of a picked pool: with pads inside the cache (mask holes) SPEC §8.7's
        count places the tail in a complete pool that may be picked too, and a selection is a set
        (impl/dsa.py index_with)."""
        B, S, _ = tail.shape
        start = tail[..., :1]                              # the tail's pool's first token; -1: no tail
        dup = (picked.view(B, S, -1, kpool)[..., 0] == start).any(-1, keepdim=True) & (start >= 0)
        return tail.masked_fill(dup, -1)

    def _width(self, w: IndexerWeights) -> int:
        """Selection slots per query: topk + P_k - 1 (SPEC §8.7; 2051 at full size, not 2048)."""
        return w.topk + w.kpool - 1

    def shared(self, prev: Selection) -> Selection:
        """oracle.dsa.shared: a "shared" layer's selection is the previous full layer's, unchanged."""
        if not isinstance(prev, Selection):
            raise ValueError(f"prev: expected the Selection of the full DSA layer directly before, "
                             f"got {type(prev).__name__}")
        return prev


def check_paged(pages, block_table, page_size, lengths, B: int, name: str = "pages"):
    """oracle.paged.check_paged on tensors: (block_table [B, M] int64, lengths [B] int64) on the pool's
    device, or a ValueError naming page_size, `name`, block_table or lengths."""
    if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size < 1:
        raise ValueError(f"page_size: expected an int >= 1, got {page_size!r}")
    if pages.ndim < 2 or pages.shape[1] != page_size:
        raise ValueError(f"{name}: expected [N, page_size={page_size}, ...], got shape {tuple(pages.shape)}")
    bt, ln = torch.as_tensor(block_table), torch.as_tensor(lengths)
    if bt.ndim != 2 or bt.shape[0] != B or bt.dtype.is_floating_point:
        raise ValueError(f"block_table: expected an integer [B={B}, M] tensor, got {bt.dtype} {tuple(bt.shape)}")
    if tuple(ln.shape) != (B,) or ln.dtype.is_floating_point:
        raise ValueError(f"lengths: expected integers [B={B}], got {ln.dtype} {tuple(ln.shape)}")
    bt, ln = bt.to(pages.device, torch.int64), ln.to(pages.device, torch.int64)
    M = bt.shape[1]
    if B and (int(ln.min()) < 0 or int(ln.max()) > M * page_size):
        raise ValueError(f"lengths: expected in [0, M·page_size = {M * page_size}] (the block table holds "
                         f"M={M} pages a row), found [{int(ln.min())}, {int(ln.max())}]")
    for b in range(B):
        used = bt[b, :-(-int(ln[b]) // page_size)]
        if used.numel() and (int(used.min()) < 0 or int(used.max()) >= pages.shape[0]):
            raise ValueError(f"block_table: row {b} names pages {sorted(set(used.tolist()))} of a pool of "
                             f"N={pages.shape[0]} (its first ceil(lengths[{b}] / page_size) entries are read)")
    return bt, ln


def gather_rows(pages, block_table, page_size: int, tokens, left: bool, table_rows=None):
    """The contiguous cache [B, T = max tokens, ...] and offsets [B]: row b's first tokens[b] positions t
    from pages[table[b, t // G], t % G] (table = table_rows or block_table), after (left) or before zero rows."""
    B, T = block_table.shape[0], max(tokens, default=0)
    out = pages.new_zeros((B, T) + tuple(pages.shape[2:]))
    off = torch.tensor([T - k if left else 0 for k in tokens], dtype=torch.int64, device=pages.device)
    table = block_table if table_rows is None else table_rows
    for b, k in enumerate(tokens):
        t = torch.arange(k, device=pages.device)
        out[b, int(off[b]):int(off[b]) + k] = pages[table[b][t // page_size], t % page_size]
    return out, off


def check_indices(indices, B: int, S: int, T: int, width=None) -> torch.Tensor:
    """oracle.dsa.check_indices on a tensor: [B, S, W] positions in [-1, T) (W == width if given); int64."""
    indices = torch.as_tensor(indices)
    if indices.ndim != 3 or tuple(indices.shape[:2]) != (B, S):
        raise ValueError(f"indices: expected [B={B}, S={S}, W], got shape {tuple(indices.shape)}")
    if width is not None and indices.shape[-1] != width:
        raise ValueError(f"indices: width {indices.shape[-1]}, expected topk + P_k - 1 = {width}")
    if indices.dtype.is_floating_point or indices.dtype == torch.bool:
        raise ValueError(f"indices: expected an integer tensor, got dtype {indices.dtype}")
    # a CUDA-graph capture reads no value back (impl/graph.py): the eager call of the step checks them
    if indices.numel() and not capturing() and (int(indices.min()) < -1 or int(indices.max()) >= T):
        raise ValueError(f"indices: entries must lie in [-1, T={T}), found "
                         f"[{int(indices.min())}, {int(indices.max())}]")
    return indices.to(torch.int64)


def selection_mask(indices, T: int) -> torch.Tensor:
    """[B, S, W] positions (-1 = none, duplicates harmless) -> [B, S, T] bool."""
    B, S, _ = indices.shape
    out = torch.zeros(B, S, T + 1, dtype=torch.bool, device=indices.device)
    out.scatter_(-1, torch.where(indices < 0, T, indices), True)
    return out[..., :T]


def slots(topk: int, kpool: int) -> int:
    """Selection width per query, topk + P_k - 1 (SPEC §1, §8.7)."""
    return topk + kpool - 1


dsa = TorchDSA()


def __getattr__(name: str):
    # the module's functions are the namespace's methods (PEP 562): `from impl.baseline.dsa import x`
    return getattr(dsa, name)
