"""Benchmark of one full decoder layer of each kind (SPEC §5) at full size, bf16 with NVFP4 experts.

Kinds, from the geometry's schedules: KDA + dense MLP, KDA + MoE, MLA/DSA (full indexer) + MoE (and a
shared-indexer DSA layer when the geometry has one). Reported per kind:
  prefill  tokens/s of one B=1 sequence of --prefill tokens from an empty cache
  decode   ms per step of one token per sequence at B = 1 and 64, after a --context token prefill
Stage shares are MEASURED: `staged_layer` runs the layer as impl.model.decoder_layer does, stage by
stage, with a CUDA event between stages (the GPU runs in order, so each gap is that stage's device
time, host stalls included); its output equals decoder_layer's (tests/test_bench_layer.py), and the
plain decoder_layer is timed as well so the instrumented total can be checked against it.
Stages: mhc (coefficients + collapse, write-back), norm (RMSNorms, gated output norm), projections
(input projections and o_proj), conv, gates (SiLU, L2, gate, beta), core (KDA chunked or the fused
decode kernel, which also does conv + gates), indexer (DSA rows, scores, top-k), attention (sparse
absorbed MLA), cache (latent append), router, experts (routed, NVFP4 W4A16), shared (shared expert),
mlp (dense MLP).

    python -m gate.bench_layer --json out.json
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import sys
import time
from typing import Optional

import torch

from gate.benchlib import do_bench, header, write_json

F32_NAMES = ("conv1d.weight", "dt_bias", "A_log", "e_score_correction_bias")   # oracle.types F32_WEIGHTS


# ----------------------------------------------------------------------------- random layer weights


def _init(name: str, shape, gen, device, dtype):
    """Init-like random values: projections N(0, 1/fan_in), norms 1 + N(0, 0.1²), inert params N(0, 0.5²)."""
    if name.endswith(("norm.weight", "layernorm.weight")):
        a = 1.0 + 0.1 * torch.randn(shape, generator=gen, device=device)
    elif name.endswith(("A_log", ".base", ".scale", "compress_ape", "e_score_correction_bias", "norm.bias",
                        "dt_bias", "conv1d.weight")):
        a = 0.5 * torch.randn(shape, generator=gen, device=device)
    else:
        a = torch.randn(shape, generator=gen, device=device) * shape[-1] ** -0.5
    f32 = name.endswith(F32_NAMES) or ".attn_hc." in name or ".ffn_hc." in name
    return a.to(torch.float32 if f32 else dtype)


def random_layer(g, i: int, device, dtype, nvfp4: bool = True, seed: int = 0):
    """LayerWeights of layer i with random torch tensors (no checkpoint: full-size files are ~20 GB a
    layer); routed experts quantized to NVFP4 (impl.nvfp4.quantize_experts) when nvfp4."""
    from impl import nvfp4 as inv
    from oracle.checkpoint import _layer, expected_shapes
    gen = torch.Generator(device=device).manual_seed(seed + i)
    p = f"layers.{i}."
    named = {k[len(p):]: _init(k, shape, gen, device, dtype)
             for k, shape in expected_shapes(g, on_disk=False).items() if k.startswith(p)}
    from impl.weights import fuse_mlps
    lw = fuse_mlps(_layer(g, {p + k: v for k, v in named.items()}, i))
    if nvfp4 and getattr(lw.mlp, "gate_up_proj", None) is not None:
        nv = inv.quantize_experts(lw.mlp.gate_up_proj, lw.mlp.down_proj)
        lw = dataclasses.replace(lw, mlp=dataclasses.replace(lw.mlp, nvfp4=nv))
    return lw


# ----------------------------------------------------------------------------- the staged layer


class Stages:
    """CUDA events between stages (or nothing on the CPU): `mark(name)` closes the stage `name`."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.events = []
        if enabled:
            self.start = torch.cuda.Event(enable_timing=True)
            self.start.record()

    def mark(self, name: str) -> None:
        if self.enabled:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            self.events.append((name, e))

    def times_ms(self) -> dict:
        torch.cuda.synchronize()
        out, prev = collections.defaultdict(float), self.start
        for name, e in self.events:
            out[name] += prev.elapsed_time(e)
            prev = e
        return dict(out)


