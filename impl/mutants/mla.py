"""MLA mutants: each a TorchMLA (impl/baseline/mla.py) overriding ONE small method, or (a kernel mutant)
a TritonMLA whose `absorbed` launches our sparse kernel with one planted source edit."""
from __future__ import annotations

import functools

import torch

from impl import dsa as _dsa_ours
from impl import mla as im
from impl import norm as inorm
from impl.baseline.dsa import compute_dtype
from impl.baseline.mla import TorchMLA, _linear
from impl.graph import MLAAbsorbedStep
from impl.mutants.catalogue import edited_helper, flip_last_bits, kernel_edited, mutant


@mutant("mla.absorbed", "output")
class MlaScaleMoved(TorchMLA):
    """The softmax scale is (d_n + d_v)^-1/2 instead of d_qk^-1/2 = d_n^-1/2 (no rope part)."""

    def _scale(self, w):
        return (w.nope_dim + w.v_dim) ** -0.5


@mutant("mla.paths", "latent_cache")
class MlaUnnormalizedLatentCached(TorchMLA):
    """The cache holds the raw kv_a output, not the kv_a_layernorm-normalized latent (pitfall 9)."""

    def _cache_latent(self, w, a, c):
        return _linear(a, w.kv_a_proj_with_mqa, w.kv_a_bias)


@mutant("mla.paths", "shared_output")
class MlaSharedRerunsIndexer(TorchMLA):
    """A "shared" layer runs the indexer `iw` it is given instead of reusing the previous selection."""

    def _select(self, iw, a, q_lat, old_rows, mask, prev, kind, T):
        return super()._select(iw, a, q_lat, old_rows, mask, prev, "full", T)


@mutant("mla.absorbed_paged", "output")
class MlaPagedFirstRowTable(TorchMLA):
    """Every batch row reads its latents through the FIRST row's block table (the table indexed by the wrong sequence)."""

    def _table_rows(self, block_table):
        return block_table[:1].expand_as(block_table)


@mutant("mla.causal", "causal", dtype="float32")
class MlaSoftmaxMaxOverMaskedKeys(TorchMLA):
    """The attention softmax subtracts the row maximum over ALL cached keys, masked later ones included, so earlier outputs depend on later tokens in their last bits."""

    def expanded(self, w, q, latent, indices):
        latent, allowed = self._check_attention(w, q, latent, indices)
        dt, acc = q.dtype, compute_dtype(q.dtype)
        W_UK, W_UV = self._split_kv_b(w, dt)
        k = torch.einsum("btr,hnr->bthn", latent, W_UK)
        v = torch.einsum("btr,hvr->bthv", latent, W_UV)
        s = torch.einsum("bshn,bthn->bsht", q, k).to(acc) * self._scale(w)
        e = torch.exp(s - s.amax(-1, keepdim=True)) * allowed[:, :, None, :]
        p = torch.nan_to_num(e / e.sum(-1, keepdim=True), nan=0.0)
        return torch.einsum("bsht,bthv->bshv", p.to(dt), v), s.masked_fill(~allowed[:, :, None, :], float("-inf"))


@mutant("mla.batch", "batch")
class MlaFirstRowSelection(TorchMLA):
    """Every batch row attends through row 0's selection, a per-row input taken from the first row for the whole batch (google-research/timesfm #492)."""

    def _check_attention(self, w, q, latent, indices):
        latent, allowed = super()._check_attention(w, q, latent, indices)
        return latent, allowed[:1].expand_as(allowed)


@mutant("mla.rerun", "rerun")
class MlaSplitPartialsRaced(TorchMLA):
    """absorbed sums its split partials by atomics in arrival order, so its output's last bit changes from run to run (hw-native-sys/pypto-lib #974)."""

    def absorbed(self, w, q, latent, indices):
        o, s = super().absorbed(w, q, latent, indices)
        return flip_last_bits(o), s


# ---------------------------------------------------------------- CUDA-graph replay (mla.graph_replay)
# Each planted bug lives in the engine's captured step (impl/graph.py), never in a kernel: its eager steps
# are right, and every other check runs the torch baseline unchanged.


class _LengthsRebound(MLAAbsorbedStep):
    def _put(self, bufs, name, value):
        if name != "lengths":
            return super()._put(bufs, name, value)
        # a fresh tensor takes the buffer's place in the metadata: the captured step still reads the old one
        fresh = self._pad[name].clone()
        fresh[:value.shape[0]] = value
        bufs[name] = fresh


