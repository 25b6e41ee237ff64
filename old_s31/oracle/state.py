"""HybridState: the whole decoder's cache, one entry per layer (SPEC §10).

KDA layers ("linear_attention") hold a KDAState (recurrent [B, h, d, d], conv window [B, 3hd, K]);
DSA layers ("indexed_attention") hold a DSACache (latent [B, T, r_kv], index_rows [B, T, 2d_i + 1] or
None on "shared" layers). An entry is None until the first forward fills it.

The oracle's forward never mutates a state it is given: it returns a new HybridState whose arrays are
fresh. `snapshot` and `fork` deep-copy, so in-place edits of one never reach the other.
"""
from __future__ import annotations

import dataclasses
import json
from typing import Optional, Sequence, Union

import ml_dtypes
import numpy as np
from safetensors.numpy import load as st_load
from safetensors.numpy import save as st_save

from oracle.config import INDEXED, LINEAR, Geometry
from oracle.types import DSACache, KDAState, core_shapes

__all__ = ["HybridState", "StateError"]

_VERSION = "1"
# the dtypes a KDA recurrent state may be persisted in (serialize): None is its own (float32, exact)
PERSISTED = (None, "bfloat16")

Entry = Union[KDAState, DSACache, None]


class StateError(ValueError):
    """A state operation the cache cannot do (e.g. truncating a KDA recurrent state)."""