def _kda(lw, a, cache, st: Stages):
    from impl import kda
    from oracle.types import KDAState
    w = lw.kda
    B, S, _ = a.shape
    H, K = w.num_heads, w.head_dim
    z, f, b, zg = kda.project(w, a)
    st.mark("projections")
    if S == 1 and cache is not None:
        o, new = kda.decode(w, z[:, 0], f[:, 0], b[:, 0], KDAState(cache.recurrent, cache.conv.to(a.dtype)))
        o = o[:, None]
        st.mark("core")
    else:
        c, conv_state = kda.conv(z, w.conv1d, None if cache is None else cache.conv)
        st.mark("conv")
        q, k, v, g, beta = kda.core_inputs(w, c, f, b)
        st.mark("gates")
        M0 = None if cache is None else cache.recurrent.float()
        o, M, _ = kda.chunked(q.to(a.dtype), k.to(a.dtype), v.to(a.dtype), g, beta, M0, 64, None,
                              boundary_states=False)
        new = KDAState(M, conv_state)
        st.mark("core")
    o = kda.gated_rmsnorm(o, zg.reshape(B, S, H, K), w.o_norm, w.eps)
    st.mark("norm")
    y = o.reshape(B, S, H * K).to(a.dtype) @ w.o_proj.T
    st.mark("projections")
    return y, new, None


def _mla(lw, a, cache, mask, prev, st: Stages):
    from impl import dsa, mla
    from oracle.types import DSACache
    w, iw = lw.mla, lw.indexer
    B, S, _ = a.shape
    q, q_lat, c = mla.project(w, a)
    st.mark("projections")
    old_latent, old_rows = (None, None) if cache is None else cache
    latent = mla._append(old_latent, c, "latent")
    st.mark("cache")
    if lw.indexer_type == "full":
        rows = mla._append(old_rows, dsa.index_rows(iw, a, mask), "index_rows")
        sel = dsa.index(iw, a, q_lat, rows, mask)
        st.mark("indexer")
    else:
        rows, sel = old_rows, prev
    o, _ = mla.absorbed(w, q, latent, sel.indices)
    st.mark("attention")
    y = mla._linear(o.reshape(B, S, w.num_heads * w.v_dim), w.o_proj, w.o_bias)
    st.mark("projections")
    return y, DSACache(latent, rows), sel


def _mlp(lw, g, a, st: Stages):
    from impl import moe
    if g.mlp_layer_types[lw.index] == "dense":
        y = moe.dense_mlp(lw.mlp, a)
        st.mark("mlp")
        return y
    w = lw.mlp
    routing = moe.route(w, a)
    st.mark("router")
    y = moe.experts(w, a, routing, nvfp4=getattr(w, "nvfp4", None))
    st.mark("experts")
    y = y + moe.shared_expert(w, a)
    st.mark("shared")
    return y


def staged_layer(lw, g, X, mask, cache, prev, st: Optional[Stages] = None):
    """impl.model.decoder_layer (triton backend) with a stage mark after each part; same arguments
    and results (X, cache, selection)."""
    from impl import mhc
    from impl.model import TorchDecoder, rmsnorm
    st = st or Stages(False)
    hc_entry = TorchDecoder(device=X.device).hc_entry           # the triton implementation's fused mHC entry
    _, post, comb, u = hc_entry(lw.attn_hc, X)
    st.mark("mhc")
    a = rmsnorm(u, lw.input_layernorm, g.rms_norm_eps)
    st.mark("norm")
    if lw.attention == "linear_attention":
        y, cache, sel = _kda(lw, a, cache, st)
    else:
        y, cache, sel = _mla(lw, a, cache, mask, prev, st)
    X = mhc.write_back(post, comb, X, y.to(X.dtype))
    _, post, comb, u = hc_entry(lw.ffn_hc, X)
    st.mark("mhc")
    a = rmsnorm(u, lw.post_attention_layernorm, g.rms_norm_eps)
    st.mark("norm")
    y = _mlp(lw, g, a, st)
    X = mhc.write_back(post, comb, X, y.to(X.dtype))
    st.mark("mhc")
    return X, cache, sel


