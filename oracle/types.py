"""Plain containers shared by oracle/ and impl/ (no math here).

Letters: B batch, S tokens of this call, H KDA heads (h), K key dim (d), V value dim (d),
D hidden size, C conv channels (3·H·K), W conv kernel width (linear_conv_kernel_dim).

The same containers hold float64 NumPy arrays on the oracle side and torch tensors on the
implementation side; `map` converts every array field at once.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple, Optional

KDA_ARRAYS = (
    "q_proj", "k_proj", "v_proj", "conv1d", "f_a_proj", "f_b_proj", "dt_bias", "A_log",
    "b_proj", "g_a_proj", "g_b_proj", "o_norm", "o_proj",
)


@dataclasses.dataclass(frozen=True)
class KDAWeights:
    """One KDA sublayer's parameters (SPEC §6, §11 names without the `self_attn.` prefix).

    Args:
        q_proj, k_proj, v_proj: [H·K, D]      conv1d: [C, W] (the checkpoint's [C, 1, W] squeezed)
        f_a_proj: [K, D]   f_b_proj: [H·K, K]  dt_bias: [H·K]   A_log: [H]
        b_proj: [H, D]     g_a_proj: [K, D]    g_b_proj: [H·K, K]
        o_norm: [K]        o_proj: [D, H·V]
        lower_bound: the safe-gate bound (-5.0), or None for the softplus gate (SPEC §6.4)
        eps: rms_norm_eps of the gated output norm (SPEC §6.7)
    """

    q_proj: Any
    k_proj: Any
    v_proj: Any
    conv1d: Any
    f_a_proj: Any
    f_b_proj: Any
    dt_bias: Any
    A_log: Any
    b_proj: Any
    g_a_proj: Any
    g_b_proj: Any
    o_norm: Any
    o_proj: Any
    lower_bound: Optional[float] = -5.0
    eps: float = 1e-5

    @property
    def num_heads(self) -> int:
        return int(self.A_log.shape[0])

    @property
    def head_dim(self) -> int:
        return int(self.o_norm.shape[0])

    @property
    def conv_width(self) -> int:
        return int(self.conv1d.shape[-1])

    def map(self, fn: Callable[[Any], Any]) -> "KDAWeights":
        """Apply `fn` to every array field (e.g. to move to torch, a device, a dtype)."""
        return dataclasses.replace(self, **{n: fn(getattr(self, n)) for n in KDA_ARRAYS})

    def validate(self, hidden: Optional[int] = None) -> None:
        """Check every shape against H, K, W (and D if given); raise naming the tensor."""
        H, K, W = self.num_heads, self.head_dim, self.conv_width
        D = hidden if hidden is not None else int(self.q_proj.shape[1])
        want = {
            "q_proj": (H * K, D), "k_proj": (H * K, D), "v_proj": (H * K, D),
            "conv1d": (3 * H * K, W), "f_a_proj": (K, D), "f_b_proj": (H * K, K),
            "dt_bias": (H * K,), "A_log": (H,), "b_proj": (H, D), "g_a_proj": (K, D),
            "g_b_proj": (H * K, K), "o_norm": (K,), "o_proj": (D, H * K),
        }
        for name, shape in want.items():
            got = tuple(getattr(self, name).shape)
            if got != shape:
                raise ValueError(f"KDAWeights.{name}: shape {got}, expected {shape} "
                                 f"(H={H}, K={K}, W={W}, D={D})")
        if self.lower_bound is not None and not self.lower_bound < 0:
            raise ValueError(f"KDAWeights.lower_bound: {self.lower_bound}, expected < 0 or None")


def core_shapes(q, k, v, g, beta, state, cu_seqlens):
    """The KDA core's shape rules (oracle/kda.py docstring), shared by every side.

    Works on anything with `.shape` (NumPy or torch); cu_seqlens may be a list, array or tensor.
    Returns (B, T, H, K, V, n, cu) with n the number of sequences and cu the offsets as a list (or None);
    raises ValueError naming the argument and the expected value.
    """
    if len(q.shape) != 4:
        raise ValueError(f"q: expected [B, T, H, K], got shape {tuple(q.shape)}")
    B, T, H, K = (int(d) for d in q.shape)
    if len(v.shape) != 4:
        raise ValueError(f"v: expected [B, T, H, V], got shape {tuple(v.shape)}")
    V = int(v.shape[-1])
    for name, a, want in (("k", k, (B, T, H, K)), ("v", v, (B, T, H, V)),
                          ("g", g, (B, T, H, K)), ("beta", beta, (B, T, H))):
        if tuple(a.shape) != want:
            raise ValueError(f"{name}: expected shape {want} (from q {tuple(q.shape)}), got {tuple(a.shape)}")
    cu = None
    n = B
    if cu_seqlens is not None:
        if B != 1:
            raise ValueError(f"cu_seqlens given: expected batch 1 (packed), got q batch {B}")
        if len(getattr(cu_seqlens, "shape", (len(cu_seqlens),))) != 1 or len(cu_seqlens) < 2:
            raise ValueError(f"cu_seqlens: expected 1-D [N+1] with N >= 1, got "
                             f"shape {tuple(getattr(cu_seqlens, 'shape', (len(cu_seqlens),)))}")
        cu = [int(c) for c in (cu_seqlens.tolist() if hasattr(cu_seqlens, "tolist") else cu_seqlens)]
        if cu[0] != 0 or cu[-1] != T:
            raise ValueError(f"cu_seqlens: expected to start at 0 and end at T={T}, got {cu}")
        if any(b < a for a, b in zip(cu, cu[1:])):
            raise ValueError(f"cu_seqlens: expected non-decreasing offsets, got {cu}")
        n = len(cu) - 1
    if state is not None and tuple(state.shape) != (n, H, K, V):
        raise ValueError(f"state: expected shape {(n, H, K, V)}, got {tuple(state.shape)}")
    return B, T, H, K, V, n, cu


class KDAState(NamedTuple):
    """Per-sequence KDA cache (SPEC §6.8, §10).

    recurrent: [B, H, K, V] float32 on the implementation side (rows = key channels)
    conv:      [B, C, W] the last W pre-conv inputs z, channel-major
    """

    recurrent: Any
    conv: Any

    def map(self, fn: Callable[[Any], Any]) -> "KDAState":
        return KDAState(fn(self.recurrent), fn(self.conv))
