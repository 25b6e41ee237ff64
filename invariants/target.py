"""Where an implementation runs: its namespaces, a device and a working dtype.

The harness draws inputs once in float64 NumPy; `Target` hands each implementation its own dtype and
device (states and gates in float32, SPEC §2) and `compare.to_numpy` brings outputs back. The oracle
is one more target (`ORACLE`, an `OracleTarget`): its conversions keep float64 NumPy, so a run
function calls oracle, candidate and baseline through one code path.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import types
from typing import NamedTuple, Optional

import numpy as np
import torch

from impl.registry import Implementation
from oracle import model as oracle_model
from oracle.types import F32_WEIGHTS, KDAState, KDAWeights, cast_arrays  # noqa: F401  (F32_WEIGHTS re-exported)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float64": torch.float64}


class Target(NamedTuple):
    impl: Implementation
    device: str
    dtype: torch.dtype

    @property
    def dtype_name(self) -> str:
        return str(self.dtype).replace("torch.", "")

    def in_dtype(self, name: str) -> "Target":
        """This target in working dtype `name` (a record that declares one dtype, Check.dtype)."""
        return self._replace(dtype=DTYPES[name])

    def tensor(self, a, *, f32: bool = False) -> torch.Tensor:
        """A float64 array in this target's working dtype (float32 where its declaration says so)."""
        return torch.as_tensor(np.asarray(a), dtype=torch.float32 if f32 else self.dtype,
                               device=self.device)

    def index(self, a, *, long: bool = False) -> torch.Tensor:
        """Integer offsets or positions as this target takes them (int32; int64 with `long`)."""
        return torch.as_tensor(np.asarray(a), dtype=torch.int64 if long else torch.int32, device=self.device)

    def weights(self, w: KDAWeights) -> KDAWeights:
        """Any weight container in this target's dtype and device, its declared float32 fields in float32."""
        return cast_arrays(w, lambda a, f32: self.tensor(a, f32=f32))

    def state(self, s: Optional[KDAState]) -> Optional[KDAState]:
        """A float64 KDA state in this target's dtypes (recurrent float32); None stays None (zeros)."""
        return None if s is None else KDAState(self.tensor(s.recurrent, f32=True), self.tensor(s.conv))

    # what the working dtype makes of float64 inputs, back in float64: the oracle run on these is exact
    # arithmetic from the very inputs the candidate receives (contracts: the held_reference floor)
    def held(self, a, *, f32: bool = False) -> np.ndarray:
        """float64 `a` as this target holds it, back in float64."""
        return _f64(self.tensor(a, f32=f32))

    def held_weights(self, w: KDAWeights) -> KDAWeights:
        """A weight container as this target holds it, back in float64."""
        return self.weights(w).map(_f64)

    def held_state(self, s: Optional[KDAState]) -> Optional[KDAState]:
        """A KDA state as this target holds it, back in float64."""
        return None if s is None else KDAState(_f64(self.tensor(s.recurrent, f32=True)), self.held(s.conv))

    def held_oracle(self) -> "OracleTarget":
        """The oracle fed the inputs as this target holds them (the held_reference of a comparison)."""
        return HeldOracle(_held_implementation(self.device, self.dtype), self.device, self.dtype)

    def nvfp4_experts(self, nv):
        """Oracle NVFP4 experts (NumPy codes and scales) on this target, bit for bit."""
        from impl.weights import nvfp4_experts
        return nvfp4_experts(nv, self.device)

    def from_host(self, a: torch.Tensor) -> torch.Tensor:
        """A host torch tensor (a deserialized state) on this target, its dtype kept."""
        return a.to(self.device)

    def poisoned(self):
        """The context a call runs in: uninitialised memory NaN-filled (poisoned_memory)."""
        return poisoned_memory()

    def cat(self, xs, dim: int):
        """This target's results concatenated along `dim`."""
        return torch.cat(xs, dim)

    def model(self, weights):
        """The whole decoder over float64 `weights`: impl.model composing this target's namespaces."""
        from impl.model import Model
        from impl.weights import to_torch
        return Model(to_torch(weights, self.device, self.dtype), self.impl)


