"""Sharding mutants: each the plan of impl/sharded.py (ShardedOps) with ONE method overridden.

The model namespace's own forward stays the unsharded one; the bug lives only in how the ranks cut
the weights or sum their partials, so only model.sharded (invariants/sharded_checks.py), which runs
the decoder over torch.distributed ranks, can see it. Every rank resolves the mutant by its registry
name ("mutant:<name>") and takes its plan from the model namespace (impl.sharded.plan_of).
"""
from __future__ import annotations

import torch

from impl.mutants.catalogue import mutant
from impl.sharded import ShardedOps


@mutant("model.sharded", "logits")
class ModelShardedAttentionNotReduced(ShardedOps):
    """The attention sublayer's partial output (o_proj over the rank's heads) goes into the residual without the all-reduce (sglang #14811: reduce_results=False on a row-parallel out_proj)."""

    def all_reduce(self, y, sublayer):
        return y if sublayer == "attention" else super().all_reduce(y, sublayer)


@mutant("model.sharded", "logits")
class ModelShardedExpertsOffsetByOneShare(ShardedOps):
    """Each rank loads the weights of the NEXT rank's experts while its expert map routes its own ids to them (modeled on the class; cf. vllm-gaudi #1796, global ids not shifted to local ones under EP)."""

    def expert_slice(self, E, rank, world):
        return super().expert_slice(E, (rank + 1) % world, world)


@mutant("model.sharded", "logits")
class ModelShardedKdaGatesNotSliced(ShardedOps):
    """Every rank takes the FIRST rank's dt_bias and A_log (its head count from 0), not those of its own KDA heads (modeled on the class; cf. vllm #36242, gate values scrambled across TP ranks)."""

    def kda_gates(self, w, heads):
        return super().kda_gates(w, slice(0, heads.stop - heads.start))


@mutant("model.sharded", "kda_conv")
class ModelShardedKdaConvChannelsContiguous(ShardedOps):
    """The packed q|k|v conv channels are cut into contiguous world-ths (rank 0: all of q and half of k), not per third by heads (NVIDIA/Megatron-LM #1989, packed in_proj split evenly across TP ranks)."""

    def kda_channels(self, H, K, rank, world):
        n = 3 * H * K // world
        return torch.arange(rank * n, (rank + 1) * n)


@mutant("model.sharded", "selection")
class ModelShardedIndexerShardedOnRankZero(ShardedOps):
    """Rank 0 runs the DSA indexer on its share of the indexer heads while the other ranks replicate it, so ranks attend different pools (sglang #24654: top-k indices differing across TP ranks)."""

    def indexer(self, iw, rank, world):
        if rank != 0:
            return super().indexer(iw, rank, world)
        import dataclasses
        h, d = self.heads(iw.n_heads, rank, world), iw.head_dim
        return dataclasses.replace(iw, wq_b=iw.wq_b[h.start * d:h.stop * d], weights_proj=iw.weights_proj[h],
                                   n_heads=h.stop - h.start)


@mutant("model.sharded", "logits", dtype="float32")
class ModelShardedAllReduceInBf16(ShardedOps):
    """The sublayers' partials are summed in bf16 (and cast back) before the residual write-back, not in float32 (TensorRT-LLM #16753: all-reduce kernels accumulating in bf16)."""

    def all_reduce(self, y, sublayer):
        import torch.distributed as dist
        t = y.to(torch.bfloat16).contiguous()
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return t.to(y.dtype)


@mutant("model.sharded", "logits")
class ModelShardedOProjBiasOnEveryRank(ShardedOps):
    """MLA o_proj's bias is added on every rank before the all-reduce, so the sum holds it world times (text-generation-inference #1036: row-parallel bias multi-added by the TP degree)."""

    def o_bias(self, bias, rank):
        return bias
