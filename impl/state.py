"""HybridState over torch tensors: oracle.state.HybridState with copies / bytes that keep torch.

The per-layer containers (KDAState, DSACache) and the checks are the oracle's; only the methods that
touch the arrays themselves (equal, snapshot, fork, truncate, serialize, deserialize) are replaced so
that tensors stay torch tensors on their device and in their dtype (KDA recurrent float32, SPEC §2).
"""
from __future__ import annotations

import json
from typing import Optional, Sequence, Union

import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from oracle.config import LINEAR, Geometry
from oracle.state import HybridState as _OracleState
from oracle.state import StateError, _metadata
from oracle.types import DSACache, KDAState

__all__ = ["HybridState", "StateError"]

_FORMAT = "glmgate.impl.HybridState"
_VERSION = "1"


def _copy(a):
    return None if a is None else a.detach().clone()


def _copy_entry(e):
    return None if e is None else e.map(_copy)


class HybridState(_OracleState):
    """oracle.state.HybridState holding torch tensors (float32 KDA recurrent, working-dtype rest)."""

    @classmethod
    def empty(cls, geometry_or_layer_types: Union[Geometry, Sequence[str]]) -> "HybridState":
        types = getattr(geometry_or_layer_types, "layer_types", geometry_or_layer_types)
        return cls(tuple(types), [None] * len(types), 0)

    @property
    def device(self) -> Optional[torch.device]:
        for e in self.layers:
            if e is not None:
                return (e.recurrent if isinstance(e, KDAState) else e.latent).device
        return None

    def equal(self, other: "HybridState") -> bool:
        if self.layer_types != other.layer_types or self.seq_len != other.seq_len:
            return False
        for a, b in zip(self.layers, other.layers):
            if (a is None) != (b is None) or type(a) is not type(b):
                return False
            if a is None:
                continue
            for x, y in zip(a, b):
                if (x is None) != (y is None):
                    return False
                if x is not None and not (x.shape == y.shape and x.dtype == y.dtype
                                          and torch.equal(x.nan_to_num(0.123), y.nan_to_num(0.123))
                                          and torch.equal(x.isnan(), y.isnan())):
                    return False
        return True

    def snapshot(self) -> "HybridState":
        return HybridState(self.layer_types, [_copy_entry(e) for e in self.layers], self.seq_len)

    def fork(self) -> "HybridState":
        return self.snapshot()

    def truncate(self, n_tokens: int) -> "HybridState":
        """A copy keeping the first n_tokens of every DSA cache; KDA layers cannot be cut (StateError)."""
        if isinstance(n_tokens, bool) or not isinstance(n_tokens, int) or not 0 <= n_tokens <= self.seq_len:
            raise StateError(f"truncate: n_tokens={n_tokens!r}, expected an int in [0, seq_len={self.seq_len}]")
        if n_tokens < self.seq_len:
            kda = [i for i in self.kda_layers if self.layers[i] is not None]
            if kda:
                raise StateError(f"truncate: cannot cut the cache from {self.seq_len} to {n_tokens} tokens: "
                                 f"layer {kda[0]} is a linear_attention (KDA) layer whose recurrent state cannot "
                                 f"be truncated (KDA layers: {kda}); snapshot() before speculating")
        layers = []
        for e in self.layers:
            if isinstance(e, DSACache):
                e = DSACache(_copy(e.latent[:, :n_tokens]),
                             None if e.index_rows is None else _copy(e.index_rows[:, :n_tokens]))
            else:
                e = _copy_entry(e)
            layers.append(e)
        return HybridState(self.layer_types, layers, n_tokens)

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

    def serialize(self) -> bytes:
        """safetensors bytes of every cached tensor (its own dtype, exact), layer types and seq_len."""
        tensors = {}
        for i, e in enumerate(self.layers):
            if e is None:
                continue
            for field, a in zip(e._fields, e):
                if a is not None:
                    tensors[f"layers.{i}.{field}"] = a.detach().to("cpu").contiguous()
        meta = {"format": _FORMAT, "version": _VERSION, "seq_len": str(self.seq_len),
                "layer_types": json.dumps(list(self.layer_types))}
        return st_save(tensors, metadata=meta)

    @classmethod
    def deserialize(cls, data: bytes, device="cpu") -> "HybridState":
        try:
            tensors = st_load(bytes(data))
            meta = _metadata(bytes(data))
        except Exception as e:
            raise StateError(f"deserialize: not a serialized HybridState ({e})") from e
        if meta.get("format") != _FORMAT or meta.get("version") != _VERSION:
            raise StateError(f"deserialize: metadata {meta!r}, expected format {_FORMAT!r} version {_VERSION!r}")
        types = tuple(json.loads(meta["layer_types"]))
        layers: list = [None] * len(types)
        seen = set()
        for i, kind in enumerate(types):
            names = KDAState._fields if kind == LINEAR else DSACache._fields
            got = {f: tensors.get(f"layers.{i}.{f}") for f in names}
            got = {f: None if a is None else a.to(device) for f, a in got.items()}
            seen.update(f"layers.{i}.{f}" for f, a in got.items() if a is not None)
            if all(a is None for a in got.values()):
                continue
            if kind == LINEAR:
                if got["recurrent"] is None or got["conv"] is None:
                    raise StateError(f"deserialize: layer {i} (KDA) needs both recurrent and conv")
                layers[i] = KDAState(got["recurrent"], got["conv"])
            else:
                if got["latent"] is None:
                    raise StateError(f"deserialize: layer {i} (DSA) has index_rows but no latent")
                layers[i] = DSACache(got["latent"], got["index_rows"])
        extra = sorted(set(tensors) - seen)
        if extra:
            raise StateError(f"deserialize: unexpected tensor {extra[0]!r}")
        return cls(types, layers, int(meta["seq_len"]))
