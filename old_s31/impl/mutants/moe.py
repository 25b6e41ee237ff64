"""MoE mutants: each a TorchMoE (impl/baseline/moe.py) overriding ONE small method, or a TritonMoE whose
forward launches our kernels with one planted source edit."""
from __future__ import annotations

import functools

import torch
import triton.language as tl

from impl import moe as imoe
from impl.baseline.moe import TorchMoE
from impl.mutants.catalogue import edited_helper, kernel_edited, mutant


@mutant("moe.route", "weights")
class MoeBiasInWeights(TorchMoE):
    """The mixture weights are made of the biased selection scores sigmoid + bias, not the raw sigmoid."""

    def _picked(self, s, bias, ids):
        return torch.gather(s + bias, -1, ids)


@mutant("moe.forward", "output")
class MoeTwoSidedGateClamp(TorchMoE):
    """The SwiGLU gate is clamped on both sides, clip(gate, -L, L) (SPEC: from above only)."""

    def _clamp_gate(self, gate, limit):
        return gate.clamp(-limit, limit)


@mutant("moe.route", "weights")
class MoeScalingBeforeNorm(TorchMoE):
    """routed_scaling_factor multiplies before the renormalization, which then cancels it (weights sum to 1)."""

    def mixture_weights(self, picked, norm_topk_prob, routed_scaling_factor):
        picked = picked * routed_scaling_factor
        if norm_topk_prob:
            picked = picked / (picked.sum(dim=-1, keepdim=True) + 1e-20)
        return picked