class _WidthAtCapture(MLAAbsorbedStep):
    def _sizes(self, values):
        # attends only the columns the widest row uses, by a host-side count: a captured step keeps its capture's
        return {"width": max(1, int((values["indices"] >= 0).sum(1).max()))}


@mutant("mla.graph_replay", "vs_eager")
class MlaGraphLengthsRebound(TorchMLA):
    """Before a replay the cache lengths are bound to a fresh tensor instead of copied into the captured buffer, so the replay writes and reads by its capture's lengths (vllm #34874)."""

    def absorbed_graph(self, w, latent, max_batch, width):
        return _LengthsRebound(self._attend_rows, w, latent, max_batch, width)


@mutant("mla.graph_replay", "vs_eager")
class MlaGraphWidthAtCapture(TorchMLA):
    """The captured step attends only as many selection columns as the widest row used at capture, so wider selections later lose their last positions (vllm #34874; capture-time host values, InfiniLM #540)."""

    def absorbed_graph(self, w, latent, max_batch, width):
        return _WidthAtCapture(self._attend_rows, w, latent, max_batch, width)


class TritonMLA:
    """Our Triton mla namespace (impl/mla.py) as a class: the base of mutants that plant one edit in a kernel
    its `absorbed` launches, so the bug is in the kernel the product runs, not in a torch re-implementation."""

    project = staticmethod(im.project)
    absorbed = staticmethod(im.absorbed)
    absorbed_paged = staticmethod(im.absorbed_paged)
    expanded = staticmethod(im.expanded)
    sublayer = staticmethod(im.sublayer)


# the split path runs on the CPU since the interpreter splits as a 4-SM device (impl/mla.py _splits): before
# that these three kernel mutants (and anything else wrong in the split path) escaped every CPU check
@mutant("mla.absorbed", "output", base="triton")
class MlaSplitEmptyLseZero(TritonMLA):
    """A selection split with no valid entry writes log-sum-exp 0, not -inf, so the combine weighs its zero output in (ROCm/aiter #3641)."""

    def absorbed(self, w, q, latent, indices, lengths=None, return_scores=False, splits=None):
        with kernel_edited(im, "mla_sparse_absorbed_fwd_kernel", "1.)), float(\"-inf\"))", "1.)), 0.)"):
            return im.absorbed(w, q, latent, indices, lengths, return_scores, splits)


@mutant("mla.absorbed", "output", base="triton")
class MlaCombineDropsLastSplit(TritonMLA):
    """The split-KV merge is handed one split fewer than the kernel wrote (a stale split count: NVIDIA/recsys-examples #379): it drops the last split and reads each later query row's partial outputs from a stride one split short."""

    def absorbed(self, w, q, latent, indices, lengths=None, return_scores=False, splits=None):
        # planted before the merge's branch, so it reaches the one-round merge (step 46) and the two-round one alike
        with kernel_edited(im, "mla_merge_kernel", "    if ONE_ROUND:\n", "    NS = NS - 1\n    if ONE_ROUND:\n"):
            return im.absorbed(w, q, latent, indices, lengths, return_scores, splits)


@mutant("mla.absorbed", "output", base="triton")
class MlaOnlineSoftmaxNoRescale(TritonMLA):
    """The online softmax's correction factor is exp(m_new - m_new) = 1, so blocks summed before a larger max keep their weight (paiml/aprender #2753)."""

    def absorbed(self, w, q, latent, indices, lengths=None, return_scores=False, splits=None):
        with kernel_edited(im, "mla_sparse_absorbed_fwd_kernel", "b_alpha = tl.exp(b_m - b_mn)",
                           "b_alpha = tl.exp(b_mn - b_mn)"):
            return im.absorbed(w, q, latent, indices, lengths, return_scores, splits)


@mutant("mla.absorbed", "output", base="triton")
class MlaPrefetchSkipsABlock(TritonMLA):
    """The gather loop's entries loaded a block ahead (issue 14 step 38) are those of the block after next: from a split's second block on, every block attends over the entries of the one after it, and the last two read none."""

    def absorbed(self, w, q, latent, indices, lengths=None, return_scores=False, splits=None):
        with kernel_edited(im, "mla_sparse_absorbed_fwd_kernel", "w_lo, w_hi, i_w + 1, BW)", "w_lo, w_hi, i_w + 2, BW)"):
            return im.absorbed(w, q, latent, indices, lengths, return_scores, splits)