@dataclasses.dataclass
class HybridState:
    """Per-layer caches plus the number of tokens they cover.

    Args:
        layer_types: one per layer, "linear_attention" (KDA) or "indexed_attention" (DSA)
        layers: one entry per layer: KDAState on KDA layers, DSACache on DSA layers, None while empty
        seq_len: tokens seen so far (= T of every DSA cache)
    """

    layer_types: tuple[str, ...]
    layers: list
    seq_len: int = 0

    # the array primitives: the only part a state over other arrays (impl.state, torch) replaces
    FORMAT = "glmgate.HybridState"

    @staticmethod
    def _copy(a):
        return None if a is None else np.array(a, dtype=np.float64, copy=True)

    @staticmethod
    def _same(x, y) -> bool:
        return np.shape(x) == np.shape(y) and np.array_equal(x, y, equal_nan=True)

    @staticmethod
    def _save(tensors: dict, meta: dict) -> bytes:
        return st_save({k: np.ascontiguousarray(a, dtype=np.float64) for k, a in tensors.items()}, metadata=meta)

    @staticmethod
    def _load(data: bytes, **kw) -> dict:
        return st_load(data)

    def _copy_entry(self, e: Entry) -> Entry:
        return None if e is None else e.map(self._copy)

    def __post_init__(self) -> None:
        self.layer_types = tuple(self.layer_types)
        self.layers = list(self.layers)
        if len(self.layers) != len(self.layer_types):
            raise StateError(f"layers: {len(self.layers)} entries for {len(self.layer_types)} layer types")
        for i, (kind, e) in enumerate(zip(self.layer_types, self.layers)):
            want = {LINEAR: KDAState, INDEXED: DSACache}.get(kind)
            if want is None:
                raise StateError(f"layer_types[{i}]: {kind!r}, expected {LINEAR!r} or {INDEXED!r}")
            if e is not None and not isinstance(e, want):
                raise StateError(f"layers[{i}]: a {kind} layer holds {want.__name__}, got {type(e).__name__}")
            if isinstance(e, DSACache) and e.latent is not None and e.latent.shape[1] != self.seq_len:
                raise StateError(f"layers[{i}]: DSA cache holds {e.latent.shape[1]} tokens, "
                                 f"seq_len is {self.seq_len}")

    @classmethod
    def empty(cls, geometry_or_layer_types: Union[Geometry, Sequence[str]]) -> "HybridState":
        """A state with no tokens for a Geometry (or an explicit list of layer types)."""
        types = getattr(geometry_or_layer_types, "layer_types", geometry_or_layer_types)
        return cls(tuple(types), [None] * len(types), 0)

    # ------------------------------------------------------------------ views

    @property
    def batch(self) -> Optional[int]:
        """B of the cached arrays, or None while empty."""
        for e in self.layers:
            if e is not None:
                return int((e.recurrent if isinstance(e, KDAState) else e.latent).shape[0])
        return None

    @property
    def kda_layers(self) -> tuple[int, ...]:
        return tuple(i for i, t in enumerate(self.layer_types) if t == LINEAR)

    @property
    def dsa_layers(self) -> tuple[int, ...]:
        return tuple(i for i, t in enumerate(self.layer_types) if t == INDEXED)

    def __len__(self) -> int:
        return len(self.layers)

    def __getitem__(self, i: int) -> Entry:
        return self.layers[i]

    def equal(self, other: "HybridState") -> bool:
        """Bitwise equality of every cached array (NaN == NaN), the layer types and seq_len."""
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
                if x is not None and not self._same(x, y):
                    return False
        return True

    # ------------------------------------------------------------------ copies

    def snapshot(self) -> "HybridState":
        """A deep copy: later forwards or in-place edits of either never reach the other."""
        return type(self)(self.layer_types, [self._copy_entry(e) for e in self.layers], self.seq_len)

    def fork(self) -> "HybridState":
        """A new independent branch from this point (prefix-cache hit, speculation): a deep copy."""
        return self.snapshot()

    def truncate(self, n_tokens: int) -> "HybridState":
        """A copy keeping the first `n_tokens` of every DSA cache (rollback after speculation).

        KDA layers keep only a recurrent summary of all tokens seen, which cannot be cut back: with any
        KDA layer holding a state, only n_tokens == seq_len (a no-op copy) is allowed; take a snapshot()
        before speculating and continue from it instead.
        """
        if isinstance(n_tokens, bool) or not isinstance(n_tokens, (int, np.integer)) \
                or not 0 <= n_tokens <= self.seq_len:
            raise StateError(f"truncate: n_tokens={n_tokens!r}, expected an int in [0, seq_len={self.seq_len}]")
        n_tokens = int(n_tokens)
        if n_tokens < self.seq_len:
            kda = [i for i in self.kda_layers if self.layers[i] is not None]
            if kda:
                raise StateError(
                    f"truncate: cannot cut the cache from {self.seq_len} to {n_tokens} tokens: layer {kda[0]} is "
                    f"a linear_attention (KDA) layer whose recurrent state summarizes all {self.seq_len} tokens "
                    f"and cannot be truncated (KDA layers: {kda}); snapshot() before speculating and restore it")
        layers = []
        for e in self.layers:
            if isinstance(e, DSACache):
                e = DSACache(self._copy(e.latent[:, :n_tokens]),
                             None if e.index_rows is None else self._copy(e.index_rows[:, :n_tokens]))
            else:
                e = self._copy_entry(e)
            layers.append(e)
        return type(self)(self.layer_types, layers, n_tokens)

    def row(self, i: int, start: int = 0, stop: Optional[int] = None) -> "HybridState":
        """Batch row i as a batch-1 deep copy keeping DSA positions [start, stop) (SERVING.md P4: a
        request's own state out of a padded batch; the dropped positions must be its pads).

        KDA entries are the row's whole recurrent state and conv window, which is the request's own
        only under LEFT padding: a zeroed pad input (SPEC §6.1) before any real token leaves the zero
        state at zero, while a pad after one still decays the state and shifts the conv window.
        """
        B = self.batch
        if B is None:
            raise StateError("row: the state is empty (no batch rows)")
        stop = self.seq_len if stop is None else stop
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not 0 <= i < B:
            raise StateError(f"row: i={i!r}, expected an int in [0, batch={B})")
        if not 0 <= start <= stop <= self.seq_len:
            raise StateError(f"row: positions [{start}, {stop}) not within [0, seq_len={self.seq_len}]")
        layers = []
        for e in self.layers:
            if isinstance(e, KDAState):
                e = KDAState(self._copy(e.recurrent[i:i + 1]), self._copy(e.conv[i:i + 1]))
            elif isinstance(e, DSACache):
                e = DSACache(self._copy(e.latent[i:i + 1, start:stop]),
                             None if e.index_rows is None else self._copy(e.index_rows[i:i + 1, start:stop]))
            layers.append(e)
        return type(self)(self.layer_types, layers, stop - start)

    # ------------------------------------------------------------------ bytes

    def serialize(self, kda_dtype: Optional[str] = None) -> bytes:
        """safetensors bytes of every cached array, with the layer types and seq_len.

        kda_dtype: the dtype the KDA recurrent states are persisted in. None: each array in its own dtype
        (the recurrent state is float32 on every implementation, SPEC §2: the hand-off is exact, bitwise);
        "bfloat16": rounded to nearest even (a prefix cache at half the bytes: a QUANTIZATION of the
        hand-off, restored as the rounded values in the state's own dtype)."""
        if kda_dtype not in PERSISTED:
            raise StateError(f"serialize: kda_dtype={kda_dtype!r}, expected one of {PERSISTED}")
        tensors = {}
        for i, e in enumerate(self.layers):
            if e is None:
                continue
            for field, a in zip(e._fields, e):
                if a is not None:
                    persisted = kda_dtype is not None and isinstance(e, KDAState) and field == "recurrent"
                    tensors[f"layers.{i}.{field}"] = self._persist(a, kda_dtype) if persisted else a
        meta = {"format": self.FORMAT, "version": _VERSION, "seq_len": str(self.seq_len),
                "layer_types": json.dumps(list(self.layer_types)), "kda_dtype": str(kda_dtype)}
        return self._save(tensors, meta)

    @staticmethod
    def _persist(a, dtype: str):
        """`a` rounded to `dtype` (round to nearest even), kept in float64: the values a cache persisted
        in that dtype gives back."""
        return np.asarray(a, dtype=np.float64).astype(ml_dtypes.bfloat16).astype(np.float64)

    @staticmethod
    def _restore(a):
        """A persisted recurrent array back in the state's own dtype (the oracle's: float64)."""
        return a

    @classmethod
    def deserialize(cls, data: bytes, **kw) -> "HybridState":
        """Inverse of serialize; raises StateError on bytes that are not a serialized HybridState.
        Keyword arguments go to the array loader (impl.state: `device`)."""
        try:
            tensors = cls._load(bytes(data), **kw)
            meta = _metadata(bytes(data))
        except StateError:
            raise
        except Exception as e:
            raise StateError(f"deserialize: not a serialized HybridState ({e})") from e
        if meta.get("format") != cls.FORMAT or meta.get("version") != _VERSION:
            raise StateError(f"deserialize: metadata {meta!r}, expected format {cls.FORMAT!r} version {_VERSION!r}")
        types = tuple(json.loads(meta["layer_types"]))
        layers: list = [None] * len(types)
        seen = set()
        for i, kind in enumerate(types):
            names = KDAState._fields if kind == LINEAR else DSACache._fields
            got = {f: tensors.get(f"layers.{i}.{f}") for f in names}
            seen.update(f"layers.{i}.{f}" for f, a in got.items() if a is not None)
            if all(a is None for a in got.values()):
                continue
            if kind == LINEAR:
                if got["recurrent"] is None or got["conv"] is None:
                    raise StateError(f"deserialize: layer {i} (KDA) needs both recurrent and conv")
                layers[i] = KDAState(cls._restore(got["recurrent"]), got["conv"])
            else:
                if got["latent"] is None:
                    raise StateError(f"deserialize: layer {i} (DSA) has index_rows but no latent")
                layers[i] = DSACache(got["latent"], got["index_rows"])
        extra = sorted(set(tensors) - seen)
        if extra:
            raise StateError(f"deserialize: unexpected tensor {extra[0]!r}")
        return cls(types, layers, int(meta["seq_len"]))


