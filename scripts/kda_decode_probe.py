"""The KDA decode's launch variants against fla's fused_recurrent_kda, each a CUDA-graph replay, at H = 64,
K = V = 128 (issue 14 steps 37 and 39): ours (since step 39 a head's value blocks split over programs while
B·H < 2 · SMs), ours before step 39 (one program a head, vs=1) and value blocks of 32 (stop 45: 0.997x fla at B = 1,
7-11 % slower than ours at B >= 16, so not batch-invariantly better). The peers: fla's fused_recurrent_kda alone
on prepared q, k, v, g, β (the issue's peer) and fla's step doing ours' work (`fla_step`: its three
short-convolution updates, then fused_recurrent_kda_fwd with the norms, gate and β in the kernel), checked against
ours before it is timed.

Every variant is first compared with ours (output, state and window after one in-place step from the same state:
the same bits, or the largest difference) and timed either way, in `--repeats` alternating rounds, each the
median of a do_bench loop; prints median [min-max] and the ratio to fla measured in the same run. (Step 37's
early state loads, measured with this script's first form at commit 71fed39, were reverted.)

    PYTHONPATH=. python3 scripts/kda_decode_probe.py [--batches 1,2,4,16,64,256] [--repeats 5] [--json F]
"""
from __future__ import annotations

import argparse
import sys

import torch

# (name, decode options)
# (ours since step 39 splits a head's value blocks over programs while B·H < 2 · SMs; vs=1 is ours before it)
VARIANTS = (("ours", {}), ("one_program", dict(vs=1)), ("bv32", dict(bv=32)))


def max_rel(pairs):
    """{name: max |x - y| / max |y|} over (name, x, y) triples (0 where the bits agree)."""
    return {n: float((x.float() - y.float()).abs().max() / y.float().abs().max().clamp_min(1e-30)) for n, x, y in pairs}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batches", default="1,2,4,16,64,256")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    from gate.bench_kda import _decode_setup, decode_bytes, fla_decode_launch, fla_decode_step
    H = 64
    from gate.benchlib import alternating, copy_ceiling, graph, write_json
    from impl import kda as ik
    from oracle.types import KDAState
    try:
        import fla.ops.kda  # noqa: F401
        has_fla = True
    except ImportError:
        has_fla = False
        print("fla not importable: no peer", file=sys.stderr)
    copy_bw = copy_ceiling()
    print(f"copy ceiling {copy_bw / 1e12:.2f} TB/s")
    out = {"copy_bytes_per_s": copy_bw}
    for B in (int(x) for x in args.batches.split(",")):
        w, z, f, b, state = _decode_setup(B, H)
        fns, bad = {}, []
        for name, opt in VARIANTS:
            if opt:
                s1 = KDAState(state.recurrent.clone(), state.conv.clone())
                s2 = KDAState(state.recurrent.clone(), state.conv.clone())
                o1, _ = ik.decode(w, z, f, b, s1, inplace=True)
                o2, _ = ik.decode(w, z, f, b, s2, inplace=True, **opt)
                diff = max_rel((("output", o2, o1), ("state", s2.recurrent, s1.recurrent),
                                ("window", s2.conv, s1.conv)))
                same = not any(diff.values())
                print(f"B={B} {name}: {'the same bits' if same else 'NOT THE SAME BITS'} as ours "
                      f"(max |difference| / max |value|: " + ", ".join(f"{n} {d:.2e}" for n, d in diff.items()) + ")")
                if not same:
                    bad.append(name)
            fns[name] = graph(lambda opt=opt: ik.decode(w, z, f, b, state, inplace=True, **opt))
        if has_fla:
            fns["fla"] = graph(fla_decode_launch(B, H, state))
            # the same work as ours (check: from the same state, one step each, then compared), in fla's launches
            step, (o_f, h_f, c_f) = fla_decode_step(w, z, f, b, state)
            s1 = KDAState(state.recurrent.clone(), state.conv.clone())
            o1, _ = ik.decode(w, z, f, b, s1, inplace=True)
            step()
            diff = max_rel((("output", o_f.view_as(o1), o1), ("state", h_f, s1.recurrent),
                            ("window", torch.cat(c_f, 1), s1.conv)))
            print(f"B={B} fla_step against ours (max |difference| / max |value|): "
                  + ", ".join(f"{n} {d:.2e}" for n, d in diff.items()))
            if max(diff.values()) > 2e-2:
                print(f"B={B} fla_step: not ours' computation, not timed")
            else:
                fns["fla_step"] = graph(step)
        res = alternating(fns, args.repeats)
        # the floors: the recurrent state read and written (float32), the convention of the "% of copy";
        # ours also reads z, f, b and reads and writes the conv window, which fla's launch does not
        state_bytes, ours_bytes = decode_bytes(z, f, b, state)
        for n, r in res.items():
            extra = "".join(f"  {p}/this {res[p]['median_us'] / r['median_us']:.3f}x" for p in ("fla", "fla_step")
                            if p in res)
            pct = 100 * state_bytes / (r["median_us"] * 1e-6) / copy_bw
            print(f"  B={B} {n:14s} {r['median_us']:8.2f} us [{r['min_us']:.2f}-{r['max_us']:.2f}]{extra}  "
                  f"{pct:5.1f} % of copy (state bytes)")
        print(f"  B={B} floors: state {1e6 * state_bytes / copy_bw:.2f} us, ours' bytes "
              f"{1e6 * ours_bytes / copy_bw:.2f} us (+{100 * (ours_bytes / state_bytes - 1):.1f} %: z, f, b, the conv "
              f"window read and written, o)")
        out[B] = {"results": res, "not_the_same_bits": bad}
        del w, z, f, b, state
        torch.cuda.empty_cache()
    write_json(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
