"""KDA mutants: each a TorchKDA (impl/baseline/kda.py) overriding ONE small method, or a TritonKDA (our
Triton namespace as a class) overriding one function to change one kernel option."""
from __future__ import annotations

import functools
import types

import torch
import torch.nn.functional as F
import triton

import impl.kda as ik
import impl.norm as inorm
from impl.baseline.kda import TorchKDA, compute_dtype
from impl.graph import KDADecodeStep
from impl.mutants.catalogue import edited_helper, kernel_edited, mutant
from oracle.types import KDAState

# (same-width integer view, the bit an unordered reduction leaves nondeterministic): the last one of
# the output dtype, or of the float32 accumulator when the output is wider (float64: 52 - 23 = bit 29)
_LAST_BIT = {torch.bfloat16: (torch.int16, 1), torch.float16: (torch.int16, 1), torch.float32: (torch.int32, 1),
             torch.float64: (torch.int64, 1 << 29)}


def _carry(seqs, initial, zero, run):
    """Documents of one packed row start from the previous document's final state; batch rows
    (different b) still start from their own."""
    finals, row = [], None
    for i, (b, s, e) in enumerate(seqs):
        if b != row:
            state, row = (zero if initial is None else initial[i].to(zero.dtype)), b
        state = run(b, s, e, state)
        finals.append(state)
    return torch.stack(finals)


@mutant("kda.recurrent", "output")
class DecayAfterCorrection(TorchKDA):
    """Corrects with the undecayed state, then decays: M <- D((I - βkkᵀ)M + βkvᵀ)."""

    def _step(self, M, q_t, k_t, v_t, g_t, beta_t):
        r = torch.einsum("hkv,hk->hv", M, k_t)
        M = M + k_t[..., None] * (beta_t[:, None] * (v_t - r))[:, None, :]
        M = torch.exp(g_t)[..., None] * M
        return torch.einsum("hkv,hk->hv", M, q_t), M


@mutant("kda.recurrent", "output")
class OutputBeforeUpdate(TorchKDA):
    """o_t is read from M_{t-1}, the state before token t's decay and correction."""

    def _step(self, M, q_t, k_t, v_t, g_t, beta_t):
        o = torch.einsum("hkv,hk->hv", M, q_t)
        return o, super()._step(M, q_t, k_t, v_t, g_t, beta_t)[1]


@mutant("kda.chunked", "output")
class TailChunkDropped(TorchKDA):
    """chunked skips the trailing partial chunk: zero outputs there, final state = last boundary."""

    def _chunks(self, q, k, v, g, beta, chunk):
        return [p for p in super()._chunks(q, k, v, g, beta, chunk) if p[0].shape[0] == chunk]


@mutant("kda.chunked", "final_state")
class PaddedStepsUpdateState(TorchKDA):
    """chunked pads to a multiple of L with beta 0.5 and k = last real k, so pads move the state."""

    def _chunks(self, q, k, v, g, beta, chunk):
        pad = -q.shape[0] % chunk
        if pad:
            q, v, g = (torch.cat([a, a.new_zeros(pad, *a.shape[1:])]) for a in (q, v, g))
            k = torch.cat([k, k[-1:].expand(pad, *k.shape[1:])])
            beta = torch.cat([beta, beta.new_full((pad, *beta.shape[1:]), 0.5)])
        return super()._chunks(q, k, v, g, beta, chunk)


@mutant("kda.paths", "output")
class ConvStateNotCarried(TorchKDA):
    """sublayer/decode treat the incoming conv window as zeros (a continuation restarts the conv)."""

    def conv(self, z, weight, conv_state=None, cu_seqlens=None):
        return super().conv(z, weight, None, cu_seqlens)


@mutant("kda.chunked", "output")
class StateLeakAcrossCuSeqlens(TorchKDA):
    """With cu_seqlens each document's recurrence starts from the previous document's final state."""

    def _documents(self, seqs, state, zero, run):
        return _carry(seqs, state, zero, run)


@mutant("kda.packed", "output")
class ConvSlidesAcrossDocuments(TorchKDA):
    """With cu_seqlens the conv window is not reset: a document sees the previous one's last inputs."""

    def _conv_documents(self, seqs, conv_state, zero, run):
        return _carry(seqs, conv_state, zero, run)