@mutant("moe.route", "expert_ids")
class MoeTop1GroupScore(TorchMoE):
    """A group's score is its single best biased score, not the sum of its top 2."""

    def group_scores(self, biased, n_group):
        N, E = biased.shape
        return biased.reshape(N, n_group, E // n_group).amax(dim=-1)


@mutant("moe.forward", "inputs_unchanged")
class MoeForwardOutputInInput(TorchMoE):
    """forward writes its result over its input x (a kernel's output aliasing an input, NVIDIA/apex#1430)."""

    def forward(self, w, x):
        y = super().forward(w, x)
        # the numbers returned are right: only the caller's x is gone
        return x.copy_(y)


# ---------------------------------------------------------------- adversarial routing (issue 13 item 8)
# caught only where the working dtype is bf16: in float32 the cast is the identity
@mutant("moe.route", "expert_ids", dtype="bfloat16")
class MoeBiasInWorkingDtype(TorchMoE):
    """The correction bias is cast to the working dtype (bf16) before it is added (sglang #31213)."""

    def _selection_bias(self, bias, dtype, acc):
        return bias.to(dtype).to(acc)


@mutant("moe.route", "expert_ids")
class MoeDroppedGroupsMaskedZero(TorchMoE):
    """Dropped groups' experts are masked with 0.0, not -inf: they beat a negative kept score (sglang #3705)."""

    def _mask_dropped(self, biased, keep):
        return torch.where(keep, biased, torch.zeros_like(biased))


@mutant("moe.route", "weights")
class MoeTieAtCutNan(TorchMoE):
    """Weights are NaN when an unchosen key s + bias equals the k-th pick's bit for bit (sglang #30989)."""

    def _picked(self, s, bias, ids):
        keys = s + bias
        kth = torch.gather(keys, -1, ids[:, -1:])                  # ids are best first
        rest = keys.scatter(-1, ids, -torch.inf)
        straddles = (rest == kth).any(dim=-1, keepdim=True)
        picked = torch.gather(s, -1, ids)
        return torch.where(straddles, torch.full_like(picked, torch.nan), picked)


@mutant("moe.batch", "batch")
class MoeCapacityDropsTokens(TorchMoE):
    """Each expert keeps at most ceil(N·k / E) of its routed tokens and drops the rest, so a token's output follows its companions' choices (capacity-factor token dropping, deepseek-ai/DeepSeek-V2 #48)."""

    def _routed_rows(self, ids, e, num_experts):
        n, slot = super()._routed_rows(ids, e, num_experts)
        cap = -(-ids.numel() // num_experts)
        return n[:cap], slot[:cap]


@mutant("moe.rerun", "rerun")
class MoeRouterTiesRaced(TorchMoE):
    """Experts whose selection keys tie exactly at the k-th place are picked in a run-dependent order (a top-k with no stable tie-break, pytorch/torchtitan #3336)."""

    def _pick(self, biased, k):
        # a fresh expert order per call: which of exactly tied experts sorts first changes from run to run
        perm = torch.randperm(biased.shape[-1], device=biased.device)
        return perm[super()._pick(biased[:, perm], k)]


class TritonMOE:
    """Our Triton moe namespace (impl/moe.py) as a class: the base of mutants that plant one edit in a kernel
    its `forward` launches."""

    BATCH_INVARIANT = imoe.BATCH_INVARIANT
    route = staticmethod(imoe.route)
    experts = staticmethod(imoe.experts)
    dense_mlp = staticmethod(imoe.dense_mlp)
    shared_expert = staticmethod(imoe.shared_expert)
    forward = staticmethod(imoe.forward)


@mutant("moe.forward", "output", base="triton")
class MoeAlignBlockTaggedLeft(TritonMOE):
    """The decode alignment tags each block with the experts ending strictly before it (a left search, not a right one), so an expert's first block runs the previous expert's weights."""

    def forward(self, w, x, nvfp4=None, w4a4=False, *, ops=None):
        with kernel_edited(imoe, "moe_align_fwd_kernel", "(pend // BM)[None, :] <= o_b[:, None]",
                           "(pend // BM)[None, :] < o_b[:, None]"):
            return imoe.forward(w, x, nvfp4, w4a4, ops=ops)


@mutant("moe.forward", "output", base="triton")
class MoeAlignPadsPointAtLastPair(TritonMOE):
    """The decode alignment fills its pad slots with the last pair's id instead of the pad marker P, so every padded block row recomputes the last pair with that block's expert and overwrites its output."""

    def forward(self, w, x, nvfp4=None, w4a4=False, *, ops=None):
        with kernel_edited(imoe, "moe_align_fwd_kernel", "+ P, mask=o_s < NB * BM)", "+ P - 1, mask=o_s < NB * BM)"):
            return imoe.forward(w, x, nvfp4, w4a4, ops=ops)


@mutant("moe.forward", "output", base="triton")
class MoeCombineDropsLastSlot(TritonMOE):
    """The slot sum stops one slot early, so each token's last routed expert is left out of its output."""

    def forward(self, w, x, nvfp4=None, w4a4=False, *, ops=None):
        with kernel_edited(imoe, "moe_combine_fwd_kernel", "tl.static_range(1, TOP_K)", "tl.static_range(1, TOP_K - 1)"):
            return imoe.forward(w, x, nvfp4, w4a4, ops=ops)


@functools.lru_cache(maxsize=None)
def _pairs_high_sign_from_low():
    """The PAIRS helper whose PTX shifts the high nibbles' sign (bit 7 of each byte) by 12, the low nibble's
    shift, so bit 3 (the low nibble's sign) lands in the high nibble's sign bit (edited once, cached)."""
    from impl.kernels import moe as km
    asm = km._E2M1X2_ASM.value
    assert asm.count("shl.b32 b, t0, 8;") == 1, "the PAIRS PTX changed: update the planted edit"
    bad = tl.constexpr(asm.replace("shl.b32 b, t0, 8;", "shl.b32 b, t0, 12;"))
    return edited_helper(km._nvfp4_halves_x2, "tl.inline_asm_elementwise(_E2M1X2_ASM,",
                         "tl.inline_asm_elementwise(_E2M1X2_ASM_PLANTED,", (("_E2M1X2_ASM_PLANTED", bad),))


# GPU only: PAIRS is inline PTX, which runs in compiled kernels on a CUDA GPU (bf16 dots), never on the CPU
@mutant("nvfp4.gate", "kernel_w4a16", base="triton", device="cuda", namespace="moe")
class Nvfp4PairsHighNibbleLowSign(TritonMOE):
    """The two-codes-per-instruction NVFP4 dequantization gives half of the high nibbles the low nibble's sign (a PTX shift of 12 where 8 belongs)."""

    def experts(self, w, x, routing, nvfp4=None, w4a4=False):
        with kernel_edited(imoe, "moe_down_fwd_kernel", "b_we, b_wo = _nvfp4_halves_x2(",
                           "b_we, b_wo = _nvfp4_halves_x2_planted(",
                           (("_nvfp4_halves_x2_planted", _pairs_high_sign_from_low()),)):
            return imoe.experts(w, x, routing, nvfp4, w4a4)