@functools.lru_cache(maxsize=None)
def _ws_part(path: tuple, old: str, new: str):
    """The producer kernel's partition path[0] ("_consume" or "_produce", impl/kernels/mla_gluon.py) with one
    planted edit in the last helper of `path` (("_consume", "_online_softmax"): the edit in the softmax helper, the
    partition calling the edited copy), made once: a GPU compile is cached by the helper's name."""
    from impl.kernels import mla_gluon as kg
    edited = edited_helper(getattr(kg, path[-1]), old, new)
    for outer, inner in zip(path[-2::-1], path[:0:-1]):
        edited = edited_helper(getattr(kg, outer), None, None, ((inner, edited),))
    return edited


def _ws_absorbed(path: tuple, old: str, new: str, w, q, latent, indices, lengths, return_scores, splits, ns=im):
    """absorbed through issue 14 step 49's producer kernel (ours since stop 53, where impl.mla._producer_applies;
    `ns`: a candidate's copy of impl.mla) with the edit of `_ws_part(path, ...)`. GPU only."""
    with kernel_edited(ns, "mla_sparse_absorbed_ws_kernel", None, None, ((path[0], _ws_part(path, old, new)),)):
        return ns.absorbed(w, q, latent, indices, lengths, return_scores, splits)


# GPU only (device="cuda"), as the kernel: the interpreter cannot run Gluon (the Triton kernel runs there). The
# producer kernel runs from ROWS_64 query rows on: mla.absorbed's GPU examples of 7-16 rows at the released
# geometry and its drawn tiny ones of as many rows. Stop 52 (H200, through the then candidate): the first, third and
# fourth caught; the empty split's log-sum-exp escaped (at the released geometry a row's lse is large, so
# e^(0 - lse) weighs the empty split's zero output in by almost nothing). Stop 53 (H100): all four caught, the
# empty split by the tiny-geometry pin of 8 rows over 24 tokens with 4 splits added for it
@mutant("mla.absorbed", "output", base="triton", device="cuda")
class MlaProducerNoRescale(TritonMLA):
    """The producer kernel's online softmax (issue 14 step 49) takes its correction factor as exp(m_new - m_new) = 1, so blocks summed before a larger max keep their weight."""

    def absorbed(self, w, q, latent, indices, lengths=None, return_scores=False, splits=None):
        return _ws_absorbed(("_consume", "_online_softmax"), "b_alpha = gl.exp(b_m - b_mn)",
                            "b_alpha = gl.exp(b_mn - b_mn)",
                            w, q, latent, indices, lengths, return_scores, splits)


@mutant("mla.absorbed", "output", base="triton", device="cuda")
class MlaProducerEmptyLseZero(TritonMLA):
    """The producer kernel (issue 14 step 49) writes log-sum-exp 0, not -inf, for a split with no valid entry, so the merge weighs its zero output in."""

    def absorbed(self, w, q, latent, indices, lengths=None, return_scores=False, splits=None):
        return _ws_absorbed(("_consume", "_store_o"), "gl.log(gl.where(b_l > 0, b_l, 1.)), float(\"-inf\"))",
                            "gl.log(gl.where(b_l > 0, b_l, 1.)), 0.)", w, q, latent, indices, lengths,
                            return_scores, splits)


@mutant("mla.absorbed", "output", base="triton", device="cuda")
class MlaProducerMaskABlockLate(TritonMLA):
    """The producer kernel's consumer (issue 14 step 49) loads the entries for its score mask two blocks ahead instead of one: from a split's second block on, each block's scores are masked by the validity of the block after it."""

    def absorbed(self, w, q, latent, indices, lengths=None, return_scores=False, splits=None):
        return _ws_absorbed(("_consume",), "w_lo, w_hi, i_w + 1, BW, s_cols)", "w_lo, w_hi, i_w + 2, BW, s_cols)",
                            w, q, latent, indices, lengths, return_scores, splits)


@mutant("mla.absorbed", "output", base="triton", device="cuda")
class MlaProducerGathersTheNextBlock(TritonMLA):
    """The producer warps (issue 14 step 49) fill stage i with the rows of block i + 1: each block's scores and values come from the next block's rows (the last block's from none)."""

    def absorbed(self, w, q, latent, indices, lengths=None, return_scores=False, splits=None):
        # through the producer that loads each half's entries before its copies (`_produce`), blocks of 32
        from impl.candidates import mla_producer
        return _ws_absorbed(("_produce",), "w_hi, i_w * (BW // BWP), BWP,", "w_hi, (i_w + 1) * (BW // BWP), BWP,",
                            w, q, latent, indices, lengths, return_scores, splits, ns=mla_producer.mla)


