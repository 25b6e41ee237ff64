"""TEMPLATE: gate your own kernels with glmgate. Copy this file next to your code and fill it in.

As shipped, every function below hands its inputs to glmgate's plain-torch baseline, so the file passes
the gate unchanged (tests/test_adapter_template.py holds it to that): replace each body marked
`YOUR KERNEL` with a call to yours, delete what you do not provide, and gate it:

    glmgate gate --candidate my_adapter:Candidate                     # CPU, float32 (interpreter)
    glmgate gate --candidate my_adapter:Candidate --device cuda       # GPU, bfloat16

What an adapter is for: your kernel's conventions differ from the protocol's (docs/candidates.md):
layout (head-first, [B, H, T, *]), who applies the 1/sqrt(K) scale, what states it returns (at the start
of a chunk or its end, which dtype), fused or split weights. The adapter converts at the boundary, and
each conversion is a place a real bug lives: the gate judges the adapter together with your kernel.

The rules the gate holds every namespace to:
  - the functions are the protocol's, by name and signature (impl/<mechanism>.py host functions; the
    containers in oracle/types.py); any subset of them: the rest come from glmgate's Triton
    implementation, whose compositions call yours (our kda.sublayer calls your chunked)
  - `@staticmethod` (or module functions, or an instance): a plain method would bind q to `self`
  - an output you do not compute: leave it None and declare it in NOT_PROVIDED (only the optional ones,
    `glmgate gate` lists them); its comparisons are then "not covered", never silently skipped
  - `warmup(shapes)` (optional): compile or autotune before the first example; the gate passes every
    shape its checks draw (dicts with device, dtype and, for KDA, heads, head_dim, varlen), reports its
    time apart, and stops with a usage error when it raises
  - raise ValueError naming the argument for inputs you refuse: the checks also hand over bad inputs
    (wrong shapes, NaN where none may be) and expect a clear refusal
"""
from __future__ import annotations

import torch

from impl.baseline.kda import kda as _reference_kda     # stands in for YOUR KERNEL until you replace it
from impl.baseline.moe import moe as _reference_moe


class KDA:
    """The kda namespace: `chunked` only here (recurrent, decode, sublayer: glmgate's own)."""

    # e.g. ("chunked.boundary_states",) when your prefill does not keep the state after every full chunk
    NOT_PROVIDED = ()

    @staticmethod
    def chunked(q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
        """q, k, g [B, T, H, K] (q L2-normalised and already scaled by K^-1/2), v [B, T, H, V], beta
        [B, T, H], state [B or N, H, K, V] float32 -> (o [B, T, H, V] in q's dtype, state float32,
        boundary states [B, T // 64, H, K, V] float32 (sum of len // 64 rows with cu_seqlens) or None)."""
        # YOUR KERNEL: convert the layout to yours (e.g. q.transpose(1, 2) for head-first), call it with
        # scale=1.0 (q is scaled already), convert the outputs back
        return _reference_kda.chunked(q, k, v, g, beta, state, chunk, cu_seqlens, boundary_states)

    @staticmethod
    def warmup(shapes) -> None:
        """Called once before the first example with every shape the checks draw."""
        for s in shapes:
            if s["device"] != "cuda":
                continue                    # YOUR KERNEL: e.g. one call per shape to trigger its autotuner
            torch.cuda.synchronize()


class MoE:
    """The moe namespace: `experts` only here (route, shared_expert, dense_mlp, forward: glmgate's own,
    and our forward calls your experts)."""

    @staticmethod
    def experts(w, x, routing):
        """w: MoEWeights; x [..., D]; routing: Routing (expert_ids, weights [N, k]) -> y [..., D] in x's
        dtype. bf16 / float32 expert weights only, as written: a kernel that also runs NVFP4 experts adds
        the keywords `nvfp4=None, w4a4=False` (glmgate passes them only for NVFP4 experts; docs/candidates.md,
        MoE and NVFP4)."""
        # YOUR KERNEL
        return _reference_moe.experts(w, x, routing)


class Candidate:
    """`--candidate my_adapter:Candidate`: one attribute per mechanism you provide (kda, dsa, mla, mhc,
    moe, nvfp4), and optionally `model` (a model port) and `serving` (an engine class)."""

    kda = KDA
    moe = MoE