def handoff(full, g, X, mask, cache):
    """(selection, cache) of the full DSA layer `full` run on X (what a shared layer reuses, SPEC §8.8);
    (None, None) when full is None."""
    if full is None:
        return None, None
    from impl.model import decoder_layer
    _, cache, sel = decoder_layer(full, g, X, mask, cache, None)
    return sel, cache


# ----------------------------------------------------------------------------- timing


def _kinds(g) -> dict:
    """{kind name: first layer index of that kind} from the geometry's schedules."""
    out = {}
    for i in range(g.num_hidden_layers):
        att = "kda" if g.layer_types[i] == "linear_attention" else f"dsa-{g.indexer_types[i]}"
        kind = f"{att}+{g.mlp_layer_types[i]}"
        if kind not in out and not (att == "dsa-shared" and i == 0):
            out[kind] = i
    return out


def _streams(B, S, g, gen, dtype):
    return torch.randn(B, S, g.hc_mult, g.hidden_size, generator=gen, device="cuda").to(dtype)


def _staged_ms(fn, reps: int = 5) -> dict:
    """Median per stage over `reps` staged runs (after one warm-up)."""
    fn(Stages(False))
    runs = []
    for _ in range(reps):
        st = Stages(True)
        fn(st)
        runs.append(st.times_ms())
    return {k: sorted(r[k] for r in runs)[len(runs) // 2] for k in runs[0]}


def bench_kind(g, i: int, args, dtype) -> dict:
    from impl.model import decoder_layer
    t0 = time.time()
    lw = random_layer(g, i, "cuda", dtype, nvfp4=not args.bf16_experts)
    row = {"layer": i, "build_s": time.time() - t0}
    gen = torch.Generator(device="cuda").manual_seed(100 + i)
    full = None
    if lw.attention != "linear_attention" and lw.indexer_type == "shared":
        row["note"] = "shared DSA layer: the selection comes from the full layer before it, run untimed"
        full = random_layer(g, i - 1, "cuda", dtype, nvfp4=False)
    T = args.prefill
    X = _streams(1, T, g, gen, dtype)
    mask = torch.ones(1, T, dtype=torch.bool, device="cuda")
    prev, _ = handoff(full, g, X, mask, None)

    def prefill(st=None):
        return staged_layer(lw, g, X, mask, None, prev, st)
    Xo, _, _ = prefill()
    ref, _, _ = decoder_layer(lw, g, X, mask, None, prev)
    row["staged_vs_layer_max_abs"] = float((Xo.float() - ref.float()).abs().max())
    if not torch.isfinite(Xo).all():
        raise RuntimeError(f"layer {i}: non-finite prefill output")
    ms = do_bench(lambda: decoder_layer(lw, g, X, mask, None, prev), warmup=3, rep=20)
    row["prefill"] = {"tokens": T, "ms": ms, "tokens_per_s": T / (ms * 1e-3), "stages_ms": _staged_ms(prefill)}
    del X, Xo, ref
    row["decode"] = []
    for B in args.batches:
        cache, pcache = _context(lw, full, g, B, args.context, gen, dtype)
        x1 = _streams(B, 1, g, gen, dtype)
        m1 = torch.ones(B, 1, dtype=torch.bool, device="cuda")
        prev, _ = handoff(full, g, x1, m1, pcache)
        snap = _clone(cache)

        def step(st=None):
            # the KDA decode kernel updates nothing in place here (inplace=False): every call starts
            # from the same context state
            return staged_layer(lw, g, x1, m1, snap, prev, st)
        ms = do_bench(lambda: decoder_layer(lw, g, x1, m1, snap, prev), warmup=5, rep=50)
        row["decode"].append({"B": B, "context": args.context, "ms_per_step": ms,
                              "tokens_per_s": B / (ms * 1e-3), "stages_ms": _staged_ms(step)})
        del cache, snap
        torch.cuda.empty_cache()
    del lw
    torch.cuda.empty_cache()
    return row


def _context(lw, full, g, B: int, T: int, gen, dtype, rows: int = 4):
    """The layer's cache (and the full layer's, for a shared one) after a T-token prefill of B rows,
    prefilled `rows` rows at a time (64 x 4096 tokens at once would not fit in memory) and stacked."""
    from impl.model import decoder_layer
    parts, fparts = [], []
    for r0 in range(0, B, rows):
        n = min(rows, B - r0)
        ctx = _streams(n, T, g, gen, dtype)
        mask = torch.ones(n, T, dtype=torch.bool, device="cuda")
        prev, pc = handoff(full, g, ctx, mask, None)
        _, c, _ = decoder_layer(lw, g, ctx, mask, None, prev)
        parts.append(c)
        fparts.append(pc)
        del ctx
    return _stack(parts), (None if full is None else _stack(fparts))


def _stack(caches):
    """Row-wise concatenation of per-slice caches (KDAState or DSACache: every field batch-first)."""
    first = caches[0]
    return type(first)(*(None if f is None else torch.cat([getattr(c, n) for c in caches], 0)
                         for n, f in zip(first._fields, first)))


def _clone(cache):
    if cache is None:
        return None
    return type(cache)(*(None if a is None else a.clone() for a in cache))


def _shares(stages: dict) -> str:
    tot = sum(stages.values())
    return " ".join(f"{k} {100 * v / tot:.0f}%" for k, v in sorted(stages.items(), key=lambda kv: -kv[1]))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="glmgate bench --mechanism layer", description=__doc__.split("\n")[0])
    p.add_argument("--json", default=None, help="write the results here")
    p.add_argument("--geometry", default="full", help="preset (default full)")
    p.add_argument("--prefill", type=int, default=4096, help="prefill tokens (B=1)")
    p.add_argument("--context", type=int, default=4096, help="tokens in the cache before each decode step")
    p.add_argument("--batches", default="1,64", help="decode batch sizes")
    p.add_argument("--kinds", default=None, help="only these kinds (e.g. kda+sparse,dsa-full+sparse)")
    p.add_argument("--bf16-experts", action="store_true", help="routed experts in bf16 instead of NVFP4")
    args = p.parse_args(argv)
    args.batches = [int(b) for b in args.batches.split(",")]
    if not torch.cuda.is_available():
        print("bench_layer: no CUDA device; nothing timed", file=sys.stderr)
        return 2
    from oracle.config import Geometry
    g = Geometry.preset(args.geometry)
    kinds = _kinds(g)
    if args.kinds:
        kinds = {k: v for k, v in kinds.items() if k in args.kinds.split(",")}
    results = header({"geometry": args.geometry, "experts": "bf16" if args.bf16_experts else "nvfp4 (W4A16)",
                      "kinds": {}})
    print(f"device {results['device']}; one decoder layer per kind, bf16, experts {results['experts']}")
    for kind, i in kinds.items():
        row = bench_kind(g, i, args, torch.bfloat16)
        results["kinds"][kind] = row
        pf = row["prefill"]
        print(f"\n{kind} (layer {i}): prefill {pf['tokens']} tokens {pf['ms']:.2f} ms = "
              f"{pf['tokens_per_s'] / 1e3:.1f} K tokens/s; staged total {sum(pf['stages_ms'].values()):.2f} ms "
              f"(staged vs layer max |diff| {row['staged_vs_layer_max_abs']:.2e})")
        print(f"  prefill stages: {_shares(pf['stages_ms'])}")
        for d in row["decode"]:
            print(f"  decode B={d['B']} (context {d['context']}): {d['ms_per_step']:.3f} ms/step, "
                  f"staged {sum(d['stages_ms'].values()):.3f} ms; stages: {_shares(d['stages_ms'])}")
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
