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

    PYTHONPATH=. python3 scripts/kda_diag_probe.py [--shapes 64:16384,8:16384] [--calls 5] [--json F]
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import sys

DIAG = "kda_intra_diag_fwd_kernel"
STORES = "            if MAKE_QK:\n                if not FROM_G:"
TWO_STORES = ("                tl.store(qg + o_st, b_qe.to(qg.dtype.element_ty), mask=mask_rk)\n"
              "                tl.store(kg + o_st, b_kl.to(kg.dtype.element_ty), mask=mask_rk)\n")
EDITS = {
    "no_stores": [(STORES, "            if False:\n                if not FROM_G:")],
    "kb_only": [(TWO_STORES, "")],
    "no_test": [("if tl.max(tl.max(b_fall, 1), 0) > SPAN_MAX:", "if False:")],
    "no_inverse": [("_sub_inverse(b_L, o_r, BC, PRECISION)", "b_L")],
    "no_nan": [("n_nan_g += tl.sum(tl.sum((b_g != b_g).to(tl.int32), 1), 0)", "n_nan_g += 0")],
    "no_qk": [("b_Aqk = tl.dot(b_q * b_er, tl.trans(b_kc), b_Aqk, input_precision=PRECISION)", "b_Aqk += 0.")],
}
EDITS["bare"] = EDITS["no_stores"] + EDITS["no_test"] + EDITS["no_inverse"] + EDITS["no_nan"]
CAPS = {"cap128": 128, "cap96": 96}


class _Launcher:
    """The diagonal kernel as ours' wrapper launches it, recording the compiled kernel's registers and spills,
    with extra launch options (a register cap)."""

    def __init__(self, kernel, seen: dict, **extra):
        self.kernel, self.seen, self.extra = kernel, seen, extra

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            c = self.kernel[grid](*args, **kwargs, **self.extra)
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
    for old, new in EDITS.get(name, []):
        kernel = _edited(kernel, old, new)
    extra = {"maxnreg": CAPS[name]} if name in CAPS else {}
    setattr(ik, DIAG, _Launcher(kernel, seen, **extra))
    try:
        yield
    finally:
        setattr(ik, DIAG, base)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shapes", default="64:16384,8:16384")
    p.add_argument("--calls", type=int, default=5)
    p.add_argument("--variants", default=",".join(["base", *EDITS, *CAPS]))
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    import torch
    from gate.bench_kda import _prefill_inputs
    from gate.benchlib import do_bench, header, kernel_times, write_json
    from impl import kda as ik
    names = [n for n in args.variants.split(",") if n]
    bad = [n for n in names if n != "base" and n not in EDITS and n not in CAPS]
    if bad:
        p.error(f"--variants: unknown {bad}")
    out = {}
    for H, T in (tuple(int(x) for x in s.split(":")) for s in args.shapes.split(",")):
        q, k, v, g, beta = _prefill_inputs(H, T)
        fn = functools.partial(ik.chunked_ex, q, k, v, g, beta, None, 64, None, False)
        res = {}
        for name in names:
            seen = {}
            with variant(name, seen):
                fn()
                torch.cuda.synchronize()
                us = kernel_times(fn, calls=args.calls, top=None, width=None)
                wall = do_bench(fn, warmup=5, rep=50)
            diag = sum(t for n, t in us.items() if DIAG in n)
            res[name] = dict(diag_us=diag, device_us=sum(us.values()), wall_ms=wall, **seen)
            b = res.get("base", res[name])
            print(f"H={H} T={T} {name:11s} diagonal {diag:8.1f} us ({diag - b['diag_us']:+7.1f})  pass "
                  f"{res[name]['device_us']:8.1f} us device, {wall:.3f} ms wall  regs {seen.get('regs')} "
                  f"spills {seen.get('spills')}", flush=True)
        out[f"{H}:{T}"] = res
    write_json(args.json, header(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
