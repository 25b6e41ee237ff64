"""KDA on torch + Triton, mirroring oracle/kda.py by name and argument order (torch tensors in/out).

Letters: B batch, S/T tokens, N sequences (cu_seqlens), H heads, K key dim, V value dim, D hidden size,
C conv channels (3·H·K), W conv width, L chunk length (64), P boundary states.

Working dtype: the dtype of q (bf16 on GPU); float32 in the Triton interpreter, whose tl.dot on bf16
operands is wrong. States are float32 always.
"""
from __future__ import annotations

import math
import sys
from typing import NamedTuple, Optional

import torch
import torch.nn.functional as F
import triton

import impl  # noqa: F401  (selects the interpreter on CPU-only machines before triton runs a kernel)
from impl import canary, interpreted, norm, num_sms
from impl.kernels.kda import (
    kda_chunk_cumsum_fwd_kernel,
    kda_combine_chunked_fwd_kernel,
    kda_decode_fused_fwd_kernel,
    kda_intra_chunked_fwd_kernel,
    kda_intra_diag_fwd_kernel,
    kda_intra_kk_fwd_kernel,
    kda_intra_offdiag_fwd_kernel,
    kda_intra_wu_fwd_kernel,
    kda_intra_wu_split_fwd_kernel,
    kda_recurrent_fused_fwd_kernel,
    kda_state_chunked_fwd_kernel,
)
from oracle.state import checkpoint_shapes
from oracle.types import KDAState, KDAWeights, core_shapes

L2_EPS = 1e-6
CHUNK = 64
# the compositions of this module and the functions of the namespace they call through `ops`: a
# candidate that provides only some of them runs inside ours (impl/compose.py)
COMPOSITIONS = {"sublayer": ("chunked", "gated_chunked", "decode", "gated_rmsnorm"), "checkpoint": ("chunked",)}
_SELF = sys.modules[__name__]
# bitwise batch invariance (impl.registry.batch_invariant; the check kda.batch): every kernel's grid and
# tiles come from per-row quantities (the state pass's segment count too, `_state_config`), so a row's
# bits never depend on its companions. A packed document equals itself packed alone, not the same
# document run as a plain row: the varlen path never segments (declared in contracts.d/kda.toml). The
# sublayer is not claimed: its projections are torch GEMMs, whose kernel choice follows the row count
BATCH_INVARIANT = ("chunked", "recurrent", "decode")
SUB_CHUNK = 16
_FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
# the widest K / V tile under the interpreter: the head dims the CPU can afford (<= 32) then span two
# tiles, so the loops over K and V tiles run more than once there too (invariants/kernel_paths.py)
INTERPRETER_TILE = 16


def _tile(gpu: int) -> int:
    """A K / V tile bound: `gpu` on a device, at most INTERPRETER_TILE under the interpreter."""
    return min(gpu, INTERPRETER_TILE) if interpreted() else gpu


# ----------------------------------------------------------------------------- validation


def _check_core_inputs(q, k, v, g, beta, state, cu_seqlens):
    """Shapes (oracle.types.core_shapes) plus what torch adds: dtypes, devices, the kernels' tile limit."""
    if cu_seqlens is not None and (not isinstance(cu_seqlens, torch.Tensor)
                                   or cu_seqlens.dtype not in (torch.int32, torch.int64)):
        raise ValueError(f"cu_seqlens: expected an int32/int64 tensor [N+1], got "
                         f"{getattr(cu_seqlens, 'dtype', type(cu_seqlens))}")
    B, T, H, K, V, n, cu = core_shapes(q, k, v, g, beta, state, cu_seqlens)
    if q.dtype not in _FLOAT_DTYPES:
        raise ValueError(f"q: expected dtype in {_FLOAT_DTYPES}, got {q.dtype}")
    for name, a in (("k", k), ("v", v)):
        if a.dtype != q.dtype:
            raise ValueError(f"{name}: expected dtype {q.dtype} (that of q), got {a.dtype}")
    for name, a in (("g", g), ("beta", beta)):
        if not a.dtype.is_floating_point:
            raise ValueError(f"{name}: expected a floating dtype, got {a.dtype}")
    for name, a in (("k", k), ("v", v), ("g", g), ("beta", beta), ("state", state)):
        if a is not None and a.device != q.device:
            raise ValueError(f"{name}: expected device {q.device} (that of q), got {a.device}")
    if K > 256 or V > 256:
        raise ValueError(f"q, v: head dims K={K}, V={V}; the kernels hold a [K, V] tile, expected <= 256")
    if state is not None and state.dtype != torch.float32:
        raise ValueError(f"state: expected dtype torch.float32, got {state.dtype}")
    lens = None if cu is None else [b - a for a, b in zip(cu, cu[1:])]
    return B, T, H, K, V, n, lens


def _check_gate(gate, q, H: int, K: int):
    """(A_log [H], dt_bias [H·K] or None, lower_bound float or None) of `_chunked`'s gate, contiguous; all
    None without one."""
    if gate is None:
        return None, None, None
    if not isinstance(gate, tuple) or len(gate) != 3:
        raise ValueError(f"gate: expected (A_log, dt_bias, lower_bound), got {type(gate).__name__}")
    A_log, dt_bias, lower_bound = gate
    for name, a, shape in (("A_log", A_log, (H,)), ("dt_bias", dt_bias, (H * K,))):
        if a is None and name == "dt_bias":
            continue
        if not isinstance(a, torch.Tensor) or tuple(a.shape) != shape or not a.dtype.is_floating_point:
            raise ValueError(f"{name}: expected a floating tensor of shape {list(shape)} (H = {H}, K = {K}), "
                             f"got {tuple(a.shape) if isinstance(a, torch.Tensor) else type(a).__name__}"
                             f"{'' if not isinstance(a, torch.Tensor) else ' ' + str(a.dtype)}")
        if a.device != q.device:
            raise ValueError(f"{name}: expected device {q.device} (that of q), got {a.device}")
    if lower_bound is not None and (isinstance(lower_bound, bool) or not isinstance(lower_bound, (int, float))
                                    or not math.isfinite(lower_bound)):
        raise ValueError(f"lower_bound: expected a finite number or None, got {lower_bound!r}")
    # float32 here: they are H and H·K numbers, and the interpreter's loads want no bf16
    return A_log.float().contiguous(), None if dt_bias is None else dt_bias.float().contiguous(), lower_bound


def _work(a: torch.Tensor) -> torch.Tensor:
    """Contiguous, in float32 under the interpreter (its bf16 tl.dot is wrong)."""
    if interpreted() and a.dtype != torch.float32:
        a = a.float()
    return a.contiguous()


# ----------------------------------------------------------------------------- core: chunked


# ours' intra-chunk pass (`_chunked`'s intra): the split pass since issue 14 step 26 passed its GPU gate
# (docs/optimization_log.md); "columns" was ours before it and stays an option (the bench's baseline)
INTRA = "split"


