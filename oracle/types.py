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


class KDAState(NamedTuple):
    """Per-sequence KDA cache (SPEC §6.8, §10).

    recurrent: [B, H, K, V] float32 on the implementation side (rows = key channels)
    conv:      [B, C, W] the last W pre-conv inputs z, channel-major
    """

    recurrent: Any
    conv: Any

    def map(self, fn: Callable[[Any], Any]) -> "KDAState":
        return KDAState(fn(self.recurrent), fn(self.conv))