class OracleTarget(Target):
    """The float64 oracle as a target: its inputs stay float64 NumPy as drawn (ORACLE)."""

    __slots__ = ()

    def tensor(self, a, *, f32: bool = False) -> np.ndarray:
        """`a` as float64 NumPy (no declaration narrows the oracle to float32)."""
        return np.asarray(a, dtype=np.float64)

    def index(self, a, *, long: bool = False) -> np.ndarray:
        """Integer offsets or positions as int64 NumPy (whatever width a kernel takes)."""
        return np.asarray(a, dtype=np.int64)

    # an oracle's inputs are already what it computes on: holding them again changes nothing
    def held(self, a, *, f32: bool = False) -> np.ndarray:
        """`a` as this oracle computes on it."""
        return self.tensor(a, f32=f32)

    def held_weights(self, w):
        """Weights as this oracle computes on them."""
        return self.weights(w)

    def held_state(self, s: Optional[KDAState]) -> Optional[KDAState]:
        """A state as this oracle computes on it."""
        return self.state(s)

    def held_oracle(self) -> "OracleTarget":
        """Itself: its inputs are already held."""
        return self

    def nvfp4_experts(self, nv):
        """The oracle's NVFP4 experts as they are."""
        return nv

    def from_host(self, a: torch.Tensor) -> np.ndarray:
        """A host torch tensor (a deserialized state) as NumPy, its dtype kept."""
        return a.numpy()

    def poisoned(self):
        """NumPy allocates no uninitialised memory the oracle could forget to write."""
        return contextlib.nullcontext()

    def cat(self, xs, dim: int) -> np.ndarray:
        """float64 results concatenated along `dim`."""
        return np.concatenate(xs, axis=dim)

    def model(self, weights):
        """The oracle's float64 decoder over `weights`."""
        from oracle.model import Model
        return Model(self.weights(weights))


class HeldOracle(OracleTarget):
    """The oracle on the inputs as a (device, dtype) target holds them: each input rounded through that
    target's dtype (its declared float32 fields through float32) and computed on in float64. Its KDA
    sublayer also holds the projections' outputs (z, b, zg) in that dtype (_held_implementation)."""

    __slots__ = ()

    def tensor(self, a, *, f32: bool = False) -> np.ndarray:
        """float64 `a` as the holding target has it, back in float64."""
        return _f64(Target.tensor(self, a, f32=f32))


ORACLE = OracleTarget(oracle_model.ORACLE, "cpu", torch.float64)


@functools.lru_cache(maxsize=None)
def _held_implementation(device: str, dtype: torch.dtype):
    """The oracle whose KDA sublayer rounds the projections' outputs through `dtype` (oracle.kda.sublayer's
    `hold`). Every implementation in a working dtype returns z, b and zg from its projections in that dtype
    (the conv state stores z so); where a token's core output nearly cancels, that rounding alone moves the
    normalised output by 10 % and more in bf16 (stop 42: kda.paths, a "large" input whose token 22 has a core
    output at 0.0072 of its head's typical scale: held error 0.014 from the inputs' rounding alone, 0.132 with
    z, b and zg held, ours and the torch baseline 0.132), so a held reference without it called such an example
    a failure of every implementation. f is not held: its bias is added in float32 after the projection, and
    holding it moved that example by 2e-4."""
    kda = types.SimpleNamespace(**{n: getattr(oracle_model.kda, n) for n in dir(oracle_model.kda)
                                   if not n.startswith("__")})
    # a target of that device and dtype holds each array as the candidate does (Target.held)
    kda.sublayer = functools.partial(oracle_model.kda.sublayer, hold=Target(oracle_model.ORACLE, device, dtype).held)
    return dataclasses.replace(oracle_model.ORACLE, kda=kda)


def _f64(t) -> np.ndarray:
    return t.detach().double().cpu().numpy()


@functools.lru_cache(maxsize=None)
def cpu_targets(impl: str = "triton") -> tuple["Target", "Target"]:
    """(candidate, baseline) on the CPU in float32: what the matrix tests run (the interpreter's dtype)."""
    from impl import registry
    return (Target(registry.get(impl), "cpu", torch.float32), Target(registry.get("torch"), "cpu", torch.float32))


@contextlib.contextmanager
def poisoned_memory():
    """Fill every torch.empty with NaN while a candidate runs (TESTING.md: poison outputs).

    torch does this for uninitialised memory when deterministic algorithms are on; any element a
    kernel forgets to write then stays NaN and breaks the non-finite pattern of its contract.
    """
    import torch.utils.deterministic as det

    prev_det, prev_warn = torch.are_deterministic_algorithms_enabled(), \
        torch.is_deterministic_algorithms_warn_only_enabled()
    prev_fill = det.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True, warn_only=True)
    det.fill_uninitialized_memory = True
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(prev_det, warn_only=prev_warn)
        det.fill_uninitialized_memory = prev_fill