class SplitTiles(NamedTuple):
    """The fixed launch tiles of the split intra pass (issue 14 step 26, intra="split"): fixed, never tuned
    per call, so a row's bits do not depend on the batch (kda.batch) or on a timing.

    diag_bk / diag_warps: the diagonal-block kernel's K tile and warps (one 16-row block a program);
    off_bk / off_warps: the off-diagonal + merge kernel's K tile and warps; wu_warps: the W / U kernel's
    (K and V tiles of 64); low_dots: W and U as bf16 tensor-core dots (float32 sums) on a bf16 run, else
    float32 operands (tf32); diag_qk (issue 14 step 27): q e^Γ, k e^(Γ_last - Γ) and β k e^Γ made by the
    diagonal kernel (which holds q, k and Γ already), so W / U reads β k e^Γ instead of q, k and Γ;
    diag_sub_first (issue 14 step 30): the diagonal kernel's grid with a chunk's four blocks neighbours in the
    launch order; diag_gamma (step 30, needs diag_qk and diag_sub_first): no Γ launch, Γ never in memory: the
    diagonal and off-diagonal kernels make it from g where they read it, the diagonal one e^Γ_last too;
    diag_ftz (step 31): the diagonal kernel's exps (and the W / U kernel's q e^Γ, k e^(Γ_last - Γ), β k e^Γ)
    flush results below e^-87.3 to 0 without tl.exp's denormal fix-up. A GPU compile's option: the CPU
    interpreter runs no PTX and keeps tl.exp (its bits are then the option's off); diag_nan_last (step 32): the
    diagonal kernel's NaN report from Γ_last's row and β with no reduction (a mask gathered across the K tiles,
    stored after them by each lane holding a NaN; the same report: Γ is a running sum along the chunk, so a NaN
    in g anywhere in it is in Γ_last); off_ftz (step 33): the off-diagonal kernel's exps as diag_ftz's (a GPU
    compile's option too; both its factors are <= 1, so a flushed one's terms are below e^-87 of the sums they
    join); x_w (step 34): X handed from the off-diagonal kernel to the W / U kernel in the W / U dots' operand
    dtype (bf16 on a bf16 run with low_dots, else float32), all ten lower blocks, where the W / U kernel rounded
    the float32 X on load before: the same bits, half of X's bytes on that hand-over; aqk_lower (step 35): the
    off-diagonal kernel stores no zero blocks right of aqk's diagonal and the state pass reads none (their value
    is the load's 0): the same bits, ~3/8 of aqk's bytes neither written nor read; pieces (step 36, refuted: 16-201
    us slower at H = 64, T = 16K on an H100): a B = 1 row whose state pass is one program a (V-block, head) (no
    segments) runs as that many pieces along the tokens, each piece's state pass on a second stream (of priority
    piece_priority) beside the next piece's intra pass, from the previous piece's final state: the same launches
    on fewer chunks each and the same bits (the float32 state is handed over exactly) (`_piece_bounds`,
    `_state_stream`)."""
    diag_bk: int = 64         # step 29 (32 before: 150 us slower at H = 64, T = 16K on an H100)
    diag_warps: int = 2
    off_bk: int = 32          # step 27 (16 in step 26: 27 us slower at H = 64, T = 16K on an H100)
    off_warps: int = 2
    wu_warps: int = 4
    low_dots: bool = True
    diag_qk: bool = True      # step 27 (False: the W / U kernel makes them, as in step 26; the same bits)
    diag_sub_first: bool = False
    diag_gamma: bool = False
    diag_ftz: bool = True     # step 31 (False: tl.exp with its denormal fix-up; 135 us slower at H = 64, T = 16K on an H100)
    diag_nan_last: bool = True  # step 32 (False: the counts over Γ and β; 21-25 us slower at H = 64, T = 16K on an H100)
    off_ftz: bool = True      # step 33 (False: tl.exp with its denormal fix-up; 106 us slower at H = 64, T = 16K on an H100)
    x_w: bool = True          # step 34 (False: X to W / U in float32; 16-19 us slower at H = 64, T = 16K on an H100)
    aqk_lower: bool = True    # step 35 (False: aqk's zero blocks stored and read; 14-18 us slower there)
    pieces: int = 1           # step 36 (candidate impl.candidates.kda_pieces: 4)
    piece_priority: int = -1  # step 36: the state stream's priority (lower is higher; 0 the default's)


