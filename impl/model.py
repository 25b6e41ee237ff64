"""The whole text decoder on torch + Triton: oracle.decoder's composition (SPEC §3, §5, written once)
with torch array primitives.

`TorchDecoder` replaces only the composition's array primitives and runs any Implementation
(impl/registry.py): the impl kernels ("triton"), the plain-torch baselines ("torch", impl/baseline:
the low-precision reference of the contracts), a mutant or a candidate.

`load(checkpoint_dir, device, dtype, backend)` reads the checkpoint with oracle.checkpoint (float64) and
moves every array to torch in the working dtype (impl.weights.to_torch: float32 on the CPU, the Triton
interpreter's dtype; bfloat16 on CUDA; KDA's conv1d / dt_bias / A_log in float32, SPEC §11). An NVFP4
checkpoint's routed experts (NVFP4.md A5) run the W4A16 kernels on their codes and scales with backend
"triton" (MoEWeights.nvfp4 becomes an NVFP4Experts); the torch backend runs their dequantized values.
`Model.forward(input_ids, attention_mask=None, state=None) -> (logits float32 [B,S,V], state)`: the
given state is never mutated (a new impl.state.HybridState is returned).
"""
from __future__ import annotations

import functools
import inspect
from typing import Optional, Union

import numpy as np
import torch

import impl  # noqa: F401  (selects the Triton interpreter on CPU-only machines)
from impl import norm
from impl.graph import capturing
from impl.state import HybridState
from impl.weights import to_torch  # noqa: F401  (re-exported: invariants and tests import it from here)
from oracle import decoder
from oracle.checkpoint import load as load_weights
from oracle.config import Geometry
from oracle.decoder import Implementation
from oracle.types import KDAState, KDAWeights, LayerWeights, Selection, Weights

__all__ = ["Model", "load", "forward", "forward_packed", "decoder_layer", "effective_mask", "rmsnorm",
           "to_torch", "TorchDecoder", "backend_for"]


def rmsnorm(x, w, eps: float):
    """Weighted RMSNorm in float32 (SPEC §2): w · x · (mean(x²) + eps)^-1/2, cast back to x's dtype. One launch
    of impl/kernels/norm.py wherever kernels run (issue 14 step 14), else `rmsnorm_torch`."""
    if norm.runs_kernel(x):
        return norm.launch(x, w, eps, norm.DECODER)
    return rmsnorm_torch(x, w, eps)


def rmsnorm_torch(x, w, eps: float):
    """`rmsnorm` in torch ops (ours before issue 14 step 14; the peer of impl.candidates.norms_torch)."""
    u = x.float()
    y = u * torch.rsqrt(torch.mean(u * u, dim=-1, keepdim=True) + eps)
    return (w.float() * y).to(x.dtype)


def _plain_torch(impl: Implementation) -> bool:
    """Whether `impl` is the plain-torch baseline ("torch") or built on it (its MLA namespace the baseline's, whose
    class says PLAIN_TORCH; read through the harness's wrappers of a namespace)."""
    return bool(getattr(impl.mla, "PLAIN_TORCH", False))


@functools.lru_cache(maxsize=None)
def backend_for(name: str) -> Implementation:
    """The registry's "triton" (impl kernels) or "torch" (impl/baseline) implementation."""
    if name not in ("triton", "torch"):
        raise ValueError(f"backend: {name!r}, expected 'triton' or 'torch'")
    from impl import registry
    return registry.get(name)


def _implementation(backend: Union[str, Implementation, None]) -> Implementation:
    """None: "triton"; a name: backend_for; an Implementation (a mutant's, a candidate's): itself."""
    if backend is None:
        return backend_for("triton")
    return backend_for(backend) if isinstance(backend, str) else backend


class TorchDecoder(decoder.Decoder):
    """SPEC §3, §5 on torch tensors on `device`: norms and logits in float32, the streams in the
    weights' dtype, states as impl.state.HybridState (an oracle state is converted into `dtype`)."""

    State = HybridState

    def __init__(self, backend: Union[str, Implementation, None] = None, device="cpu",
                 dtype: torch.dtype = torch.float32):
        super().__init__(_implementation(backend))
        self.device, self.dtype = torch.device(device), dtype

    @classmethod
    def of(cls, weights: Weights, backend: Union[str, Implementation, None] = None) -> "TorchDecoder":
        """The decoder for torch Weights: their device and working dtype."""
        return cls(backend, weights.embed_tokens.device, weights.embed_tokens.dtype)

    def _rmsnorm(self, x, w, eps: float):
        # a seam (impl.registry.SEAMS): an implementation's model namespace may bring its own norm. Without one,
        # ours (one kernel launch); but the plain-torch baseline and the mutants built on it keep the torch form:
        # the baseline is the contracts' low-precision reference, no kernel of ours runs inside it (its bf16
        # near-ties, tests/test_model_paths.py, are torch's)
        own = getattr(self.impl.model, "rmsnorm", None)
        if own is None:
            own = rmsnorm_torch if _plain_torch(self.impl) else rmsnorm
        return own(x, w, eps)

    def _array(self, x):
        return (x if isinstance(x, torch.Tensor) else torch.as_tensor(np.asarray(x))).to(self.device)

    def _is_int(self, a) -> bool:
        return not (a.dtype.is_floating_point or a.dtype == torch.bool or a.is_complex())

    def _ones(self, B: int, S: int):
        return torch.ones(B, S, dtype=torch.bool, device=self.device)

    def _embed(self, table, ids):
        return table[ids.long()]

    def _cast(self, y, X):
        return y.to(X.dtype)

    def _cat(self, xs, axis: int = 0):
        return torch.cat(xs, dim=axis)

    def _logits(self, h, lm_head):
        return (h @ lm_head.T).float()

    def _own(self, state):
        return state if isinstance(state, HybridState) else HybridState.from_oracle(state, self.device, self.dtype)

    def _kda_row(self, w: KDAWeights, cache: Optional[KDAState], a) -> KDAState:
        # the kernels' state layout (SPEC §2): recurrent float32, conv window in a's dtype
        if cache is None:
            H, K = w.num_heads, w.head_dim
            return KDAState(torch.zeros(1, H, K, K, device=a.device),
                            torch.zeros(1, 3 * H * K, w.conv_width, device=a.device, dtype=a.dtype))
        return KDAState(cache.recurrent.float(), cache.conv.to(a.dtype))

    def _kda(self, w, a, docs):
        # oracle.decoder's composition reads `mask.all()` back to the host to drop an all-real mask; while
        # a CUDA graph is captured (impl.graph.capturing) the mask is always passed instead: the sublayer
        # multiplies x by it, and x · 1 is x bit for bit, so an all-real mask gives the same bits
        if docs.cu is None and capturing():
            y, cache = self.impl.kda.sublayer(w, a, docs.caches[0], docs.mask)
            return y, [cache]
        return super()._kda(w, a, docs)

    def _moe_options(self, lw: LayerWeights) -> dict:
        # W4A16 on the checkpoint's codes whenever the implementation's MoE takes them (ours, and every
        # candidate or mutant built on it); one that does not (the torch baseline) runs the exact
        # dequantization. Deciding by the implementation's NAME sent every candidate down the
        # dequantized path, so a replay's peer ran another MoE than the one it was meant to time.
        if lw.mlp.nvfp4 is not None and _takes(self.impl.moe.forward, "nvfp4"):
            return {"nvfp4": lw.mlp.nvfp4}
        return {}


