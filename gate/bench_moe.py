"""Benchmark of the fused MoE grouped GEMMs (impl/moe.py), bf16 and NVFP4, gated by the float64 oracle.

Full size (GLM-5.3): 288 routed experts, top-8, hidden 4096, expert width 2048. Tokens N in
{1, 8, 32, 128} (decode) and 4096 (prefill), each routed to 8 distinct experts drawn uniformly.
Timed, all in the same process:
  torch    the plain torch per-expert loop (impl/baseline/moe.py TorchMoE.experts, bf16 weights)
  bf16     our fused grouped GEMM with bf16 weights (gate_up + clamped SwiGLU, down + routing weight)
  nvfp4    the same kernels with NVFP4 weights dequantized in registers (W4A16; gate and up each with
           its own global scale, global_decode [E, 2], as checkpoints have them)
  nvfp4_swizzled  the same with the block scales in the 128x4 swizzled layout (scale_layout "swizzled")
  nvfp4_split  the NVFP4 weight tiles in the split form (even / odd columns: impl.moe._grouped(split=True),
           issue 14 step 1, docs/optimization_log.md), dequantized as the default does on this GPU: two
           codes per 32-bit instruction (inline PTX, step 11) where impl.moe.pairs_possible
  nvfp4_split_fp16  the split form with step 1's dequantization (the scale product in fp16, pairs=False):
           the peer of step 11
  w4a4     the W4A4 emulation (activations quantize-dequantized in the GEMM prologues), if present
  bf16_glue_torch, nvfp4_split_glue_torch  bf16 and nvfp4_split with the host glue of before issue 14
           step 8 (impl.candidates.moe_align_torch: the torch alignment's ~25 launches and the slot loop),
           the peers of ours' one-launch alignment and slot sum
  bf16_step12, nvfp4_split_step12  bf16 and nvfp4_split with the decode tiles and alignment of before
           step 13 (impl.candidates.moe_decode_step12: BK 128 at <= 16 pairs, the pad slots by a last pass)
The summary line of each N shows ours: the NVFP4 path impl.moe takes there by default (nvfp4_split at
decode sizes, nvfp4 at prefill), its time, % of copy and ratio to our bf16.
`--paths` picks some of them; `--repeats R` times each path R times, round-robin over the paths (a drift
of the clock or the temperature then falls on every path alike), and reports the median with the min and
max of the R medians.
Ours are replayed from CUDA graphs (the routing is an input: no host sync inside). Weight bytes are
those of the experts the batch touches (distinct ids); bandwidth is reported against the copy
ceiling measured in the same run (bytes per second over a device copy's bytes read + written per second).

Before timing, each path's output on two tokens is compared with oracle/moe.py in float64 (bf16
weights as they are; NVFP4 through the oracle's exact dequantization); above the declared bench bound
the benchmark refuses to time and exits 1.

    python -m gate.bench_moe --json out.json
    python -m gate.bench_moe --paths bf16,nvfp4,nvfp4_split --repeats 5 --skip-torch --json out.json
    python -m gate.bench_moe --paths bf16,nvfp4_split_fp16,nvfp4_split --repeats 5 --skip-torch --no-w4a4
"""
from __future__ import annotations

import argparse
import sys

import numpy as np
import torch

from gate.benchlib import copy_ceiling, do_bench, graph, header, kernel_times, rel_l2, to_np, write_json
from invariants.contracts import bench_bound

E, K_TOP, D, I = 288, 8, 4096, 2048
TOKENS = (1, 8, 32, 128, 4096)


def _weights(gen):
    from oracle.types import MoEWeights
    s = D ** -0.5
    gu = (torch.randn(E, 2 * I, D, device="cuda", generator=gen) * s).bfloat16()
    dn = (torch.randn(E, D, I, device="cuda", generator=gen) * I ** -0.5).bfloat16()
    router = (torch.randn(E, D, device="cuda", generator=gen) * s).bfloat16()
    bias = torch.zeros(E, device="cuda")
    return MoEWeights(router, bias, gu, dn, None, None, None, top_k=K_TOP)


def _routing(N: int, gen):
    ids = torch.rand(N, E, device="cuda", generator=gen).argsort(-1)[:, :K_TOP].contiguous()
    wts = torch.softmax(torch.randn(N, K_TOP, device="cuda", generator=gen), -1) * 2.5
    return ids, wts.float().contiguous()