def chunked(q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
    """Chunked (WY/UT) prefill; must match oracle.kda.chunked.

    Args:
        q, k: [B, T, H, K] L2-normalised (q scaled);  v: [B, T, H, V];  g: [B, T, H, K] log-decay;
        beta: [B, T, H];  state: [B or N, H, K, V] float32 or None (zeros);  chunk: 64 only;
        cu_seqlens: [N+1] int32/int64 (B == 1);  boundary_states: False skips computing them.
    Returns:
        o: [B, T, H, V] in q's dtype;  state: [B or N, H, K, V] float32;
        boundary_states: [B, T // 64, H, K, V] (or [sum floor(len/64), H, K, V] with cu_seqlens) float32,
        or None when boundary_states is False.
    """
    return _chunked(q, k, v, g, beta, state, chunk, cu_seqlens, boundary_states)


def chunked_ex(q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
    """`chunked` without its host read (issue 14 step 28): the same launches and bits, and the NaN refusal
    left on the device as `info` (torch.linalg.cholesky_ex's convention).

    `chunked` reads its NaN flags back after the launches to raise (a sync: the next call's host work then
    runs on an idle GPU, and a CUDA-graph capture cannot hold it). `chunked_ex` returns them instead: the
    caller reads them where it syncs anyway, or passes them to `raise_on_nan`, which raises chunked's
    ValueError. On dense rows (cu_seqlens None) it reads nothing back to the host; cu_seqlens are read once
    to validate and index them, as in `chunked`. The outputs of a call with a NaN in g or beta are
    undefined (NaN where it reached).

    Returns:
        o, state, boundary_states: as `chunked`;  info: int32 [2] on q's device, info[0] = 1 when g held a
        NaN, info[1] = 1 when beta did, else 0.
    """
    return _chunked(q, k, v, g, beta, state, chunk, cu_seqlens, boundary_states, sync=False)


def raise_on_nan(info, gated: bool = False) -> None:
    """Reads `chunked_ex`'s info (a host sync) and raises the ValueError `chunked` would have raised: naming g
    (f with `gated`: the log decays made from the gate's input) or beta; returns None when both are 0."""
    if not isinstance(info, torch.Tensor) or tuple(info.shape) != (2,) or info.dtype != torch.int32:
        raise ValueError(f"info: expected chunked_ex's int32 tensor of shape (2,), got "
                         f"{tuple(info.shape) if isinstance(info, torch.Tensor) else type(info).__name__}"
                         f"{' ' + str(info.dtype) if isinstance(info, torch.Tensor) else ''}")
    nan_g, nan_beta = info.tolist()
    _refuse_nan(nan_g, nan_beta, gated)


def _refuse_nan(nan_g, nan_beta, gated: bool) -> None:
    """The NaN policy's ValueError (NOTES.md): a NaN in g (f when the Γ kernel made g from the gate) or beta."""
    if nan_g and gated:
        raise ValueError("f: the log decays gate(f + dt_bias) contain NaN (expected finite gate inputs, "
                         "A_log and dt_bias)")
    if nan_g:
        raise ValueError("g: contains NaN (expected finite log-decay values)")
    if nan_beta:
        raise ValueError("beta: contains NaN (expected finite values in [0, 1])")


# The state pass cuts a long row into segments (a two-level scan) when few programs would run. On a GPU
# a segment is at least 16 chunks and only rows of >= 32 chunks are cut (measured at H=8, T=16384,
# NOTES.md); the interpreter cuts rows of >= 2 chunks into segments of >= 1 chunk, so the CPU strategies
# (rows of at most a few hundred tokens) reach the segmented scan and its combine kernel.
SEGMENT_MIN_CHUNKS = {"gpu": 32, "interpreter": 2}
SEGMENT_CHUNKS = {"gpu": 16, "interpreter": 1}


def _state_config(device, H, NT, K, V):
    """(BV, NSEG, num_warps) for the state pass of ONE row: enough programs to fill the SMs.

    Only per-row quantities (H, NT, K, V) decide, never the batch: a row's bits must not depend on how
    many rows share the launch (batch invariance, the check kda.batch). The state recurrence is
    independent per value column, so a few heads split into narrow V-blocks; below one program per SM a
    long row is also cut into segments (two-level scan).
    """
    BV = 64 if V >= 64 else triton.next_power_of_2(max(V, 16))
    sms = num_sms(device)
    progs = triton.cdiv(V, BV) * H
    if progs < sms // 2:
        BV = min(32, BV)
        progs = triton.cdiv(V, BV) * H
    where = "interpreter" if interpreted() else "gpu"
    nseg = 1
    if progs < sms // 2 + 2 and NT >= SEGMENT_MIN_CHUNKS[where]:
        nseg = min(max(sms // progs, 1), NT // SEGMENT_CHUNKS[where])
    return BV, max(nseg, 1), 4


PIECE_MIN_CHUNKS = {"gpu": 16, "interpreter": 1}


def _piece_bounds(T, pieces, BT=CHUNK):
    """[(t0, t1)] of `pieces` pieces of a row of T tokens at chunk boundaries, as even as whole chunks allow, the
    last one with the partial chunk; [] when fewer than two pieces of PIECE_MIN_CHUNKS chunks fit (issue 14
    step 36: each piece is a whole prefill's launches, worth it only on long rows)."""
    NT = triton.cdiv(T, BT)
    P = min(int(pieces), NT // PIECE_MIN_CHUNKS["interpreter" if interpreted() else "gpu"])
    if P < 2:
        return []
    cuts = [p * NT // P * BT for p in range(P)] + [T]
    return list(zip(cuts[:-1], cuts[1:]))


_STATE_STREAMS: dict = {}


def _state_stream(device, priority):
    """The second stream of the pieced prefill (issue 14 step 36), one per (device, priority), kept: a captured
    graph and later calls fork to the same one. None on the CPU (the interpreter runs the pieces in order)."""
    if device.type != "cuda":
        return None
    key = (device.index if device.index is not None else torch.cuda.current_device(), int(priority))
    if key not in _STATE_STREAMS:
        _STATE_STREAMS[key] = torch.cuda.Stream(device=device, priority=int(priority))
    return _STATE_STREAMS[key]


def _chunked(q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True,
             bv=None, nseg=None, num_warps=None, intra_warps=None, inv_merge=True, stages=None, intra_bk=32,
             anchor=0, offset64=True, intra=None, intra_maxnreg=None, intra_stack=False, g_cumsum=False,
             gate=None, split=None, sync=True):
    """`chunked` with the state pass's tiles exposed (the bench sweeps them, the smoke tests force segments).

    intra: which intra-chunk pass makes W, U, q e^Γ, k e^(Γ_last - Γ) and the qk matrix. None is INTRA, ours:
    "split" since issue 14 step 26 (below). "columns" (ours until step 26: kda_intra_chunked_fwd_kernel, the
    kk / qk products as [BT, BT] tiles a column block, one kernel) or "blocked" (step 18:
    kda_intra_kk_fwd_kernel then kda_intra_wu_fwd_kernel on the 16-row sub-chunks; inv_merge and anchor do
    not apply to it). inv_merge, anchor, intra_stack, g_cumsum and intra_maxnreg are options of "columns";
    intra_bk and intra_warps of "columns" and "blocked"; the split pass takes its tiles from `split`. intra_maxnreg: a register cap for the
    intra-chunk kernel(s) (more programs an SM at the cost of spills; the interpreter ignores it).
    intra_stack (step 21, "columns" only): the kk and qk products of a column block as one [2 BT, BK] dot.
    g_cumsum (step 23, "columns" only): Γ, the chunk-local cumsum of g, by its own kernel before the
    intra kernel instead of inside it.
    gate (step 24, with g_cumsum or intra="split"): (A_log, dt_bias, lower_bound): `g` is the gate's input f
    and the Γ kernel makes g = gate(f + dt_bias, A_log, lower_bound) before its sum (`gated_chunked`).
    intra="split" (step 26): Γ by its own kernel, then the diagonal 16-row blocks in small programs of their
    own (kda_intra_diag_fwd_kernel, with the strong-decay pairs inside), the off-diagonal blocks and X's
    merge (kda_intra_offdiag_fwd_kernel), then W, U, q e^Γ, k e^(Γ_last - Γ) (kda_intra_wu_split_fwd_kernel);
    split: its SplitTiles (None: the defaults).
    sync (issue 14 step 28): True reads the NaN flags back and raises (`chunked`); False returns them as a
    fourth result, info = flags[:2], without a host read (`chunked_ex`): the split pass only, the whole-chunk
    and blocked passes read a strong-decay flag back to re-run their pairs.
    """
    # a launch option only a GPU compile takes
    cap = {"maxnreg": intra_maxnreg} if intra_maxnreg and not interpreted() else {}
    intra = INTRA if intra is None else intra
    if intra not in ("columns", "blocked", "split"):
        raise ValueError(f"intra: expected 'columns', 'blocked' or 'split', got {intra!r}")
    if not sync and intra != "split":
        raise ValueError(f"sync=False: only the split intra pass (ours) runs without a host read; intra={intra!r} "
                         f"reads its strong-decay flag back to re-run its exact pairs")
    if split is not None and intra != "split":
        raise ValueError("split: the SplitTiles of intra='split' only")
    if split is not None and not isinstance(split, SplitTiles):
        raise ValueError(f"split: expected an impl.kda.SplitTiles or None, got {type(split).__name__}")
    if split is not None and (isinstance(split.pieces, bool) or not isinstance(split.pieces, int)
                              or split.pieces < 1):
        raise ValueError(f"split: SplitTiles(pieces={split.pieces!r}), expected an int >= 1 (1: one piece, ours)")
    if split is not None and split.diag_gamma and not (split.diag_qk and split.diag_sub_first):
        raise ValueError("split: SplitTiles(diag_gamma=True) needs diag_qk=True and diag_sub_first=True: without "
                         "diag_qk the W / U kernel reads Γ, which diag_gamma never stores; without "
                         "diag_sub_first a chunk's four diagonal programs each read its g from DRAM")
    if intra == "split":
        given = [name for name, value, default in (
            ("inv_merge", inv_merge, True), ("anchor", anchor, 0), ("intra_maxnreg", intra_maxnreg, None),
            ("intra_stack", intra_stack, False), ("intra_bk", intra_bk, 32), ("intra_warps", intra_warps, None))
            if value != default]
        if given:
            raise ValueError(f"{', '.join(given)}: options of intra='columns' (or 'blocked'); the split pass "
                             f"(intra='split', ours) takes its tiles from split=impl.kda.SplitTiles(...)")
    if intra_stack and intra != "columns":
        raise ValueError("intra_stack: only the 'columns' intra kernel stacks its kk and qk products")
    if g_cumsum and intra != "columns":
        raise ValueError("g_cumsum: only the 'columns' intra kernel reads a precomputed Γ")
    if gate is not None and not (g_cumsum or intra == "split"):
        raise ValueError("gate: the gate is applied by the Γ kernel, which only g_cumsum=True or intra='split' "
                         "runs")
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk != CHUNK:
        raise ValueError(f"chunk: expected {CHUNK} (the only supported chunk length), got {chunk!r}")
    B, T, H, K, V, N, lens = _check_core_inputs(q, k, v, g, beta, state, cu_seqlens)
    device, out_dtype = q.device, q.dtype
    A_log, dt_bias, lower_bound = _check_gate(gate, q, H, K)
    q, k, v, g, beta = (_work(a) for a in (q, k, v, g, beta))
    varlen = cu_seqlens is not None
    # float32 inputs ask for float32 results: tf32 would round every operand to 10 bits; the
    # intra-chunk float32 dots of the bf16 path are tf32 (their operands came from bf16 already)
    precision = "ieee" if k.dtype == torch.float32 else "tf32"
    BT, BK = CHUNK, triton.next_power_of_2(max(K, 16))
    if varlen:
        lens_t = torch.tensor(lens, dtype=torch.int64)
        n_chunks = (lens_t + BT - 1) // BT
        chunk_offsets = torch.cat([lens_t.new_zeros(1), n_chunks.cumsum(0)])
        boundary_offsets = torch.cat([lens_t.new_zeros(1), (lens_t // BT).cumsum(0)])
        seq_of_chunk = torch.repeat_interleave(torch.arange(N), n_chunks)
        local = torch.arange(int(chunk_offsets[-1])) - chunk_offsets[:-1][seq_of_chunk]
        chunk_indices = torch.stack([seq_of_chunk, local], 1).to(device=device, dtype=torch.int32)
        chunk_offsets = chunk_offsets.to(device)
        boundary_offsets = boundary_offsets.to(device)
        cu = cu_seqlens.to(device=device, dtype=torch.int64).contiguous()
        NC_total, NB_total = int(n_chunks.sum()), int((lens_t // BT).sum())
        intra_grid = (NC_total, H, 1)
    else:
        chunk_indices = chunk_offsets = boundary_offsets = cu = None
        NT = triton.cdiv(T, BT)
        NC_total, NB_total = B * NT, B * (T // BT)
        intra_grid = (NT, H, B)

    qg, kg, w = (torch.empty_like(k) for _ in range(3))
    u = torch.empty_like(v)
    aqk = torch.empty(B, T, H, BT, device=device, dtype=k.dtype)
    gl = torch.empty(max(NC_total, 1), H, K, device=device, dtype=torch.float32)
    # NaN in g, NaN in beta, decays past the intra kernel's factorised range (then its PAIRS pass)
    flags = torch.zeros(3, device=device, dtype=torch.int32)
    tiles = split or SplitTiles()
    # step 35: aqk's blocks right of the diagonal left unwritten by the split pass and unread by the state pass
    lower_only = intra == "split" and bool(tiles.aqk_lower)

    # launched once, and again with PAIRS after a strong-decay flag; `g` is read at the call (Γ after
    # g_cumsum's pass has replaced it below)
    def run_intra(pairs: bool):
        kda_intra_chunked_fwd_kernel[intra_grid](
            q, k, v, g, beta, qg, kg, w, u, aqk, gl, flags, cu, chunk_indices, chunk_offsets, T,
            H=H, K=K, V=V, BT=BT, BC=SUB_CHUNK, BK=_tile(min(BK, intra_bk)),
            BV=_tile(min(triton.next_power_of_2(V), 64)), IS_VARLEN=varlen, PRECISION=precision,
            INV_MERGE=inv_merge, ANCHOR=anchor, OFFSET64=offset64, STACK=intra_stack, GC=bool(g_cumsum),
            PAIRS=pairs, num_warps=intra_warps or 4, **cap,
        )

    def rows(a, t0, t1):
        """a's rows t0:t1 along the tokens (a piece of a B = 1 row: contiguous), or a itself for all of them."""
        return a if (t0, t1) == (0, T) else a[:, t0:t1]

    def chunk_rows(a, t0, t1):
        """a's chunks of rows t0:t1 (a [chunks, ...] array: gl), or a itself for all of them."""
        return a if (t0, t1) == (0, T) else a[t0 // BT:triton.cdiv(t1, BT)]

    def piece_grid(t0, t1):
        return intra_grid if (t0, t1) == (0, T) else (triton.cdiv(t1 - t0, BT), H, 1)

    def gamma(t0=0, t1=T):
        """Γ, the chunk-local cumsum of g (of gate(f + dt_bias) with a gate), float32, by its own kernel; of
        rows t0:t1 (a piece, step 36) or of all of them."""
        gp = rows(g, t0, t1)
        gc = torch.empty(gp.shape, device=device, dtype=torch.float32)
        kda_chunk_cumsum_fwd_kernel[piece_grid(t0, t1)](
            gp, gc, A_log, dt_bias, 0. if lower_bound is None else float(lower_bound), cu, chunk_indices,
            chunk_offsets, t1 - t0, H=H, K=K, BT=BT, BK=_tile(BK), IS_VARLEN=varlen, OFFSET64=offset64,
            GATE=0 if gate is None else 1 if lower_bound is None else 2, HAS_BIAS=dt_bias is not None,
            num_warps=4,
        )
        return gc

    o = torch.empty(B, T, H, V, device=device, dtype=v.dtype)
    final = torch.empty(N, H, K, V, device=device, dtype=torch.float32)
    hb = torch.empty(B, T // BT, H, K, V, device=device, dtype=torch.float32) if not varlen else \
        torch.empty(NB_total, H, K, V, device=device, dtype=torch.float32)
    NTmax = max(lens) if varlen else T
    cfg_bv, cfg_nseg, cfg_warps = _state_config(device, H, triton.cdiv(NTmax, BT), K, V)
    BV = bv or cfg_bv
    NSEG = 1 if varlen else (nseg or cfg_nseg)
    NSEG = max(1, min(NSEG, triton.cdiv(T, BT)))
    CPS = triton.cdiv(triton.cdiv(T, BT), NSEG) if not varlen else max(triton.cdiv(NTmax, BT), 1)
    NSEG = triton.cdiv(triton.cdiv(T, BT), CPS) if not varlen and T else NSEG
    warps = num_warps or cfg_warps

    # step 36: a B = 1 row whose state pass runs one program a (V-block, head) in pieces along its tokens
    pieces = _piece_bounds(T, tiles.pieces) if intra == "split" and B == 1 and not varlen and NSEG == 1 else []

    def split_pass(t0, t1):
        """The split intra pass (step 26) of rows t0:t1: Γ, the diagonal blocks, the off-diagonal blocks and X's
        merge, W / U (and q e^Γ, k e^(Γ_last - Γ)); all rows, or one piece of a B = 1 row (step 36)."""
        Tp = t1 - t0
        qp, kp, betap, aqkp, qgp, kgp = (rows(a, t0, t1) for a in (q, k, beta, aqk, qg, kg))
        glp = chunk_rows(gl, t0, t1)
        from_g = bool(tiles.diag_gamma)
        # step 30: the intra kernels make Γ from g (f with a gate) themselves
        gc = rows(g, t0, t1) if from_g else gamma(t0, t1)
        gate_kw = dict(A_log=A_log, dt_bias=dt_bias, lower_bound=0. if lower_bound is None else float(lower_bound),
                       FROM_G=True, GATE=0 if gate is None else 1 if lower_bound is None else 2,
                       HAS_BIAS=dt_bias is not None) if from_g else {}
        # X = (I + A)^-1 in float32, rows as aqk's; its blocks above the diagonal are never written
        x = torch.empty(B, Tp, H, BT, device=device, dtype=torch.float32)
        NC = BT // SUB_CHUNK
        # bf16 operands only on a bf16 / fp16 run (the interpreter works in float32: its bf16 tl.dot is wrong)
        low_dots = bool(tiles.low_dots) and k.dtype != torch.float32
        # β k e^Γ in W's operand dtype: the same bits the W / U kernel would round it to itself
        kb = torch.empty_like(rows(k, t0, t1), dtype=k.dtype if low_dots else torch.float32) if tiles.diag_qk \
            else None
        sub_first = bool(tiles.diag_sub_first)
        grid = piece_grid(t0, t1)
        diag_grid = (grid[0] * NC, H, grid[2]) if sub_first else (grid[0], H, grid[2] * NC)
        # inline PTX: a GPU compile only
        ftz = bool(tiles.diag_ftz) and not interpreted()
        kda_intra_diag_fwd_kernel[diag_grid](
            qp, kp, gc, betap, aqkp, x, flags, cu, chunk_indices, chunk_offsets, Tp,
            H=H, K=K, BT=BT, BC=SUB_CHUNK, BK=_tile(min(BK, tiles.diag_bk)), IS_VARLEN=varlen,
            PRECISION=precision, OFFSET64=offset64, qg=qgp if kb is not None else None,
            kg=kgp if kb is not None else None, kb=kb, MAKE_QK=kb is not None, num_warps=tiles.diag_warps,
            SUB_FIRST=sub_first, FTZ=ftz, NAN_LAST=bool(tiles.diag_nan_last), **(dict(gl=glp, **gate_kw) if from_g else {}),
        )
        # step 34: X for W / U in its dots' operand dtype, the diagonal blocks too (x keeps them in float32 for
        # the off-diagonal kernel's substitution)
        xw = torch.empty(B, Tp, H, BT, device=device, dtype=w.dtype if low_dots else torch.float32) \
            if tiles.x_w else None
        kda_intra_offdiag_fwd_kernel[grid](
            qp, kp, gc, betap, aqkp, x, cu, chunk_indices, chunk_offsets, Tp,
            H=H, K=K, BT=BT, BC=SUB_CHUNK, BK=_tile(min(BK, tiles.off_bk)), IS_VARLEN=varlen,
            PRECISION=precision, OFFSET64=offset64, num_warps=tiles.off_warps,
            FTZ=bool(tiles.off_ftz) and not interpreted(), xw=xw, X_W=xw is not None,
            LOWER_ONLY=lower_only, **gate_kw,
        )
        kda_intra_wu_split_fwd_kernel[grid](
            qp, kp, rows(v, t0, t1), None if from_g else gc, betap, x if xw is None else xw, qgp, kgp,
            rows(w, t0, t1), rows(u, t0, t1), glp, cu, chunk_indices, chunk_offsets, Tp,
            H=H, K=K, V=V, BT=BT, BC=SUB_CHUNK, BK=_tile(min(BK, 64)),
            BV=_tile(min(triton.next_power_of_2(V), 64)), IS_VARLEN=varlen, PRECISION=precision,
            OFFSET64=offset64, LOW_DOTS=low_dots, kb=kb, FROM_KB=kb is not None, GL_DONE=from_g, FTZ=ftz,
            num_warps=tiles.wu_warps,
        )

    if NC_total and intra == "blocked":
        # X = (I + A)^-1's lower blocks in float32, rows as aqk's (the upper blocks are never read)
        x = torch.empty(B, T, H, BT, device=device, dtype=torch.float32)
        kda_intra_kk_fwd_kernel[intra_grid](
            q, k, g, beta, aqk, x, flags, cu, chunk_indices, chunk_offsets, T,
            H=H, K=K, BT=BT, BC=SUB_CHUNK, BK=_tile(min(BK, intra_bk)), IS_VARLEN=varlen, PRECISION=precision,
            OFFSET64=offset64, num_warps=intra_warps or 4, **cap,
        )
        kda_intra_wu_fwd_kernel[intra_grid](
            q, k, v, g, beta, x, qg, kg, w, u, gl, cu, chunk_indices, chunk_offsets, T,
            H=H, K=K, V=V, BT=BT, BC=SUB_CHUNK, BK=_tile(min(BK, intra_bk)),
            BV=_tile(min(triton.next_power_of_2(V), 64)), IS_VARLEN=varlen, PRECISION=precision,
            OFFSET64=offset64, num_warps=intra_warps or 4, **cap,
        )
    elif NC_total and intra == "split":
        if not pieces:
            split_pass(0, T)
    elif NC_total:
        if g_cumsum:
            g = gamma()
        run_intra(False)

    def run_state():
        h0 = state.contiguous() if state is not None else None
        if NSEG > 1:
            VS = V + K
            hl = torch.empty(N, NSEG, H, K, VS, device=device, dtype=torch.float32)
            kda_state_chunked_fwd_kernel[(triton.cdiv(VS, BV), H, N * NSEG)](
                qg, kg, w, u, aqk, gl, o, None, hl, None, cu, chunk_offsets, boundary_offsets, T, NSEG, CPS,
                H=H, K=K, V=V, BT=BT, BK=BK, BV=BV, VS=VS, USE_INITIAL_STATE=False, STORE_BOUNDARY=False,
                STORE_FINAL=False, IS_VARLEN=False, IS_LOCAL=True, PRECISION=precision, LOWER_ONLY=lower_only,
                BC=SUB_CHUNK, num_warps=warps,
            )
            hs = torch.empty(N, NSEG, H, K, V, device=device, dtype=torch.float32)
            kda_combine_chunked_fwd_kernel[(triton.cdiv(V, BV), H, N)](
                h0, hl, hs, NSEG, H=H, K=K, V=V, BK=BK, BV=BV, USE_INITIAL_STATE=h0 is not None, num_warps=4,
            )
            h0 = hs
        state_pass(0, T, h0, final, NSEG, CPS)

    def state_pass(t0, t1, h0, fin, nseg, cps):
        """The state pass's output launch over rows t0:t1 (all of them, or one piece of a B = 1 row: step 36,
        one segment), from h0, its final state to `fin`, its boundary states to hb's chunks from t0 on."""
        kda_state_chunked_fwd_kernel[(triton.cdiv(V, BV), H, N * nseg)](
            *(rows(a, t0, t1) for a in (qg, kg, w, u, aqk)), chunk_rows(gl, t0, t1), rows(o, t0, t1), h0, fin,
            hb[:, t0 // BT:], cu, chunk_offsets, boundary_offsets,
            t1 - t0, nseg, cps,
            H=H, K=K, V=V, BT=BT, BK=BK, BV=BV, VS=V, USE_INITIAL_STATE=h0 is not None,
            STORE_BOUNDARY=bool(boundary_states), STORE_FINAL=True, IS_VARLEN=varlen, IS_LOCAL=False,
            PRECISION=precision, LOWER_ONLY=lower_only, BC=SUB_CHUNK, num_warps=warps,
            **({"num_stages": stages} if stages else {}),
        )

    if pieces:
        # step 36: piece p's state pass on the second stream beside piece p + 1's intra pass. Every buffer the
        # second stream touches is held in `held` until the join: the allocator would hand a freed one to the
        # next piece's intra pass while the state pass still reads it
        main = torch.cuda.current_stream(device) if device.type == "cuda" else None
        second = _state_stream(device, tiles.piece_priority)
        h, held = (state.contiguous() if state is not None else None), []
        for i, (t0, t1) in enumerate(pieces):
            split_pass(t0, t1)
            fin = final if i == len(pieces) - 1 else torch.empty(N, H, K, V, device=device, dtype=torch.float32)
            held += [h, fin]
            if second is None:
                state_pass(t0, t1, h, fin, 1, triton.cdiv(t1 - t0, BT))
            else:
                second.wait_stream(main)
                with torch.cuda.stream(second):
                    state_pass(t0, t1, h, fin, 1, triton.cdiv(t1 - t0, BT))
            h = fin
        if second is not None:
            main.wait_stream(second)
        del held
    else:
        run_state()
    if not sync:
        return o.to(out_dtype), final, (hb if boundary_states else None), flags[:2]
    # a host read of three ints: it syncs (chunked_ex leaves them on the device), but a pass over g would
    # read all of g again
    nan_g, nan_beta, strong = flags.tolist()
    if strong and not (nan_g or nan_beta):
        # some 16-row block's decays fell past the factorised products' range (the softplus gate's strong
        # decays): the intra kernel again with its exact pairs pass for those entries, and the state pass
        # on its results. Chunks without such entries come out bit for bit as the first time
        run_intra(True)
        run_state()
    _refuse_nan(nan_g, nan_beta, gate is not None)
    return o.to(out_dtype), final, (hb if boundary_states else None)


# ----------------------------------------------------------------------------- core: recurrent


def recurrent(q, k, v, g, beta, state=None, cu_seqlens=None):
    """Token-by-token recurrence (fla's fused_recurrent shape); must match oracle.kda.recurrent.

    Returns:
        o: [B, T, H, V] in q's dtype;  state: [B or N, H, K, V] float32.
    """
    B, T, H, K, V, N, lens = _check_core_inputs(q, k, v, g, beta, state, cu_seqlens)
    # the token loop is not the fast path: a full isnan pass is cheap next to it
    if torch.isnan(g).any():
        raise ValueError("g: contains NaN (expected finite log-decay values)")
    if torch.isnan(beta).any():
        raise ValueError("beta: contains NaN (expected finite values in [0, 1])")
    out_dtype = q.dtype
    q, k, v, g, beta = (_work(a) for a in (q, k, v, g, beta))
    o = torch.empty(B, T, H, V, device=q.device, dtype=v.dtype)
    final = torch.empty(N, H, K, V, device=q.device, dtype=torch.float32)
    cu = cu_seqlens.to(device=q.device, dtype=torch.int64).contiguous() if cu_seqlens is not None else None
    BK = triton.next_power_of_2(max(K, 16))
    BV = _tile(min(32, triton.next_power_of_2(max(V, 16))))
    kda_recurrent_fused_fwd_kernel[(triton.cdiv(V, BV), N * H)](
        q, k, v, g, beta, o, state.contiguous() if state is not None else None, final, cu, T,
        H=H, K=K, V=V, BK=BK, BV=BV, USE_INITIAL_STATE=state is not None, IS_VARLEN=cu is not None,
        num_warps=4,
    )
    return o.to(out_dtype), final


# ----------------------------------------------------------------------------- decode


# per (device, B·H): the decode kernel's arrival counters (zero at rest; the last program of each head
# resets its own), kept so a captured CUDA graph and every later call use the same buffer
_ARRIVALS: dict = {}


def _arrivals(device, n: int) -> torch.Tensor:
    # one buffer per stream too: two launches in flight on different streams must not count each other
    stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
    key = (str(device), stream, n)
    if key not in _ARRIVALS:
        _ARRIVALS[key] = torch.zeros(max(n, 1), dtype=torch.int32, device=device)
    return _ARRIVALS[key]


def _value_splits(B: int, H: int, blocks: int, device) -> int:
    """Programs a head's value blocks are split over: enough for two programs an SM (four "SMs" under the
    interpreter), at most one block each; 1 from B·H = 2 · SMs up."""
    return max(1, min(blocks, -(-2 * num_sms(device) // max(B * H, 1))))


def decode(w: KDAWeights, z, f, b, state: KDAState, inplace: bool = False, num_warps: Optional[int] = None,
           bv: Optional[int] = None, num_stages: int = 0, vs: Optional[int] = None):
    """One token per sequence in ONE kernel; must match oracle.kda.decode.

    Args:
        z: [B, C] pre-conv q|k|v;  f: [B, H·K] gate pre-activation (with dt_bias);  b: [B, H] beta logits;
        state: KDAState(recurrent [B, H, K, K] float32, conv [B, C, W]);
        inplace: update state's buffers instead of returning new ones (CUDA-graph serving);
        num_warps, bv, num_stages, vs: launch overrides (the bench sweeps them). vs: programs a head's value
            blocks are split over: None (ours since issue 14 step 39) or "auto" as many as `_value_splits` picks
            (more than one only while B·H < 2 · SMs: B <= 4 at H = 64 on 132 SMs), 1 one program a head (ours
            before step 39), or an int. Every split gives the same bits (the same code on the same value
            blocks), so a row's bits do not depend on its batch.
    Returns:
        o: [B, H, V] in z's dtype;  state: KDAState after the token (the same buffers when inplace).
    """
    H, K, W = w.num_heads, w.head_dim, w.conv_width
    C = 3 * H * K
    if z.ndim != 2 or z.shape[1] != C:
        raise ValueError(f"z: expected [B, {C}] (C = 3·H·K), got shape {tuple(z.shape)}")
    B = z.shape[0]
    for name, a, want in (("f", f, (B, H * K)), ("b", b, (B, H)),
                          ("state.recurrent", state.recurrent, (B, H, K, K)),
                          ("state.conv", state.conv, (B, C, W)),
                          ("w.conv1d", w.conv1d, (C, W)), ("w.A_log", w.A_log, (H,))):
        if tuple(a.shape) != want:
            raise ValueError(f"{name}: expected shape {want}, got {tuple(a.shape)}")
        if a.device != z.device:
            raise ValueError(f"{name}: expected device {z.device} (that of z), got {a.device}")
    if state.recurrent.dtype != torch.float32:
        raise ValueError(f"state.recurrent: expected dtype torch.float32, got {state.recurrent.dtype}")
    if K > 256:
        raise ValueError(f"w.head_dim: {K}, expected <= 256")
    if inplace and not (state.recurrent.is_contiguous() and state.conv.is_contiguous()):
        raise ValueError("state: in-place decode needs contiguous state buffers")
    h_in, c_in = state.recurrent.contiguous(), state.conv.contiguous()
    # GLMGATE_CANARY=1: fresh outputs inside sentinel margins, verified after the launch (impl/canary.py)
    h_out = h_in if inplace else canary.empty(*h_in.shape, dtype=h_in.dtype, device=h_in.device)
    c_out = c_in if inplace else canary.empty(*c_in.shape, dtype=c_in.dtype, device=c_in.device)
    o = canary.empty(B, H, K, device=z.device, dtype=z.dtype)
    lb = w.lower_bound
    BV = bv or _tile(min(64, triton.next_power_of_2(K)))
    blocks = triton.cdiv(K, BV)
    # step 39: at small B·H one program a head leaves most SMs idle behind each head's serial state stream
    VS = _value_splits(B, H, blocks, z.device) if vs is None or vs == "auto" else vs
    if isinstance(VS, bool) or not isinstance(VS, int) or not 1 <= VS <= blocks:
        raise ValueError(f"vs: {vs!r}, expected None, \"auto\" or an int in [1, {blocks}] (the head's value "
                         f"blocks of {BV})")
    kda_decode_fused_fwd_kernel[(H, B, VS)](
        z.contiguous(), f.contiguous(), b.contiguous(), w.conv1d.contiguous(), w.A_log.contiguous(),
        c_in, c_out, h_in, h_out, o, _arrivals(z.device, B * H), 0.0 if lb is None else float(lb), K ** -0.5,
        H=H, K=K, W=W, BK=triton.next_power_of_2(max(K, 16)), BV=BV,
        BW=triton.next_power_of_2(W), NUM_STAGES=num_stages,
        USE_LOWER_BOUND=lb is not None, VS=VS, num_warps=num_warps or 4,
    )
    canary.verify("kda_decode_fused_fwd_kernel", o=o, **({} if inplace else {"state.recurrent": h_out,
                                                                            "state.conv": c_out}))
    return o, KDAState(h_out, c_out)


def decode_graph(w: KDAWeights, pool: KDAState, max_batch: int):
    """A CUDA-graph decode step over a pool of states: `decode` (in place) captured once at max_batch rows,
    replayed with each step's inputs and state slots copied into its persistent buffers (impl/graph.py).

    Args:
        pool: KDAState(recurrent [P, H, K, K] float32, conv [P, C, W]) the states rows read and write by
            slot (the step keeps its own copy);  max_batch: the captured batch M
    Returns:
        a KDADecodeStep: eager / capture / replay(z [B, C], f [B, H·K] f32, b [B, H], slots [B]) -> o [B, H, V];
        its `pool` after the steps
    """
    from impl.graph import KDADecodeStep
    return KDADecodeStep(_SELF, w, pool, max_batch)


# ----------------------------------------------------------------------------- sublayer pieces (torch)


def l2norm(x):
    """x / sqrt(Σ x² + 1e-6) over the last axis, in float32 (oracle.kda.l2norm)."""
    x = x.float()
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + L2_EPS)


def gate(f, A_log, lower_bound):
    """Log-decay g [.., H, K] float32 from f [.., H, K] (oracle.kda.gate)."""
    a = torch.exp(A_log.float())[:, None]
    f = f.float()
    if lower_bound is None:
        return -a * F.softplus(f, threshold=20.0)
    return lower_bound * torch.sigmoid(a * f)


def conv(z, weight, conv_state=None, cu_seqlens=None):
    """Depthwise causal conv over q|k|v channels, no activation (oracle.kda.conv); float32 math.

    Args:
        z: [B, S, C];  weight: [C, W];  conv_state: [B or N, C, W] or None (zeros)
    Returns:
        c: [B, S, C] in z's dtype;  conv_state: [B or N, C, W] in z's dtype
    """
    B, S, C = z.shape
    W = weight.shape[-1]
    wt = weight.float()[:, None, :]                                          # [C, 1, W]
    if cu_seqlens is None:
        prev = conv_state.float() if conv_state is not None else z.new_zeros(B, C, W, dtype=torch.float32)
        zz = torch.cat([prev, z.float().transpose(1, 2)], dim=2)             # [B, C, W + S]
        c = F.conv1d(zz[:, :, 1:], wt, groups=C).transpose(1, 2)            # [B, S, C]
        return c.to(z.dtype), zz[:, :, -W:].to(z.dtype).contiguous()
    cu = [int(x) for x in cu_seqlens.tolist()]
    c = torch.empty(B, S, C, device=z.device, dtype=torch.float32)
    states = []
    for i, (s, e) in enumerate(zip(cu, cu[1:])):
        prev = conv_state[i].float() if conv_state is not None else z.new_zeros(C, W, dtype=torch.float32)
        zz = torch.cat([prev, z[0, s:e].float().T], dim=1)                  # [C, W + len]
        if e > s:
            c[0, s:e] = F.conv1d(zz[None, :, 1:], wt, groups=C)[0].T
        states.append(zz[:, -W:])
    return c.to(z.dtype), torch.stack(states).to(z.dtype)


def gated_rmsnorm(o, zg, weight, eps):
    """w · o · (mean(o²)+eps)^-1/2 · sigmoid(zg) over the last axis, float32, cast to o's dtype. One launch of
    impl/kernels/norm.py wherever kernels run (issue 14 step 14), else `gated_rmsnorm_torch`."""
    if norm.runs_kernel(o):
        return norm.launch(o, weight, eps, norm.GATED, zg)
    return gated_rmsnorm_torch(o, zg, weight, eps)


def gated_rmsnorm_torch(o, zg, weight, eps):
    """`gated_rmsnorm` in torch ops (ours before issue 14 step 14; the peer of impl.candidates.norms_torch)."""
    u = o.float()
    y = weight.float() * u * torch.rsqrt(u.pow(2).mean(-1, keepdim=True) + eps) * torch.sigmoid(zg.float())
    return y.to(o.dtype)


def project(w: KDAWeights, x, f_bias: bool = True):
    """Padding-zeroed x [B,S,D] -> (z [B,S,C], f [B,S,H·K] f32, b [B,S,H], zg [B,S,H·K]) (oracle.kda.project).

    f_bias False: f as its projection gives it (x's dtype) without dt_bias, for a `gated_chunked` that adds
    the bias inside its kernel (two float32 passes over [B, S, H·K] fewer)."""
    z = torch.cat([x @ w.q_proj.T, x @ w.k_proj.T, x @ w.v_proj.T], dim=-1)
    f = (x @ w.f_a_proj.T) @ w.f_b_proj.T
    if f_bias:
        f = f.float() + w.dt_bias.float()
    b = x @ w.b_proj.T
    zg = (x @ w.g_a_proj.T) @ w.g_b_proj.T
    return z, f, b, zg


def core_inputs(w: KDAWeights, c, f, b):
    """Post-conv c [..,C], f [..,H·K], b [..,H] -> q, k, v [..,H,K], g, beta float32 (oracle.kda.core_inputs).

    f None: q, k, v, beta only (a `gated_chunked` makes g itself)."""
    H, K = w.num_heads, w.head_dim
    shape = c.shape[:-1]
    c = F.silu(c.float())
    q, k, v = (c[..., i * H * K:(i + 1) * H * K].reshape(*shape, H, K) for i in range(3))
    q = l2norm(q) * K ** -0.5
    k = l2norm(k)
    beta = torch.sigmoid(b.float())
    if f is None:
        return q, k, v, beta
    g = gate(f.reshape(*shape, H, K), w.A_log, w.lower_bound)
    return q, k, v, g, beta


def zero_state(w: KDAWeights, batch: int, device=None, dtype=torch.float32) -> KDAState:
    """Zero KDAState: recurrent float32, conv in `dtype` (the model dtype)."""
    H, K = w.num_heads, w.head_dim
    device = device if device is not None else w.A_log.device
    return KDAState(torch.zeros(batch, H, K, K, device=device, dtype=torch.float32),
                    torch.zeros(batch, 3 * H * K, w.conv_width, device=device, dtype=dtype))


def sublayer(w: KDAWeights, x, state: Optional[KDAState] = None, mask=None, cu_seqlens=None, *, ops=None):
    """The KDA sublayer from the post-norm input to o_proj; must match oracle.kda.sublayer.

    ops: the namespace whose `chunked`, `decode` and `gated_rmsnorm` it calls (default this module's; a
    candidate's composed namespace passes itself, impl/compose.py; the norm is a seam, impl.registry.SEAMS).

    Args:
        x: [B, S, D];  mask: [B, S] 1 = real, 0 = pad;  state: KDAState or None;
        cu_seqlens: [N+1] (B == 1, state rows are documents)
    Returns:
        y: [B, S, D] in x's dtype;  state: KDAState(recurrent float32, conv in x's dtype)
    """
    if x.ndim != 3:
        raise ValueError(f"x: expected [B, S, D], got shape {tuple(x.shape)}")
    if mask is not None:
        x = x * mask.to(x.dtype)[..., None]
    B, S, _ = x.shape
    H, K = w.num_heads, w.head_dim
    ops = _SELF if ops is None else ops
    step = S == 1 and state is not None and cu_seqlens is None
    # a namespace's fused gate + chunked pass (impl.registry.FAST_PATHS) takes f before its bias and gate
    gated = None if step else getattr(ops, "gated_chunked", None)
    z, f, b, zg = project(w, x, f_bias=gated is None)
    if step:
        o, new = ops.decode(w, z[:, 0], f[:, 0], b[:, 0], KDAState(state.recurrent, state.conv.to(x.dtype)))
        o = o[:, None]                                                       # [B, 1, H, V]
    else:
        c, conv_state = conv(z, w.conv1d, None if state is None else state.conv, cu_seqlens)
        work = x.dtype if x.dtype in _FLOAT_DTYPES else torch.float32
        M0 = None if state is None else state.recurrent.float()
        if gated is None:
            q, k, v, g, beta = core_inputs(w, c, f, b)
            o, M, _ = ops.chunked(q.to(work), k.to(work), v.to(work), g, beta, M0, 64, cu_seqlens,
                                  boundary_states=False)
        else:
            q, k, v, beta = core_inputs(w, c, None, b)
            o, M, _ = gated(q.to(work), k.to(work), v.to(work), f.reshape(B, S, H, K), beta, M0, 64, cu_seqlens,
                            boundary_states=False, A_log=w.A_log, dt_bias=w.dt_bias, lower_bound=w.lower_bound)
        new = KDAState(M, conv_state)
    o = ops.gated_rmsnorm(o, zg.reshape(B, S, H, K), w.o_norm, w.eps)
    y = o.reshape(B, S, H * K).to(x.dtype) @ w.o_proj.T
    return y, new



def checkpoint(q, k, v, g, beta, boundary_states, state=None, depth=0, chunk=64, *, ops=None):
    """The state after exactly the first `depth` tokens of a prefill, from its chunked pass's boundary
    states (a prefix-cache checkpoint at any depth); must match oracle.kda.checkpoint.

    ops: the namespace whose `chunked` replays the tokens after the boundary (default this module's).

    Args:
        q, k, v, g, beta: the prefill's inputs [B, T, ...];  boundary_states: [B, T // 64, H, K, V] float32
        (chunked's);  state: [B, H, K, V] float32 or None;  depth: 0 <= depth <= T
    Returns:
        [B, H, K, V] float32
    """
    B, T, H, K, V = checkpoint_shapes(q, k, v, g, beta, boundary_states, state, depth, chunk)
    ops = _SELF if ops is None else ops
    at = depth // chunk * chunk
    saved = (boundary_states[:, at // chunk - 1] if at else
             q.new_zeros(B, H, K, V, dtype=torch.float32) if state is None else state).float()
    if at == depth:
        return saved.clone()
    part = (a[:, at:depth].contiguous() for a in (q, k, v, g, beta))
    return ops.chunked(*part, saved.contiguous(), chunk, boundary_states=False)[1]