def _takes(fn, name: str) -> bool:
    """Whether callable fn accepts a parameter called `name` (by name, or through **kwargs)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == name or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def effective_mask(attention_mask, B: int, S: int, device="cpu") -> torch.Tensor:
    """SPEC §3 (Decoder.effective_mask) as a bool tensor [B, S] on `device`."""
    return TorchDecoder(device=device).effective_mask(attention_mask, B, S)


def decoder_layer(lw: LayerWeights, g: Geometry, X, mask, cache, prev: Optional[Selection],
                  backend: Union[str, Implementation, None] = None):
    """SPEC §5 (Decoder.decoder_layer) on torch tensors: X [B, S, N, D], mask [B, S] bool -> (X, cache, sel)."""
    return TorchDecoder(backend, X.device, X.dtype).decoder_layer(lw, g, X, mask, cache, prev)


def forward(weights: Weights, input_ids, state: Optional[HybridState] = None, attention_mask=None,
            backend: Union[str, Implementation, None] = None):
    """SPEC §3 (Decoder.forward) on torch Weights (see `to_torch`): (logits float32 [B,S,V], impl
    HybridState); a float64 NumPy oracle state is converted first."""
    return TorchDecoder.of(weights, backend).forward(weights, input_ids, state, attention_mask)


def deserialize(data: bytes, device="cpu") -> HybridState:
    """A state back from `HybridState.serialize()` bytes, on `device` (the model namespace's restore)."""
    return HybridState.deserialize(data, device=device)


def forward_packed(weights: Weights, input_ids, cu_seqlens, states, backend: Union[str, Implementation, None] = None):
    """SERVING.md P4 (Decoder.forward_packed) on torch: (logits float32 [T, V], one new impl
    HybridState per document). No state given is mutated."""
    return TorchDecoder.of(weights, backend).forward_packed(weights, input_ids, cu_seqlens, states)


class Model(decoder.Model):
    """The whole decoder on torch (SPEC §3): oracle.decoder.Model over a TorchDecoder, without autograd.

    backend: "triton" (impl kernels), "torch" (impl/baseline), or any Implementation (a mutant's or a
    candidate's mechanism namespaces)."""

    def __init__(self, weights: Weights, backend: Union[str, Implementation] = "triton"):
        super().__init__(weights, TorchDecoder.of(weights, backend))

    @property
    def backend(self) -> Implementation:
        return self.decoder.impl

    @property
    def device(self) -> torch.device:
        return self.weights.embed_tokens.device

    @property
    def dtype(self) -> torch.dtype:
        return self.weights.embed_tokens.dtype

    def forward(self, input_ids, attention_mask=None, state: Optional[HybridState] = None):
        """SPEC §3 (logits float32 [B, S, V], state): oracle.decoder.Model.forward on torch."""
        with torch.no_grad():
            return super().forward(input_ids, attention_mask, state)

    def forward_packed(self, input_ids, cu_seqlens, states):
        """SERVING.md P4 (logits float32 [T, V], one new HybridState per document)."""
        with torch.no_grad():
            return super().forward_packed(input_ids, cu_seqlens, states)


def load(checkpoint_dir, device="cpu", dtype: Optional[torch.dtype] = None, backend: str = "triton") -> Model:
    """oracle.checkpoint.load + every array to torch on `device` in the working dtype -> Model.

    dtype: default float32 on the CPU (the Triton interpreter), bfloat16 on CUDA. An NVFP4 checkpoint
    (either layout) runs its experts' codes and scales on "triton", their dequantization on "torch".
    """
    device = torch.device(device)
    if dtype is None:
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    backend_for(backend)
    return Model(to_torch(load_weights(checkpoint_dir), device, dtype, nvfp4=backend == "triton"), backend)