def checkpoint_shapes(q, k, v, g, beta, boundary_states, state, depth, chunk) -> tuple:
    """The argument rules of a KDA checkpoint taken from a chunked prefill (oracle.kda.checkpoint), shared
    by every side: the core's shapes (batch rows, no cu_seqlens), depth an int in [0, T], chunk a
    positive int, boundary_states [B, T // chunk, H, K, V] once depth reaches a chunk boundary, state
    [B, H, K, V] or None. Returns (B, T, H, K, V); ValueError naming the argument otherwise."""
    B, T, H, K, V, _, _ = core_shapes(q, k, v, g, beta, state, None)
    if isinstance(chunk, bool) or not isinstance(chunk, (int, np.integer)) or chunk < 1:
        raise ValueError(f"chunk: expected a positive integer, got {chunk!r}")
    if isinstance(depth, bool) or not isinstance(depth, (int, np.integer)) or not 0 <= depth <= T:
        raise ValueError(f"depth: expected an int in [0, T={T}], got {depth!r}")
    want = (B, T // chunk, H, K, V)
    if depth >= chunk and (boundary_states is None or tuple(boundary_states.shape) != want):
        got = None if boundary_states is None else tuple(boundary_states.shape)
        raise ValueError(f"boundary_states: expected chunked's {want} over the T={T} tokens (depth {depth} "
                         f"reaches a chunk boundary), got {got}")
    return B, T, H, K, V


def _metadata(data: bytes) -> dict:
    n = int.from_bytes(data[:8], "little")
    return json.loads(data[8:8 + n].decode("utf-8")).get("__metadata__") or {}
