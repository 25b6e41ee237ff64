"""Every code path of every Triton kernel, the predicate that says a launch took it, and the checks whose
`ci` examples reach it on the CPU interpreter: the proof that the matrix tests each path.

Why: a branch no drawn case reaches is untested however many examples pass. Before this table the CPU
strategies never split a selection (flash-decoding), never spanned two K tiles of a KDA head, never
stepped the down GEMM past one reduction tile: bugs written there escaped every check.

A `Path` is one branch or one loop that must run more than once (a second tile, a second selection
block), judged from one launch's arguments (impl/launches.py: constexprs, scalars and the input tensors,
read on the host). `by` names the matrix checks whose derandomized `ci` examples reach it on the CPU
(tests/test_matrix.py asserts each one after running the check); a path no CPU check can reach says
`why` instead (a GPU's bf16 dots, a benchmark's launch option) and where it is exercised.

`KERNELS` lists, per kernel, the constexpr parameters that choose no code of their own (dimensions,
tile sizes, plain values): every other constexpr must be read by a path's predicate, so a new flag
added to a kernel without a path fails tests/test_kernel_paths.py, and so does a new kernel.
"""
from __future__ import annotations

import collections
import contextlib
import types
from typing import Callable, Iterator, NamedTuple

import numpy as np


class Path(NamedTuple):
    kernel: str                          # the @triton.jit kernel of impl/kernels/ ("mla_merge_kernel")
    name: str                            # what runs ("a second selection block")
    ran: Callable[[dict], bool]          # {parameter: argument} of one launch -> did it take this path
    by: tuple = ()                       # the checks whose ci examples reach it on the interpreter
    why: str = ""                        # for a path no CPU check reaches: why not, and where it runs