@mutant("kda.sublayer", "output")
class SoftplusGate(TorchKDA):
    """The softplus gate -exp(A_log)·softplus(f) even when lower_bound is set."""

    def gate(self, f, A_log, lower_bound):
        return super().gate(f, A_log, None)


@mutant("kda.sublayer", "output")
class L2EpsOutsideSqrt(TorchKDA):
    """L2 norm as x / max(sqrt(Σx²), sqrt(1e-6)): eps clamps the norm instead of sitting in the sqrt."""

    def l2norm(self, x):
        x = x.to(compute_dtype(x.dtype))
        return x / torch.sqrt(torch.sum(x * x, dim=-1, keepdim=True)).clamp(min=1e-3)


@mutant("kda.chunked", "final_state", dtype="float32")
class StateBf16AcrossChunks(TorchKDA):
    """chunked rounds the carried state to bfloat16 at every chunk boundary (contract: float32)."""

    # A float32 property (dtype="float32" above): the recurrent state is carried in float32 (SPEC §2).
    # In a bf16 run the state error of a CORRECT kernel is already dominated by the bf16-rounded inputs
    # and, for a GPU kernel, its bf16 operands inside the chunk (measured on the H200: our kernel's
    # final-state error ~3.4x the torch baseline's, more than one bf16 rounding of the state per chunk
    # adds), so no bf16 bound separates this bug from a correct kernel. In float32 a bf16 rounding is
    # 2^16 x the run's own, and the float32 contract catches it.

    def _chunk_step(self, q, k, v, g, beta, M):
        o, M = super()._chunk_step(q, k, v, g, beta, M)
        return o, M.to(torch.bfloat16).to(M.dtype)


@mutant("kda.sublayer", "output")
class QNotScaled(TorchKDA):
    """q is L2-normalised but not scaled by K^-1/2."""

    def _qk_norm(self, q, k):
        return self.l2norm(q), self.l2norm(k)


@mutant("kda.sublayer", "output")
class SiluGateNorm(TorchKDA):
    """The output norm gate is silu(z) instead of sigmoid(z) (the Qwen3-Next GDN form)."""

    def _norm_gate(self, zg):
        return F.silu(zg)


@mutant("kda.decode", "conv_state")
class DecodeWindowNotShifted(TorchKDA):
    """decode returns the incoming conv window unchanged: the new token never enters the window."""

    def decode(self, w, z, f, b, state):
        o, new = super().decode(w, z, f, b, state)
        return o, KDAState(new.recurrent, state.conv)


@mutant("kda.sublayer", "output")
class MaskIgnored(TorchKDA):
    """sublayer does not zero padded inputs, so left-padding tokens move the state (SPEC §6.1)."""

    def sublayer(self, w, x, state=None, mask=None, cu_seqlens=None):
        return super().sublayer(w, x, state, None, cu_seqlens)


@mutant("kda.rerun", "rerun")
class NondeterministicOutput(TorchKDA):
    """Each run flips the last mantissa bit of a random half of the sublayer output (an unordered atomic reduction)."""

    def sublayer(self, w, x, state=None, mask=None, cu_seqlens=None):
        y, s = super().sublayer(w, x, state, mask, cu_seqlens)
        # made on the output's own bits: noise added in float32 and cast back rounds away in bf16,
        # where a real race still shows as a last-bit difference
        bits, lsb = _LAST_BIT[y.dtype]
        flip = torch.randint(0, 2, y.shape, device=y.device, dtype=bits) * lsb
        return (y.contiguous().view(bits) ^ flip).view(y.dtype), s



class TritonKDA:
    """Our Triton kda namespace (impl/kda.py) as a class: the base of mutants that change one kernel
    option, so the planted bug is in the kernel the product runs, not in a torch re-implementation."""

    recurrent = staticmethod(ik.recurrent)
    chunked = staticmethod(ik.chunked)
    chunked_ex = staticmethod(ik.chunked_ex)
    decode = staticmethod(ik.decode)
    sublayer = staticmethod(ik.sublayer)
    BATCH_INVARIANT = ik.BATCH_INVARIANT
    decode_graph = staticmethod(ik.decode_graph)
    checkpoint = staticmethod(ik.checkpoint)