def _sub_nvfp4(nv, experts):
    """The oracle's NVFP4Experts (NumPy fields) of a few experts: bits unchanged."""
    import ml_dtypes

    from oracle import nvfp4 as onv
    from oracle.types import NVFP4Tensor

    def sub(t):
        sc = t.block_scale[experts].view(torch.uint8).cpu().numpy().view(ml_dtypes.float8_e4m3fn)
        return NVFP4Tensor(t.packed[experts].cpu().numpy(), sc, t.global_decode[experts].cpu().numpy())
    return onv.NVFP4Experts(sub(nv.gate_up), sub(nv.down))


def _static_scales(x) -> tuple[float, float]:
    """W4A4 input scales (ENCODE) fixed per run so that the oracle, fed two tokens, quantizes exactly
    as the kernel fed all N: x from its amax; h from a bound (|h| <= L (L + 1) = 110 with the clamps
    at L = 10, so 128 never saturates)."""
    return 2688.0 / float(x.float().abs().max()), 2688.0 / 128.0


def _check(w, nv, x, ids, wts, outs: dict, tokens=(0, -1)) -> dict:
    """rel-L2 vs the float64 oracle on `tokens`, computed over only the experts they use."""
    import oracle.moe as om
    from oracle.types import MoEWeights, Routing
    n = [t % x.shape[0] for t in tokens]
    used = torch.unique(ids[n]).tolist()
    remap = {e: j for j, e in enumerate(used)}
    sub_ids = np.vectorize(remap.get)(ids[n].cpu().numpy())
    routing = Routing(sub_ids, to_np(wts[n]), None, None, None)
    ws = MoEWeights(np.zeros((len(used), D)), np.zeros(len(used)), to_np(w.gate_up_proj[used]),
                    to_np(w.down_proj[used]), None, None, None, top_k=K_TOP)
    x64 = to_np(x[n])
    refs = {}
    if set(outs) & set(BF16_PATHS):
        ref = om.experts(ws, x64, routing)
        refs.update({k: ref for k in BF16_PATHS})
    if nv is not None and set(outs) - set(BF16_PATHS):
        sub = _sub_nvfp4(nv, used)
        if set(outs) & set(NVFP4_PATHS):
            # the swizzled scales are the same bytes reordered, the split tiles the same values regrouped
            ref = om.experts(ws, x64, routing, nvfp4=sub)
            refs.update({k: ref for k in NVFP4_PATHS})
        if "w4a4" in outs:
            gx, gh = _static_scales(x)
            from oracle import nvfp4 as onv
            static = onv.with_input_scales(sub, np.full(len(used), gx), np.full(len(used), gh))
            refs["w4a4"] = om.experts(ws, x64, routing, nvfp4=static, w4a4=True)
    return {k: rel_l2(to_np(o[n]), refs[k]) for k, o in outs.items()}


PATHS = ("bf16", "nvfp4", "nvfp4_swizzled", "nvfp4_split", "nvfp4_split_fp16", "w4a4", "bf16_glue_torch",
         "nvfp4_split_glue_torch", "bf16_step12", "nvfp4_split_step12")
# the paths over bf16 weights and over W4A16 NVFP4 weights (each family has one oracle reference and one bound)
BF16_PATHS = ("bf16", "bf16_glue_torch", "bf16_step12")
NVFP4_PATHS = ("nvfp4", "nvfp4_swizzled", "nvfp4_split", "nvfp4_split_fp16", "nvfp4_split_glue_torch",
               "nvfp4_split_step12")


def ours_path(N: int) -> str:
    """The path that times ours' NVFP4 experts at N tokens: the tile form impl.moe._grouped takes by default (split
    tiles for blocks of <= 16 rows, the decode's), so the summary's ratio is ours', not a form ours does not run."""
    from impl import moe as imoe
    BM, _, BK, *_ = imoe.default_tiles(D, I, E, N * K_TOP)
    return "nvfp4_split" if imoe.split_tiles(BM, BK, False) else "nvfp4"


