"""flash-linear-attention's KDA kernels (fla-core 0.6) as a glmgate candidate.

Covers (GPU only: fla's kernels are Triton for CUDA):
  kda.recurrent  fla.ops.kda.fused_recurrent_kda
  kda.chunked    fla.ops.kda.chunk_kda; the boundary states are rebuilt from its intermediate states
Not covered: kda.decode (fla has no one-token step over our KDAWeights: conv window, gate and delta step
in one call) and kda.sublayer. Both come from glmgate's own Triton implementation, whose sublayer calls
fla's chunked, so the whole-decoder checks run fla's chunked prefill too.

    glmgate gate --candidate adapters.fla_kda:Candidate --device cuda --mechanism kda

What the adapter undoes (each a bug when forgotten):
  scale   our q arrives L2-normalised AND scaled by K^-1/2, so fla is called with scale=1.0 and without
          its in-kernel L2 norm
  gates   our g is the log-decay already (fla's use_gate_in_kernel=False) and beta is post-sigmoid
  states  fla returns the state at the START of every chunk (a trailing partial chunk included), in
          bfloat16, [B, NT, H, K, V] (with cu_seqlens B is 1 and NT counts every document's chunks in
          order); ours is the state at the END of every FULL chunk in float32. So the boundary states
          carry fla's bfloat16 rounding: judge them at --dtype bfloat16, the dtype fla keeps them in
  empty   a zero-length document has no chunk in fla's list; its state passes through unchanged

`warmup(shapes)` compiles and autotunes fla's kernels for every shape the checks will draw before the
first example (`glmgate gate --warmup`), so that cost is not charged to the examples.
"""
from __future__ import annotations

import torch

CHUNK = 64
_INSTALL = "pip install fla-core==0.6.0 (flash-linear-attention's kernels; they need a CUDA GPU)"


def _fla():
    """(chunk_kda, fused_recurrent_kda), or ImportError saying how to get them."""
    try:
        from fla.ops.kda import chunk_kda, fused_recurrent_kda
    except ImportError as e:
        raise ImportError(f"adapters.fla_kda needs flash-linear-attention: {_INSTALL} ({e})") from e
    return chunk_kda, fused_recurrent_kda


def _on_gpu(q) -> None:
    if q.device.type != "cuda":
        raise ValueError(f"adapters.fla_kda: fla's kernels run on CUDA only, got q on {q.device} "
                         f"(run the gate with --device cuda)")


def _lengths(B: int, T: int, cu_seqlens) -> list[int]:
    """Token count of every independent sequence, in fla's chunk-list order."""
    if cu_seqlens is None:
        return [T] * B
    cu = [int(c) for c in cu_seqlens.tolist()]
    return [b - a for a, b in zip(cu, cu[1:])]


def end_states(starts, final, lengths) -> torch.Tensor:
    """Our boundary states from fla's chunk-start states: full chunk j of a sequence ends where its
    chunk j + 1 starts; its last chunk, when full, ends at the sequence's final state.

    starts: [R, NT, H, K, V] (R batch rows, or 1 row of every sequence's chunks);  final: [N, H, K, V]
    Returns [sum_n lengths[n] // 64, H, K, V] float32, sequence-major.
    """
    flat, rows, at = starts.flatten(0, 1).float(), [], 0
    for n, length in enumerate(lengths):
        m = -(-length // CHUNK)                          # its chunks in fla's list, a partial one included
        following = torch.cat([flat[at + 1:at + m], final[n:n + 1].float()])
        rows.append(following[:length // CHUNK])
        at += m
    return torch.cat(rows) if rows else final.new_zeros(0, *final.shape[1:])


class KDA:
    """The kda namespace: recurrent and chunked from fla; decode and sublayer from glmgate's fallback."""

    @staticmethod
    def recurrent(q, k, v, g, beta, state=None, cu_seqlens=None):
        """impl.kda.recurrent through fla's fused_recurrent_kda."""
        _on_gpu(q)
        _, fused_recurrent_kda = _fla()
        cu = None if cu_seqlens is None else cu_seqlens.to(device=q.device, dtype=torch.int64)
        o, final = fused_recurrent_kda(q, k, v, g.float(), beta, scale=1.0, initial_state=state,
                                       output_final_state=True, use_qk_l2norm_in_kernel=False, cu_seqlens=cu)
        return o.to(q.dtype), final.float()

    @staticmethod
    def chunked(q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
        """impl.kda.chunked through fla's chunk_kda (64-token chunks, its only shared length with ours)."""
        if isinstance(chunk, bool) or chunk != CHUNK:
            raise ValueError(f"chunk: expected {CHUNK} (the chunk length fla and glmgate share), got {chunk!r}")
        _on_gpu(q)
        chunk_kda, _ = _fla()
        B, T, H = q.shape[:3]
        K, V = q.shape[-1], v.shape[-1]
        lengths = _lengths(B, T, cu_seqlens)
        cu = None if cu_seqlens is None else cu_seqlens.to(device=q.device, dtype=torch.int64)
        # return_intermediate_states is an inference-mode feature of fla (it bypasses autograd)
        with torch.inference_mode():
            o, final, h = chunk_kda(q, k, v, g.float(), beta, scale=1.0, initial_state=state,
                                    output_final_state=True, use_qk_l2norm_in_kernel=False,
                                    return_intermediate_states=True, cu_seqlens=cu)
        o, final = o.clone().to(q.dtype), final.clone().float()
        if not boundary_states:
            return o, final, None
        ends = end_states(h.clone(), final, lengths)
        if cu_seqlens is None:
            ends = ends.reshape(B, T // CHUNK, H, K, V)
        return o, final, ends

    @staticmethod
    def warmup(shapes) -> None:
        """Compile and autotune fla's kernels for each shape (dicts of heads, head_dim, dtype, device,
        varlen) once, outside the judged examples: fla autotunes per (H, K, V, varlen), not per length."""
        for s in shapes:
            dev, dt, H, K = torch.device(s["device"]), s["dtype"], s["heads"], s["head_dim"]
            if dev.type != "cuda":
                continue
            T = 2 * CHUNK + 3                       # a partial chunk after full ones: every kernel runs
            q = torch.nn.functional.normalize(torch.randn(1, T, H, K, device=dev), dim=-1).to(dt) * K ** -0.5
            k = torch.nn.functional.normalize(torch.randn(1, T, H, K, device=dev), dim=-1).to(dt)
            v = torch.randn(1, T, H, K, device=dev, dtype=dt)
            g = -torch.rand(1, T, H, K, device=dev)
            beta = torch.rand(1, T, H, device=dev).to(dt)
            cu = torch.tensor([0, CHUNK + 1, T], device=dev) if s.get("varlen") else None
            state = torch.zeros(1 if cu is None else 2, H, K, K, device=dev)
            KDA.chunked(q, k, v, g, beta, state, cu_seqlens=cu)
            KDA.recurrent(q, k, v, g, beta, state, cu_seqlens=cu)
        if torch.cuda.is_available():
            torch.cuda.synchronize()


class Candidate:
    """`--candidate adapters.fla_kda:Candidate`: fla's KDA kernels."""

    kda = KDA
