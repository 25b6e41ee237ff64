"""MoE mutants: each a TorchMoE (impl/baseline/moe.py) overriding ONE small method."""
from __future__ import annotations

import torch

from impl.baseline.moe import TorchMoE
from impl.mutants.catalogue import mutant


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
