"""Where the sparse absorbed MLA decode's time goes at B = 1 (issue 14: >= 100x dense SDPA at 128K): the
profiler's kernels of one impl.mla.attend call (W_UK's einsum, the gather kernel, the split combine, W_UV's
einsum, the casts) at the bench's shape (H = 64, r_kv 512, 2051 rows of a 128K cache), beside the whole call
replayed from a CUDA graph and the two einsums' weight bytes at the copy ceiling.

    PYTHONPATH=. python3 scripts/mla_b1_profile.py [--batch 1] [--cache 131072]
"""
from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--cache", type=int, default=131072)
    args = p.parse_args(argv)
    from gate.bench_mla import DN, DV, H, R, decode_inputs
    from gate.benchlib import copy_ceiling, do_bench, graph, kernel_times
    from impl import mla as im
    copy_bw = copy_ceiling()
    w, latent, q, idx, lengths, q_abs = decode_inputs(args.batch, args.cache)
    attend = graph(lambda: im.attend(w, q, latent, idx, lengths))
    kern = graph(lambda: im.sparse_absorbed(q_abs, latent, idx, lengths, DN ** -0.5))
    weights = H * (DN + DV) * R * 2
    print(f"B={args.batch} T={args.cache}: attend {do_bench(attend) * 1e3:.2f} us, sparse_absorbed "
          f"{do_bench(kern) * 1e3:.2f} us; W_UK + W_UV bytes {weights / 1e6:.1f} MB = "
          f"{1e6 * weights / copy_bw:.2f} us at copy speed ({copy_bw / 1e12:.2f} TB/s)")
    for name, us in kernel_times(lambda: im.attend(w, q, latent, idx, lengths), calls=20, width=90).items():
        print(f"  {us:8.2f} us  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
