"""One GPU per pytest-xdist worker (conftest.py: `--gpus-per-worker` or GLMGATE_PIN_GPUS=1): worker gwK
sees only GPU K mod the GPU count, set in CUDA_VISIBLE_DEVICES before torch initialises CUDA. No torch
import here (conftest.py runs this first)."""
from __future__ import annotations

import os
import re
from typing import Optional

PIN_ENV = "GLMGATE_PIN_GPUS"


def _nvml_count() -> int:
    """GPUs NVML sees, without initialising CUDA (0 without a driver)."""
    import ctypes

    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return 0
    try:
        if nvml.nvmlInit_v2() != 0:
            return 0
        count = ctypes.c_uint(0)
        ok = nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 0
        nvml.nvmlShutdown()
        return count.value if ok else 0
    except AttributeError:
        return 0


def _listed(environ) -> Optional[list[str]]:
    """CUDA_VISIBLE_DEVICES's entries (None when unset; CUDA stops at an entry it cannot read: -1, empty)."""
    value = environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    out = []
    for entry in value.split(","):
        entry = entry.strip()
        if not entry or entry.startswith("-"):
            break
        out.append(entry)
    return out


def xdist_gpu(worker: str, count: int) -> Optional[int]:
    """The GPU index of pytest-xdist worker `worker` (gwK: K mod count); None without a GPU or outside xdist."""
    m = re.fullmatch(r"gw(\d+)", worker or "")
    if m is None or count < 1:
        return None
    return int(m.group(1)) % count


def pin_xdist_worker(environ=None, count=None) -> Optional[str]:
    """Under pytest-xdist with GLMGATE_PIN_GPUS=1: set this worker's CUDA_VISIBLE_DEVICES to one GPU (gwK:
    the K mod count-th of the visible ones) and return it; must run before torch initialises CUDA
    (conftest.py calls it first thing). A no-op (None) without the variable, outside xdist, or without a
    GPU. `count` (tests): the number of GPUs when CUDA_VISIBLE_DEVICES is unset (default: NVML's)."""
    environ = os.environ if environ is None else environ
    if environ.get(PIN_ENV) != "1" or not environ.get("PYTEST_XDIST_WORKER"):
        return None
    visible = _listed(environ)
    if visible is None:
        visible = [str(i) for i in range(_nvml_count() if count is None else count)]
    k = xdist_gpu(environ["PYTEST_XDIST_WORKER"], len(visible))
    if k is None:
        return None
    environ["CUDA_VISIBLE_DEVICES"] = visible[k]
    return visible[k]
