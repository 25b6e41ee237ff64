"""An ESTIMATE of the whole model's decode step on one H200 at NVFP4 experts, from measured layers.

Not a measurement of the whole model: one decoder layer of each kind was measured (graph replay of one
decode step, B = 1 after 4096 tokens, full geometry, NVFP4 experts: scripts/profile_replay.py, raw JSON
given by --replay); the model is those layers in the geometry's order, so the estimate is

    time per token ≈ Σ_kinds count(kind) x measured(kind)  +  the ends (embedding row, final norm,
                     lm_head: their bytes at the copy ceiling, NOT measured)
    memory         = the cost model's equation (gate/costmodel.py: weights within 1.2 % of the H200 at
                     one layer, state exact; NOT measured for 45 layers)

What it leaves out, stated: the layers' weights are read cold from HBM in every measured replay (do_bench
flushes L2), as they would be in a model; the launch of 45 layer graphs (or one model graph) and the host
between tokens are not in it; the mHC expand / reduce at the model's ends are small and not counted.

    PYTHONPATH=. python3 scripts/whole_model_estimate.py [--replay bench_results/.../replay.json ...] [--json F]
"""
from __future__ import annotations

import argparse
import collections
import json
import sys

# every layer kind from step 8's run; dsa-full+sparse from step 9's (the landed pooling kernel), then from
# step 10's (the landed selection kernel); kda+sparse and dsa-full+sparse from step 11's (the NVFP4 PAIRS
# dequantization), dsa-full+sparse from step 12's (the packed selection counts, with step 11), kda+sparse and
# dsa-full+sparse from step 13's (the MoE decode glue and BK 256; kda+dense's dense MLP takes the same tile
# and alignment but was not re-measured): a later file's kinds replace an earlier one's
DEFAULT_REPLAY = ("bench_results/issue14_h200_2026-12-03/step8/replay.json",
                  "bench_results/issue14_h200_2026-12-04/step9/landed/replay.json",
                  "bench_results/issue14_h200_2026-12-04/step10/call1_tests_replay_zoo/replay.json",
                  "bench_results/issue14_h200_2026-12-04/step11/call2/replay.json",
                  "bench_results/issue14_h200_2026-12-04/step12/call3/replay.json",
                  "bench_results/issue14_h200_2026-12-04/step13/call2/replay.json")
H200_BYTES = 139 * 2**30    # one H200's memory as the GPU machine reports it (about 139 GiB)
COPY_CEILING = 4.27e12      # bytes/s: the H200's, measured beside the default replays (a replay JSON that carries its
                            # run's own copy speed, profile_replay.py since stop 48, replaces it)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--replay", action="append", default=None,
                   help="scripts/profile_replay.py --json output (repeatable: a later file's layer kinds replace "
                        "an earlier one's; default: " + ", ".join(DEFAULT_REPLAY) + ")")
    p.add_argument("--context", type=int, default=4096)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    from gate.benchlib import write_json
    from gate.cost_layers import layer_kinds, layer_predictions
    from gate.costmodel import Plan, model_cost
    from oracle.config import LINEAR, Geometry
    g = Geometry.preset("full")
    replays = args.replay or list(DEFAULT_REPLAY)
    measured, source = {}, {}
    copy_bw = COPY_CEILING
    for path in replays:
        for k, v in json.load(open(path)).items():
            if k == "copy_ceiling_bytes_per_s":
                # the run's own copy speed (profile_replay.py since stop 48): the floors of that device
                copy_bw = v
                continue
            measured[k] = v["compare"]["ours"]["median_us"] if "compare" in v else v["replay_us"]
            source[k] = path
    count = collections.Counter()
    for i in range(g.num_hidden_layers):
        att = "kda" if g.layer_types[i] == LINEAR else f"dsa-{g.indexer_types[i]}"
        count[f"{att}+{g.mlp_layer_types[i]}"] += 1
    missing = sorted(set(count) - set(measured))
    if missing:
        print(f"no measured replay for layer kind(s) {missing} in {', '.join(replays)}", file=sys.stderr)
        return 2
    pred = layer_predictions(g, 1, context=args.context, hbm_bw=copy_bw)
    assert set(layer_kinds(g)) == set(count)
    cost = model_cost(g, Plan.make(g, 1, 1, "nvfp4"), batch=1, context=args.context)
    ends = sum(cost.terms[k].hbm for k in ("embeddings", "norms", "lm_head")) / copy_bw * 1e6
    rows, layers_us, floor_us = [], 0.0, 0.0
    for kind, n in sorted(count.items()):
        f = pred[kind]["bytes_per_step"] / copy_bw * 1e6
        rows.append({"kind": kind, "layers": n, "measured_us": measured[kind], "floor_us": f,
                     "total_us": n * measured[kind], "source": source[kind]})
        layers_us += n * measured[kind]
        floor_us += n * f
    mem = cost.memory()
    out = {"estimate": True, "geometry": "full", "layers": g.num_hidden_layers, "context": args.context,
           "replay_source": replays, "copy_ceiling_bytes_per_s": copy_bw, "rows": rows,
           "ends_us_floor_not_measured": ends,
           "token_us": layers_us + ends, "floor_us": floor_us + ends, "memory": mem,
           "fits_one_h200": mem["total"] <= H200_BYTES}
    print(f"ESTIMATE (not a measurement): full geometry, {g.num_hidden_layers} layers, NVFP4 experts, B = 1, "
          f"context {args.context}, one GPU; floors at {copy_bw / 1e12:.2f} TB/s (the replays' copy speed)")
    print(f"{'kind':18s} {'layers':>6s} {'measured/layer':>15s} {'floor/layer':>12s} {'x floor':>8s} {'total':>10s}")
    for r in rows:
        print(f"{r['kind']:18s} {r['layers']:6d} {r['measured_us']:12.1f} us {r['floor_us']:9.1f} us "
              f"{r['measured_us'] / r['floor_us']:7.1f}x {r['total_us'] / 1e3:7.2f} ms")
    print(f"{'ends (floor only)':18s} {'':6s} {'':15s} {ends:9.1f} us {'':8s} {ends / 1e3:7.2f} ms")
    print(f"per token: {out['token_us'] / 1e3:.2f} ms ({1e6 / out['token_us']:.1f} tokens/s at B = 1); bytes floor "
          f"{out['floor_us'] / 1e3:.2f} ms ({out['token_us'] / out['floor_us']:.1f}x)")
    print(f"memory on one GPU: weights {mem['weights'] / 1e9:.1f} GB + states and caches "
          f"{mem['states_and_caches'] / 1e9:.2f} GB + activations {mem['activations'] / 1e9:.2f} GB = "
          f"{mem['total'] / 1e9:.1f} GB: {'fits' if out['fits_one_h200'] else 'does NOT fit'} one H200 "
          f"({H200_BYTES / 1e9:.0f} GB = {H200_BYTES / 2**30:.0f} GiB)")
    write_json(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
