"""DSA indexer with KPool on torch + Triton, mirroring oracle/dsa.py by name and argument order.

Letters: B batch, S queries of this call, T cached tokens (past + current), D hidden size,
H indexer heads (H_i), K index head dim (d_i), R query latent rank (r_q), P kept pools,
M pool size (P_k, index_kpool), W selection width (index_topk + P_k - 1).

The pooled keys (`pool_keys`: dsa_pool_fwd_kernel) and the scores (`_scores`: dsa_score_fwd_kernel) are
kernels; packing and the selection around them are torch (`pool_keys_torch` is the pooling's torch
form, the peer the kernel was measured against: impl/candidates/dsa_pool_torch.py).
Scores are float32 (SPEC §2); under the Triton interpreter every kernel operand is float32 (its
tl.dot on bf16 is wrong). Top-k is torch.topk: exact score ties (SPEC §12 pitfall 1) may break
differently from the oracle's lowest-index rule, which is why `index` returns the scores and
selections are compared tie-aware (invariants.compare.compare_selection).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
import triton

import impl  # noqa: F401  (selects the interpreter on CPU-only machines before triton runs a kernel)
from impl import interpreted, kernel_operand, paged
from impl.graph import capturing
from impl.kernels.dsa import dsa_pool_fwd_kernel, dsa_score_fwd_kernel, dsa_select_fwd_kernel
from oracle.types import IndexerWeights, Selection

LN_EPS = 1e-6
# bitwise batch invariance claimed for nothing (impl.registry.batch_invariant; the check dsa.batch): the
# query and key projections are torch GEMMs whose kernel choice follows the row count on a GPU, and
# torch.topk's choice among exactly tied scores may follow the number of kept pools, which a longer
# companion raises. Measured bitwise on the CPU (float32 and bf16), held to contracts.d/dsa.toml's bounds
BATCH_INVARIANT = ()


def _check_shape(name: str, a, want) -> None:
    if tuple(a.shape) != tuple(want):
        raise ValueError(f"{name}: expected shape {tuple(want)}, got {tuple(a.shape)}")


# ----------------------------------------------------------------------------- per-token rows


def index_rows(w: IndexerWeights, a, mask=None):
    """Packed per-token indexer rows (LayerNorm'd key | gate vector | valid flag); oracle.dsa.index_rows.

    Args:
        a: [B, S, D] post-norm input;  mask: [B, S] 1 = real, 0 = pad, or None (all real)
    Returns:
        packed: [B, S, 2K + 1] in a's dtype
    """
    if a.ndim != 3:
        raise ValueError(f"a: expected [B, S, D], got shape {tuple(a.shape)}")
    B, S, _ = a.shape
    if mask is not None:
        _check_shape("mask", mask, (B, S))
    K = w.head_dim
    k = F.layer_norm(a @ w.wk.T, (K,), w.k_norm_weight.to(a.dtype), w.k_norm_bias.to(a.dtype), LN_EPS)   # [B, S, K]
    gsc = a @ w.compress_gate.T                                                                   # [B, S, K]
    val = a.new_ones(B, S) if mask is None else mask.to(a.dtype)
    return torch.cat([k, gsc, val[..., None]], dim=-1)


# ----------------------------------------------------------------------------- pools (kernel)


def pool_anchor(packed, ape, kpool: int):
    """`pool_keys`' arguments checked, and each row's anchor: (B, T, K, val [B, T] bool, first [B] int64,
    T when a row has no real token)."""
    if packed.ndim != 3 or packed.shape[-1] % 2 != 1:
        raise ValueError(f"packed: expected [B, T, 2K + 1], got shape {tuple(packed.shape)}")
    B, T, width = packed.shape
    K = (width - 1) // 2
    if isinstance(kpool, bool) or not isinstance(kpool, int) or kpool < 1:
        raise ValueError(f"kpool: expected an int >= 1, got {kpool!r}")
    _check_shape("ape", ape, (kpool, K))
    val = packed[..., 2 * K] > 0.5
    first = torch.where(val.any(1), val.int().argmax(1), torch.full((B,), T, device=packed.device)).long()
    return B, T, K, val, first


def pool_keys(packed, ape, kpool: int, keep_all: bool = False):
    """Pool keys over the cached rows, anchored at each row's first real token; oracle.dsa.pool_keys.

    keep_all: keep every one of the ceil(T / M) pools (P = n_p, a host-known size), not only those
    valid in some row: how many those are is a value, read back to the host by the boolean compaction
    (a CUDA-graph capture cannot). The dropped pools are invalid in every row (pool_valid False): they
    are candidates of no query, so a selection over them picks the same tokens (`index`).

    Args:
        packed: [B, T, 2K + 1];  ape: [M, K];  kpool: M
    Returns:
        kbar: [B, P, K] float32;  member_idx: [B, P, M] int64 token of each member;
        pool_valid: [B, P] bool (complete);  first: [B] int64 (T when a row has no real token);
        kept: [n_p] bool, which of the ceil(T / M) pools are valid in at least one row (P of them)
    """
    B, T, K, _, first = pool_anchor(packed, ape, kpool)
    dev = packed.device
    n_p = -(-T // kpool)
    kbar = torch.empty(B, n_p, K, device=dev, dtype=torch.float32)
    idx = torch.empty(B, n_p, kpool, device=dev, dtype=torch.int64)
    valid = torch.empty(B, n_p, device=dev, dtype=torch.int8)
    if B * n_p:
        # 16 pools a program on the interpreter (its cost is per program); 8 on the GPU: 8 pools x 4 members
        # x 128 channels in registers (106 at sm_90, no spills)
        BPL = 16 if interpreted() else 8
        dsa_pool_fwd_kernel[(triton.cdiv(n_p, BPL), B)](
            kernel_operand(packed), ape.float().contiguous(), first, kbar, idx, valid, T, n_p,
            K=K, M=kpool, BPL=BPL, BM=triton.next_power_of_2(kpool), BK=triton.next_power_of_2(max(K, 16)),
            num_warps=4)
    pool_valid = valid.bool()
    kept = pool_valid.any(0)                                                             # [n_p]
    if keep_all:
        return kbar, idx, pool_valid, first, kept
    return kbar[:, kept].contiguous(), idx[:, kept], pool_valid[:, kept], first, kept


def pool_keys_torch(packed, ape, kpool: int, keep_all: bool = False):
    """`pool_keys` in ~28 torch launches (the form before issue 14 step 9; the peer of its kernel)."""
    B, T, K, val, first = pool_anchor(packed, ape, kpool)
    dev = packed.device
    kI, gsc = packed[..., :K].float(), packed[..., K:2 * K].float()
    n_p = -(-T // kpool)
    idx = first[:, None, None] + torch.arange(n_p * kpool, device=dev).view(1, n_p, kpool)   # [B, n_p, M]
    safe = idx.clamp(max=max(T - 1, 0))
    member = (idx < T) & torch.gather(val, 1, safe.view(B, -1)).view_as(idx)
    pool_valid = member.all(-1)                                                          # [B, n_p]
    rows = torch.arange(B, device=dev)[:, None, None]
    lam = gsc[rows, safe] + ape.float()[None, None]                                      # [B, n_p, M, K]
    lam = lam.masked_fill(~member[..., None], float("-inf"))
    # per channel over the members; a pool with no real member gives NaN, which is defined as 0
    pi = torch.nan_to_num(torch.softmax(lam, dim=2), nan=0.0)
    kbar = (pi * kI[rows, safe]).sum(2)                                                  # [B, n_p, K]
    kept = pool_valid.any(0)                                                             # [n_p]
    if keep_all:
        return kbar.contiguous(), idx, pool_valid, first, kept
    return kbar[:, kept].contiguous(), idx[:, kept], pool_valid[:, kept], first, kept


# ----------------------------------------------------------------------------- scores (kernel)


def _scores(q, wts, kbar, pool_last, offset: int):
    """Launch dsa_score_fwd_kernel: q [B, S, H, K], wts [B, S, H], kbar [B, P, K], pool_last [B, P]."""
    B, S, H, K = q.shape
    P = kbar.shape[1]
    _check_shape("w", wts, (B, S, H))
    _check_shape("kbar", kbar, (B, P, K))
    _check_shape("pool_last", pool_last, (B, P))
    if K > 256:
        raise ValueError(f"q: index head dim {K}, expected <= 256 (one [BT, K] tile)")
    out = torch.empty(B, S, P, device=q.device, dtype=torch.float32)
    if B * S * P == 0:
        return out
    q = kernel_operand(q)
    kbar = kernel_operand(kbar.to(q.dtype))
    BK = triton.next_power_of_2(max(K, 16))
    BT, BP = 16 if interpreted() else 64, 32 if interpreted() else 64
    grid = (triton.cdiv(S, BT), triton.cdiv(P, BP), B)
    dsa_score_fwd_kernel[grid](
        q, wts.float().contiguous(), kbar, pool_last.to(torch.int64).contiguous(), out,
        S, P, offset, K ** -0.5,
        H=H, K=K, BT=BT, BP=BP, BK=BK, PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
        num_warps=4,
    )
    return out


def _query_parts(w: IndexerWeights, q_lat, a):
    """q_lat [B, S, R], a [B, S, D] -> qI [B, S, H, K] (model dtype), weights [B, S, H] float32."""
    H, K = w.n_heads, w.head_dim
    B, S = a.shape[:2]
    if q_lat.ndim != 3 or tuple(q_lat.shape[:2]) != (B, S):
        raise ValueError(f"q_lat: expected [B, S, r_q] with B, S = {B, S} (from a), got {tuple(q_lat.shape)}")
    qI = (q_lat @ w.wq_b.T).view(B, S, H, K)
    wts = (a @ w.weights_proj.T).float() * H ** -0.5
    return qI, wts


def scores(w: IndexerWeights, q_lat, a, kbar):
    """Index scores of every query against every kept pool, no candidate mask; oracle.dsa.scores.

    Args:
        q_lat: [B, S, r_q];  a: [B, S, D];  kbar: [B, P, K]
    Returns:
        I: [B, S, P] float32
    """
    if a.ndim != 3:
        raise ValueError(f"a: expected [B, S, D], got shape {tuple(a.shape)}")
    qI, wts = _query_parts(w, q_lat, a)
    B, P = kbar.shape[0], kbar.shape[1]
    # pool_last = 0 marks every pool visible to every query: the kernel's mask is then a no-op
    return _scores(qI, wts, kbar, torch.zeros(B, P, dtype=torch.int64, device=a.device), 0)


# ----------------------------------------------------------------------------- the pick (kernel)


def _check_select(I, pool_last, member_idx, val, n_vis, first, k_sel: int, width: int):
    """`select_pools`' arguments checked -> (B, S, P, T, M)."""
    if I.ndim != 3 or I.dtype != torch.float32:
        raise ValueError(f"I: expected float32 [B, S, P], got {I.dtype} of shape {tuple(I.shape)}")
    B, S, P = I.shape
    if val.ndim != 2 or val.shape[0] != B or val.dtype != torch.bool:
        raise ValueError(f"val: expected bool [B, T] with B = {B}, got {val.dtype} of shape {tuple(val.shape)}")
    T = val.shape[1]
    if member_idx.ndim != 3 or tuple(member_idx.shape[:2]) != (B, P):
        raise ValueError(f"member_idx: expected [B, P, M] = [{B}, {P}, M], got {tuple(member_idx.shape)}")
    _check_shape("pool_last", pool_last, (B, P))
    _check_shape("n_vis", n_vis, (B, S))
    _check_shape("first", first, (B,))
    if not 0 <= k_sel <= P:
        raise ValueError(f"k_sel: expected 0 <= k_sel <= P = {P}, got {k_sel}")
    M = member_idx.shape[2]
    if width < k_sel * M + M - 1:
        raise ValueError(f"width: {width} slots cannot hold {k_sel} pools of {M} and a tail of {M - 1}")
    return B, S, P, T, M


def select_pools(I, pool_last, member_idx, val, n_vis, first, k_sel: int, width: int, tail: bool,
                 block_pools=None, radix_bits=None, num_warps=None, packed=None):
    """Top-k pools, expanded, the tail, compacted (SPEC §8.6, §8.7) in one kernel: dsa_select_fwd_kernel.

    Picks are listed in pool order (the oracle lists them by score: the same set; nothing downstream
    reads the order), then the tail, then -1. Ties at the k-th score go to the lowest pool, as the oracle.

    Args:
        I: [B, S, P] float32 scores (a non-candidate's value is ignored);  pool_last: [B, P] the last
        member of a valid pool, -1 otherwise;  member_idx: [B, P, M] int64;  val: [B, T] bool real flags;
        n_vis: [B, S] int64 real tokens up to each query;  first: [B] int64 first real token;
        k_sel: pools to pick;  width: slots W;  tail: append the current incomplete pool's tokens;
        block_pools / radix_bits / num_warps: tile, search step and launch overrides (tests, benchmarks);
        packed: count a pass's digits packed in one int64 (None: whenever radix_bits <= 2)
    Returns:
        indices [B, S, W] int64, scores [B, S, P] float32 (non-candidates -inf), candidate [B, S, P] bool
    """
    B, S, P, T, M = _check_select(I, pool_last, member_idx, val, n_vis, first, k_sel, width)
    dev = I.device
    indices = torch.empty(B, S, width, dtype=torch.int64, device=dev)
    scored = torch.empty(B, S, P, dtype=torch.float32, device=dev)
    candidate = torch.empty(B, S, P, dtype=torch.bool, device=dev)
    if B * S == 0:
        return indices, scored, candidate
    # the interpreter's cost is per operation: many queries a program and 8-bit digits (4 passes over a
    # [BS, BP, 256] count). On the GPU one query a program over up to 2048 pools held in registers across
    # the passes, 2-bit digits (16 passes) counted packed, 8 warps. Measured on the H200
    # (scripts/dsa_select_variants.py, docs/optimization_log.md steps 10 and 12): 2 bits beat 1 and 4; the
    # unpacked [BS, BP, 2^RB] count held 1024 pools (11.6 us; 1025 pools over two tiles 33.1 us, in one
    # 2048-pool tile 104 us), the packed one holds 2048 (1025 pools 15.8 us); 4 warps do not compile
    # on triton 3.6 (an assertion in its scan lowering).
    BS = 16 if interpreted() else 1
    RB = radix_bits or (8 if interpreted() else 2)
    if 32 % RB:
        raise ValueError(f"radix_bits: expected a divisor of 32, got {RB}")
    packed = RB <= 2 if packed is None else bool(packed)
    if packed and (RB > 2 or P >= 1 << 20):
        raise ValueError(f"packed: needs radix_bits <= 2 (got {RB}) and fewer than 2^20 pools (got {P}): "
                         f"the 2^RB - 1 digit counts share one int64 in 20-bit fields")
    BP = block_pools or min(triton.next_power_of_2(max(P, 1)), 16 if interpreted() else 2048 if packed else 1024)
    dsa_select_fwd_kernel[(triton.cdiv(S, BS), B)](
        I.contiguous(), pool_last.to(torch.int64).contiguous(), member_idx.contiguous(),
        val.contiguous().view(torch.int8), n_vis.to(torch.int64).contiguous(), first.to(torch.int64).contiguous(),
        indices, scored, candidate.view(torch.int8), S, P, T, k_sel, width,
        M=M, TAIL=bool(tail and M > 1), ONE=P <= BP, RB=RB, BS=BS, BP=BP, BM=triton.next_power_of_2(M),
        BW=8 if interpreted() else 1024, PACKED=packed, num_warps=num_warps or (4 if interpreted() else 8))
    return indices, scored, candidate


def select_pools_torch(I, pool_last, member_idx, val, n_vis, first, k_sel: int, width: int, tail: bool):
    """`select_pools` in torch (the form before issue 14 step 10, its peer): torch.topk, picks in score
    order, the compaction a stable sort. Unlike the kernel it reads a non-candidate's score: I must hold
    float32 min there (as dsa_score_fwd_kernel writes it)."""
    B, S, P, T, M = _check_select(I, pool_last, member_idx, val, n_vis, first, k_sel, width)
    dev = I.device
    pos = torch.arange(T - S, T, device=dev)                                                 # [S]
    candidate = (pool_last[:, None, :] >= 0) & (pool_last[:, None, :] <= pos[None, :, None])  # [B, S, P]
    parts, picked = [], None
    if k_sel > 0:
        # non-candidates must rank last: the score kernel writes float32 min there (finite for topk)
        pick = torch.topk(I, k_sel, dim=-1).indices                                        # [B, S, k]
        ok = torch.gather(candidate, 2, pick)
        rows = torch.arange(B, device=dev)[:, None, None]
        picked = torch.where(ok[..., None], member_idx[rows, pick], -1)                       # [B, S, k, M]
        parts.append(picked.reshape(B, S, k_sel * M))
    if tail and M > 1:
        tau = n_vis % M
        o = torch.arange(M - 1, device=dev)
        start = first[:, None] + n_vis - tau                                                 # [B, S] its pool's first token
        t = start[..., None] + o                                                             # [B, S, M-1]
        vis = torch.gather(val, 1, t.clamp(max=T - 1).view(B, -1)).view_as(t)
        ok = (o < tau[..., None]) & (t < T) & (t <= pos[None, :, None]) & vis
        if picked is not None:
            # SPEC §8.7 places the tail by counting real tokens (n_vis): with pads inside the cache (mask
            # holes) it can land in a complete pool that was also picked. The oracle then lists those
            # tokens twice ("duplicates harmless": its attention takes a set); impl.mla.absorbed sums over
            # slots, so the tail gives them up. Without holes the tail's pool is never complete.
            ok = ok & ~(picked[..., 0] == start[..., None]).any(-1, keepdim=True)
        parts.append(torch.where(ok, t, -1))
    sel = torch.cat(parts, -1) if parts else torch.empty(B, S, 0, dtype=torch.int64, device=dev)
    sel = torch.where(val[:, T - S:, None], sel, -1)
    # compact: valid entries first, in pick order, then the -1 padding
    order = torch.sort((sel < 0).to(torch.int8), dim=-1, stable=True).indices
    sel = torch.gather(sel, 2, order)
    indices = torch.full((B, S, width), -1, dtype=torch.int64, device=dev)
    indices[..., :sel.shape[-1]] = sel
    return indices, I.masked_fill(~candidate, float("-inf")), candidate


# ----------------------------------------------------------------------------- selection


def index(w: IndexerWeights, a, q_lat, packed_all, mask=None) -> Selection:
    """Token selection of every query (picked pools ++ tail, -1 padded); oracle.dsa.index.

    Args:
        a: [B, S, D];  q_lat: [B, S, r_q];  packed_all: [B, T, 2K + 1] the cached rows, this call's last;
        mask: [B, S] query mask (1 = real), or None: the valid flags of the last S cached rows;
            given, it must agree with them
    Returns:
        Selection(indices [B, S, W] int64 (-1 padded, compacted), scores [B, S, P] float32
        (non-candidates -inf), candidate [B, S, P] bool, k_sel int, pool_first [B] int64,
        kept [n_p] bool)

    While a CUDA graph is captured (impl.graph.capturing) nothing is read back to the host: the mask's
    agreement with the valid flags is not checked (every eager call checks it), and the pool axis keeps
    all n_p = ceil(T / M) pools (pool_keys keep_all: P = n_p, scores / candidate [B, S, n_p], k_sel
    min(topk, n_p)): the pools eager drops are candidates of no query, scored float32 min by the
    kernel like every non-candidate, so `indices` are the same tokens in the same order (up to torch.topk
    among exactly tied scores, as between batch sizes: BATCH_INVARIANT), and the attention over them the
    same bits (tests/test_host_sync.py).
    """
    return index_with(w, a, q_lat, packed_all, mask)


def index_with(w: IndexerWeights, a, q_lat, packed_all, mask=None, *, pool=None, select=None) -> Selection:
    """`index` with the pooling and the selection chosen (pool: `pool_keys`' signature, select:
    `select_pools`'; None: ours; a candidate's from impl/candidates/)."""
    if a.ndim != 3:
        raise ValueError(f"a: expected [B, S, D], got shape {tuple(a.shape)}")
    B, S, _ = a.shape
    w.validate()
    kpool, K = w.kpool, w.head_dim
    if packed_all.ndim != 3 or packed_all.shape[0] != B or packed_all.shape[2] != 2 * K + 1:
        raise ValueError(f"packed_all: expected [B, T, 2K + 1] = [{B}, T, {2 * K + 1}], got "
                         f"{tuple(packed_all.shape)}")
    T = packed_all.shape[1]
    if T < S:
        raise ValueError(f"packed_all: {T} cached rows, fewer than the {S} queries of this call")
    val = packed_all[..., 2 * K] > 0.5                                                       # [B, T]
    qmask = val[:, T - S:]
    if mask is not None:
        _check_shape("mask", mask, (B, S))
        if not capturing() and not torch.equal(mask.bool(), qmask):
            raise ValueError("mask: disagrees with the valid flags of the last S rows of packed_all "
                             "(index_rows must be packed with the same mask)")
    kbar, member_idx, pool_valid, first, kept = (pool or pool_keys)(packed_all, w.compress_ape, kpool,
                                                                    keep_all=capturing())
    P = kbar.shape[1]
    pool_last = torch.where(pool_valid, member_idx[..., -1], -1)                             # [B, P]
    qI, wts = _query_parts(w, q_lat, a)
    I = _scores(qI, wts, kbar, pool_last, T - S)

    k_sel = min(w.topk_pools, P)
    n_vis = torch.cumsum(val, 1)[:, T - S:]                                                  # [B, S] int64
    tail = w.always_select_tail and kpool > 1
    indices, scored, candidate = (select or select_pools)(I, pool_last, member_idx, val, n_vis, first, k_sel,
                                                          w.slots, tail)
    return Selection(indices, scored, candidate, k_sel, first, kept)


# ----------------------------------------------------------------------------- paged cache


def index_paged(w: IndexerWeights, a, q_lat, row_pages, block_table, page_size: int, lengths,
                mask=None) -> Selection:
    """`index` over a paged indexer cache; oracle.dsa.index_paged (docs/candidates.md section 13).

    The pages are read through the block table by a Triton gather (impl.paged.gather: the first cut;
    pooling reads the whole cache anyway) into rows left-padded to T = max(lengths) with zero rows
    (valid flag 0), then the contiguous path runs and positions are moved into each row's own frame.

    Args:
        a: [B, S, D];  q_lat: [B, S, r_q];  row_pages: [N, page_size, 2K + 1] the page pool of packed
        rows (index_rows' output, one token a slot);  block_table: [B, M] int page ids;  page_size: G;
        lengths: [B] int cache lengths, each >= S (this call's queries are every row's last S tokens);
        mask: as `index`
    Returns:
        Selection as `index`: indices in [-1, lengths[b]) of row b, pool_first in row b's frame
    """
    if a.ndim != 3:
        raise ValueError(f"a: expected [B, S, D], got shape {tuple(a.shape)}")
    B, S, _ = a.shape
    bt, ln = paged.check_paged(row_pages, block_table, page_size, lengths, B, "row_pages")
    if B and int(ln.min()) < S:
        raise ValueError(f"lengths: every row must cache at least the S={S} queries of this call, found "
                         f"{int(ln.min())}")
    packed, off = paged.gather(row_pages, bt, page_size, ln, left=True)
    sel = index(w, a, q_lat, packed, mask)
    shifted = torch.where(sel.indices >= 0, sel.indices - off[:, None, None], -1)
    return sel._replace(indices=shifted, pool_first=sel.pool_first - off)
