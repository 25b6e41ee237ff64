"""mHC mutants: each a TorchMHC (impl/baseline/mhc.py) overriding ONE small method."""
from __future__ import annotations

import torch

from impl.baseline.mhc import COLS, ROWS, TorchMHC
import impl.mhc as imhc
from impl.mutants.catalogue import flip_last_bits, mutant


@mutant("mhc.write_back", "output")
class MhcCombNotTransposed(TorchMHC):
    """write_back mixes the streams with C instead of Cᵀ: output stream n takes row n of C, not column n."""

    def _comb_for_write_back(self, comb):
        return comb


@mutant("mhc.coefficients", "comb")
class MhcRowFirstSinkhorn(TorchMHC):
    """Sinkhorn starts with a row normalization: row, then (iters-1) x (column, row), ending on rows."""

    def _sinkhorn_step_order(self, iters):
        return (ROWS,) + (COLS, ROWS) * (iters - 1)


@mutant("mhc.coefficients", "pre")
class MhcPreNormalized(TorchMHC):
    """pre = sigmoid + hc_eps divided by its sum over the streams (a convex combination; SPEC: not normalized)."""

    def _pre(self, logits, eps):
        pre = super()._pre(logits, eps)
        return pre / pre.sum(dim=-1, keepdim=True)


class TritonMHC:
    """Our Triton mhc namespace (impl/mhc.py) as a class: the base of mutants that change one kernel
    option, so the planted bug is in the kernel the product runs."""

    coefficients = staticmethod(imhc.coefficients)
    collapse = staticmethod(imhc.collapse)
    write_back = staticmethod(imhc.write_back)
    expand = staticmethod(imhc.expand)
    reduce = staticmethod(imhc.reduce)
    BATCH_INVARIANT = imhc.BATCH_INVARIANT


@mutant("mhc.batch", "batch", base="triton")
class MhcReductionSplitByTokens(TritonMHC):
    """The coefficient kernel's reduction block over N·D is picked from the token count (32 wide past 8 tokens), so a token's coefficients follow its batch's size (an RMSNorm block size from num_tokens, vllm-project/vllm #48391)."""

    def coefficients(self, w, X):
        tokens = X.shape[0] * X.shape[1]
        return imhc.fused_coefficients_collapse(w, X, bk=32 if tokens > 8 else None)[:3]


@mutant("mhc.rerun", "rerun")
class MhcSplitKRaced(TorchMHC):
    """The coefficient projection's split-K partials are summed by atomics in arrival order, so pre changes in its last bit from run to run (warpfront/hipfire #383)."""

    def coefficients(self, w, X):
        pre, post, comb = super().coefficients(w, X)
        return flip_last_bits(pre), post, comb


@mutant("mhc.coefficients", "pre", base="triton")
class MhcLastChunkDropped(TritonMHC):
    """The coefficient finish sums the partials of all chunks but the last (a split-K reduction bounded by the chunk count minus one): Σx² and every projection miss the row's last N·D chunk. The split is forced to two chunks or more, so the mutant is live at every size."""

    def coefficients(self, w, X):
        import triton
        from impl.kernels.mhc import mhc_coeff_finish_fwd_kernel
        N = w.hc_mult
        B, S, D = (int(d) for d in (X.shape[0], X.shape[1], X.shape[3]))
        BK = max(triton.next_power_of_2(N * D) // 2, 1)
        NS = triton.cdiv(N * D, BK)
        x = X.contiguous()
        pre, post, comb, u = imhc.empty_outputs(X, N)
        R, BR, BN = B * S, imhc._BR_FINISH, triton.next_power_of_2(N)
        BD = min(triton.next_power_of_2(D), imhc._BD_MAX)
        if R:
            part = imhc.partials(w, x, BK)                             # our partial, the GPU's tl.dot included
            # the bug: the finish sums NS - 1 chunks of each row
            mhc_coeff_finish_fwd_kernel[(triton.cdiv(R, BR), triton.cdiv(D, BD))](
                part[:, :NS - 1].contiguous(), w.base.contiguous(), w.scale.contiguous(), x, pre, post, comb, u,
                R, w.sinkhorn_iters, float(w.hc_eps), float(w.rms_eps),
                N=N, D=D, NS=NS - 1, BR=BR, BN=BN, BS=triton.next_power_of_2(NS - 1), BD=BD,
                num_warps=imhc._FINISH_WARPS)
        return pre, post, comb
