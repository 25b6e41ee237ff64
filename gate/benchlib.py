"""Shared pieces of the GPU benchmarks (gate/bench_*.py): timing, CUDA graphs, the copy ceiling.

Every benchmark measures the copy ceiling in the same run and reports bandwidth as a share of it, and
compares against a peer timed in the same process (the repository rule: ratios, never absolute claims).
"""
from __future__ import annotations

import json
import statistics
from typing import Callable, Optional

import numpy as np
import torch

from invariants.compare import to_numpy as to_np  # noqa: F401  (re-exported for the benches)


def rel_l2(a, b) -> float:
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300))


def do_bench(fn: Callable, warmup: int = 25, rep: int = 100) -> float:
    """Median milliseconds per call (triton.testing.do_bench: flushes L2 between calls)."""
    import triton.testing
    return triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median")


def alternating(fns: dict, repeats: int, unit: str = "us", bench: Callable = do_bench) -> dict:
    """Every fn of `fns` timed `repeats` times in alternating rounds (a round times each once, so a drift of the
    machine reaches all alike): {name: {median_<unit>, min_<unit>, max_<unit>, runs_<unit>}}, each run the
    median of one `bench` loop (milliseconds, converted to `unit`: "us" or "ms")."""
    scale = {"us": 1e3, "ms": 1.0}[unit]
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            times[name].append(bench(fn) * scale)
    return {name: {f"median_{unit}": statistics.median(t), f"min_{unit}": min(t), f"max_{unit}": max(t),
                   f"runs_{unit}": t} for name, t in times.items()}


def copy_ceiling(bench=do_bench) -> float:
    """Bytes read + written per second of a 2 GiB device-to-device copy."""
    n = 1 << 29
    src = torch.empty(n, dtype=torch.float32, device="cuda").uniform_()
    dst = torch.empty_like(src)
    ms = bench(lambda: dst.copy_(src))
    del src, dst
    torch.cuda.empty_cache()
    return 2 * n * 4 / (ms * 1e-3)


def kernel_times(fn: Callable, calls: int = 5, top: Optional[int] = 12, width: Optional[int] = 60) -> dict:
    """{kernel name: microseconds per call} from the profiler (where the time goes), after one warm call:
    the `top` largest (None: all), names cut to `width` characters (None: whole)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    out = {}
    for e in prof.key_averages():
        if getattr(e, "device_type", DeviceType.CUDA) != DeviceType.CUDA:
            continue        # a host-side op record would carry its kernels' time again
        t = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
        if t:
            out[e.key[:width]] = round(t / calls, 1)
    return dict(sorted(out.items(), key=lambda kv: -kv[1])[:top])


def kernel_table(prof, steps: int) -> list:
    """[(name, launches per step, us per step)] of the CUDA kernels and memcpy/memset in prof, largest first."""
    from collections import defaultdict
    acc = defaultdict(lambda: [0, 0.0])
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            a = acc[e.name]
            a[0] += 1
            a[1] += e.time_range.elapsed_us()
    rows = [(n, c / steps, us / steps) for n, (c, us) in acc.items()]
    return sorted(rows, key=lambda r: -r[2])


def graph(fn: Callable) -> Callable:
    """Capture fn() (after a warm-up on a side stream) and return the replay callable."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g.replay


def header(results: dict) -> dict:
    import triton
    results.update(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__)
    return results


def write_json(path, results: dict) -> None:
    if path:
        with open(path, "w") as fh:
            json.dump(results, fh, indent=1, default=str)
