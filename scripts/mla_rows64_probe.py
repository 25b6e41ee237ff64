"""Issue 14 step 47's probe: the sparse absorbed MLA decode (impl.mla.attend) of ours against the 64-head launch
from fewer query rows (impl.mla.ROWS_64): `r7` (impl.candidates.mla_rows64_7, the gated candidate) and, ungated,
`r4` / `r5` (ROWS_64 = 4 / 5: what mla.batch's bit rule keeps out), at B = 4-8 on a 32K cache (one query a row;
B = 8 is the control: every form runs ours' launch there). Each form held to the float64 oracle first, then timed
as CUDA-graph replays in --repeats alternating rounds (gate.bench_mla.time_decode_forms).

    PYTHONPATH=. python3 scripts/mla_rows64_probe.py [--repeats 5] [--json F]
"""
from __future__ import annotations

import argparse
import sys

import torch

SHAPES = ((4, 32768), (5, 32768), (6, 32768), (7, 32768), (8, 32768))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    from gate.bench_mla import decode_inputs, time_decode_forms
    from gate.benchlib import write_json
    from impl import mla as im
    from impl.candidates import mla_rows64_7
    from impl.candidates.mla_heads64 import module_copy
    forms = {"ours": im, "r7": mla_rows64_7.mla, "r5": module_copy("probe_r5", ROWS_64=5),
             "r4": module_copy("probe_r4", ROWS_64=4)}
    out = {}
    for B, T in SHAPES:
        w, latent, q, idx, lengths, _ = decode_inputs(B, T)
        print(f"B={B}: launches " + "; ".join(f"{n} {ns._launch(q.device, B, 64, idx.shape[-1], 512)}"
                                             for n, ns in forms.items()), flush=True)
        res, fns = time_decode_forms(forms, w, q, latent, idx, lengths, args.repeats, f"B={B} T={T}")
        out[f"B{B}_T{T}"] = dict(times=res)
        del latent, fns
        torch.cuda.empty_cache()
    write_json(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
