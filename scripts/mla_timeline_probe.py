"""Issue 14 step 56's probe: a timeline of ours' producer kernel, per program, from %globaltimer stamps the kernel
writes when impl.mla._TIMELINE holds a buffer (the TIMELINE form of impl/kernels/mla_gluon.py: off in every other
launch, which compiles to the same PTX as without it).

The question (docs/optimization_log.md "Step 56"): a program that runs ONE block of 64 entries takes 14.7 us at
B = 32 (stop 55b) where a block in steady state costs ~3.5 us: where do the other ~11 us go? Stamps (ns), per program:
consumer entry, q in shared memory, the first block's rows landed (its first `ready`), the last block's MMAs done,
the output stored; producer entry, the first block's copies issued, the last block's. Printed per shape: the phases'
medians and maxima over programs, each from the kernel's first stamp (the earliest program's entry), and the
kernel's span (first stamp to last store) against its profiler device time.

    PYTHONPATH=. python3 scripts/mla_timeline_probe.py [--json F]
"""
from __future__ import annotations

import argparse
import json
import sys

import torch

STAMPS = ("c_entry", "c_q", "c_first_ready", "c_loop_end", "c_stored", "p_entry", "p_first_issued", "p_loop_end")


def _phases(t):
    """t [programs, 8] int64 ns -> {phase: (median us, max us)} from the kernel's first stamp."""
    t0 = t[:, [0, 5]].min()
    rel = (t - t0).double() / 1e3
    d = {"c_entry (from kernel start)": rel[:, 0], "p_entry (from kernel start)": rel[:, 5],
         "q load (c_q - c_entry)": rel[:, 1] - rel[:, 0],
         "first block's rows (c_first_ready - p_entry)": rel[:, 2] - rel[:, 5],
         "first copies issued (p_first_issued - p_entry)": rel[:, 6] - rel[:, 5],
         "blocks (c_loop_end - c_first_ready)": rel[:, 3] - rel[:, 2],
         "epilogue (c_stored - c_loop_end)": rel[:, 4] - rel[:, 3],
         "program end (c_stored, from kernel start)": rel[:, 4]}
    return {k: (float(v.median()), float(v.max())) for k, v in d.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    from gate.bench_mla import DN, decode_inputs
    from gate.benchlib import kernel_times
    from impl import mla as im
    res = {}
    for B, blocks in ((32, 9), (32, 1), (128, 33), (128, 1), (16, 5)):
        _, latent, _, idx, lengths, q_abs = decode_inputs(B, 32768)
        plan = im._launch(q_abs.device, B, q_abs.shape[2], idx.shape[-1], latent.shape[-1])
        NS = plan["splits"]
        sub = idx[..., :min(idx.shape[-1], NS * 64 * blocks)].contiguous()
        fn = lambda: im.sparse_absorbed(q_abs, latent, sub, lengths, DN ** -0.5, NS)
        dev = sum(v for k, v in kernel_times(fn, calls=10, top=None, width=None).items() if "mla_sparse_absorbed" in k)
        plain = fn()
        im._TIMELINE = torch.zeros(B * NS, len(STAMPS), dtype=torch.int64, device="cuda")
        try:
            for _ in range(3):                          # the last call's stamps
                stamped = fn()
            torch.cuda.synchronize()
            t = im._TIMELINE.clone()
        finally:
            im._TIMELINE = None
        same = bool(torch.equal(plain, stamped))
        if bool((t == 0).any()):
            print(f"B={B} blocks {blocks}: some stamps missing (the TIMELINE form did not run?)", flush=True)
            continue
        ph = _phases(t)
        span = float((t[:, 4].max() - t[:, [0, 5]].min()).item()) / 1e3
        res[f"B{B}_n{blocks}"] = {"splits": NS, "device_us": dev, "span_us": span, "phases": ph}
        res[f"B{B}_n{blocks}"]["same_output"] = same
        print(f"B={B}, {NS} splits, {blocks} blocks of 64 a program: profiler {dev:.2f} us, stamped span {span:.2f} us; "
              f"the stamped launch's output {'is' if same else 'is NOT'} ours' bit for bit", flush=True)
        for k, (med, mx) in ph.items():
            print(f"    {k:48s} median {med:7.2f} us   max {mx:7.2f} us", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
