"""Where fla's time per example goes: each (H, K, varlen) shape's first chunk_kda call against its
later calls at new lengths (fla autotunes per (H, K, V, varlen), not per T). GPU only."""
import itertools
import sys
import time

import torch

from adapters.fla_kda import KDA


def inputs(B, T, H, K, dt, dev):
    q = torch.nn.functional.normalize(torch.randn(B, T, H, K, device=dev), dim=-1).to(dt) * K ** -0.5
    k = torch.nn.functional.normalize(torch.randn(B, T, H, K, device=dev), dim=-1).to(dt)
    return q, k, torch.randn(B, T, H, K, device=dev, dtype=dt), -torch.rand(B, T, H, K, device=dev), \
        torch.rand(B, T, H, device=dev).to(dt)


def timed(fn):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


dev, dt = torch.device("cuda"), torch.bfloat16
total_first = 0.0
print(f"{'H':>2} {'K':>3} {'varlen':>6} {'first s':>8} {'2nd s (new T)':>13} {'3rd s (new T)':>13}")
for H, K, varlen in itertools.product((1, 2, 3), (8, 16, 32), (False, True)):
    times = []
    for T in (131, 77, 160):
        x = inputs(1, T, H, K, dt, dev)
        cu = torch.tensor([0, T // 2, T], device=dev) if varlen else None
        st = torch.zeros(1 if cu is None else 2, H, K, K, device=dev)
        times.append(timed(lambda: KDA.chunked(*x, st, cu_seqlens=cu)))
    total_first += times[0]
    print(f"{H:>2} {K:>3} {str(varlen):>6} {times[0]:>8.2f} {times[1]:>13.4f} {times[2]:>13.4f}", flush=True)
print(f"first calls in all: {total_first:.1f} s over 18 shapes")
