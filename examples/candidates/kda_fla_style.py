"""A KDA candidate: a chunked-prefill kernel with flash-linear-attention-style conventions, wrapped.

`head_first_chunk_kda` stands in for your kernel (it is built on our plain-torch baseline, so it is
correct). It differs from the protocol's `chunked` (impl/kda.py) in three ways the wrapper undoes:

  layout  head-first: q, k, g [B, H, T, K], v [B, H, T, V], beta [B, H, T]; ours are [B, T, H, *]
  scale   it multiplies q by `scale` itself; our q arrives L2-normalised AND already scaled by K^-1/2,
          so the wrapper passes scale=1.0 (K^-1/2 again would scale q twice)
  states  it returns h, the state at the START of every chunk (a trailing partial chunk included) in
          k's dtype: [B, H, NT, K, V], NT = ceil(T / 64); with cu_seqlens B is 1 and NT counts the
          chunks of every document in order. Ours: the state at the END of every FULL chunk, float32.

Gate it from this directory:  glmgate gate --candidate kda_fla_style:KDA --mechanism kda
"""
from __future__ import annotations

import torch

from impl.baseline.kda import check_core_inputs
from impl.baseline.kda import kda as _baseline

CHUNK = 64


def _documents(B: int, T: int, cu_seqlens) -> list[tuple[int, int, int]]:
    """(batch row, start, end) of every independent sequence."""
    if cu_seqlens is None:
        return [(b, 0, T) for b in range(B)]
    cu = [int(c) for c in cu_seqlens.tolist()]
    return [(0, s, e) for s, e in zip(cu, cu[1:])]


def head_first_chunk_kda(q, k, v, g, beta, scale, initial_state=None, cu_seqlens=None):
    """The stand-in kernel, one chunk at a time so that it sees each chunk's starting state.

    Args:
        q, k, g: [B, H, T, K];  v: [B, H, T, V];  beta: [B, H, T];  scale: multiplies q
        initial_state: [N, H, K, V] float32 or None (zeros);  cu_seqlens: [N+1] (B == 1) or None
    Returns:
        o: [B, H, T, V] in q's dtype;  final: [N, H, K, V] float32;
        h: [B, H, NT, K, V] in k's dtype, the state before each chunk's first token
    """
    q, k, v, g, beta = (a.transpose(1, 2) for a in (q * scale, k, v, g, beta))    # -> [B, T, H, *]
    B, T, H, K = q.shape
    o = torch.zeros(B, T, H, v.shape[-1], dtype=q.dtype, device=q.device)
    finals, starts = [], [[] for _ in range(B)]
    for i, (b, s, e) in enumerate(_documents(B, T, cu_seqlens)):
        M = (torch.zeros(1, H, K, v.shape[-1], device=q.device) if initial_state is None
             else initial_state[i:i + 1].float())
        for c0 in range(s, e, CHUNK):
            c = slice(c0, min(c0 + CHUNK, e))
            starts[b].append(M[0])
            o[b:b + 1, c], M, _ = _baseline.chunked(q[b:b + 1, c], k[b:b + 1, c], v[b:b + 1, c],
                                                    g[b:b + 1, c], beta[b:b + 1, c], M, CHUNK,
                                                    boundary_states=False)
        finals.append(M[0])
    h = torch.stack([torch.stack(row) for row in starts]) if T else k.new_zeros(B, 0, H, K, v.shape[-1])
    return o.transpose(1, 2), torch.stack(finals), h.transpose(1, 2).to(k.dtype)


def end_states(starts, final, lengths):
    """States after every full chunk from the states at every chunk's start: chunk j of a document
    ends where its chunk j + 1 starts, and its last chunk, when full, ends at its final state.

    Args:
        starts: [R, NT, H, K, V] (R batch rows, or 1 row of every document's chunks);  final: [N, H, K, V]
        lengths: the N documents' token counts, in the order their chunks appear in `starts`
    Returns:
        [sum_n lengths[n] // 64, H, K, V] float32, document-major
    """
    flat, rows, at = starts.flatten(0, 1).float(), [], 0
    for n, length in enumerate(lengths):
        m = -(-length // CHUNK)                                      # its chunks, a partial one included
        following = torch.cat([flat[at + 1:at + m], final[n:n + 1].float()])
        rows.append(following[:length // CHUNK])
        at += m
    return torch.cat(rows)


class KDA:
    """The kda namespace: only `chunked`; recurrent, decode and sublayer come from our Triton
    implementation, whose sublayer calls this chunked."""

    @staticmethod
    def chunked(q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
        """impl.kda.chunked: q, k, g [B, T, H, K] (q scaled), v [B, T, H, V], beta [B, T, H], state
        [B or N, H, K, V] float32 -> (o [B, T, H, V] q's dtype, state float32, boundary states or None)."""
        if isinstance(chunk, bool) or chunk != CHUNK:
            raise ValueError(f"chunk: expected {CHUNK} (the only supported chunk length), got {chunk!r}")
        # the protocol's refusals (ValueError naming the argument) before the kernel sees anything
        check_core_inputs(q, k, v, g, beta, state, cu_seqlens)
        hf = [a.transpose(1, 2) for a in (q, k, v, g, beta)]
        o, final, h = head_first_chunk_kda(*hf, 1.0, state, cu_seqlens)
        if not boundary_states:
            return o.transpose(1, 2), final, None
        B, T = q.shape[:2]
        lengths = [e - s for _, s, e in _documents(B, T, cu_seqlens)]
        ends = end_states(h.transpose(1, 2), final, lengths)
        if cu_seqlens is None:
            ends = ends.reshape(B, T // CHUNK, *ends.shape[1:])
        return o.transpose(1, 2), final, ends
