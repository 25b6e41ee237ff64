"""Ours' KDA chunked prefill against its intra-kernel variants and fla's chunk_kda, alternating, 5 repeats
(issue 14 step 18): every variant checked against the float64 oracle on 3 heads first (bench_kda's
bounds), then each repeat the median of a do_bench loop; prints median [min-max] and the ratio to ours
and to fla measured in the same run: fla's general path and its bounded-gate path (safe_gate=True,
lower_bound=-5, the checkpoint's gate). `ours` is impl.kda.chunked (the split intra pass since step 26);
`columns` is ours before it (the whole-chunk intra kernel), which every variant named after an option of it
(inv_sub, cap168, stack, gc) runs.

    PYTHONPATH=. python3 scripts/kda_prefill_variants.py [--shapes 64:16384,8:16384] [--repeats 5] [--json F]
        [--pre-fix FILE] [--breakdown N]

--breakdown N profiles N calls of each path after the timings (torch.profiler, CUDA activity) and prints
each kernel's device time per call: where ours and fla spend the step, launch by launch.

--pre-fix times one more path, `pre_fix`: ours' wrapper launching the intra kernel of FILE, the kernel
module of an earlier commit, in the same run as ours. Made here and carried to the device:
    mkdir -p .prefix && git show 2d3c0ef:impl/kernels/kda.py > .prefix/kda_kernels_2d3c0ef.py
(2d3c0ef: the last commit before the strong-decay fix, whose cost on the bounded gate this measures).
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.util
import sys

VARIANTS = {"ours": {},
            # step 28: ours without the host read of the NaN flags (impl.kda.chunked_ex; the same launches)
            "ours_ex": dict(sync=False),
            # ours before step 26 (the whole-chunk intra kernel) and its options
            "columns": dict(intra="columns"),
            "inv_sub": dict(intra="columns", inv_merge=False),
            "cap168": dict(intra="columns", intra_maxnreg=168),
            "inv_sub+cap168": dict(intra="columns", inv_merge=False, intra_maxnreg=168),
            "inv_sub+cap168+bk64": dict(intra="columns", inv_merge=False, intra_maxnreg=168, intra_bk=64),
            # step 21: the kk and qk products of a column block as one stacked dot
            "stack": dict(intra="columns", intra_stack=True),
            "stack+inv_sub+cap168": dict(intra="columns", intra_stack=True, inv_merge=False, intra_maxnreg=168),
            # step 23: Γ by its own kernel, the intra kernel without its scan along the tokens
            "gc": dict(intra="columns", g_cumsum=True),
            "gc+inv_sub+cap168": dict(intra="columns", g_cumsum=True, inv_merge=False, intra_maxnreg=168),
            "gc+stack+inv_sub+cap168": dict(intra="columns", g_cumsum=True, intra_stack=True, inv_merge=False,
                                            intra_maxnreg=168),
            # step 18's sub-chunk pair (kk kernel, then W / U kernel), kept for its kernel split beside fla's
            "pair": dict(intra="blocked", intra_bk=16, intra_warps=2),
            # step 26: the split intra pass (Γ; diagonal blocks; off-diagonal blocks + merge; W / U) at its
            # tiles ("split"), then one tile choice changed at a time from ours' (the dict: SplitTiles fields)
            "split": dict(intra="split", split=dict(diag_qk=False, off_bk=16, diag_bk=32, diag_sub_first=False, diag_gamma=False)),
            "split_tf32": dict(intra="split", split=dict(low_dots=False)),
            "split_d128w4": dict(intra="split", split=dict(diag_bk=128, diag_warps=4)),
            "split_o32w4": dict(intra="split", split=dict(off_bk=32, off_warps=4)),
            "split_wu8": dict(intra="split", split=dict(wu_warps=8)),
            "split_wu2": dict(intra="split", split=dict(wu_warps=2)),
            "split_d64w4": dict(intra="split", split=dict(diag_bk=64, diag_warps=4)),
            # step 27 (ours since): q e^Γ, k e^(Γ_last - Γ) and β k e^Γ made by the diagonal kernel, and the
            # off-diagonal K tile of 32; each undone alone (in stop 38's logs split_o32 was named split_o32w2,
            # and ours' tiles split_qk_o32)
            "split_qk": dict(intra="split", split=dict(diag_qk=True, off_bk=16, diag_bk=32, diag_sub_first=False, diag_gamma=False)),
            "split_o32": dict(intra="split", split=dict(diag_qk=False, off_bk=32, diag_bk=32, diag_sub_first=False, diag_gamma=False)),
            # step 29 (ours since): the diagonal kernel's K tile of 64; split_d32 undoes it (ours after step 27),
            # and its warps either side. In stop 39's logs ours' tiles are split_d64w2 (split_d64_ex without the
            # host read), and `ours` / `ours_ex` there had the K tile of 32
            "split_d32": dict(intra="split", split=dict(diag_bk=32)),
            "split_d64w1": dict(intra="split", split=dict(diag_bk=64, diag_warps=1)),
            "split_d128w2": dict(intra="split", split=dict(diag_bk=128, diag_warps=2)),
            # step 30 (ours since): no Γ launch, Γ made by the diagonal and off-diagonal kernels from g (gamma),
            # and the diagonal kernel's grid with a chunk's blocks neighbours alone (sub); both without the host
            # read. step29 / step29_ex: ours before step 30 (split_d32 and the others above change one tile from
            # ours, so since step 30 they run without the Γ launch)
            "gamma_ex": dict(intra="split", split=dict(diag_sub_first=True, diag_gamma=True), sync=False),
            "gamma": dict(intra="split", split=dict(diag_sub_first=True, diag_gamma=True)),
            "gamma_dw4_ex": dict(intra="split", split=dict(diag_sub_first=True, diag_gamma=True, diag_warps=4),
                                 sync=False),
            "gamma_d32_ex": dict(intra="split", split=dict(diag_sub_first=True, diag_gamma=True, diag_bk=32),
                                 sync=False),
            "sub_ex": dict(intra="split", split=dict(diag_gamma=False), sync=False),
            "step29": dict(intra="split", split=dict(diag_sub_first=False, diag_gamma=False, diag_ftz=False, diag_nan_last=False, off_ftz=False, x_w=False, aqk_lower=False)),
            "step29_ex": dict(intra="split", split=dict(diag_sub_first=False, diag_gamma=False, diag_ftz=False, diag_nan_last=False, off_ftz=False, x_w=False, aqk_lower=False), sync=False),
            # step 31 (ours since): the diagonal kernel's exps as ex2.approx.ftz (impl.candidates.kda_diag_ftz);
            # noftz_ex is ours before it (tl.exp with its denormal fix-up)
            "ftz_ex": dict(intra="split", split=dict(diag_ftz=True, diag_nan_last=False, off_ftz=False, x_w=False, aqk_lower=False), sync=False),
            "noftz_ex": dict(intra="split", split=dict(diag_ftz=False, diag_nan_last=False, off_ftz=False, x_w=False, aqk_lower=False), sync=False),
            # step 32 (ours since): the diagonal kernel's NaN report from Γ_last and β, no reduction
            # (impl.candidates.kda_diag_nan_last); step31_ex is ours before it
            "nanlast_ex": dict(intra="split", split=dict(diag_nan_last=True, off_ftz=False, x_w=False, aqk_lower=False), sync=False),
            "step31_ex": dict(intra="split", split=dict(diag_nan_last=False, off_ftz=False, x_w=False, aqk_lower=False), sync=False),
            # step 33 (ours since): the off-diagonal kernel's exps as ex2.approx.ftz (impl.candidates.kda_off_ftz);
            # step32_ex is ours before it
            "offftz_ex": dict(intra="split", split=dict(off_ftz=True, x_w=False, aqk_lower=False), sync=False),
            "step32_ex": dict(intra="split", split=dict(off_ftz=False, x_w=False, aqk_lower=False), sync=False),
            # steps 34 and 35 (ours since): X handed to the W / U kernel in bf16 (impl.candidates.kda_x_w), aqk's
            # zero blocks neither stored nor read (impl.candidates.kda_aqk_lower); step33_ex is ours before both.
            # The state pass's launch (ours: BV 64, 4 warps, Triton's default stages) one choice at a time: each
            # slower at H = 64 in stop 43
            "xw_ex": dict(intra="split", split=dict(x_w=True, aqk_lower=False), sync=False),
            # step 35: aqk's blocks right of the diagonal neither stored nor read (impl.candidates.kda_aqk_lower)
            "lower_ex": dict(intra="split", split=dict(aqk_lower=True, x_w=False), sync=False),
            "xw_lower_ex": dict(intra="split", split=dict(x_w=True, aqk_lower=True), sync=False),
            "step33_ex": dict(intra="split", split=dict(x_w=False, aqk_lower=False), sync=False),
            "st_w8_ex": dict(intra="split", num_warps=8, sync=False),
            "st_s2_ex": dict(intra="split", stages=2, sync=False),
            "st_s4_ex": dict(intra="split", stages=4, sync=False),
            "st_bv32_ex": dict(intra="split", bv=32, sync=False),
            # step 36: a B = 1 row in pieces along its tokens, each piece's state pass on a second stream beside
            # the next piece's intra pass (impl.candidates.kda_pieces: 4); p0 the second stream at the default
            # priority instead of a high one
            "pieces2_ex": dict(intra="split", split=dict(pieces=2), sync=False),
            "pieces4_ex": dict(intra="split", split=dict(pieces=4), sync=False),
            "pieces8_ex": dict(intra="split", split=dict(pieces=8), sync=False),
            "pieces4_p0_ex": dict(intra="split", split=dict(pieces=4, piece_priority=0), sync=False)}


class _WithoutPairs:
    """An intra kernel from before PAIRS existed, launched as ours' wrapper launches the current one."""

    def __init__(self, kernel):
        self.kernel = kernel

    def __getitem__(self, grid):
        def launch(*args, PAIRS=False, **kwargs):
            if PAIRS:
                raise RuntimeError("--pre-fix: the earlier kernel has no PAIRS pass (strong decays flagged)")
            return self.kernel[grid](*args, **kwargs)
        return launch


