"""SASS of the NVFP4 MoE GEMM kernels' hot loop, without a GPU: instructions per dequantized element.

The roofline input of docs/optimization_log.md: the W4A16 tile is bound by instruction issue, so the
number that predicts its time is how many SASS instructions each thread spends per weight element it
dequantizes. This compiles `moe_gate_up_fwd_kernel` and `moe_down_fwd_kernel` (NVFP4, linear scales,
bf16 dots) for sm_90 with the ptxas inside the triton wheel (gate/compile_check.py's records), finds
the hot loop (the longest backward branch: the K loop), and prints its instruction count per K step,
per element (BN x BK weights per GEMM half, gate_up has two, over 32 x num_warps threads), and the
opcode mix.

    python3 scripts/sass_loop.py                      # the decode tiles of impl.moe._tiles
    python3 scripts/sass_loop.py --set SPLIT=True     # with extra constexprs (a variant's flag)
    python3 scripts/sass_loop.py --json out.json --dump DIR   # also the SASS and TTGIR files
    python3 scripts/sass_loop.py --set SPLIT=True --set PAIRS=True --tile 16x64x256/4 --tile 16x64x128/4/4
                                                      # other tiles: BMxBNxBK/warps[/pipeline stages]

The numbers depend on the Triton version (the H200 runs 3.6; set PYTHONPATH to another install to
compare). Static counts: no stalls, no memory time; issue-bound kernels only.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile

# compile the real kernels, not the interpreter's stand-ins (before triton is imported)
os.environ.pop("TRITON_INTERPRET", None)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# (BM, BN, BK, num_warps) of impl.moe._tiles on a GPU: N=1 decode, N=8..128 decode, prefill
TILES = ((16, 32, 128, 4), (16, 64, 128, 4), (128, 128, 64, 8))


def _compile(rec, arch: int):
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from gate import compile_check as cc
    fn = getattr(cc._load(rec.module), rec.name)
    sig = {n: "constexpr" if n in rec.constexprs else rec.pointers.get(n) or rec.scalars[n] for n in fn.arg_names}
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(fn.arg_names) if sig[n].startswith("*")}
    consts = {k: (getattr(tl, {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}[v]) if k == "DOT" else v)
              for k, v in rec.constexprs.items()}
    c = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs),
                       target=GPUTarget("cuda", arch, 32), options=rec.options)
    nvdisasm = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "nvdisasm")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as fh:
        fh.write(c.asm["cubin"])
        fh.flush()
        sass = subprocess.run([nvdisasm, "-c", fh.name], capture_output=True, text=True, check=True).stdout
        res = subprocess.run([os.path.join(os.path.dirname(nvdisasm), "cuobjdump"), "-res-usage", fh.name],
                             capture_output=True, text=True).stdout
    m = re.search(r"REG:(\d+).*?STACK:(\d+)", res)
    usage = dict(regs=int(m.group(1)) if m else -1, spill=int(m.group(2)) if m else -1, smem=int(c.metadata.shared))
    return sass, c.asm["ttgir"], usage


def hot_loop(sass: str) -> collections.Counter:
    """Opcode counts of the longest backward branch's body (labels `.L_x_N:`, branches BRA `(.L_x_N)`)."""
    lines = sass.splitlines()
    labels = {m.group(1): i for i, l in enumerate(lines) if (m := re.match(r"\s*(\.L_x_\d+):", l))}
    loop = None
    for i, l in enumerate(lines):
        m = re.search(r"BRA\s+`\((\.L_x_\d+)\)", l)
        if m and labels.get(m.group(1), i) < i and (loop is None or i - labels[m.group(1)] > loop[1] - loop[0]):
            loop = (labels[m.group(1)], i)
    ops = collections.Counter()
    if loop is not None:
        for l in lines[loop[0]:loop[1] + 1]:
            m = re.match(r"\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_.]+)", l)
            if m:
                ops[m.group(1)] += 1
    return ops


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--arch", type=int, default=90)
    p.add_argument("--set", action="append", default=[], help="NAME=VALUE constexpr override (True/False/int)")
    p.add_argument("--json", default=None)
    p.add_argument("--dump", default=None, help="write each kernel's SASS and TTGIR into this folder")
    p.add_argument("--tile", action="append", default=None,
                   help="BMxBNxBK/warps[/stages] instead of the default tiles (repeatable; stages: Triton's "
                        "default 3 when left out)")
    args = p.parse_args(argv)
    tiles = TILES
    if args.tile:
        tiles = []
        for t in args.tile:
            m = re.fullmatch(r"(\d+)x(\d+)x(\d+)/(\d+)(?:/(\d+))?", t)
            if not m:
                p.error(f"--tile {t!r}: expected BMxBNxBK/warps[/stages], e.g. 16x64x256/4/4")
            tiles.append(tuple(int(g) for g in m.groups() if g is not None))
    import triton

    from gate import compile_check as cc
    extra = {}
    for kv in args.set:
        k, v = kv.split("=", 1)
        extra[k] = v == "True" if v in ("True", "False") else int(v) if v.lstrip("-").isdigit() else v
    base = {r.name: r for r in cc.RECORDS if r.module == "moe" and r.constexprs.get("NVFP4")
            and not r.constexprs.get("W4A4") and not r.constexprs.get("SWIZZLED") and not r.constexprs.get("SPLIT")
            and r.constexprs["BM"] == 16}
    rows = []
    print(f"triton {triton.__version__}, sm_{args.arch}, overrides {extra or 'none'}")
    print(f"{'kernel':24s} {'BMxBNxBK/warps':16s} {'per K step':>10s} {'per element':>11s} {'regs':>4s} "
          f"{'spill':>5s} {'smem':>6s}  top opcodes")
    for name in ("moe_gate_up_fwd_kernel", "moe_down_fwd_kernel"):
        for bm, bn, bk, nw, *st in tiles:
            opts = dict(num_warps=nw, **({"num_stages": st[0]} if st else {}))
            rec = base[name]._replace(constexprs={**base[name].constexprs, "BM": bm, "BN": bn, "BK": bk, **extra},
                                      options=opts)
            label = f"{bm}x{bn}x{bk}/{nw}" + (f"/{st[0]}" if st else "")
            try:
                sass, ttgir, usage = _compile(rec, args.arch)
            except Exception as e:  # a variant that does not compile is the finding: say so and go on
                print(f"{name:24s} {label}: FAILED {type(e).__name__}: {str(e).strip()[-200:]}")
                rows.append(dict(kernel=name, tile=[bm, bn, bk, nw, *st], error=str(e)[-500:]))
                continue
            ops = hot_loop(sass)
            total = sum(ops.values())
            elems = (2 if "gate_up" in name else 1) * bn * bk / (32 * nw)
            fam = collections.Counter()
            for op, n in ops.items():
                fam[op.split(".")[0] if op.split(".")[0] not in ("IMAD", "HADD2") else op] += n
            top = ", ".join(f"{k} {v / elems:.2f}" for k, v in fam.most_common(9))
            print(f"{name:24s} {label:16s} {total:>10d} {total / elems:>11.2f} {usage['regs']:>4d} "
                  f"{usage['spill']:>5d} {usage['smem']:>6d}  {top}")
            rows.append(dict(kernel=name, tile=[bm, bn, bk, nw, *st], per_step=total, per_element=total / elems,
                             opcodes=dict(ops), convert_layouts=ttgir.count("ttg.convert_layout"), **usage))
            if args.dump:
                os.makedirs(args.dump, exist_ok=True)
                stem = os.path.join(args.dump, f"{name}_{label.replace('/', '_')}")
                for ext, text in (("sass", sass), ("ttgir", ttgir)):
                    with open(f"{stem}.{ext}", "w") as fh:
                        fh.write(text)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(dict(triton=triton.__version__, arch=args.arch, overrides=extra, rows=rows), fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
