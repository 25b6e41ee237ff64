"""An MoE candidate that brings only the routed-expert GEMMs (`experts`); routing, the shared expert and
the layer's `forward` are ours, and our forward calls this `experts`.

`grouped_gate_up` / `grouped_down` stand in for your grouped GEMM (plain torch here). Their
conventions differ from the protocol's `experts` (impl/moe.py) and the wrapper converts:

  pairs    they take the (token, slot) rows already sorted by expert, with offsets [E + 1] saying
           where each expert's rows start; ours get tokens x [N, D] and a Routing (expert_ids and
           weights [N, k]), so the wrapper sorts, gathers, and after the GEMMs scales each row by its
           routing weight and sums the k slots of a token (in float32)
  weights  gate and up as two tensors [E, I, D]; ours are fused, gate_up_proj [E, 2I, D] with the
           gate rows FIRST (rows 0..I-1), then up
  NVFP4    given NVFP4 experts (nvfp4=...), the wrapper dequantizes them exactly with our plain-torch
           NVFP4 (W4A16 by dequantization); with w4a4=True it also quantize-dequantizes each GEMM's
           input with the expert's static input scale, or the dynamic one (2688 / amax over the whole
           input) when the checkpoint has none. The check nvfp4.gate calls `experts` that way because
           its signature has a `w4a4` parameter (invariants/nvfp4_checks.py: _candidate_experts).

Gate it from this directory:  glmgate gate --candidate moe_gemm_only:Candidate --mechanism moe
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from impl.baseline.nvfp4 import nvfp4 as _nvfp4
from impl.nvfp4 import check_experts, dynamic_input_scale


def grouped_gate_up(a, offsets, gate, up, limit: float):
    """The stand-in kernel, first GEMM. a [P, D] rows sorted by expert, offsets [E + 1], gate and up
    [E, I, D] -> h [P, I] float32 = silu(min(a gate_e^T, L)) · clip(a up_e^T, -L, L)."""
    h = a.new_zeros(a.shape[0], gate.shape[1], dtype=torch.float32)
    for e in range(gate.shape[0]):
        r = slice(int(offsets[e]), int(offsets[e + 1]))
        g, u = a[r].float() @ gate[e].float().T, a[r].float() @ up[e].float().T
        h[r] = F.silu(g.clamp(max=limit)) * u.clamp(-limit, limit)
    return h


def grouped_down(h, offsets, down):
    """The stand-in kernel, second GEMM. h [P, I], offsets [E + 1], down [E, D, I] -> [P, D] float32."""
    out = h.new_zeros(h.shape[0], down.shape[1], dtype=torch.float32)
    for e in range(down.shape[0]):
        r = slice(int(offsets[e]), int(offsets[e + 1]))
        out[r] = h[r].float() @ down[e].float().T
    return out


def _per_expert_qdq(rows, offsets, t, whole):
    """W4A4: rows [P, K] quantize-dequantized per expert with t's static ENCODE input scale [E], or
    one dynamic scale from `whole` (every row of this GEMM's input) when there is none."""
    E = offsets.numel() - 1
    G = t.input_global_scale if t.input_global_scale is not None else dynamic_input_scale(whole).expand(E)
    out = torch.empty_like(rows, dtype=torch.float32)
    for e in range(E):
        r = slice(int(offsets[e]), int(offsets[e + 1]))
        if r.stop > r.start:                     # an expert no token chose has no rows to quantize
            out[r] = _nvfp4.qdq_activation(rows[r], G[e]).float()
    return out


class MoE:
    """The moe namespace: `experts` only."""

    @staticmethod
    def experts(w, x, routing, nvfp4=None, w4a4=False):
        """impl.moe.experts: x [..., D], routing (expert_ids [N, k] int, weights [N, k] float32),
        nvfp4 NVFP4Experts or None, w4a4 -> y [..., D] in x's dtype = Σ_slots weight · expert(x)."""
        if w4a4 and nvfp4 is None:
            raise ValueError("w4a4: needs the NVFP4 experts (nvfp4=...): W4A4 has no bf16-weight form")
        D, E, k = int(w.router.shape[-1]), w.num_experts, w.top_k
        xs = x.reshape(-1, D)
        ids, wts = routing.expert_ids, routing.weights
        if tuple(ids.shape) != (xs.shape[0], k) or tuple(wts.shape) != (xs.shape[0], k):
            raise ValueError(f"routing: expected expert_ids and weights [N, k] = {(xs.shape[0], k)}, "
                             f"got {tuple(ids.shape)} and {tuple(wts.shape)}")
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= E):
            raise ValueError(f"routing.expert_ids: expected ids in [0, E={E}), found [{int(ids.min())}, "
                             f"{int(ids.max())}]")
        if nvfp4 is None:
            gate_up, down = w.gate_up_proj, w.down_proj
        else:
            # our validation, so that bad scales are refused naming the tensor ("nvfp4.down.block_scale")
            check_experts(nvfp4, E, D, 2 * int(nvfp4.down.packed.shape[-1]), x.device)
            gate_up, down = _nvfp4.dequantize(nvfp4.gate_up), _nvfp4.dequantize(nvfp4.down)
        I = gate_up.shape[1] // 2
        flat = ids.reshape(-1).long()
        order = torch.argsort(flat, stable=True)                       # (token, slot) pairs by expert
        offsets = torch.cat([flat.new_zeros(1), torch.bincount(flat, minlength=E).cumsum(0)])
        a = xs[order // k]
        if w4a4:
            a = _per_expert_qdq(a, offsets, nvfp4.gate_up, xs)
        h = grouped_gate_up(a, offsets, gate_up[:, :I], gate_up[:, I:], w.swiglu_limit)
        if w4a4:
            h = _per_expert_qdq(h, offsets, nvfp4.down, h)
        rows = grouped_down(h, offsets, down) * wts.reshape(-1)[order, None].float()
        y = torch.zeros(xs.shape, dtype=torch.float32, device=x.device).index_add_(0, order // k, rows)
        return y.to(x.dtype).reshape(x.shape)


class Candidate:
    moe = MoE