def _paths(w, nv, x, ids, wts, w4a4: bool, names=PATHS, swz=None):
    """{name: callable} of our fused paths over the same routing (the graph-capturable core), for `names`;
    swz: the experts with swizzled scales (made once by the caller)."""
    from impl import moe as imoe
    from impl import nvfp4 as inv
    from impl.candidates import moe_align_torch, moe_decode_step12
    paths = {"bf16": lambda: imoe._grouped(x, ids, wts, E, I, dense=(w.gate_up_proj, w.down_proj)),
             "bf16_glue_torch": lambda: moe_align_torch.grouped(x, ids, wts, E, I, dense=(w.gate_up_proj, w.down_proj)),
             "bf16_step12": lambda: moe_decode_step12.grouped(x, ids, wts, E, I, dense=(w.gate_up_proj, w.down_proj))}
    if nv is not None:
        # the interleaved tiles, named explicitly: NVFP4_SPLIT must not change what "nvfp4" times
        paths["nvfp4"] = lambda: imoe._grouped(x, ids, wts, E, I, nv=nv, split=False)
        # the 128x4-swizzled block scales a CUTLASS loader leaves: a gathered scale load per tile
        if "nvfp4_swizzled" in names:
            swz = inv.swizzle_experts(nv) if swz is None else swz
            paths["nvfp4_swizzled"] = lambda: imoe._grouped(x, ids, wts, E, I, nv=swz, split=False)
        paths["nvfp4_split"] = lambda: imoe._grouped(x, ids, wts, E, I, nv=nv, split=True)
        paths["nvfp4_split_fp16"] = lambda: imoe._grouped(x, ids, wts, E, I, nv=nv, split=True, pairs=False)
        paths["nvfp4_split_glue_torch"] = lambda: moe_align_torch.grouped(x, ids, wts, E, I, nv=nv, split=True)
        paths["nvfp4_split_step12"] = lambda: moe_decode_step12.grouped(x, ids, wts, E, I, nv=nv, split=True)
        if w4a4 and "w4a4" in names:
            gx, gh = _static_scales(x)
            static = inv.with_input_scales(nv, torch.full((E,), gx), torch.full((E,), gh))
            paths["w4a4"] = lambda: imoe._grouped(x, ids, wts, E, I, nv=static, w4a4=True, split=False)
    return {k: f for k, f in paths.items() if k in names}


# (BM, BN, BK, num_warps[, num_stages]) variants the --sweep times: BM 16 drops the padded rows of decode
# blocks (1-4 pairs per expert), BN 32 doubles the programs in flight; after issue 14 step 11 (the PAIRS
# dequantization: the decode tiles' issue time and bytes of one size) deeper pipelines, BK 256 and BN 128,
# compiled for sm_90 in docs/optimization_log.md step 11's "Next"
SWEEP_TILES = ((64, 64, 64, 4), (16, 64, 64, 4), (16, 32, 64, 4), (16, 32, 128, 4), (16, 64, 128, 4),
               (32, 64, 64, 4), (16, 128, 64, 4), (16, 64, 64, 8), (128, 128, 64, 8),
               (16, 64, 128, 4, 4), (16, 64, 128, 4, 5), (16, 32, 128, 4, 4), (16, 128, 128, 4), (16, 32, 256, 4),
               # the fewest instructions per dequantized element in the static count (4.26 against the decode
               # tile's 4.86: docs/optimization_log.md step 17), half the decode tile's programs at N = 1
               (16, 64, 256, 4), (16, 64, 256, 4, 3))


