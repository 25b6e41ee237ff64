"""Issue 14 step 44 timed: the sparse absorbed MLA decode (impl.mla.attend) of ours against the candidate whose
split merge takes the rank in chunks of 128 over programs (impl.candidates.mla_merge_chunks), at the bench's decode
shape (gate.bench_mla.decode_inputs), B = 1 at 128K and B = 2-32 at 32K; then, at B = 1 (128K), how the harness's
L2 flush enters the time:

- `zero`: triton.testing.do_bench, the bench's method: a 256 MB buffer zeroed before every call. Its writes leave
  L2 full of dirty lines, written back to HBM while the timed call runs.
- `read`: the same buffer READ before every call (a sum): L2 is as cold for the call's inputs, with clean lines.
- `none`: no flush (the inputs may sit in the H100's 50 MB L2: W_UK and W_UV are 33.6 MB).

Each with ours, the candidate and the dense SDPA peer of gate.bench_mla (the same K / V sizes), 5 alternating
rounds each; and the profiler's kernel times inside the replays after each flush (their sum against the time).
Every form is first held to the float64 oracle on its first and last row (gate.bench_mla.time_decode_forms).

    PYTHONPATH=. python3 scripts/mla_merge_chunk_probe.py [--repeats 5] [--json F]

Another candidate namespace against ours (step 45: impl.candidates.mla_splits_w:mla, label splits_w) and other
shapes (B x T, comma-separated; the flush forms at the first B = 1 shape):

    PYTHONPATH=. python3 scripts/mla_merge_chunk_probe.py --candidate impl.candidates.mla_splits_w:mla \
        --label splits_w --shapes 1x131072,1x32768,2x32768,4x32768,7x32768,8x32768,32x32768
"""
from __future__ import annotations

import argparse
import statistics
import sys

import torch

SHAPES = ((1, 131072), (2, 32768), (4, 32768), (8, 32768), (32, 32768))
FLUSH_BYTES = 256 << 20


def timed(fn, flush, reps: int = 100, warmup: int = 10) -> float:
    """Median microseconds of fn() between CUDA events, `flush()` before each call (None: none)."""
    for _ in range(warmup):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        if flush is not None:
            flush()
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends)) * 1e3


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", default=None)
    p.add_argument("--candidate", default="impl.candidates.mla_merge_chunks:mla",
                   help="module:attribute of the candidate's mla namespace")
    p.add_argument("--label", default="chunks", help="the candidate's name in the printout")
    p.add_argument("--shapes", default=",".join(f"{b}x{t}" for b, t in SHAPES), help="BxT,... (default: %(default)s)")
    args = p.parse_args(argv)
    shapes = [tuple(int(v) for v in x.split("x")) for x in args.shapes.split(",")]
    import importlib
    from torch.profiler import ProfilerActivity, profile

    from gate.bench_mla import DN, DV, H, decode_inputs, time_decode_forms
    from gate.benchlib import graph, kernel_table, kernel_times, write_json
    from impl import mla as im
    mod, attr = args.candidate.split(":")
    cand, label = getattr(importlib.import_module(mod), attr), args.label
    out, flushed = {}, False
    for B, T in shapes:
        w, latent, q, idx, lengths, _ = decode_inputs(B, T)
        forms = {"ours": im, label: cand}
        res, fns = time_decode_forms(forms, w, q, latent, idx, lengths, args.repeats, f"B={B} T={T}")
        out[f"B{B}_T{T}"] = dict(times=res)
        if B == 1 and not flushed:
            flushed = True
            for name, ns in forms.items():
                print(f"  kernels of {name} (eager, no flush):", flush=True)
                for k, us in kernel_times(lambda ns=ns: ns.attend(w, q, latent, idx, lengths), calls=20,
                                          width=70).items():
                    print(f"    {us:8.2f} us  {k}", flush=True)
            buf = torch.empty(FLUSH_BYTES // 4, device="cuda", dtype=torch.float32)
            sink = torch.empty((), device="cuda", dtype=torch.float32)
            flushes = {"zero": buf.zero_, "read": lambda: torch.sum(buf, 0, out=sink), "none": None}
            gen = torch.Generator(device="cuda").manual_seed(B * 7 + T + 1)
            k = torch.randn(B, H, T, DN, device="cuda", generator=gen, dtype=torch.bfloat16)
            v = torch.randn(B, H, T, DV, device="cuda", generator=gen, dtype=torch.bfloat16)
            qd = q.transpose(1, 2)
            fns["dense"] = graph(lambda: torch.nn.functional.scaled_dot_product_attention(qd, k, v, scale=DN ** -0.5))
            flush_res = {}
            for fl, f in flushes.items():
                runs = {n: [] for n in fns}
                for _ in range(args.repeats):
                    for n, fn in fns.items():
                        runs[n].append(timed(fn, f))
                med = {n: statistics.median(r) for n, r in runs.items()}
                flush_res[fl] = dict(runs_us=runs, median_us=med)
                print(f"  flush {fl:5s}: " + "; ".join(f"{n} {m:.2f} us [{min(runs[n]):.2f}-{max(runs[n]):.2f}]"
                                                       for n, m in med.items())
                      + f"; dense / ours {med['dense'] / med['ours']:.1f}x, dense / {label} "
                        f"{med['dense'] / med[label]:.1f}x", flush=True)
                for n in ("ours", label):
                    with profile(activities=[ProfilerActivity.CUDA]) as pg:
                        for _ in range(20):
                            if f is not None:
                                f()
                            fns[n]()
                        torch.cuda.synchronize()
                    rows = [r for r in kernel_table(pg, 20) if "sum" not in r[0].lower()
                            and "fill" not in r[0].lower() and "zero" not in r[0].lower()
                            and "reduce" not in r[0].lower()]
                    tot = sum(r[2] for r in rows)
                    print(f"    {n} after flush {fl}: kernels {tot:.2f} us of {med[n]:.2f}: "
                          + "; ".join(f"{r[0][:40]} {r[2]:.2f}" for r in rows[:6]), flush=True)
                    flush_res[fl][f"kernels_{n}"] = rows
            out[f"B{B}_T{T}"]["flush"] = flush_res
            del k, v, buf
        del fns
        torch.cuda.empty_cache()
    write_json(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