# float32: in bf16 the leak (last bits of float32 intermediate products) mostly vanishes in the rounding (not
# caught in 34 bf16 examples on the CPU)
@mutant("kda.causal", "causal", base="triton", dtype="float32")
class IntraAnchorMiddle(TritonKDA):
    """The whole-chunk intra kernel (intra="columns", ours before issue 14 step 26) anchors each sub-chunk's decay products on its row 7, so rows 0-6 depend on later gates."""

    def chunked(self, q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
        return ik._chunked(q, k, v, g, beta, state, chunk, cu_seqlens, boundary_states, intra="columns", anchor=7)


@mutant("kda.causal", "causal", base="triton", dtype="float32")
class IntraSplitAnchorMiddle(TritonKDA):
    """The split intra pass's diagonal-block kernel takes each 16-row block's row 7 as its decay reference instead of its first row, so rows 0-6 depend on later gates (fla-org/flash-linear-attention #1240 shipped that leak)."""

    def chunked(self, q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
        with kernel_edited(ik, "kda_intra_diag_fwd_kernel", "b_ref = tl.load(gc + s_row * K + o_k, mask=mask_k,",
                           "b_ref = tl.load(gc + (s_row + 7 * H) * K + o_k, mask=mask_k & (o_k * 0 + 7 < n_valid),"):
            return ik._chunked(q, k, v, g, beta, state, chunk, cu_seqlens, boundary_states, intra="split")


@functools.lru_cache(maxsize=None)
def _exp_without_log2e():
    """_exp whose flushed branch (ex2.approx.ftz, the GPU's) drops the log2(e) scale: 2^x for e^x (edited once,
    cached). The interpreter runs tl.exp, never this branch."""
    from impl.kernels import kda as kk
    return edited_helper(kk._exp, "[x * 1.4426950408889634]", "[x]")


# GPU only: FTZ is inline PTX, which the interpreter never runs (there the row factor is tl.exp's, ours' bits)
@mutant("kda.chunked", "output", base="triton", device="cuda")
class IntraDiagFtzWithoutLog2e(TritonKDA):
    """The diagonal-block kernel's flushed exp (ex2.approx.ftz, issue 14 step 31) takes its row factor without the log2(e) scale: e^(Γ_i - ref) becomes 2^(Γ_i - ref), too large wherever Γ falls (ex2 is base 2: the conversion an exp2-based kernel must not drop)."""

    def chunked(self, q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
        with kernel_edited(ik, "kda_intra_diag_fwd_kernel", "b_er = _exp(b_d, FTZ)", "b_er = _exp_planted(b_d, FTZ)",
                           (("_exp_planted", _exp_without_log2e()),)):
            return ik._chunked(q, k, v, g, beta, state, chunk, cu_seqlens, boundary_states, intra="split")


@functools.lru_cache(maxsize=None)
def _off_block_without_log2e():
    """_off_block whose column factors e^(ref_i - Γ_c) take _exp_without_log2e (edited once, cached)."""
    from impl.kernels import kda as kk
    return edited_helper(kk._off_block, "kc_t = tl.trans(k_j * _exp(", "kc_t = tl.trans(k_j * _exp_planted(",
                         (("_exp_planted", _exp_without_log2e()),))


# GPU only, as the diagonal kernel's: the off-diagonal kernel's FTZ branch (issue 14 step 33) is inline PTX. Its
# column factors, not a row factor: stop 43's first form (the second row block's row factor) escaped the GPU zoo,
# because under the bounded gate's decays a row factor's error lands on products already small
@mutant("kda.chunked", "output", base="triton", device="cuda")
class IntraOffdiagFtzWithoutLog2e(TritonKDA):
    """The off-diagonal kernel's flushed exp (ex2.approx.ftz, issue 14 step 33) takes its column factors without the log2(e) scale: e^(ref_i - Γ_c) becomes 2^(ref_i - Γ_c), too large wherever Γ falls, so every row block weighs the earlier blocks' keys wrong (the largest error on the keys just before it)."""

    def chunked(self, q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
        with kernel_edited(ik, "kda_intra_offdiag_fwd_kernel", None, None, (("_off_block", _off_block_without_log2e()),)):
            return ik._chunked(q, k, v, g, beta, state, chunk, cu_seqlens, boundary_states, intra="split")


@mutant("kda.chunked", "output", base="triton")
class IntraXHandOverMisplaced(TritonKDA):
    """The off-diagonal kernel's hand-over of X to the W / U kernel (issue 14 step 34) stores block (2, 0) where (2, 1) belongs: rows 32-47 of every chunk's W and U take the wrong column block of (I + A)^-1."""

    def chunked(self, q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
        with kernel_edited(ik, "kda_intra_offdiag_fwd_kernel", "tl.store(p_w + rt2 + BC + o_c, x21.to(dt), mask=m2)",
                           "tl.store(p_w + rt2 + BC + o_c, x20.to(dt), mask=m2)"):
            return ik._chunked(q, k, v, g, beta, state, chunk, cu_seqlens, boundary_states, intra="split")


@mutant("kda.chunked", "output", base="triton")
class StateAqkLowerDropsDiagonal(TritonKDA):
    """The state pass's aqk load, masked to the blocks at or below the diagonal (issue 14 step 35), masks the diagonal block too (< where <= belongs): each token's output loses its own chunk's nearest qk terms, itself included."""

    def chunked(self, q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
        with kernel_edited(ik, "kda_state_chunked_fwd_kernel", "((o_t[None, :] // BC) <= (o_t[:, None] // BC))",
                           "((o_t[None, :] // BC) < (o_t[:, None] // BC))"):
            return ik._chunked(q, k, v, g, beta, state, chunk, cu_seqlens, boundary_states, intra="split")


@mutant("kda.scale", "per_sample", base="triton", device="cuda")
class IntraOffsetsInt32(TritonKDA):
    """The intra-chunk kernels compute their chunk base offsets in int32: past B*T*H*K = 2^31 they wrap (flash-linear-attention #1080)."""

    def chunked(self, q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
        return ik._chunked(q, k, v, g, beta, state, chunk, cu_seqlens, boundary_states, offset64=False)


@mutant("kda.decode", "in_bounds")
class DecodeInPlacePastState(TorchKDA):
    """decode(inplace=True) writes one float past the end of state.recurrent (a tail mask off by one)."""

    def decode(self, w, z, f, b, state, inplace=False):
        o, new = super().decode(w, z, f, b, state)
        if not inplace:
            return o, new
        state.recurrent.copy_(new.recurrent)
        state.conv.copy_(new.conv)
        # the element after the last one, through the storage as a kernel's pointer arithmetic reaches it
        n = state.recurrent.numel()
        torch.as_strided(state.recurrent, (n + 1,), (1,))[n] = 0.0
        return o, state


@mutant("kda.batch", "batch", base="triton")
class SegmentsFromBatch(TritonKDA):
    """The state pass counts programs over every row of the launch, so a row's segment count follows the batch size (split boundaries from the whole batch, sgl-project/sgl-flash-attn #43)."""

    def chunked(self, q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
        # the rule before the fix: programs = cdiv(V, BV) * H * N, the per-row rule over H * N heads
        bv, nseg, _ = ik._state_config(q.device, q.shape[2] * q.shape[0], triton.cdiv(q.shape[1], ik.CHUNK),
                                       q.shape[3], v.shape[3])
        return ik._chunked(q, k, v, g, beta, state, chunk, cu_seqlens, boundary_states, bv=bv, nseg=nseg)


# ---------------------------------------------------------------- CUDA-graph replay (kda.graph_replay)
# Each planted bug lives in the engine's captured step (impl/graph.py), never in a kernel: its eager steps
# are right, and every other check runs the torch baseline unchanged.


class _LiveRowsAtCapture(KDADecodeStep):
    def _sizes(self, values):
        # skips writing back padding rows by a host-side count: a captured step keeps its capture's
        return {"rows": values["slots"].shape[0]}


class _PaddingKeepsSlots(KDADecodeStep):
    def _put(self, bufs, name, value):
        # only the live rows are copied in: the rows past them keep what the last step left there
        bufs[name][:value.shape[0]].copy_(value)


@mutant("kda.graph_replay", "vs_eager")
class GraphLiveRowsAtCapture(TorchKDA):
    """The captured decode step writes back only as many rows as were live at capture, so requests joining later keep a stale state (vllm #34874; capture-time host values, InfiniLM #540)."""

    def decode_graph(self, w, pool, max_batch):
        return _LiveRowsAtCapture(self, w, pool, max_batch)


@mutant("kda.graph_replay", "vs_eager")
class GraphPaddingKeepsSlots(TorchKDA):
    """Before a replay only the live rows' inputs and slots are copied in: padding rows keep those of requests that left and advance their states again (vllm #34874; padded graph rows on live slots, rvllm #32)."""

    def decode_graph(self, w, pool, max_batch):
        return _PaddingKeepsSlots(self, w, pool, max_batch)


# reachable on the CPU since the interpreter's K tile is 16 (impl/kda.py INTERPRETER_TILE): head dim 32 spans two
@mutant("kda.chunked", "output", base="triton")
class IntraKTilesNotAccumulated(TritonKDA):
    """The whole-chunk intra kernel (intra="columns") restarts the kk and qk products at every K tile, so only the head dim's last tile counts (the head dim cut to one tile: triton-lang/triton #621)."""

    def chunked(self, q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
        with kernel_edited(ik, "kda_intra_chunked_fwd_kernel", "b_gc, b_A, b_Aqk, 0, BT",
                           "b_gc, b_A * 0., b_Aqk * 0., 0, BT"):
            return ik._chunked(q, k, v, g, beta, state, chunk, cu_seqlens, boundary_states, intra="columns")


@mutant("kda.chunked", "output", base="triton")
class IntraSplitKTilesNotAccumulated(TritonKDA):
    """The split intra pass's diagonal-block kernel restarts its kk and qk products at every K tile, so only the head dim's last tile counts in the diagonal blocks (triton-lang/triton #621's class)."""

    def chunked(self, q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
        with kernel_edited(ik, "kda_intra_diag_fwd_kernel",
                           "tl.trans(b_kc), b_A, input_precision=PRECISION)\n"
                           "            b_Aqk = tl.dot(b_q * b_er, tl.trans(b_kc), b_Aqk,",
                           "tl.trans(b_kc), b_A * 0., input_precision=PRECISION)\n"
                           "            b_Aqk = tl.dot(b_q * b_er, tl.trans(b_kc), b_Aqk * 0.,"):
            return ik._chunked(q, k, v, g, beta, state, chunk, cu_seqlens, boundary_states, intra="split")


@mutant("kda.chunked", "output", base="triton")
class IntraStrongDecayPairsSkipped(TritonKDA):
    """The whole-chunk intra kernel (intra="columns") leaves the entries past its factorised products' range out and never adds them by the exact pairs pass: strong decays (the softplus gate, |g| > 5 a token) lose those products."""

    def chunked(self, q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
        with kernel_edited(ik, "kda_intra_chunked_fwd_kernel", "PAIRS and fall > SPAN_MAX", "PAIRS and fall > 1e30"):
            return ik._chunked(q, k, v, g, beta, state, chunk, cu_seqlens, boundary_states, intra="columns")


@mutant("kda.chunked", "output", base="triton")
class IntraBlockedX30DropsATerm(TritonKDA):
    """The 16-row sub-chunk intra pass (issue 14 step 18's candidate) builds X = (I + A)^-1's block (3, 0) without A_31 X_10: rows 48-63 of a chunk see a wrong inverse (a block forward substitution missing one term of its sum)."""

    def chunked(self, q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
        with kernel_edited(ik, "kda_intra_kk_fwd_kernel", "tl.dot(a31, x10, tl.dot(a30, x00",
                           "tl.dot(a31 * 0., x10, tl.dot(a30, x00"):
            return ik._chunked(q, k, v, g, beta, state, chunk, cu_seqlens, boundary_states, intra="blocked")



@mutant("kda.chunked", "output", base="triton")
class IntraSplitDiagPairsSkipped(TritonKDA):
    """The split intra pass (issue 14 step 26's candidate) leaves a diagonal block's entries past the factorised products' range out of its dots and never adds them by the exact pairs: strong decays (the softplus gate, |g| > 5 a token) lose those products."""

    def chunked(self, q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
        with kernel_edited(ik, "kda_intra_diag_fwd_kernel", "tl.max(tl.max(b_fall, 1), 0) > SPAN_MAX",
                           "tl.max(tl.max(b_fall, 1), 0) > 1e30"):
            return ik._chunked(q, k, v, g, beta, state, chunk, cu_seqlens, boundary_states, intra="split")


@mutant("kda.chunked", "output", base="triton")
class IntraSplitX30DropsATerm(TritonKDA):
    """The split intra pass's off-diagonal + merge kernel (issue 14 step 26's candidate) builds X = (I + A)^-1's block (3, 0) without A_31 X_10: rows 48-63 of a chunk see a wrong inverse (a block forward substitution missing one term of its sum)."""

    def chunked(self, q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
        with kernel_edited(ik, "kda_intra_offdiag_fwd_kernel", "tl.dot(a31, x10, tl.dot(a30, x00",
                           "tl.dot(a31 * 0., x10, tl.dot(a30, x00"):
            return ik._chunked(q, k, v, g, beta, state, chunk, cu_seqlens, boundary_states, intra="split")

# ---------------------------------------------------------------- the prefill without a host read (issue 14 step 28)
@mutant("kda.device_report", "host_syncs", base="triton")
class ChunkedExReadsInfoBack(TritonKDA):
    """chunked_ex looks at its own NaN report before returning (`if info.any(): ...`): a host read each call, so the GPU idles while the next call's host work runs and a CUDA-graph capture breaks."""

    def chunked_ex(self, q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
        o, final, hb, info = ik.chunked_ex(q, k, v, g, beta, state, chunk, cu_seqlens, boundary_states)
        if info.any():
            o = o.clone()
        return o, final, hb, info


@mutant("kda.device_report", "nan_report", base="triton")
class ChunkedExNanBetaUnreported(TritonKDA):
    """The split intra pass's diagonal kernel never raises its beta flag in chunked_ex's launches: a NaN in beta runs through with a clean report."""

    def chunked_ex(self, q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
        with kernel_edited(ik, "kda_intra_diag_fwd_kernel", "tl.store(flags + 1 + o_r * 0, 1, mask=b_beta != b_beta)",
                           "tl.store(flags + 1 + o_r * 0, 1, mask=(b_beta != b_beta) & (o_r < 0))"):
            return ik.chunked_ex(q, k, v, g, beta, state, chunk, cu_seqlens, boundary_states)


@mutant("kda.device_report", "nan_report", base="triton")
class ChunkedExNanFromBlockReference(TritonKDA):
    """The diagonal kernel's NaN report (issue 14 step 32) looks at its block's reference row (the block's first) instead of the chunk's last row: a NaN in g after a chunk's row 48 reaches no block's first row and goes unreported."""

    def chunked_ex(self, q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
        with kernel_edited(ik, "kda_intra_diag_fwd_kernel", "b_nan = tl.maximum(b_nan, (b_gl != b_gl).to(tl.int32))",
                           "b_nan = tl.maximum(b_nan, (b_ref != b_ref).to(tl.int32))"):
            return ik.chunked_ex(q, k, v, g, beta, state, chunk, cu_seqlens, boundary_states)


@mutant("kda.device_report", "final_state", base="triton")
class ChunkedExDropsState(TritonKDA):
    """chunked_ex forwards everything to the kernels but the initial state: a prefill continuing a request starts from zero (its outputs and final state differ from chunked's)."""

    def chunked_ex(self, q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
        return ik._chunked(q, k, v, g, beta, None, chunk, cu_seqlens, boundary_states, sync=False)


def _gated_chunked_head0_bias(q, k, v, f, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True, *,
                              A_log, dt_bias=None, lower_bound=None):
    """impl.candidates.kda_gate_fused.gated_chunked with its Γ kernel adding head 0's dt_bias to every head."""
    from impl.candidates.kda_gate_fused import gated_chunked
    with kernel_edited(ik, "kda_chunk_cumsum_fwd_kernel", "dt_bias + i_h * K + o_k", "dt_bias + o_k"):
        return gated_chunked(q, k, v, f, beta, state, chunk, cu_seqlens, boundary_states, A_log=A_log,
                             dt_bias=dt_bias, lower_bound=lower_bound)


@mutant("kda.sublayer", "output", base="triton")
class GateFusedDtBiasDropped(TritonKDA):
    """The fused gate + Γ kernel (issue 14 step 24's candidate, impl.candidates.kda_gate_fused) adds head 0's dt_bias to every head's f: the bias indexed without its head (a per-head parameter sliced apart from its head)."""

    def sublayer(self, w, x, state=None, mask=None, cu_seqlens=None):
        # ours' sublayer over a namespace whose prefill fast path is the planted one (a whole namespace is
        # not composed, impl/compose.py, so the mutant hands ours its ops itself)
        ops = types.SimpleNamespace(chunked=self.chunked, decode=self.decode, gated_rmsnorm=ik.gated_rmsnorm,
                                    gated_chunked=_gated_chunked_head0_bias)
        return ik.sublayer(w, x, state, mask, cu_seqlens, ops=ops)


@mutant("kda.decode", "final_state", base="triton")
class DecodeFirstArrivalWritesWindow(TritonKDA):
    """With a head's value blocks split over programs, the FIRST program to arrive writes the new conv window in place: a later one reads the new window as if it were the old (a decode race)."""

    def decode(self, w, z, f, b, state, inplace=False, **launch):
        launch.setdefault("vs", "auto")           # the split decode (step 16's candidate) the edit is in
        # its own arrival counters: the planted kernel leaves them off zero, which must not reach ours
        saved = dict(ik._ARRIVALS)
        ik._ARRIVALS.clear()
        try:
            with kernel_edited(ik, "kda_decode_fused_fwd_kernel", 'sem="acq_rel") == VS - 1', 'sem="acq_rel") == 0'):
                return ik.decode(w, z, f, b, state, inplace, **launch)
        finally:
            ik._ARRIVALS.clear()
            ik._ARRIVALS.update(saved)


# ---------------------------------------------------------------- prefix-cache checkpoints (issue 13 item 5)
@mutant("kda.checkpoint", "state")
class CheckpointCacheChunkUnits(TorchKDA):
    """The checkpoint's boundary state is indexed in 128-token cache-chunk units: h[d // 128 - 1] for h[d // 64 - 1] (sglang #33515)."""

    def _saved(self, boundary_states, state, depth, chunk):
        row = depth // (2 * chunk) - 1
        return (boundary_states[:, row] if row >= 0 else state).float(), depth // chunk * chunk


@mutant("kda.checkpoint", "state")
class CheckpointAlignedForUnaligned(TorchKDA):
    """A checkpoint at a depth off the 64-token grid is the aligned state below it, taken as is: no error, no NaN, a wrong state (tt-metal #54962)."""

    def _saved(self, boundary_states, state, depth, chunk):
        return super()._saved(boundary_states, state, depth, chunk)[0], depth


@mutant("kda.sublayer", "output", base="triton")
class NormKernelGateDropped(TritonKDA):
    """The one-launch gated norm (issue 14 step 14) multiplies by sigmoid(0) = 1/2, not sigmoid(zg): the output gate lost inside the fused kernel."""

    def sublayer(self, w, x, state=None, mask=None, cu_seqlens=None):
        with kernel_edited(inorm, "norm_fwd_kernel", "* tl.sigmoid(b_g)", "* tl.sigmoid(b_g * 0.)"):
            return ik.sublayer(w, x, state, mask, cu_seqlens)


@mutant("kda.sublayer", "output", base="triton")
class NormKernelMeanOverOneMore(TritonKDA):
    """The one-launch norm (issue 14 step 14) divides the row's sum of squares by D + 1, not D (a mean over one element too many: a padded row length)."""

    def sublayer(self, w, x, state=None, mask=None, cu_seqlens=None):
        with kernel_edited(inorm, "norm_fwd_kernel", "/ D + eps", "/ (D + 1) + eps"):
            return ik.sublayer(w, x, state, mask, cu_seqlens)