@mutant("mla.absorbed", "output", base="triton", device="cuda")
class MlaProducerCopiesHalfABlock(TritonMLA):
    """The producer warps (issue 14 step 51) copy only the first half of each block of 64 entries: the consumer reads the second half's rows from whatever the stage held before (an earlier block's rows, or never-written shared memory)."""

    def absorbed(self, w, q, latent, indices, lengths=None, return_scores=False, splits=None):
        # through step 51's candidate (blocks of 64 at every row count): the 8-row GPU pins then take blocks of 64
        from impl.candidates import mla_producer_bw64
        return _ws_absorbed(("_produce",), "for h in gl.static_range(BW // BWP):", "for h in gl.static_range(1):",
                            w, q, latent, indices, lengths, return_scores, splits, ns=mla_producer_bw64.mla)


@mutant("mla.absorbed", "output", base="triton", device="cuda")
class MlaProducerAheadCopiesTheNextEntries(TritonMLA):
    """The producer warps that load entries a block ahead (issue 14 step 52) form a block's first half of addresses from the entries just prefetched for the NEXT block, not the ones carried for this block: each block's first rows come from the block after it."""

    def absorbed(self, w, q, latent, indices, lengths=None, return_scores=False, splits=None):
        return _ws_absorbed(("_produce_ahead",), "p_c, mask_w = _rows(c, block_table, b0,",
                            "p_c, mask_w = _rows(c, block_table, e0,", w, q, latent, indices, lengths,
                            return_scores, splits, ns=_ahead_ns())


def _ahead_ns():
    """The namespace step 52's producer (`_produce_ahead`) runs in for its mutants: ours since it landed."""
    return im


def _ahead_bw64_ns():
    """Step 52's producer with blocks of 64 at every row count, so the 8-row GPU pins run its second half's copy."""
    from impl.candidates.mla_heads64 import module_copy
    return module_copy("impl.mutants.mla_ahead_bw64", PRODUCER=True, PRODUCER_AHEAD=True, PRODUCER_BW64_ROWS=1)


@mutant("mla.absorbed", "output", base="triton", device="cuda")
class MlaProducerAheadPrefetchesTwoAhead(TritonMLA):
    """Step 52's producer prefetches the first half's entries two blocks ahead instead of one: from the second block on, each block's first half holds the rows of the block after it."""

    def absorbed(self, w, q, latent, indices, lengths=None, return_scores=False, splits=None):
        return _ws_absorbed(("_produce_ahead",), "e0 = _entries(indices, i_bs, W, w_lo, w_hi, (i_w + 1) * NH,",
                            "e0 = _entries(indices, i_bs, W, w_lo, w_hi, (i_w + 2) * NH,", w, q, latent, indices,
                            lengths, return_scores, splits, ns=_ahead_ns())


@mutant("mla.absorbed", "output", base="triton", device="cuda")
class MlaProducerAheadSecondHalfOverTheFirst(TritonMLA):
    """Step 52's producer copies a block of 64's second half into the stage's first half: the first 32 rows are the wrong ones and the last 32 whatever the stage held before."""

    def absorbed(self, w, q, latent, indices, lengths=None, return_scores=False, splits=None):
        return _ws_absorbed(("_produce_ahead",), "c_smem.index(s).slice(BWP, BWP), p_c,", "c_smem.index(s).slice(0, BWP), p_c,",
                            w, q, latent, indices, lengths, return_scores, splits, ns=_ahead_bw64_ns())


