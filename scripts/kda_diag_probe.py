"""Where the diagonal-block kernel's time goes (issue 14 step 31, a measurement before any change): ours'
`chunked_ex` at H = 64 (and 8), T = 16K, bf16, with kda_intra_diag_fwd_kernel replaced by ablated copies, each
with one stage left out (its results are then wrong: these copies are timed, never judged), and by launches
under a register cap. For each: the diagonal kernel's device time per call (torch.profiler), the whole pass's,
and the kernel's registers and spills as compiled.

Ablations are source edits of the shipped kernel (impl.mutants.catalogue.kernel_edited, as the kernel mutants
are made), so what is timed is the product's kernel less one stage:
    no_stores   q e^Γ, k e^(Γ_last - Γ), β k e^Γ not made or stored (step 26's kernel on K tiles of 64)
    kb_only     only β k e^Γ stored (q e^Γ and k e^(Γ_last - Γ) left to another kernel)
    no_test     the strong-decay test per K tile (a cross-thread max and a branch) left out
    no_inverse  X_ii stored as β A_ii (the doubling inverse's 8 dots left out)
    no_nan      the NaN count over Γ per K tile left out
    no_qk       the qk product's dot left out
    bare        no_stores + no_test + no_inverse + no_nan: the loads, the factors and the kk / qk dots
    cap128, cap96   ours under maxnreg 128 / 96 (more programs an SM if registers bound the occupancy)
    cap200, cap168  ours under maxnreg 200 / 168: 5 / 6 two-warp programs an SM instead of 4 (step 32)
Changes that keep every stored bit (timed here first; stop 41's ncu pass found the kernel at 255 registers with
6 spills, 12.5 % occupancy, and 12 % of its instructions in tl.exp's denormal fix-ups):
    stores_first  q e^Γ, k e^(Γ_last - Γ), β k e^Γ made and stored right after the loads, before the factors
                  and dots (their registers free before the dots' tiles are live)
    off32         the launch with OFFSET64 False (32-bit offsets: exact at this shape, 2^31 elements away)
    stages1       the launch with num_stages 1 (no software pipelining of the K loop's loads)
    noftz         the launch with FTZ False: tl.exp with its fix-ups (ours before step 31 landed)
And one that changes bits below e^-87: ftz, the launch with FTZ True (every exp of the kernel and of _gated_qk as
ex2.approx.ftz: results below float32's normal range flush to 0, no fix-up instructions). Ours since step 31
(SplitTiles.diag_ftz), so `base` is ftz now; step 31's probe ran it as a source edit of the kernel before the flag
existed. Combinations: sf_ftz, sf_off32, sf_ftz_off32, sf_ftz_off32_s1.
Step 32: nan_last, the launch with NAN_LAST True (SplitTiles.diag_nan_last: the NaN report from Γ_last's row and
β stored lane by lane after the K loop, no reduction; the same bits), and with it nl_cap200, nl_cap168, nl_stages1.
(Stop 42's first probe ran NAN_LAST with the stores inside the K loop: +23 / +25 us at H = 64; its second probe
ran the stores after the loop, `nl_after` then, the kernel's form since: -25 us.)

    PYTHONPATH=. python3 scripts/kda_diag_probe.py [--shapes 64:16384,8:16384] [--calls 5] [--json F]
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import sys

DIAG = "kda_intra_diag_fwd_kernel"
STORES = "            if MAKE_QK:\n                b_qe, b_kl, b_kb"
TWO_STORES = ("                tl.store(qg + o_st, b_qe.to(qg.dtype.element_ty), mask=mask_rk)\n"
              "                tl.store(kg + o_st, b_kl.to(kg.dtype.element_ty), mask=mask_rk)\n")
EDITS = {
    "no_stores": [(STORES, "            if False:\n                b_qe, b_kl, b_kb")],
    "kb_only": [(TWO_STORES, "")],
    "no_test": [("if tl.max(tl.max(b_fall, 1), 0) > SPAN_MAX:", "if False:")],
    "no_inverse": [("_sub_inverse(b_L, o_r, BC, PRECISION)", "b_L")],
    "no_nan": [("n_nan_g += tl.sum(tl.sum((b_g != b_g).to(tl.int32), 1), 0)", "n_nan_g += 0")],
    "no_qk": [("b_Aqk = tl.dot(b_q * b_er, tl.trans(b_kc), b_Aqk, input_precision=PRECISION)", "b_Aqk += 0.")],
}
EDITS["bare"] = EDITS["no_stores"] + EDITS["no_test"] + EDITS["no_inverse"] + EDITS["no_nan"]
NAN_LINE = ("            if not NAN_LAST:\n"
            "                # a NaN anywhere in a chunk's g reaches Γ at its own row and every row after it\n"
            "                n_nan_g += tl.sum(tl.sum((b_g != b_g).to(tl.int32), 1), 0)\n")
STORE_BLOCK = ("            if MAKE_QK or NAN_LAST:\n"
               "                if not FROM_G:\n"
               "                    b_gl = tl.load(gc + s_last * K + o_k, mask=mask_k, other=0.).to(tl.float32)\n"
               "            if NAN_LAST:\n"
               "                # Γ is a running sum along the chunk: a NaN in g at any of its rows is in Γ_last's row\n"
               "                b_nan = tl.maximum(b_nan, (b_gl != b_gl).to(tl.int32))\n"
               "            if MAKE_QK:\n"
               "                b_qe, b_kl, b_kb = _gated_qk(b_q, b_k, b_g, b_gl, b_beta, mask_r[:, None], FTZ)\n"
               "                tl.store(qg + o_st, b_qe.to(qg.dtype.element_ty), mask=mask_rk)\n"
               "                tl.store(kg + o_st, b_kl.to(kg.dtype.element_ty), mask=mask_rk)\n"
               "                tl.store(kb + o_st, b_kb.to(kb.dtype.element_ty), mask=mask_rk)\n")
# the block moved before the rows past the end are set to -3e38: there their g is the load's 0, their q and k 0,
# and every store is masked to the valid rows; the valid rows' values are the same expressions on the same bits
EDITS["stores_first"] = [(STORE_BLOCK, ""), (NAN_LINE, NAN_LINE + STORE_BLOCK)]
# 200 and 168: the most registers with which 5 / 6 two-warp programs fit an SM's 64K (a warp's registers are
# allocated in units of 256: 204 would round to 208, 4 programs)
CAPS = {"cap128": 128, "cap96": 96, "cap200": 200, "cap168": 168}
LAUNCH = {"off32": dict(OFFSET64=False), "stages1": dict(num_stages=1),
          # the kernel's flag (step 31; ours runs FTZ True): noftz times tl.exp's fix-ups
          "ftz": dict(FTZ=True), "noftz": dict(FTZ=False),
          # step 32 (SplitTiles.diag_nan_last): the NaN report from Γ_last and β with no reduction
          "nan_last": dict(NAN_LAST=True), "nonan_last": dict(NAN_LAST=False)}
COMBOS = {"sf_ftz": ("stores_first", "ftz"), "sf_off32": ("stores_first", "off32"),
          "sf_ftz_off32": ("stores_first", "ftz", "off32"), "sf_ftz_off32_s1": ("stores_first", "ftz", "off32", "stages1"),
          "nl_cap200": ("nan_last", "cap200"), "nl_cap168": ("nan_last", "cap168"),
          "nl_stages1": ("nan_last", "stages1")}


class _Launcher:
    """The diagonal kernel as ours' wrapper launches it, recording the compiled kernel's registers and spills,
    with extra launch options (a register cap)."""

    def __init__(self, kernel, seen: dict, **extra):
        self.kernel, self.seen, self.extra = kernel, seen, extra

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            c = self.kernel[grid](*args, **{**kwargs, **self.extra})
            if c is not None:
                self.seen.update(regs=getattr(c, "n_regs", None), spills=getattr(c, "n_spills", None))
            return c
        return launch


@contextlib.contextmanager
def variant(name: str, seen: dict):
    from impl import kda as ik
    from impl.mutants.catalogue import _edited
    base = getattr(ik, DIAG)
    kernel = base
    parts = COMBOS.get(name, (name,))
    for part in parts:
        for old, new in EDITS.get(part, []):
            kernel = _edited(kernel, old, new)
    extra = {}
    for part in parts:
        extra.update(LAUNCH.get(part, {}), **({"maxnreg": CAPS[part]} if part in CAPS else {}))
    setattr(ik, DIAG, _Launcher(kernel, seen, **extra))
    try:
        yield
    finally:
        setattr(ik, DIAG, base)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shapes", default="64:16384,8:16384")
    p.add_argument("--calls", type=int, default=5)
    p.add_argument("--variants", default=",".join(["base", *EDITS, *CAPS, *LAUNCH, *COMBOS]))
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    import torch
    from gate.bench_kda import _prefill_inputs
    from gate.benchlib import do_bench, header, kernel_times, write_json
    from impl import kda as ik
    names = [n for n in args.variants.split(",") if n]
    bad = [n for n in names if n != "base" and n not in EDITS and n not in CAPS and n not in LAUNCH
           and n not in COMBOS]
    if bad:
        p.error(f"--variants: unknown {bad}")
    out = {}
    for H, T in (tuple(int(x) for x in s.split(":")) for s in args.shapes.split(",")):
        q, k, v, g, beta = _prefill_inputs(H, T)
        fn = functools.partial(ik.chunked_ex, q, k, v, g, beta, None, 64, None, False)
        res = {}
        ref = None
        for name in names:
            seen = {}
            with variant(name, seen):
                o, final = fn()[:2]
                torch.cuda.synchronize()
                if ref is None:
                    ref = (o.clone(), final.clone())
                # against the first variant's (base's) results: the same bits, or how far
                same = torch.equal(o, ref[0]) and torch.equal(final, ref[1])
                seen["bits"] = "same" if same else "rel-L2 output {:.2e} state {:.2e}".format(
                    *((a.float() - b.float()).norm().item() / max(b.float().norm().item(), 1e-30)
                      for a, b in ((o, ref[0]), (final, ref[1]))))
                us = kernel_times(fn, calls=args.calls, top=None, width=None)
                wall = do_bench(fn, warmup=5, rep=50)
            diag = sum(t for n, t in us.items() if DIAG in n)
            res[name] = dict(diag_us=diag, device_us=sum(us.values()), wall_ms=wall, **seen)
            b = res.get("base", res[name])
            print(f"H={H} T={T} {name:11s} diagonal {diag:8.1f} us ({diag - b['diag_us']:+7.1f})  pass "
                  f"{res[name]['device_us']:8.1f} us device, {wall:.3f} ms wall  regs {seen.get('regs')} "
                  f"spills {seen.get('spills')}  bits vs base: {seen.get('bits')}", flush=True)
        out[f"{H}:{T}"] = res
    write_json(args.json, header(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
