"""HybridState over torch tensors: oracle.state.HybridState with copies / bytes that keep torch.

The per-layer containers (KDAState, DSACache), the checks and every operation are the oracle's; only
the array primitives are replaced so that tensors stay torch tensors on their device and in their
dtype (KDA recurrent float32, SPEC §2).
"""
from __future__ import annotations

from typing import Optional

import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from oracle.state import HybridState as _OracleState
from oracle.state import StateError
from oracle.types import KDAState

__all__ = ["HybridState", "StateError"]


class HybridState(_OracleState):
    """oracle.state.HybridState holding torch tensors (float32 KDA recurrent, working-dtype rest).

    Only the array primitives differ from the oracle's: copies clone, equality is torch's, and bytes
    keep each tensor's own dtype; snapshot, fork, truncate and (de)serialize are the oracle's.
    """

    FORMAT = "glmgate.impl.HybridState"

    @staticmethod
    def _copy(a):
        return None if a is None else a.detach().clone()

    @staticmethod
    def _same(x, y) -> bool:
        return (x.shape == y.shape and x.dtype == y.dtype and torch.equal(x.isnan(), y.isnan())
                and torch.equal(x.nan_to_num(0.123), y.nan_to_num(0.123)))

    @staticmethod
    def _save(tensors: dict, meta: dict) -> bytes:
        return st_save({k: a.detach().to("cpu").contiguous() for k, a in tensors.items()}, metadata=meta)

    @staticmethod
    def _load(data: bytes, device="cpu") -> dict:
        return {k: a.to(device) for k, a in st_load(data).items()}

    @staticmethod
    def _persist(a, dtype: str):
        """`a` stored as a `dtype` tensor (2 bytes an element for bfloat16; torch rounds to nearest even)."""
        return a.detach().to(getattr(torch, dtype))

    @staticmethod
    def _restore(a):
        """A persisted recurrent tensor back in float32, the state's own dtype (SPEC §2)."""
        return a.float()

    @property
    def device(self) -> Optional[torch.device]:
        for e in self.layers:
            if e is not None:
                return (e.recurrent if isinstance(e, KDAState) else e.latent).device
        return None

    def to_oracle(self) -> _OracleState:
        """The same state as float64 NumPy (oracle.state.HybridState)."""
        def f(a):
            return a.detach().to("cpu", torch.float64).numpy().copy()
        return _OracleState(self.layer_types, [None if e is None else e.map(f) for e in self.layers], self.seq_len)

    @classmethod
    def from_oracle(cls, state: _OracleState, device="cpu", dtype=torch.float32) -> "HybridState":
        """A float64 oracle state on `device`: KDA recurrent float32, every other array in `dtype`."""
        layers = []
        for e in state.layers:
            if isinstance(e, KDAState):
                e = KDAState(torch.as_tensor(e.recurrent, dtype=torch.float32, device=device),
                             torch.as_tensor(e.conv, dtype=dtype, device=device))
            elif e is not None:
                e = e.map(lambda a: torch.as_tensor(a, dtype=dtype, device=device))
            layers.append(e)
        return cls(state.layer_types, layers, state.seq_len)