# Step 54's three mutants (through ours, where it landed): the W_UK fold's q_abs ([H, B·S, R] memory seen as [B, S, H, R]) read through the wrong
# strides. Only a strided q shows them (a contiguous one has row stride H·R and head stride R): mla.absorbed's q_abs
# is the fold's einsum, read where it is on the GPU (bf16 and float32) and on the CPU in float32; the CPU's bf16 runs
# the interpreter on a float32 copy (kernel_operand), contiguous, so there the first two are float32 mutants
@mutant("mla.absorbed", "output", base="triton", dtype="float32")
class MlaQStridesRowsAsContiguous(TritonMLA):
    """The sparse kernels read q_abs where it is (issue 14 step 54) but are handed a contiguous tensor's strides (row H·R, head R), so each query row reads its heads from another row's and head's memory."""

    def absorbed(self, w, q, latent, indices, lengths=None, return_scores=False, splits=None):
        real = im._q_operand

        def as_contiguous(q_abs):
            q_op, _, _ = real(q_abs)
            return q_op, q_abs.shape[2] * q_abs.shape[3], q_abs.shape[3]
        im._q_operand = as_contiguous
        try:
            return im.absorbed(w, q, latent, indices, lengths, return_scores, splits)
        finally:
            im._q_operand = real


@mutant("mla.absorbed", "output", base="triton", dtype="float32")
class MlaQStridesHeadsStepR(TritonMLA):
    """The Triton sparse kernel steps from head to head by R elements, not by q's head stride (issue 14 step 54): right for a contiguous q, wrong for the W_UK fold's, whose heads are B·S·R apart."""

    def absorbed(self, w, q, latent, indices, lengths=None, return_scores=False, splits=None):
        with kernel_edited(im, "mla_sparse_absorbed_fwd_kernel", "o_h[:, None].to(tl.int64) * stride_q_h",
                           "o_h[:, None].to(tl.int64) * R"):
            return im.absorbed(w, q, latent, indices, lengths, return_scores, splits)


@mutant("mla.absorbed", "output", base="triton", device="cuda")
class MlaProducerQHeadsStepR(TritonMLA):
    """The producer kernel's q load (issue 14 step 54) steps from head to head by R elements, not by q's head stride: right for a contiguous q, wrong for the W_UK fold's."""

    def absorbed(self, w, q, latent, indices, lengths=None, return_scores=False, splits=None):
        return _ws_absorbed(("_consume", "_load_q"), "o_h[:, None].to(gl.int64) * stride_q_h",
                            "o_h[:, None].to(gl.int64) * R", w, q, latent, indices, lengths, return_scores, splits)


def _out_uv_ns():
    """The namespace issue 14 step 55's output in W_UV's dtype runs in for its mutant, stored from the MMA layout:
    impl.candidates.mla_out_uv (step 58's staged epilogue pinned off; ours stages that output since step 58)."""
    from impl.candidates import mla_out_uv
    return mla_out_uv.mla


# step 55's cast in the producer kernel's epilogue: the attend of mla.absorbed's drawn cases (tiny selections, one
# split from 7 query rows on) writes through it in bf16 on the GPU; its rounding (to nearest even, ours' bits) is held
# by tests/test_mla_out_uv.py, not by a bound
@mutant("mla.absorbed", "output", base="triton", device="cuda")
class MlaProducerOutUvUnnormalized(TritonMLA):
    """The producer kernel's epilogue casts to the output's dtype (issue 14 step 55) from the accumulator before its division by the softmax sum: each head's output is scaled by its sum of e^(s - m)."""

    def absorbed(self, w, q, latent, indices, lengths=None, return_scores=False, splits=None):
        return _ws_absorbed(("_consume", "_store_o"), "b_o.to(out.dtype.element_ty)", "b_acc.to(out.dtype.element_ty)",
                            w, q, latent, indices, lengths, return_scores, splits, ns=_out_uv_ns())


@mutant("mla.absorbed", "output", base="triton", device="cuda")
class MlaProducerStagedStoreDropsHeads(TritonMLA):
    """The producer kernel's staged epilogue (issue 14 step 58, ours since stop 62) masks its row-contiguous store to the first half of the heads: the other half of the output is never written (whatever the buffer held)."""

    def absorbed(self, w, q, latent, indices, lengths=None, return_scores=False, splits=None):
        return _ws_absorbed(("_consume", "_store_o", "_store_o_staged"), "mask=(oh < H)[:, None])",
                            "mask=(oh < H // 2)[:, None])", w, q, latent, indices, lengths, return_scores, splits)


def _part_staged_ns():
    """The namespace issue 14 step 59's staged bf16 partials and 2-warp merge run in for its mutants: ours since it
    landed."""
    return im