def _sweep(w, nv, x, ids, wts, N: int) -> dict:
    from impl import moe as imoe
    out = {}
    for tiles in SWEEP_TILES:
        if tiles[0] == 128 and N < 1024:
            continue
        for name, kw in (("bf16", dict(dense=(w.gate_up_proj, w.down_proj))), ("nvfp4", dict(nv=nv))):
            def fn():
                return imoe._grouped(x, ids, wts, E, I, tiles=tiles, **kw)
            try:
                out[f"{name} {tiles}"] = do_bench(graph(fn) if N <= 128 else fn) * 1e3
            except Exception as e:  # a tile that does not fit is a sweep result, not a failure
                out[f"{name} {tiles}"] = float("nan")
                print(f"  sweep {name} {tiles}: {type(e).__name__}: {str(e)[:160]}")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="glmgate bench --mechanism moe", description=__doc__.split("\n")[0])
    p.add_argument("--json", default=None, help="write the results here")
    p.add_argument("--tokens", default=None, help="token counts (default 1,8,32,128,4096)")
    p.add_argument("--skip-torch", action="store_true", help="do not time the per-expert torch loop")
    p.add_argument("--no-w4a4", action="store_true")
    p.add_argument("--sweep", action="store_true", help="also time every tile variant (SWEEP_TILES)")
    p.add_argument("--paths", default=",".join(PATHS), help=f"the paths to time (default all: {','.join(PATHS)})")
    p.add_argument("--repeats", type=int, default=1, help="time each path this many times, round-robin (>= 1)")
    args = p.parse_args(argv)
    names = tuple(n for n in args.paths.split(",") if n)
    if not names or set(names) - set(PATHS) or args.repeats < 1:
        p.error(f"--paths: a comma list of {PATHS}; --repeats >= 1")
    if not torch.cuda.is_available():
        print("bench_moe: no CUDA device; nothing timed", file=sys.stderr)
        return 2
    from impl import nvfp4 as inv
    from impl.baseline.moe import TorchMoE
    from oracle.types import Routing
    results = header({"rows": []})
    copy_bw = copy_ceiling()
    results["copy_bytes_per_s"] = copy_bw
    print(f"device {results['device']}; copy ceiling {copy_bw / 1e12:.2f} TB/s (read + write)")
    gen = torch.Generator(device="cuda").manual_seed(0)
    w = _weights(gen)
    nv = inv.quantize_experts(w.gate_up_proj, w.down_proj)
    per_expert = {"bf16": 3 * I * D * 2, "nvfp4": 3 * I * D // 2 + 3 * I * D // 16 + 8}
    for name in ("w4a4",) + NVFP4_PATHS:
        per_expert[name] = per_expert["nvfp4"]
    for name in BF16_PATHS:
        per_expert[name] = per_expert["bf16"]
    w4a4 = not args.no_w4a4
    bounds = {"bf16": bench_bound("moe", "experts", "output", "bfloat16"),
              "nvfp4": bench_bound("nvfp4", "experts", "output", "bfloat16")}
    for name in ("w4a4",) + NVFP4_PATHS:
        bounds[name] = bounds["nvfp4"]
    for name in BF16_PATHS:
        bounds[name] = bounds["bf16"]
    tokens = TOKENS if args.tokens is None else [int(t) for t in args.tokens.split(",")]
    swz = inv.swizzle_experts(nv) if "nvfp4_swizzled" in names else None
    results.update(paths=list(names), repeats=args.repeats)
    print(f"\nfused MoE E={E} top-{K_TOP} D={D} I={I}; gate rel-L2 <= {bounds}; {args.repeats} repeat(s) per path")
    print("ours: the NVFP4 tile form impl.moe takes at that N by default (the split tiles where a block has <= 16 "
          "rows: decode), timed as that path below")
    print(f"{'N':>5} {'experts':>7} {'torch us':>9} {'bf16 us':>9} {'ours us':>9} {'w4a4 us':>9} "
          f"{'bf16 %copy':>10} {'ours %copy':>10} {'ours/bf16':>9} {'bf16/torch':>10} {'ours':>11}")
    refused = False
    for N in tokens:
        x = torch.randn(N, D, device="cuda", generator=gen).bfloat16()
        ids, wts = _routing(N, gen)
        paths = _paths(w, nv, x, ids, wts, w4a4, names, swz)
        outs = {}
        for name in list(paths):
            try:
                outs[name] = paths[name]()
            except TypeError as e:              # an older _grouped without the W4A4 path
                print(f"  {name}: not run ({e})")
                del paths[name]
        errs = _check(w, nv, x, ids, wts, outs)
        row = {"N": N, "experts_touched": int(torch.unique(ids).numel()), "err": errs}
        bad = {k: v for k, v in errs.items() if not v <= bounds[k]}
        if bad:
            print(f"REFUSED N={N}: rel-L2 vs oracle {bad} above {bounds}")
            row["refused"] = True
            results["rows"].append(row)
            refused = True
            continue
        # each path captured once; the repeats replay it round-robin over the paths
        timed = {name: graph(fn) if N <= 128 else fn for name, fn in paths.items()}
        runs = {name: [] for name in timed}
        for _ in range(args.repeats):
            for name, fn in timed.items():
                runs[name].append(do_bench(fn) * 1e3)
        for name in paths:
            t = float(np.median(runs[name]))
            row[f"{name}_us"] = t
            row[f"{name}_us_repeats"] = runs[name]
            row[f"{name}_us_spread"] = [min(runs[name]), max(runs[name])]
            byts = row["experts_touched"] * per_expert[name]
            row[f"{name}_weight_bytes"] = byts
            row[f"{name}_pct_copy"] = 100 * byts / (t * 1e-6) / copy_bw
        if not args.skip_torch:
            base = TorchMoE()
            row["torch_us"] = do_bench(lambda: base.experts(w, x, Routing(ids, wts, None, None, None))) * 1e3
            row["torch_pct_copy"] = 100 * row["experts_touched"] * per_expert["bf16"] / (row["torch_us"] * 1e-6) / copy_bw
            if "bf16_us" in row:
                row["bf16_vs_torch"] = row["torch_us"] / row["bf16_us"]
        for name in ("nvfp4", "nvfp4_swizzled", "nvfp4_split", "nvfp4_split_fp16", "w4a4"):
            if f"{name}_us" in row and "bf16_us" in row:
                row[f"{name}_speedup_vs_bf16"] = row["bf16_us"] / row[f"{name}_us"]
        if "nvfp4_split_us" in row and "nvfp4_us" in row:
            row["nvfp4_split_speedup_vs_nvfp4"] = row["nvfp4_us"] / row["nvfp4_split_us"]
        # ours against the step 8 peer (the torch host glue), same kernels otherwise
        for ours, peer in (("nvfp4_split", "nvfp4_split_glue_torch"), ("bf16", "bf16_glue_torch"),
                           ("nvfp4_split", "nvfp4_split_fp16"), ("nvfp4_split", "nvfp4_split_step12"),
                           ("bf16", "bf16_step12")):
            if f"{ours}_us" in row and f"{peer}_us" in row:
                row[f"{ours}_speedup_vs_{peer}"] = row[f"{peer}_us"] / row[f"{ours}_us"]
        if args.sweep:
            row["sweep_us"] = _sweep(w, nv, x, ids, wts, N)
            for name in ("bf16", "nvfp4"):
                best = min((kv for kv in row["sweep_us"].items() if kv[0].startswith(name) and kv[1] == kv[1]),
                           key=lambda kv: kv[1], default=None)
                row[f"{name}_sweep_best"] = best
            print(f"  sweep best: bf16 {row['bf16_sweep_best']}, nvfp4 {row['nvfp4_sweep_best']}")
        if N in (1, 8, 32, 4096):
            row["kernels"] = {k: kernel_times(fn, calls=3) for k, fn in paths.items()}
        if N >= 1024:
            row["tflops"] = {k: 2 * N * K_TOP * 3 * I * D / (row[f"{k}_us"] * 1e-6) / 1e12 for k in paths}
        ours = row["ours_path"] = ours_path(N)
        results["rows"].append(row)
        nan = float("nan")
        print(f"{N:>5} {row['experts_touched']:>7} {row.get('torch_us', nan):>9.1f} {row.get('bf16_us', nan):>9.1f} "
              f"{row.get(f'{ours}_us', nan):>9.1f} {row.get('w4a4_us', nan):>9.1f} {row.get('bf16_pct_copy', nan):>10.1f} "
              f"{row.get(f'{ours}_pct_copy', nan):>10.1f} {row.get(f'{ours}_speedup_vs_bf16', nan):>9.2f} "
              f"{row.get('bf16_vs_torch', nan):>10.2f} {ours:>11}  "
              f"err {', '.join(f'{k} {v:.1e}' for k, v in errs.items())}")
        for name in paths:
            lo, hi = row[f"{name}_us_spread"]
            vs = f", {row[f'{name}_speedup_vs_bf16']:.2f}x bf16" if f"{name}_speedup_vs_bf16" in row else ""
            print(f"      {name:15s} median {row[f'{name}_us']:9.1f} us  (min {lo:.1f}, max {hi:.1f}, "
                  f"{args.repeats} repeats){vs}")
        if "nvfp4_split_speedup_vs_nvfp4" in row:
            print(f"      nvfp4_split vs nvfp4: {row['nvfp4_split_speedup_vs_nvfp4']:.3f}x")
        for key in ("nvfp4_split_speedup_vs_nvfp4_split_glue_torch", "bf16_speedup_vs_bf16_glue_torch",
                    "nvfp4_split_speedup_vs_nvfp4_split_fp16", "nvfp4_split_speedup_vs_nvfp4_split_step12",
                    "bf16_speedup_vs_bf16_step12"):
            if key in row:
                print(f"      {key.replace('_speedup_vs_', ' vs ')}: {row[key]:.3f}x")
        del x, outs
        torch.cuda.empty_cache()
    write_json(args.json, results)
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
