"""Where a candidate runs: an implementation, a device and a working dtype.

The harness draws inputs once in float64 NumPy; `Target` hands each implementation its own dtype and
device (states and gates in float32, SPEC §2) and `compare.to_numpy` brings outputs back.
"""
from __future__ import annotations

import contextlib
import functools
from typing import NamedTuple, Optional

import numpy as np
import torch

from impl.registry import Implementation
from oracle.types import F32_WEIGHTS, KDAState, KDAWeights, cast_arrays  # noqa: F401  (F32_WEIGHTS re-exported)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float64": torch.float64}


class Target(NamedTuple):
    impl: Implementation
    device: str
    dtype: torch.dtype

    @property
    def dtype_name(self) -> str:
        return str(self.dtype).replace("torch.", "")

    def tensor(self, a, *, f32: bool = False) -> torch.Tensor:
        return torch.as_tensor(np.asarray(a), dtype=torch.float32 if f32 else self.dtype,
                               device=self.device)

    def index(self, a) -> torch.Tensor:
        return torch.as_tensor(np.asarray(a), dtype=torch.int32, device=self.device)

    def weights(self, w: KDAWeights) -> KDAWeights:
        """Any weight container in this target's dtype and device, its declared float32 fields in float32."""
        return cast_arrays(w, lambda a, f32: self.tensor(a, f32=f32))

    def state(self, s: KDAState) -> KDAState:
        return KDAState(self.tensor(s.recurrent, f32=True), self.tensor(s.conv))

    # what the working dtype makes of float64 inputs, back in float64: the oracle run on these is exact
    # arithmetic from the very inputs the candidate receives (contracts: the held_reference floor)
    def held(self, a, *, f32: bool = False) -> np.ndarray:
        return _f64(self.tensor(a, f32=f32))

    def held_weights(self, w: KDAWeights) -> KDAWeights:
        return self.weights(w).map(_f64)

    def held_state(self, s: Optional[KDAState]) -> Optional[KDAState]:
        return None if s is None else KDAState(_f64(self.tensor(s.recurrent, f32=True)), self.held(s.conv))


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