@mutant("mla.absorbed", "output", base="triton", device="cuda")
class MlaProducerStagedPartialsDropHeads(TritonMLA):
    """Step 58's staged store masked to the first half of the heads, through step 59 (bf16 split partials staged the same way): half of each split's partial output is never written."""

    def absorbed(self, w, q, latent, indices, lengths=None, return_scores=False, splits=None):
        return _ws_absorbed(("_consume", "_store_o", "_store_o_staged"), "mask=(oh < H)[:, None])",
                            "mask=(oh < H // 2)[:, None])", w, q, latent, indices, lengths, return_scores, splits,
                            ns=_part_staged_ns())


@mutant("mla.absorbed", "output", base="triton")
class MlaCombineBf16DropsLastSplit(TritonMLA):
    """The split merge handed one split fewer than the kernel wrote, through step 59 (bf16 partials merged on 2 warps on the GPU): the last split dropped, each later row's partials read a split short."""

    def absorbed(self, w, q, latent, indices, lengths=None, return_scores=False, splits=None):
        ns = _part_staged_ns()
        with kernel_edited(ns, "mla_merge_kernel", "    if ONE_ROUND:\n", "    NS = NS - 1\n    if ONE_ROUND:\n"):
            return ns.absorbed(w, q, latent, indices, lengths, return_scores, splits)


def _pdl_ns():
    """The namespace issue 14 step 60's programmatic dependent merge runs in for its mutant:
    impl.candidates.mla_merge_pdl until it lands, ours after."""
    from impl.candidates import mla_merge_pdl
    return mla_merge_pdl.mla


# GPU only: the interpreter never launches a dependent grid early (the candidate is ours there). A race, not a
# planted arithmetic error: the merge's programs start while the sparse kernel's still write, so what they read is
# whatever the partials' buffer held (an earlier example's partials, or never-written memory)
@mutant("mla.absorbed", "output", base="triton", device="cuda")
class MlaMergePdlNoWait(TritonMLA):
    """The split merge launched as a programmatic dependent of the sparse kernel (issue 14 step 60) without its griddepcontrol.wait: it reads the split partials while the sparse kernel's programs are still writing them."""

    def absorbed(self, w, q, latent, indices, lengths=None, return_scores=False, splits=None):
        ns = _pdl_ns()
        with kernel_edited(ns, "mla_merge_kernel", "        cuda.gdc_wait()\n", "        pass\n"):
            return ns.absorbed(w, q, latent, indices, lengths, return_scores, splits)


# the split store's cast (float32 partials on the interpreter; on a GPU bf16 since issue 14 step 59 landed)
@mutant("mla.absorbed", "output", base="triton")
class MlaSplitPartialsUnnormalized(TritonMLA):
    """The Triton kernel's split partials, cast to the partial buffer's dtype on their way out, are the accumulator before its division by the split's softmax sum: the merge then weighs unnormalized sums."""

    def absorbed(self, w, q, latent, indices, lengths=None, return_scores=False, splits=None):
        with kernel_edited(im, "mla_sparse_absorbed_fwd_kernel", "tl.store(p_o, b_o.to(out.dtype.element_ty), mask=mask_hr)\n        b_lse",
                           "tl.store(p_o, b_acc.to(out.dtype.element_ty), mask=mask_hr)\n        b_lse"):
            return im.absorbed(w, q, latent, indices, lengths, return_scores, splits)


@mutant("mla.paths", "latent_cache", base="triton")
class CacheInPlaceWithoutTheTipRule(TritonMLA):
    """The in-place cache append (issue 14 step 19's candidate, impl.candidates.cache_in_place) writes past ANY view of a buffer with room, not only its tip: a second continuation of one state overwrites the rows the first one's state reads (a fork that shares, not copies)."""

    dsa = _dsa_ours

    @staticmethod
    def append_rows(old, new, name):
        from impl.candidates import cache_in_place
        return cache_in_place.append_rows(old, new, name, tip_rule=False)

    def sublayer(self, w, iw, a, cache=None, mask=None, prev=None, kind="full"):
        return im.sublayer(w, iw, a, cache, mask, prev, kind, ops=self)


@mutant("mla.paths", "latent_cache", base="triton")
class NormKernelLatentUnweighted(TritonMLA):
    """MLA's one-launch norm (issue 14 step 14) drops its weight (q_a_layernorm, kv_a_layernorm): the cached latent is the normalized row unweighted."""

    def sublayer(self, *args, **kwargs):
        with kernel_edited(inorm, "norm_fwd_kernel", ".to(tl.float32) * b_w", ".to(tl.float32)"):
            return im.sublayer(*args, **kwargs)