def _pre_fix(path: str):
    """(a context manager that swaps FILE's intra kernel into impl.kda while it is open)."""
    spec = importlib.util.spec_from_file_location("kda_kernels_pre_fix", path)
    if spec is None:
        raise SystemExit(f"--pre-fix: cannot load {path}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)        # triton reads a kernel's source from its file: it must stay there
    from impl import kda as ik
    old = _WithoutPairs(mod.kda_intra_chunked_fwd_kernel)

    @contextlib.contextmanager
    def swapped():
        current = ik.kda_intra_chunked_fwd_kernel
        ik.kda_intra_chunked_fwd_kernel = old
        try:
            yield
        finally:
            ik.kda_intra_chunked_fwd_kernel = current
    return swapped


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shapes", default="64:16384,8:16384")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--variants", default=",".join(VARIANTS),
                   help=f"comma-separated names among {', '.join(VARIANTS)} (ours is always timed)")
    p.add_argument("--json", default=None)
    p.add_argument("--pre-fix", default=None, metavar="FILE",
                   help="an earlier commit's impl/kernels/kda.py: its intra kernel timed as `pre_fix` (see above)")
    p.add_argument("--breakdown", type=int, default=0, metavar="N",
                   help="after the timings, profile N calls of each path and print each kernel's time per call")
    args = p.parse_args(argv)
    chosen = ["ours"] + [n for n in args.variants.split(",") if n and n != "ours"]
    unknown = [n for n in chosen if n not in VARIANTS]
    if unknown:
        p.error(f"--variants: unknown {unknown}; expected names among {', '.join(VARIANTS)}")
    from gate.bench_kda import _check_prefill, _prefill_inputs, bench_bound
    from gate.benchlib import alternating, do_bench, header, kernel_times, write_json
    from impl import kda as ik
    from oracle import kda as ok
    try:
        from fla.ops.kda import chunk_kda
    except ImportError:
        chunk_kda = None
    def options(name):
        kw = dict(VARIANTS[name])
        if isinstance(kw.get("split"), dict):
            kw["split"] = ik.SplitTiles(**kw["split"])
        return kw
    def path(name):
        fn = functools.partial(ik._chunked, **options(name))
        # chunked_ex's fourth result (the NaN flags on the device) is left unread, as its caller would
        return (lambda *a, **kw: fn(*a, **kw)[:3]) if options(name).get("sync") is False else fn
    paths = {name: path(name) for name in chosen}
    if args.pre_fix:
        swapped = _pre_fix(args.pre_fix)

        def pre_fix(*a, **kw):
            with swapped():
                return ik._chunked(*a, intra="columns", **kw)
        paths["pre_fix"] = pre_fix
    bo, bm = bench_bound("kda", "chunked", "output", "bfloat16"), bench_bound("kda", "chunked", "final_state", "bfloat16")
    out = {}
    for H, T in (tuple(int(x) for x in s.split(":")) for s in args.shapes.split(",")):
        q, k, v, g, beta = _prefill_inputs(H, T)
        fns = {}
        for name, fn in paths.items():
            e_o, e_m = _check_prefill(fn, ok, q, k, v, g, beta, [0, H // 2, H - 1])
            ok_ = e_o <= bo and e_m <= bm
            print(f"H={H} T={T} {name}: oracle rel-L2 output {e_o:.2e} state {e_m:.2e} {'ok' if ok_ else 'REFUSED'}")
            if ok_:
                fns[name] = functools.partial(fn, q, k, v, g, beta, None, 64, None, False)
        if chunk_kda is not None:
            fns["fla"] = lambda: chunk_kda(q, k, v, g, beta, scale=1.0, initial_state=None, output_final_state=True)
            # fla's bounded-gate path (the checkpoint's gate: g in [-5, 0), tensor-core intra products): the peer
            # a GLM-5.3-Flash deployment runs
            fns["fla_safe"] = lambda: chunk_kda(q, k, v, g, beta, scale=1.0, initial_state=None,
                                                output_final_state=True, safe_gate=True, lower_bound=-5.0)
        res = alternating(fns, args.repeats, "ms", functools.partial(do_bench, warmup=5, rep=50))
        for n, r in res.items():
            extra = f"  ours/this {res['ours']['median_ms'] / r['median_ms']:.3f}x"
            for peer in ("fla", "fla_safe"):
                if peer in res:
                    extra += f"  {peer}/this {res[peer]['median_ms'] / r['median_ms']:.3f}x"
            print(f"  H={H} T={T} {n:22s} {r['median_ms']:.3f} ms [{r['min_ms']:.3f}-{r['max_ms']:.3f}]{extra}")
        if args.breakdown:
            for n, f in fns.items():
                res[n]["kernels_us"] = kernel_times(f, calls=args.breakdown, top=None, width=None)
                total = sum(res[n]["kernels_us"].values())
                print(f"  H={H} T={T} {n} per call, device time by kernel (sum {total:.1f} us):")
                for name, us in sorted(res[n]["kernels_us"].items(), key=lambda kv: -kv[1]):
                    print(f"      {us:9.1f} us  {name[:110]}")
        out[f"{H}:{T}"] = res
    write_json(args.json, header(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