def _cdiv(a: int, b: int) -> int:
    return -(-int(a) // int(b))


def _ints(t) -> np.ndarray:
    """A launch's integer tensor on the host as int64 NumPy."""
    return t.detach().to("cpu").long().numpy()


def _rows(a) -> list[int]:
    """Token lengths of the rows a KDA launch walks: the documents of cu_seqlens, else T per row."""
    if a.get("IS_VARLEN"):
        return np.diff(_ints(a["cu_seqlens"])).tolist()
    return [int(a["T"])]


def _decays_past_factor_range(a) -> bool:
    """Some 16-row block of a KDA intra launch has Γ fall more than 75 below its first row in some channel:
    the launch flags it and the wrapper launches the kernel again with PAIRS, whose _intra_pairs adds those
    entries' products (the softplus gate's strong decays)."""
    g = a["g"].detach().to("cpu").double().numpy()                          # [B, T, H, K]: g, or Γ with GC
    starts = np.cumsum([0] + _rows(a))[:-1] if a["IS_VARLEN"] else [0]
    for row in g:
        for s0, n in zip(starts, _rows(a)):
            for c in range(s0, s0 + n, a["BT"]):
                gamma = row[c:min(c + a["BT"], s0 + n)]
                gamma = gamma if a["GC"] else np.cumsum(gamma, 0)
                for r in range(0, len(gamma), a["BC"]):
                    if (gamma[r] - gamma[r:r + a["BC"]]).max() > 75:
                        return True
    return False


def _chunks_in_a_program(a) -> bool:
    """Some program of the KDA state pass walks two or more chunks."""
    if a["IS_VARLEN"]:
        return max(_cdiv(n, a["BT"]) for n in _rows(a)) >= 2
    return min(int(a["CPS"]), _cdiv(a["T"], a["BT"])) >= 2


def _selection_blocks(a) -> np.ndarray:
    """[rows, splits, blocks] bool: which BW-blocks of each split of each query row hold a valid entry
    (an index in [0, lengths[b])) in a launch of the sparse MLA kernel."""
    idx = _ints(a["indices"])
    B, S, W = idx.shape
    valid = (idx >= 0) & (idx < _ints(a["lengths"])[:, None, None])
    ws, bw = int(a["W_SPLIT"]), int(a["BW"])
    ns = _cdiv(max(W, 1), ws)
    pad = np.zeros((B, S, ns * ws), dtype=bool)
    pad[..., :W] = valid
    per = pad.reshape(B * S, ns, ws)
    nb = _cdiv(ws, bw)
    blocks = np.zeros((B * S, ns, nb * bw), dtype=bool)
    blocks[..., :ws] = per
    return blocks.reshape(B * S, ns, nb, bw).any(-1)


def _expert_blocks(a) -> np.ndarray:
    """The expert id of every block of a grouped MoE GEMM launch (-1: a spare block)."""
    return _ints(a["block_expert"])


def _pad_rows(a) -> bool:
    """A block that runs an expert holds a pad row (pair id P) among its BM rows."""
    ids = _ints(a["sorted_ids"]).reshape(-1, int(a["BM"]))
    used = _expert_blocks(a) >= 0
    return bool((ids[used] == int(a["P"])).any())


def _expert_in_two_chunks(a) -> bool:
    """moe_align_fwd_kernel: some expert has pairs in two of its BP-pair chunks."""
    ids = _ints(a["ids"])[:int(a["P"])]
    chunk = np.arange(ids.size) // int(a["BP"])
    return any(len(set(chunk[ids == e])) >= 2 for e in set(ids.tolist()))


def _pool_hole(a) -> bool:
    """dsa_pool_fwd_kernel, dsa_pool_append_kernel: some row has a pad token after its first real one (its valid
    flag column)."""
    flags = a["packed"][..., -1].detach().to("cpu").float().numpy() > 0.5          # [B, T]
    first = _ints(a["first"])
    return any((~flags[b, f:]).any() for b, f in enumerate(first))


def _pool_ends_at_t0(a) -> bool:
    """dsa_pool_append_kernel: some row's pool ends on the call's first new row T0 (a decode step completing
    a pool: the row the cache had to leave for this call)."""
    T0, M = int(a["T0"]), int(a["M"])
    rel = T0 - _ints(a["first"]) + 1
    return T0 > 0 and bool(((rel >= M) & (rel % M == 0)).any())


def _select_pad_query(a) -> bool:
    """dsa_select_fwd_kernel: some query of the launch is a pad (its row's valid flag 0)."""
    S, T = int(a["S"]), int(a["T"])
    return bool((_ints(a["val"])[:, T - S:] == 0).any())


def _select_short(a) -> bool:
    """dsa_select_fwd_kernel: some query has fewer candidate pools than k_sel (all of them picked)."""
    S, T = int(a["S"]), int(a["T"])
    last = _ints(a["pool_last"])                                                    # [B, P]
    pos = np.arange(T - S, T)
    n = ((last[:, None, :] >= 0) & (last[:, None, :] <= pos[None, :, None])).sum(-1)  # [B, S]
    return bool((n < int(a["k_sel"])).any())


def _doubled(e: np.ndarray) -> bool:
    """Some expert runs over two or more blocks."""
    e = e[e >= 0]
    return len(e) != len(set(e.tolist()))


_F32 = "fp32"          # str() of tl.float32, a constexpr dtype argument
GPU_BF16 = ("tf32 / bf16 dots are a GPU's bf16 path: the interpreter computes float32 operands with ieee "
            "dots (its bf16 tl.dot is wrong); `glmgate run --device cuda` runs them")
GPU_PTX = ("inline PTX (impl.moe.pairs_possible: bf16 dots compiled for a CUDA GPU); the interpreter cannot run it, "
           "so the CPU checks its bit arithmetic's twin (tests/test_nvfp4_pairs.py) and `glmgate run --device cuda` "
           "the kernels")
MLA_MERGE_UV_CANDIDATE = ("only issue 14 step 43's refuted candidate launches it (impl.candidates.mla_merge_uv: ours' "
                          "ROWS_UV is 0); tests/test_mla_merge.py holds it on the CPU against the float64 truth over "
                          "1-20 splits (two tiles), empty splits and rows, 1-2 query rows, and on a GPU in bf16")
MLA_PDL = ("GPU only (inline PTX, compute capability >= 9; the interpreter never sets it), and only through issue 14 step "
           "60's candidate (impl.candidates.mla_merge_pdl: ours' MERGE_PDL is False); tests/test_mla_merge_pdl.py "
           "holds it bit for bit against ours on a GPU, eager, paged and replayed from a CUDA graph")
MLA_MERGE_CHUNKS = ("only issue 14 step 44's refuted candidate launches it (impl.candidates.mla_merge_chunks: ours' "
                    "MERGE_BR is 0, the whole rank a program); tests/test_mla_merge.py holds it on the CPU against "
                    "the float64 truth and the whole-rank merge's bits, and on a GPU in bf16")
MLA_MERGE_TILES = ("a selection of more than 16 splits: ours' rules give at most 16 at the released width (B = 1, "
                   "2051 entries) and the interpreter at most 4; tests/test_mla_merge.py merges 20 (two tiles) on the "
                   "CPU against the float64 truth")
KDA_COLUMNS = ("ours before issue 14 step 26 (intra='columns', kept as the bench's baseline and the base of steps "
               "21, 23 and 24's candidates); tests/test_kda_intra_blocked.py, tests/test_kda_strong_decays.py and "
               "tests/test_kda_causal.py hold it on the CPU against the float64 truth on dense rows, packed documents "
               "with an empty one, partial chunks, two K and V tiles, masked head dims and strong decays (its PAIRS "
               "launch), and the mutants kda_intra_k_tiles_not_accumulated, kda_intra_strong_decay_pairs_skipped "
               "and kda_intra_anchor_middle run it")
KDA_INTRA_STEPS = ("only issue 14's candidates launch it (step 21: impl.candidates.kda_intra_stacked, step 23: "
                   "impl.candidates.kda_intra_gc; on ours before step 26, intra='columns'); "
                   "tests/test_kda_intra_blocked.py holds it bitwise against that kernel on the CPU on dense rows, "
                   "partial chunks, masked head dims and packed documents with an empty one")
KDA_GATE_FUSED = ("only a candidate's gated_chunked launches it (issue 14 step 24: impl.candidates.kda_gate_fused; "
                  "step 26: impl.candidates.kda_intra_split; ours computes the gate in torch); "
                  "tests/test_kda_gate_fused.py and tests/test_kda_intra_split.py hold it on the CPU against the "
                  "torch gate then chunked, both gates, with and without dt_bias, dense and packed, and the mutant "
                  "kda_gate_fused_dt_bias_dropped runs it through kda.sublayer")
KDA_INTRA_CANDIDATE = ("only impl.candidates.kda_intra_blocked launches it (issue 14 step 18, not gated on a GPU; "
                       "ours runs the split pass since step 26); tests/test_kda_intra_blocked.py holds it on the CPU "
                       "against ours and the float64 truth on each of these paths, and the mutant "
                       "kda_intra_blocked_x30_drops_a_term runs it")
KDA_SPLIT_QK = ("step 26's place for q e^Γ, k e^(Γ_last - Γ) and β k e^Γ (impl.kda.SplitTiles(diag_qk=False): the "
                "bench's `split` and impl.candidates.kda_intra_split; ours makes them in the diagonal kernel since "
                "step 27); tests/test_kda_intra_split.py holds it bit for bit against ours on the CPU on dense rows, "
                "packed documents, partial chunks, a 7-token chunk and strong decays, and on the GPU in bf16")
KDA_FTZ = ("inline PTX (ex2.approx.ftz for tl.exp, issue 14 steps 31 and 33: SplitTiles.diag_ftz and off_ftz, a GPU "
           "compile only); the interpreter runs tl.exp. `glmgate run --device cuda` runs it, and the GPU tests of "
           "tests/test_kda_intra_split.py and tests/test_kda_off_ftz.py hold it against the float64 oracle in bf16, "
           "strong decays included")
KDA_GAMMA_SCANNED = ("only impl.candidates.kda_gamma_diag launches it (issue 14 step 30, refuted on the H100: Γ scanned "
                     "in the diagonal and off-diagonal kernels costs 1.2 ms more than the Γ launch it replaces); "
                     "tests/test_kda_gamma_diag.py holds it bit for bit against ours on the CPU (dense rows with a "
                     "given state, partial chunks, a 7-token chunk, packed documents with an empty one, strong "
                     "decays, both fused gates) and against the float64 oracle in bf16 on the GPU")
GPU_PREFILL_TILES = ("the GPU's prefill tiles (impl.moe._tiles: 128-row blocks past 16 pairs an expert; W4A4 64); the "
                     "interpreter's tiles are 16 rows at every size. moe.forward's and nvfp4.gate's CUDA pins of 160 "
                     "tokens (40 pairs an expert) reach them: `glmgate run --device cuda`")
GPU_SELECT = ("the GPU's selection (impl.dsa.select_pools: 2-bit digits, packed counts, tiles of 2048 pools); "
              "the interpreter's checks take 8-bit digits (its cost is per operation), so on the CPU "
              "tests/test_dsa_select.py runs the packed form against the oracle's pick, and `glmgate run "
              "--device cuda` the checks")
# the GPU's mHC partial projection (impl.mhc._PARTIAL_DOT: a tl.dot over 16 token rows), never the
# interpreter's: numpy's matmul sums a row differently by its place in the tile (mhc.batch)
MHC_DOT = ("the GPU's partial (impl.mhc._PARTIAL_DOT; the interpreter keeps the broadcast-and-sum form, its "
           "tl.dot is not row-invariant): on the GPU mhc.coefficients' full-geometry pins (64 chunks of 256, "
           "4 sub-blocks each); on the CPU tests/test_mhc_kernels.py test_the_gpus_dot_partial against the oracle")

PATHS: tuple[Path, ...] = (
    # ---------------------------------------------------------------- KDA chunked prefill: intra-chunk
    # ours before issue 14 step 26: the whole-chunk kernel (intra="columns")
    Path("kda_intra_chunked_fwd_kernel", "dense rows", lambda a: not a["IS_VARLEN"],
         why=KDA_COLUMNS),
    Path("kda_intra_chunked_fwd_kernel", "packed documents (cu_seqlens)", lambda a: a["IS_VARLEN"],
         why=KDA_COLUMNS),
    Path("kda_intra_chunked_fwd_kernel", "a row's second chunk", lambda a: max(_rows(a)) > a["BT"],
         why=KDA_COLUMNS),
    Path("kda_intra_chunked_fwd_kernel", "a partial last chunk", lambda a: any(n % a["BT"] for n in _rows(a)),
         why=KDA_COLUMNS),
    Path("kda_intra_chunked_fwd_kernel", "a second K tile (kk and qk products summed over tiles)",
         lambda a: _cdiv(a["K"], a["BK"]) >= 2,
         why=KDA_COLUMNS),
    Path("kda_intra_chunked_fwd_kernel", "a head dim narrower than its tile (masked lanes)",
         lambda a: a["K"] % a["BK"] != 0,
         why=KDA_COLUMNS),
    Path("kda_intra_chunked_fwd_kernel", "a second V tile", lambda a: _cdiv(a["V"], a["BV"]) >= 2,
         why=KDA_COLUMNS),
    Path("kda_intra_chunked_fwd_kernel", "decays past the factorised products' range, flagged",
         lambda a: not a["PAIRS"] and _decays_past_factor_range(a), why=KDA_COLUMNS),
    Path("kda_intra_chunked_fwd_kernel", "the exact pairs pass (the launch after a flag)",
         lambda a: a["PAIRS"] and _decays_past_factor_range(a), why=KDA_COLUMNS),
    Path("kda_intra_chunked_fwd_kernel", "(I + A)^-1 by doubling", lambda a: a["INV_MERGE"],
         why=KDA_COLUMNS),
    Path("kda_intra_chunked_fwd_kernel", "(I + A)^-1 by forward substitution", lambda a: not a["INV_MERGE"],
         why="a benchmark sweep option (gate/bench_kda.py, inv_merge=False) of ours before step 26 "
             "(intra='columns'), which inverts by doubling"),
    Path("kda_intra_chunked_fwd_kernel", "tf32 dots", lambda a: a["PRECISION"] == "tf32", why=GPU_BF16),
    Path("kda_intra_chunked_fwd_kernel", "kk and qk as one stacked dot (step 21)", lambda a: a["STACK"],
         why=KDA_INTRA_STEPS),
    Path("kda_intra_chunked_fwd_kernel", "Γ read, not scanned (step 23)", lambda a: a["GC"], why=KDA_INTRA_STEPS),
    # ---------------------------------------------------------------- ours since issue 14 step 26: the split pass
    # Γ first (also steps 23 and 24's), then the diagonal blocks, the off-diagonal blocks + merge, W / U
    *(Path(kernel, name, pred, by=by)
      for kernel in ("kda_chunk_cumsum_fwd_kernel", "kda_intra_diag_fwd_kernel", "kda_intra_offdiag_fwd_kernel",
                     "kda_intra_wu_split_fwd_kernel")
      for name, pred, by in (("dense rows", lambda a: not a["IS_VARLEN"],
                              ("kda.chunked", "kda.causal", "kda.sublayer", "kda.paths")),
                             ("packed documents (cu_seqlens)", lambda a: a["IS_VARLEN"],
                              ("kda.chunked", "kda.causal", "kda.packed")),
                             ("a row's second chunk", lambda a: max(_rows(a)) > a["BT"], ("kda.chunked", "kda.causal", "kda.sublayer", "kda.paths", "kda.packed")),
                             ("a partial last chunk", lambda a: any(n % a["BT"] for n in _rows(a)), ("kda.chunked", "kda.causal", "kda.sublayer", "kda.paths", "kda.packed")),
                             ("a second K tile", lambda a: _cdiv(a["K"], a["BK"]) >= 2, ("kda.chunked", "kda.causal", "kda.sublayer", "kda.paths", "kda.packed")))),
    *(Path(kernel, "tf32 dots", lambda a: a["PRECISION"] == "tf32", why=GPU_BF16)
      for kernel in ("kda_intra_diag_fwd_kernel", "kda_intra_offdiag_fwd_kernel", "kda_intra_wu_split_fwd_kernel")),
    Path("kda_intra_diag_fwd_kernel", "decays past the factorised products' range: the pairs in the same program",
         lambda a: _decays_past_factor_range({**a, "g": a["gc"], "GC": not a.get("FROM_G", False)}), by=("kda.chunked", "kda.causal")),
    # step 30's candidate (refuted): Γ scanned from g in the diagonal and off-diagonal kernels, no Γ launch
    *(Path(kernel, name, pred, why=KDA_GAMMA_SCANNED)
      for kernel, name, pred in (
          ("kda_intra_diag_fwd_kernel", "Γ scanned from g, block by block (step 30)", lambda a: a.get("FROM_G", False)),
          ("kda_intra_diag_fwd_kernel", "a chunk's four blocks neighbours in the grid (step 30)",
           lambda a: a.get("SUB_FIRST", False)),
          ("kda_intra_offdiag_fwd_kernel", "Γ scanned from g, block by block (step 30)", lambda a: a.get("FROM_G", False)),
          ("kda_intra_wu_split_fwd_kernel", "e^Γ_last from the diagonal kernel, no Γ read (step 30)",
           lambda a: a.get("GL_DONE", False)),
          *((kernel, name, pred) for kernel in ("kda_intra_diag_fwd_kernel", "kda_intra_offdiag_fwd_kernel")
            for name, pred in (
                ("the softplus gate from f, in the scan (step 30)", lambda a: a.get("FROM_G", False) and a.get("GATE", 0) == 1),
                ("the lower-bound gate from f, in the scan (step 30)", lambda a: a.get("FROM_G", False) and a.get("GATE", 0) == 2),
                ("dt_bias added to f, in the scan (step 30)", lambda a: a.get("FROM_G", False) and a.get("GATE", 0) and a.get("HAS_BIAS", False)))))),
    *(Path(kernel, "e^x flushed below float32's normal range, no fix-up (step 31)", lambda a: a.get("FTZ", False),
           why=KDA_FTZ) for kernel in ("kda_intra_diag_fwd_kernel", "kda_intra_wu_split_fwd_kernel")),
    Path("kda_intra_offdiag_fwd_kernel", "e^x flushed below float32's normal range, no fix-up (step 33)",
         lambda a: a.get("FTZ", False), why=KDA_FTZ),
    Path("kda_intra_offdiag_fwd_kernel", "X to W / U in its dots' operand dtype, all ten blocks (step 34)",
         lambda a: a.get("X_W", False), by=("kda.chunked", "kda.packed")),
    *(Path(kernel, "aqk's blocks right of the diagonal neither stored nor read (step 35)",
           lambda a: a.get("LOWER_ONLY", False), by=("kda.chunked", "kda.packed"))
      for kernel in ("kda_intra_offdiag_fwd_kernel", "kda_state_chunked_fwd_kernel")),
    Path("kda_intra_diag_fwd_kernel", "the NaN report from Γ_last and β, no reduction (step 32)",
         lambda a: a.get("NAN_LAST", False), by=("kda.chunked", "kda.device_report")),
    Path("kda_intra_wu_split_fwd_kernel", "a second V tile", lambda a: _cdiv(a["V"], a["BV"]) >= 2, by=("kda.chunked", "kda.causal", "kda.sublayer", "kda.paths", "kda.packed")),
    Path("kda_intra_wu_split_fwd_kernel", "W and U as bf16 dots (LOW_DOTS)", lambda a: a["LOW_DOTS"], why=GPU_BF16),
    Path("kda_intra_diag_fwd_kernel", "q e^Γ, k e^(Γ_last - Γ) and β k e^Γ made here (step 27)",
         lambda a: a["MAKE_QK"], by=("kda.chunked", "kda.causal", "kda.sublayer", "kda.paths", "kda.packed")),
    Path("kda_intra_wu_split_fwd_kernel", "W from the stored β k e^Γ (step 27)", lambda a: a["FROM_KB"],
         by=("kda.chunked", "kda.causal", "kda.sublayer", "kda.paths", "kda.packed")),
    Path("kda_intra_wu_split_fwd_kernel", "q e^Γ, k e^(Γ_last - Γ) and β k e^Γ made here (step 26)",
         lambda a: not a["FROM_KB"], why=KDA_SPLIT_QK),
    *(Path("kda_chunk_cumsum_fwd_kernel", name, pred, why=KDA_GATE_FUSED)
      for name, pred in (("the softplus gate from f (step 24)", lambda a: a["GATE"] == 1),
                         ("the lower-bound gate from f (step 24)", lambda a: a["GATE"] == 2),
                         ("dt_bias added to f", lambda a: a["GATE"] and a["HAS_BIAS"]))),
    # the 16-row sub-chunk pair (issue 14 step 18's candidate)
    *(Path(kernel, name, pred, why=KDA_INTRA_CANDIDATE)
      for kernel in ("kda_intra_kk_fwd_kernel", "kda_intra_wu_fwd_kernel")
      for name, pred in (("dense rows", lambda a: not a["IS_VARLEN"]),
                         ("packed documents (cu_seqlens)", lambda a: a["IS_VARLEN"]),
                         ("a partial last chunk", lambda a: any(n % a["BT"] for n in _rows(a))),
                         ("a second K tile", lambda a: _cdiv(a["K"], a["BK"]) >= 2),
                         ("tf32 dots", lambda a: a["PRECISION"] == "tf32"))),
    Path("kda_intra_wu_fwd_kernel", "a second V tile", lambda a: _cdiv(a["V"], a["BV"]) >= 2,
         why=KDA_INTRA_CANDIDATE),
    # ---------------------------------------------------------------- KDA chunked prefill: state pass
    Path("kda_state_chunked_fwd_kernel", "segment-local pass (two-level scan)", lambda a: a["IS_LOCAL"],
         by=("kda.chunked", "kda.causal", "kda.sublayer", "kda.paths")),
    Path("kda_state_chunked_fwd_kernel", "segment-local pass, a second V block (the transition's columns)",
         lambda a: a["IS_LOCAL"] and _cdiv(a["VS"], a["BV"]) >= 2, by=("kda.chunked", "kda.sublayer")),
    Path("kda_state_chunked_fwd_kernel", "carry pass from a given state",
         lambda a: not a["IS_LOCAL"] and a["USE_INITIAL_STATE"],
         by=("kda.chunked", "kda.causal", "kda.sublayer", "kda.paths", "kda.packed")),
    Path("kda_state_chunked_fwd_kernel", "carry pass from zero",
         lambda a: not a["IS_LOCAL"] and not a["USE_INITIAL_STATE"],
         by=("kda.chunked", "kda.causal", "kda.sublayer", "kda.paths")),
    Path("kda_state_chunked_fwd_kernel", "carry pass over a row cut into segments",
         lambda a: not a["IS_LOCAL"] and a["NSEG"] > 1,
         by=("kda.chunked", "kda.causal", "kda.sublayer", "kda.paths")),
    Path("kda_state_chunked_fwd_kernel", "carry pass, a second V block",
         lambda a: not a["IS_LOCAL"] and _cdiv(a["V"], a["BV"]) >= 2,
         why="the state pass's V block (impl/kda.py _state_config) covers V <= 32, every head dim the CPU "
             "draws; the full geometry (V = 128) splits it on a GPU (scripts/gpu_kernel_paths.sh)"),
    Path("kda_state_chunked_fwd_kernel", "boundary states stored", lambda a: a["STORE_BOUNDARY"],
         by=("kda.chunked", "kda.causal")),
    Path("kda_state_chunked_fwd_kernel", "boundary states not asked for",
         lambda a: not a["IS_LOCAL"] and not a["STORE_BOUNDARY"], by=("kda.sublayer", "kda.paths", "kda.packed")),
    Path("kda_state_chunked_fwd_kernel", "final state stored", lambda a: a["STORE_FINAL"],
         by=("kda.chunked", "kda.causal", "kda.sublayer", "kda.paths", "kda.packed")),
    Path("kda_state_chunked_fwd_kernel", "packed documents (cu_seqlens)", lambda a: a["IS_VARLEN"],
         by=("kda.chunked", "kda.causal", "kda.packed")),
    Path("kda_state_chunked_fwd_kernel", "a zero-length document",
         lambda a: a["IS_VARLEN"] and 0 in _rows(a), by=("kda.chunked", "kda.causal", "kda.packed")),
    Path("kda_state_chunked_fwd_kernel", "several chunks in one program", _chunks_in_a_program,
         by=("kda.chunked", "kda.causal", "kda.sublayer", "kda.packed")),
    Path("kda_state_chunked_fwd_kernel", "a partial last chunk (no boundary state for it)",
         lambda a: a["STORE_BOUNDARY"] and any(n % a["BT"] for n in _rows(a)), by=("kda.chunked", "kda.causal")),
    Path("kda_state_chunked_fwd_kernel", "tf32 dots", lambda a: a["PRECISION"] == "tf32", why=GPU_BF16),
    Path("kda_combine_chunked_fwd_kernel", "segment starts from a given state", lambda a: a["USE_INITIAL_STATE"],
         by=("kda.chunked", "kda.causal", "kda.sublayer", "kda.paths")),
    Path("kda_combine_chunked_fwd_kernel", "segment starts from zero", lambda a: not a["USE_INITIAL_STATE"],
         by=("kda.chunked", "kda.sublayer")),
    Path("kda_combine_chunked_fwd_kernel", "three or more segments", lambda a: a["NSEG"] >= 3,
         by=("kda.chunked",)),
    # ---------------------------------------------------------------- KDA token loop and fused decode
    Path("kda_recurrent_fused_fwd_kernel", "dense rows", lambda a: not a["IS_VARLEN"],
         by=("kda.recurrent", "kda.causal")),
    Path("kda_recurrent_fused_fwd_kernel", "packed documents (cu_seqlens)", lambda a: a["IS_VARLEN"],
         by=("kda.recurrent", "kda.causal")),
    Path("kda_recurrent_fused_fwd_kernel", "a zero-length document",
         lambda a: a["IS_VARLEN"] and 0 in _rows(a), by=("kda.recurrent", "kda.causal")),
    Path("kda_recurrent_fused_fwd_kernel", "from a given state", lambda a: a["USE_INITIAL_STATE"],
         by=("kda.recurrent", "kda.causal")),
    Path("kda_recurrent_fused_fwd_kernel", "from zero", lambda a: not a["USE_INITIAL_STATE"],
         by=("kda.recurrent", "kda.causal")),
    Path("kda_recurrent_fused_fwd_kernel", "a second V block", lambda a: _cdiv(a["V"], a["BV"]) >= 2,
         by=("kda.recurrent", "kda.causal")),
    Path("kda_decode_fused_fwd_kernel", "bounded gate (lower_bound · sigmoid)", lambda a: a["USE_LOWER_BOUND"],
         by=("kda.decode", "kda.paths")),
    Path("kda_decode_fused_fwd_kernel", "softplus gate (no lower bound)", lambda a: not a["USE_LOWER_BOUND"],
         by=("kda.decode",)),
    Path("kda_decode_fused_fwd_kernel", "value blocks unrolled", lambda a: a["NUM_STAGES"] == 0,
         by=("kda.decode", "kda.paths")),
    Path("kda_decode_fused_fwd_kernel", "value blocks in a pipelined loop", lambda a: a["NUM_STAGES"] >= 1,
         why="a benchmark sweep option (gate/bench_kda.py num_stages); `decode` unrolls"),
    Path("kda_decode_fused_fwd_kernel", "a second value block", lambda a: _cdiv(a["K"], a["BV"]) >= 2,
         by=("kda.decode", "kda.paths")),
    Path("kda_decode_fused_fwd_kernel", "a head's value blocks over several programs (the last to arrive writes "
         "the window)", lambda a: a["VS"] > 1, by=("kda.decode", "kda.paths")),
    Path("kda_decode_fused_fwd_kernel", "a head in one program", lambda a: a["VS"] == 1, by=("kda.decode", "kda.paths")),
    Path("kda_decode_fused_fwd_kernel", "a head dim narrower than its tile (masked lanes)",
         lambda a: a["K"] < a["BK"], by=("kda.decode", "kda.paths")),
    # ---------------------------------------------------------------- DSA indexer pooled keys
    Path("dsa_pool_fwd_kernel", "a second block of pools", lambda a: _cdiv(a["NP"], a["BPL"]) >= 2,
         by=("dsa.index",)),
    Path("dsa_pool_fwd_kernel", "a pool cut by the cache's end (members past T)",
         lambda a: bool(((_ints(a["first"]) + int(a["NP"]) * a["M"]) > int(a["T"])).any()), by=("dsa.index",)),
    Path("dsa_pool_fwd_kernel", "a row with no real token (every pool empty: K̄ 0)",
         lambda a: bool((_ints(a["first"]) >= int(a["T"])).any()),
         why="a row of pads only; tests/test_dsa_pool.py draws it against the oracle (the model's rows each hold "
             "a real token)"),
    Path("dsa_pool_fwd_kernel", "a pad inside a pool (a mask hole: the pool incomplete)", _pool_hole, by=("dsa.index",)),
    Path("dsa_pool_fwd_kernel", "a pool size not a power of two (masked member lanes)", lambda a: a["M"] < a["BM"],
         why="the tiny and full geometries' P_k is 4; tests/test_dsa_pool.py draws P_k = 3 and 1 against the oracle"),
    Path("dsa_pool_fwd_kernel", "an index head dim narrower than its tile", lambda a: a["K"] < a["BK"],
         by=("dsa.index",)),
    # ---------------------------------------------------------------- DSA pooled-key cache: append, read
    Path("dsa_pool_append_kernel", "a second block of new rows", lambda a: _cdiv(int(a["T"]) - int(a["T0"]), a["BR"]) >= 2,
         by=("mla.paths", "dsa.pooled")),
    Path("dsa_pool_append_kernel", "rows appended after cached ones (a pooled cache reused)", lambda a: int(a["T0"]) > 0,
         by=("mla.paths", "model.paths", "dsa.pooled")),
    Path("dsa_pool_append_kernel", "a pool ending on a call's first new row", _pool_ends_at_t0,
         by=("dsa.pooled",)),
    Path("dsa_pool_append_kernel", "a row anchored after position 0 (left padding)",
         lambda a: bool(((_ints(a["first"]) > 0) & (_ints(a["first"]) < int(a["T"]))).any()),
         by=("mla.paths", "model.paths", "dsa.pooled")),
    Path("dsa_pool_append_kernel", "a row with no real token (no pool ends)",
         lambda a: bool((_ints(a["first"]) >= int(a["T"])).any()),
         why="a row of pads only; tests/test_dsa_pooled.py draws it against the oracle"),
    Path("dsa_pool_append_kernel", "a pad inside a pool (a mask hole: no pool flagged there)", _pool_hole,
         by=("dsa.pooled",)),
    Path("dsa_pool_append_kernel", "a pool size not a power of two (masked member lanes)", lambda a: a["M"] < a["BM"],
         why="the tiny and full geometries' P_k is 4; tests/test_dsa_pooled.py draws P_k = 3 and 1 against the oracle"),
    Path("dsa_pool_append_kernel", "an index head dim narrower than its tile", lambda a: a["K"] < a["BK"],
         by=("mla.paths", "model.paths")),
    Path("dsa_pool_read_kernel", "a second block of pools", lambda a: _cdiv(a["NP"], a["BPL"]) >= 2,
         by=("mla.paths", "dsa.pooled")),
    Path("dsa_pool_read_kernel", "a pool cut by the cache's end (its last member past T)",
         lambda a: bool(((_ints(a["first"]) + int(a["NP"]) * a["M"]) > int(a["T"])).any()),
         by=("mla.paths", "model.paths", "dsa.pooled")),
    Path("dsa_pool_read_kernel", "a row with no real token (every pool invalid)",
         lambda a: bool((_ints(a["first"]) >= int(a["T"])).any()),
         why="a row of pads only; tests/test_dsa_pooled.py draws it against the oracle"),
    Path("dsa_pool_read_kernel", "a pool size not a power of two (masked member lanes)", lambda a: a["M"] < a["BM"],
         why="the tiny and full geometries' P_k is 4; tests/test_dsa_pooled.py draws P_k = 3 and 1 against the oracle"),
    Path("dsa_pool_read_kernel", "an index head dim narrower than its tile", lambda a: a["K"] < a["BK"],
         by=("mla.paths", "model.paths")),
    # ---------------------------------------------------------------- DSA indexer scores
    Path("dsa_score_fwd_kernel", "a second query tile", lambda a: _cdiv(a["S"], a["BT"]) >= 2,
         by=("dsa.index", "dsa.index_paged")),
    Path("dsa_score_fwd_kernel", "a second pool tile", lambda a: _cdiv(a["P"], a["BP"]) >= 2,
         by=("dsa.index", "dsa.index_paged")),
    Path("dsa_score_fwd_kernel", "a pool not yet visible to a query (masked)",
         lambda a: bool((_ints(a["pool_last"]) > int(a["offset"])).any()), by=("dsa.index", "dsa.index_paged")),
    Path("dsa_score_fwd_kernel", "a pool incomplete in one row (masked there)",
         lambda a: bool((_ints(a["pool_last"]) < 0).any()), by=("dsa.index", "dsa.index_paged")),
    Path("dsa_score_fwd_kernel", "an index head dim narrower than its tile", lambda a: a["K"] < a["BK"],
         by=("dsa.index", "dsa.index_paged")),
    Path("dsa_score_fwd_kernel", "tf32 dots", lambda a: a["PRECISION"] == "tf32", why=GPU_BF16),
    # ---------------------------------------------------------------- sparse absorbed MLA
    Path("mla_sparse_absorbed_fwd_kernel", "the whole selection in one program", lambda a: not a["SPLIT"],
         by=("mla.absorbed", "mla.paths", "mla.causal", "mla.absorbed_paged")),
    Path("mla_sparse_absorbed_fwd_kernel", "selection splits (flash-decoding)", lambda a: a["SPLIT"],
         by=("mla.absorbed", "mla.paths", "mla.causal", "mla.absorbed_paged")),
    Path("mla_sparse_absorbed_fwd_kernel", "contiguous cache", lambda a: not a["PAGED"],
         by=("mla.absorbed", "mla.paths", "mla.causal")),
    Path("mla_sparse_absorbed_fwd_kernel", "paged cache (block table)", lambda a: a["PAGED"],
         by=("mla.absorbed_paged",)),
    Path("mla_sparse_absorbed_fwd_kernel", "paged cache with selection splits", lambda a: a["PAGED"] and a["SPLIT"],
         by=("mla.absorbed_paged",)),
    Path("mla_sparse_absorbed_fwd_kernel", "valid entries in a second block of a split (online-softmax rescale)",
         lambda a: bool((_selection_blocks(a).sum(-1) >= 2).any()),
         by=("mla.absorbed", "mla.paths", "mla.absorbed_paged")),
    Path("mla_sparse_absorbed_fwd_kernel", "an empty split (log-sum-exp -inf)",
         lambda a: a["SPLIT"] and bool((~_selection_blocks(a).any(-1)).any()),
         by=("mla.absorbed", "mla.paths", "mla.causal", "mla.absorbed_paged")),
    Path("mla_sparse_absorbed_fwd_kernel", "a query row with no valid entry (output 0)",
         lambda a: bool((~_selection_blocks(a).any((1, 2))).any()),
         by=("mla.absorbed", "mla.paths", "mla.causal", "mla.absorbed_paged")),
    Path("mla_sparse_absorbed_fwd_kernel", "fewer heads than the block (masked rows)", lambda a: a["H"] % a["BH"] != 0,
         by=("mla.absorbed", "mla.paths", "mla.causal", "mla.absorbed_paged")),
    Path("mla_sparse_absorbed_fwd_kernel", "a second head block", lambda a: _cdiv(a["H"], a["BH"]) >= 2,
         why="the tiny geometry's 2 MLA heads fit one block of 16; the full geometry's 64 heads take several "
             "on a GPU (scripts/gpu_kernel_paths.sh)"),
    Path("mla_sparse_absorbed_fwd_kernel", "tf32 dots", lambda a: a["PRECISION"] == "tf32", why=GPU_BF16),
    Path("mla_sparse_absorbed_fwd_kernel", "the next block's entries loaded a block ahead (step 38)",
         lambda a: a.get("PREFETCH", False), by=("mla.absorbed", "mla.paths", "mla.causal", "mla.absorbed_paged")),
    Path("mla_sparse_absorbed_fwd_kernel", "each block's entries loaded in its own iteration (before step 38)",
         lambda a: not a.get("PREFETCH", False),
         why="ours before step 38 (config prefetch=False): the same bits as ours (tests/test_mla_prefetch.py, on "
             "the CPU and the GPU), timed beside it by scripts/mla_prefetch_probe.py"),
    Path("mla_merge_kernel", "two splits merged", lambda a: a["NS"] == 2,
         by=("mla.absorbed", "mla.paths", "mla.causal", "mla.absorbed_paged")),
    Path("mla_merge_kernel", "three or more splits merged", lambda a: a["NS"] >= 3, by=("mla.absorbed",)),
    Path("mla_merge_kernel", "an empty split merged (weight 0)",
         lambda a: bool(np.isneginf(a["lse"].detach().to("cpu").numpy()).any()),
         by=("mla.absorbed", "mla.paths", "mla.causal", "mla.absorbed_paged")),
    Path("mla_merge_kernel", "two or more tiles of splits", lambda a: a["NS"] > a["BJ"], why=MLA_MERGE_TILES),
    Path("mla_merge_kernel", "the rank in two or more chunks", lambda a: a["R"] > a["BR"], why=MLA_MERGE_CHUNKS),
    Path("mla_merge_kernel", "the splits' log-sum-exps and partials in one round of loads (step 46)",
         lambda a: a.get("ONE_ROUND", False),
         why="only issue 14 step 46's candidate launches it (impl.candidates.mla_merge_one_round: ours' "
             "MERGE_ONE_ROUND is False); tests/test_mla_merge.py holds it bit for bit against ours' two-round merge "
             "on the CPU (1-16 splits, empty splits, a row with no valid entry) and on a GPU in bf16"),
    Path("mla_merge_kernel", "launched as a programmatic dependent of the sparse kernel, waiting for it (step 60)",
         lambda a: a.get("PDL", False), why=MLA_PDL),
    Path("mla_sparse_absorbed_fwd_kernel", "its programs let the merge's grid start early (step 60)",
         lambda a: a.get("DEPENDENTS", False), why=MLA_PDL),
    Path("mla_merge_uv_kernel", "a second block of the rank", lambda a: a["R"] > a["BK"], why=MLA_MERGE_UV_CANDIDATE),
    Path("mla_merge_uv_kernel", "two or more tiles of splits", lambda a: a["NS"] > a["BJ"],
         why=MLA_MERGE_UV_CANDIDATE),
    # ---------------------------------------------------------------- paged caches
    Path("paged_gather_fwd_kernel", "a second row tile", lambda a: _cdiv(a["T"], a["BT"]) >= 2,
         by=("dsa.index_paged",)),
    Path("paged_gather_fwd_kernel", "a second feature block", lambda a: _cdiv(a["F"], a["BF"]) >= 2,
         by=("dsa.index_paged",)),
    Path("paged_gather_fwd_kernel", "rows shorter than the longest (left offsets)",
         lambda a: bool((_ints(a["offsets"]) > 0).any()), by=("dsa.index_paged",)),
    Path("paged_gather_fwd_kernel", "a row ending mid-page",
         lambda a: bool((_ints(a["lengths"]) % int(a["PAGE"]) != 0).any()), by=("dsa.index_paged",)),
    # ---------------------------------------------------------------- mHC
    Path("mhc_coeff_partial_fwd_kernel", "a second K-chunk (the projections split along N·D)",
         lambda a: _cdiv(a["N"] * a["D"], a["BK"]) >= 2, by=("mhc.coefficients", "mhc.write_back")),
    Path("mhc_coeff_partial_fwd_kernel", "a second sub-block of a chunk", lambda a: a["BK"] // a["BKS"] >= 2,
         why="a launch option: the interpreter runs a chunk in one sub-block (the GPU runs the tl.dot partial "
             "below); tests/test_mhc_kernels.py test_sub_blocks_of_a_chunk runs 16-wide sub-blocks on the CPU "
             "against the oracle"),
    Path("mhc_coeff_partial_dot_fwd_kernel", "a second K-chunk", lambda a: _cdiv(a["N"] * a["D"], a["BK"]) >= 2,
         why=MHC_DOT),
    Path("mhc_coeff_partial_dot_fwd_kernel", "a second sub-block of a chunk", lambda a: a["BK"] // a["BKS"] >= 2,
         why=MHC_DOT),
    Path("mhc_coeff_partial_dot_fwd_kernel", "tf32x3 dots", lambda a: a["PRECISION"] == "tf32x3", why=MHC_DOT),
    Path("mhc_coeff_partial_dot_fwd_kernel", "IEEE float32 (FMA) dots", lambda a: a["PRECISION"] == "ieee",
         why="a launch option timed by scripts/mhc_variants.py (slower on the H200: docs/optimization_log.md "
             "step 6); tests/test_mhc_kernels.py test_the_gpus_dot_partial runs it on the CPU"),
    Path("mhc_coeff_finish_fwd_kernel", "partials of several chunks summed", lambda a: a["NS"] >= 2,
         by=("mhc.coefficients", "mhc.write_back")),
    Path("mhc_coeff_finish_fwd_kernel", "a second D block (collapse)", lambda a: _cdiv(a["D"], a["BD"]) >= 2,
         by=("mhc.coefficients", "mhc.write_back")),
    Path("mhc_coeff_finish_fwd_kernel", "a partial D block", lambda a: a["D"] % a["BD"] != 0,
         by=("mhc.coefficients", "mhc.write_back")),
    Path("mhc_coeff_finish_fwd_kernel", "one Sinkhorn pass", lambda a: a["iters"] == 1,
         by=("mhc.coefficients", "mhc.write_back")),
    Path("mhc_coeff_finish_fwd_kernel", "Sinkhorn iterations after the first", lambda a: a["iters"] >= 2,
         by=("mhc.coefficients", "mhc.write_back")),
    Path("mhc_write_back_fwd_kernel", "float32 arithmetic", lambda a: str(a["ACC"]) == _F32,
         by=("mhc.coefficients", "mhc.write_back")),
    Path("mhc_write_back_fwd_kernel", "float64 arithmetic (float64 streams)", lambda a: str(a["ACC"]) != _F32,
         why="float64 streams exist only in a float64 run (`glmgate gate --dtype float64`); "
             "tests/test_mhc_kernels.py test_write_back_float64_streams holds it on the CPU"),
    Path("mhc_write_back_fwd_kernel", "a second D block", lambda a: _cdiv(a["D"], a["BD"]) >= 2,
         by=("mhc.coefficients", "mhc.write_back")),
    # ---------------------------------------------------------------- MoE router
    Path("moe_router_fwd_kernel", "normalized mixture weights", lambda a: a["NORM"],
         by=("moe.route", "moe.forward")),
    Path("moe_router_fwd_kernel", "unnormalized mixture weights", lambda a: not a["NORM"],
         by=("moe.route", "moe.forward")),
    Path("moe_router_fwd_kernel", "one group", lambda a: a["G"] == 1, by=("moe.route", "moe.forward")),
    Path("moe_router_fwd_kernel", "groups, some dropped", lambda a: a["TOPK_GROUP"] < a["G"],
         by=("moe.route", "moe.forward")),
    Path("moe_router_fwd_kernel", "several picks per token", lambda a: a["TOP_K"] >= 2,
         by=("moe.route", "moe.forward")),
    Path("moe_router_fwd_kernel", "pad expert lanes", lambda a: a["E"] < a["BE"], by=("moe.route", "moe.forward")),
    Path("moe_router_fwd_kernel", "a second token tile", lambda a: _cdiv(a["N"], a["BT"]) >= 2,
         by=("moe.route", "moe.forward")),
)


def _grouped_gemm(kernel: str, k: str, n: str) -> tuple[Path, ...]:
    """The paths of one grouped MoE GEMM kernel whose reduction runs over `k` and whose columns over `n`."""
    return (
        Path(kernel, "bf16 / float32 expert weights", lambda a: not a["NVFP4"], by=("moe.forward", "nvfp4.gate")),
        Path(kernel, "NVFP4 W4A16 expert weights", lambda a: a["NVFP4"] and not a["W4A4"], by=("nvfp4.gate",)),
        Path(kernel, "NVFP4 W4A4 (activations quantized in the prologue)", lambda a: a["W4A4"], by=("nvfp4.gate",)),
        Path(kernel, "linear block scales", lambda a: a["NVFP4"] and not a["SWIZZLED"], by=("nvfp4.gate",)),
        Path(kernel, "128x4-swizzled block scales", lambda a: a["SWIZZLED"], by=("nvfp4.gate",)),
        Path(kernel, "NVFP4 interleaved weight tiles (one dot per K step)", lambda a: a["NVFP4"] and not a["SPLIT"],
             by=("nvfp4.gate",)),
        Path(kernel, "NVFP4 split weight tiles (even / odd columns, two half-dots per K step)",
             lambda a: a["SPLIT"], by=("nvfp4.gate",)),
        Path(kernel, "NVFP4 split tiles dequantized two codes per 32-bit instruction (inline PTX)",
             lambda a: bool(a.get("PAIRS")), why=GPU_PTX),
        Path(kernel, "a second reduction tile", lambda a: _cdiv(a[k], a["BK"]) >= 2,
             by=("moe.forward", "nvfp4.gate")),
        Path(kernel, "a partial reduction tile", lambda a: a[k] % a["BK"] != 0, by=("moe.forward", "nvfp4.gate")),
        Path(kernel, "a second column tile", lambda a: _cdiv(a[n], a["BN"]) >= 2, by=("moe.forward", "nvfp4.gate")),
        Path(kernel, "an expert over two row blocks", lambda a: _doubled(_expert_blocks(a)),
             by=("moe.forward", "nvfp4.gate")),
        Path(kernel, "a spare block (no expert)", lambda a: bool((_expert_blocks(a) < 0).any()),
             by=("moe.forward", "nvfp4.gate")),
        Path(kernel, "pad rows in an expert's block", _pad_rows, by=("moe.forward", "nvfp4.gate")),
        Path(kernel, "16-row blocks (<= 16 pairs an expert: decode tiles)", lambda a: a["BM"] <= 16,
             by=("moe.forward", "nvfp4.gate")),
        Path(kernel, "64- or 128-row blocks (GPU tiles: prefill past 16 pairs an expert, W4A4 at every size)",
             lambda a: a["BM"] >= 64,
             why=GPU_PREFILL_TILES),
        Path(kernel, "bf16 / fp16 dots", lambda a: str(a["DOT"]) != _F32, why=GPU_BF16),
        Path(kernel, "tf32 dots", lambda a: a["PRECISION"] == "tf32", why=GPU_BF16),
    )


PATHS += _grouped_gemm("moe_gate_up_fwd_kernel", "D", "I") + _grouped_gemm("moe_down_fwd_kernel", "I", "D") + (
    Path("moe_align_fwd_kernel", "pad expert lanes", lambda a: a["E"] < a["BE"], by=("moe.forward",)),
    Path("moe_align_fwd_kernel", "a second chunk of pairs", lambda a: int(a["P"]) > a["BP"], by=("moe.forward",)),
    Path("moe_align_fwd_kernel", "an expert's pairs in two chunks (the carried count)", _expert_in_two_chunks,
         by=("moe.forward",)),
    Path("moe_align_fwd_kernel", "a second pass of slots", lambda a: int(a["NB"]) * a["BM"] > a["BS"],
         by=("moe.forward",)),
    Path("moe_align_fwd_kernel", "pad slots written first, the pairs after a barrier", lambda a: a["FILL"],
         by=("moe.forward",)),
    Path("moe_align_fwd_kernel", "pad slots found by a last pass (the form before issue 14 step 13)",
         lambda a: not a["FILL"],
         why="only impl.candidates.moe_decode_step12 (the peer step 13 is gated and timed against) launches it; "
             "tests/test_moe_align.py holds it on the CPU, bit for bit against impl.moe.align_torch"),
    Path("moe_align_fwd_kernel", "a second pass of blocks", lambda a: int(a["NB"]) > a["BS"],
         why="needs more than 64 blocks (E = 288 at decode on the GPU); the matrix's CPU experts are 8 or 32, so "
             "tests/test_moe_align.py draws E = 288 on the CPU, bit for bit against impl.moe.align_torch"),
    Path("moe_combine_fwd_kernel", "several slots", lambda a: a["TOP_K"] >= 2, by=("moe.forward",)),
    Path("moe_combine_fwd_kernel", "one slot (the shared expert, the dense MLP)", lambda a: a["TOP_K"] == 1,
         by=("moe.forward",)),
    Path("moe_combine_fwd_kernel", "a second column tile", lambda a: int(a["D"]) > a["BD"],
         why="needs D > 1024 (the full geometry's 4096, on the GPU); tests/test_moe_align.py draws D up to 2100 on "
             "the CPU against the slot-order sum"),
    # ---------------------------------------------------------------- DSA indexer selection
    Path("dsa_select_fwd_kernel", "the pools in one tile, held across the threshold passes", lambda a: a["ONE"],
         by=("dsa.index", "mla.paths")),
    Path("dsa_select_fwd_kernel", "the pools over several tiles, re-read each pass (ranks carried across)",
         lambda a: not a["ONE"], by=("dsa.index",)),
    Path("dsa_select_fwd_kernel", "digit counts packed in one int64 (2-bit digits: the GPU's form)",
         lambda a: a["PACKED"], why=GPU_SELECT),
    Path("dsa_select_fwd_kernel", "digit counts as a [BS, BP, 2^RB] tile (8-bit digits: the interpreter's form)",
         lambda a: not a["PACKED"], by=("dsa.index", "mla.paths")),
    Path("dsa_select_fwd_kernel", "the tail appended", lambda a: a["TAIL"], by=("dsa.index", "mla.paths")),
    Path("dsa_select_fwd_kernel", "no tail (P_k = 1)", lambda a: not a["TAIL"], by=("dsa.index",)),
    Path("dsa_select_fwd_kernel", "a second query block", lambda a: _cdiv(a["S"], a["BS"]) >= 2,
         by=("dsa.index", "mla.paths")),
    Path("dsa_select_fwd_kernel", "a pad query (selects nothing)", _select_pad_query, by=("dsa.index",)),
    Path("dsa_select_fwd_kernel", "a query with fewer candidates than k_sel", _select_short, by=("dsa.index",)),
    Path("dsa_select_fwd_kernel", "a second block of the -1 fill", lambda a: _cdiv(a["W"], a["BW"]) >= 2,
         by=("dsa.index", "mla.paths")),
    # ---------------------------------------------------------------- the norms (ours since issue 14 step 14)
    Path("norm_fwd_kernel", "the decoder's norm (weight times the normalized row)", lambda a: a["MODE"] == 0,
         by=("model.paths",)),
    Path("norm_fwd_kernel", "MLA's norm (normalized row in x's dtype, then the weight)", lambda a: a["MODE"] == 1,
         by=("mla.paths",)),
    Path("norm_fwd_kernel", "KDA's gated norm (times sigmoid(zg))", lambda a: a["MODE"] == 2, by=("kda.sublayer",)),
    Path("norm_fwd_kernel", "a block of rows past the last (masked rows)", lambda a: a["N"] % a["BM"] != 0,
         by=("kda.sublayer",)),
    Path("nvfp4_qdq_fwd_kernel", "the W4A4 prologue alone", lambda a: True,
         why="`impl.nvfp4.qdq_activation` launches it, which the matrix calls only for a candidate without a fused "
             "NVFP4 path (our gate_up / down kernels run the same prologue inline); tests/test_w4a4.py holds it "
             "bit-exact on the CPU"),
)

# per kernel, the constexpr parameters that choose no code of their own: dimensions, tile sizes and plain
# values (their loops are paths above); every other constexpr must be read by one of the kernel's paths
KERNELS: dict[str, tuple[str, ...]] = {
    "kda_intra_chunked_fwd_kernel": ("H", "K", "V", "BT", "BC", "BK", "BV",
                                     "ANCHOR",    # the decay anchor row: 0 (a mutant plants 7)
                                     "OFFSET64"),  # 64-bit element offsets: always (a mutant plants 32-bit)
    "kda_intra_kk_fwd_kernel": ("H", "K", "BT", "BC", "BK", "OFFSET64"),
    "kda_chunk_cumsum_fwd_kernel": ("H", "BT", "OFFSET64"),
    "kda_intra_wu_fwd_kernel": ("H", "K", "V", "BT", "BC", "BK", "BV", "OFFSET64"),
    "kda_intra_diag_fwd_kernel": ("H", "K", "BT", "BC", "BK", "OFFSET64"),
    "kda_intra_offdiag_fwd_kernel": ("H", "K", "BT", "BC", "BK", "OFFSET64"),
    "kda_intra_wu_split_fwd_kernel": ("H", "K", "V", "BT", "BC", "BK", "BV", "OFFSET64"),
    "kda_state_chunked_fwd_kernel": ("H", "K", "V", "BT", "BK", "BV", "VS", "BC"),
    "kda_combine_chunked_fwd_kernel": ("H", "K", "V", "BK", "BV"),
    "kda_recurrent_fused_fwd_kernel": ("H", "K", "V", "BK", "BV"),
    "kda_decode_fused_fwd_kernel": ("H", "K", "W", "BK", "BV", "BW"),
    "dsa_pool_fwd_kernel": ("K", "M", "BPL", "BM", "BK"),
    "dsa_pool_append_kernel": ("K", "M", "BR", "BM", "BK"),
    "dsa_pool_read_kernel": ("K", "M", "BPL", "BM", "BK"),
    "dsa_score_fwd_kernel": ("H", "K", "BT", "BP", "BK"),
    "dsa_select_fwd_kernel": ("M", "BS", "BP", "BM", "BW",
                              "RB"),      # the search step: the same code at 1 to 32 bits a pass
    "mla_sparse_absorbed_fwd_kernel": ("H", "R", "BH", "BW", "BR", "PAGE"),
    "mla_merge_kernel": ("H", "R", "BR", "BJ"),
    "mla_merge_uv_kernel": ("H", "R", "V", "BK", "BV", "BJ"),
    "paged_gather_fwd_kernel": ("PAGE", "BT", "BF"),
    "mhc_coeff_partial_fwd_kernel": ("N", "D", "BR", "BN", "BK", "BKS"),
    "mhc_coeff_partial_dot_fwd_kernel": ("N", "D", "BR", "BM", "BK", "BKS"),
    "mhc_coeff_finish_fwd_kernel": ("N", "D", "BR", "BN", "BS", "BD"),
    "mhc_write_back_fwd_kernel": ("N", "D", "BR", "BN", "BD"),
    "moe_router_fwd_kernel": ("E", "G", "TOPK_GROUP", "TOP_K", "BT", "BE", "BG", "BKE"),
    "moe_gate_up_fwd_kernel": ("D", "I", "TOP_K", "BM", "BN", "BK"),
    "moe_down_fwd_kernel": ("D", "I", "BM", "BN", "BK"),
    "nvfp4_qdq_fwd_kernel": ("K", "BM", "BK"),
    "moe_align_fwd_kernel": ("E", "BM", "BE", "BP", "BS",
                             "IDX"),      # the bookkeeping's int type: the same code in int32 or int64
    "moe_combine_fwd_kernel": ("TOP_K", "BT", "BD"),
    "norm_fwd_kernel": ("BM", "BD"),
}


def reads(fn) -> set[str]:
    """The parameter names a predicate reads: the string constants of its code, and of the functions of
    this module it calls (one level of helpers and their own helpers)."""
    out, seen, todo = set(), set(), [fn]
    while todo:
        f = todo.pop()
        code = getattr(f, "__code__", None)
        if code is None or code in seen:
            continue
        seen.add(code)
        stack = [code]
        while stack:
            c = stack.pop()
            out.update(x for x in c.co_consts if isinstance(x, str))
            stack.extend(x for x in c.co_consts if isinstance(x, types.CodeType))
            todo.extend(globals()[n] for n in c.co_names if isinstance(globals().get(n), types.FunctionType))
    return out


def unlisted(kernels: dict) -> list[str]:
    """What the table misses of `kernels` ({name: @triton.jit kernel}, impl.launches.kernels()): a kernel
    with no KERNELS entry or no path, an entry or a path naming no kernel, a constexpr parameter that is
    neither a size of its kernel nor read by one of its paths' predicates."""
    from impl.launches import constexprs

    out = [f"{n}: a kernel of impl/kernels/ with no entry in KERNELS" for n in kernels if n not in KERNELS]
    out += [f"{n}: a KERNELS entry naming no kernel of impl/kernels/" for n in KERNELS if n not in kernels]
    out += [f"{p.kernel}: path {p.name!r} of no kernel of impl/kernels/" for p in PATHS if p.kernel not in kernels]
    for name, k in kernels.items():
        mine = [p for p in PATHS if p.kernel == name]
        if not mine:
            out.append(f"{name}: no path declared")
        read = set().union(*(reads(p.ran) for p in mine)) if mine else set()
        out += [f"{name}: constexpr {c} is neither a size (KERNELS) nor read by one of its paths"
                for c in constexprs(k) if c not in KERNELS.get(name, ()) and c not in read]
    return out


class Coverage:
    """Launches and path hits seen while recording: per kernel the launches, per (kernel, path) the
    launches that took it."""

    def __init__(self):
        self.launches: collections.Counter = collections.Counter()
        self.hits: collections.Counter = collections.Counter()
        self._by_kernel = collections.defaultdict(list)
        for p in PATHS:
            self._by_kernel[p.kernel].append(p)

    def on_launch(self, kernel: str, args: dict) -> None:
        self.launches[kernel] += 1
        for p in self._by_kernel.get(kernel, ()):
            if p.ran(args):
                self.hits[(p.kernel, p.name)] += 1

    def reached(self, p: Path) -> bool:
        return self.hits[(p.kernel, p.name)] > 0


@contextlib.contextmanager
def recording() -> Iterator[Coverage]:
    """Within the block, every launch of a kernel of impl/kernels/ is judged against PATHS."""
    from impl import launches

    cov = Coverage()
    with launches.watching(cov.on_launch):
        yield cov


def expected(check: str) -> list[Path]:
    """The paths `check`'s ci examples must reach on the interpreter."""
    return [p for p in PATHS if check in p.by]


def missing(cov: Coverage, check: str) -> list[Path]:
    """The paths `check` declares it reaches that the recorded run did not."""
    return [p for p in expected(check) if not cov.reached(p)]


def describe(paths) -> str:
    """One line per path: "kernel: path"."""
    return "\n".join(f"  {p.kernel}: {p.name}" for p in paths)
