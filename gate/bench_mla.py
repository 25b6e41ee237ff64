"""Benchmark of sparse absorbed MLA decode and DSA index scoring (impl/mla.py, impl/dsa.py), gated by
the float64 oracle.

(a) decode: one query per sequence, H = 64 heads, r_kv = 512, d_n = d_v = 256 (GLM-5.3 full size), a
    selection of topk + kpool - 1 = 2051 latent rows (512 pools of 4 consecutive tokens + the 3-token
    tail, as the indexer makes them) out of a cache of T tokens, B in {1, 32, 128}, T in {32K, 128K}.
    Ours: q folded through W_UK, the Triton gather kernel (64 heads a program from 8 rows on; flash-decoding
    splits for one wave of the SMs), W_UV;
    replayed from a CUDA graph. Peers in the same run: (i) the same attention in expanded form with
    torch SDPA over the dense cache (K, V of every cached token; run where it fits in memory), (ii) the
    bytes floor: the selected latent rows read once at the copy ceiling.
(b) index scoring at T = 32K (prefill: every query against every pool, causal): our score kernel vs
    a torch implementation (bf16 matmul per head, ReLU, weighted head sum; query blocks so it fits).

Before timing, each shape runs once and is compared with oracle/mla.py (oracle/dsa.py) on a few rows
in float64; above the declared bench bound the benchmark refuses to time and exits 1.

    python -m gate.bench_mla --json out.json
"""
from __future__ import annotations

import argparse
import sys
import time

import torch

from gate.benchlib import copy_ceiling, do_bench, graph, header, kernel_times, rel_l2, to_np, write_json
from invariants.contracts import bench_bound

H, R, DN, DV = 64, 512, 256, 256
TOPK, KPOOL = 2048, 4
W = TOPK + KPOOL - 1
DECODE_BATCHES = (1, 32, 128)
DECODE_CACHES = (32768, 131072)
HI, DI, TI = 32, 128, 32768            # indexer heads, head dim, prefill length
GiB = 1 << 30
# launch variants the --sweep times (registers checked for sm_90 with gate/compile_check.py first:
# 16 warps with a [64, 512] tile spill; ours from 7 query rows on is bh 64, issue 14 steps 40, 41, 47; the last,
# 16 heads in blocks of 32 at 4 warps, is the small-row launch that fits two programs an SM under the device's
# Triton 3.6: 232 registers x 128 threads, where 8 warps take 138 x 256, one an SM; issue 14 step 48)
SWEEP_CONFIGS = (
    dict(bh=16, bw=64, num_warps=8, num_stages=2), dict(bh=16, bw=64, num_warps=8, num_stages=3),
    dict(bh=16, bw=32, num_warps=8, num_stages=3), dict(bh=32, bw=64, num_warps=8, num_stages=2),
    dict(bh=64, bw=32, num_warps=8, num_stages=3), dict(bh=16, bw=32, num_warps=4, num_stages=2),
)


def _mla_weights(gen):
    from oracle.types import MLAWeights
    kv_b = (torch.randn(H * (DN + DV), R, device="cuda", generator=gen) * R ** -0.5).bfloat16()
    # only kv_b_proj enters the attention; the rest are shape-correct placeholders (r_kv from the norm)
    none = torch.zeros(1, device="cuda")
    return MLAWeights(none, none, none, none, torch.ones(R, device="cuda"), kv_b, none,
                      num_heads=H, nope_dim=DN, v_dim=DV)


def _selection(B: int, T: int, gen) -> torch.Tensor:
    """[B, 1, W] int64: TOPK / KPOOL random complete pools (KPOOL consecutive tokens each) + the tail."""
    n_pools = (T - (KPOOL - 1)) // KPOOL
    pools = torch.rand(B, n_pools, device="cuda", generator=gen).argsort(-1)[:, :TOPK // KPOOL]
    tok = (pools[..., None] * KPOOL + torch.arange(KPOOL, device="cuda")).reshape(B, -1)
    tail = torch.arange(T - (KPOOL - 1), T, device="cuda").expand(B, -1)
    return torch.cat([tok, tail], -1)[:, None, :].contiguous()


def decode_inputs(B: int, T: int, gen=None):
    """The decode shape's inputs, drawn from `gen` (None: a generator seeded by (B, T), as the bench's): (w,
    latent [B, T, R] bf16, q [B, 1, H, DN] bf16, the selection idx [B, 1, W], lengths [B] (all T), q_abs
    [B, 1, H, R]: q folded through W_UK, sparse_absorbed's query)."""
    from impl import mla as im
    if gen is None:
        gen = torch.Generator(device="cuda").manual_seed(B * 7 + T)
    w = _mla_weights(gen)
    latent = torch.randn(B, T, R, device="cuda", generator=gen, dtype=torch.bfloat16)
    q = torch.randn(B, 1, H, DN, device="cuda", generator=gen, dtype=torch.bfloat16)
    idx = _selection(B, T, gen)
    lengths = torch.full((B,), T, device="cuda", dtype=torch.int64)
    q_abs = torch.einsum("bshn,hnr->bshr", q, im._split_kv_b(w)[0])
    return w, latent, q, idx, lengths, q_abs


def decode_refs(w, q, latent, idx, rows) -> dict:
    """{b: the float64 oracle's output (absorbed form) of query row b} for b in `rows`, over its selected rows
    alone (gathered and renumbered 0..W-1): what a decode form is held to before it is timed."""
    import numpy as np

    import oracle.mla as om
    w64 = w.map(to_np)
    refs = {}
    for b in rows:
        lat = to_np(latent[b, idx[b, 0]])[None]                            # the selected rows, renumbered
        refs[b] = om.absorbed(w64, to_np(q[b:b + 1]), lat, np.arange(W)[None, None])[0]
    return refs


def _check_decode(w, q, latent, idx, lengths, rows, ns=None) -> float:
    """rel-L2 of our output (ns: another MLA namespace's `attend`) vs the float64 oracle (absorbed form) on
    `rows`, gathered rows only."""
    from impl import mla as im
    o, _ = (ns or im).attend(w, q, latent, idx, lengths)
    return max(rel_l2(to_np(o[b:b + 1]), ref) for b, ref in decode_refs(w, q, latent, idx, rows).items())


def time_decode_forms(forms: dict, w, q, latent, idx, lengths, repeats: int, tag: str = ""):
    """The probes' loop over decode forms ({name: MLA namespace}, "ours" among them): each form's `attend` held to
    the float64 oracle on the first and last row (`_check_decode`; above 2e-2 it is not timed), then the rest timed
    as CUDA-graph replays in `repeats` alternating rounds (gate.benchlib.alternating), each printed with ours' time
    over its own. Returns (the timings, {name: the graphed call})."""
    from gate.benchlib import alternating
    B = q.shape[0]
    fns, errs = {}, {}
    for name, ns in forms.items():
        e = errs[name] = _check_decode(w, q, latent, idx, lengths, sorted({0, B - 1}), ns)
        print(f"{tag} {name}: rel-L2 {e:.2e} (oracle)", flush=True)
        if e <= 2e-2:
            fns[name] = graph(lambda ns=ns: ns.attend(w, q, latent, idx, lengths))
    res = alternating(fns, repeats)
    for n, r in res.items():
        r["oracle_rel_l2"] = errs[n]
    for n, r in res.items():
        print(f"  {tag} {n:10s} {r['median_us']:8.2f} us [{r['min_us']:.2f}-{r['max_us']:.2f}]  "
              f"ours/this {res['ours']['median_us'] / r['median_us']:.3f}x", flush=True)
    return res, fns


def bench_decode(B: int, T: int, copy_bw: float, args) -> dict:
    from impl import mla as im
    # the dense peer's K / V come from the same generator after these
    gen = torch.Generator(device="cuda").manual_seed(B * 7 + T)
    w, latent, q, idx, lengths, q_abs = decode_inputs(B, T, gen)
    im.check_selection(idx, lengths, B, 1, T)                      # validated once, outside the graph
    bound = bench_bound("mla", "absorbed", "output", "bfloat16")
    err = _check_decode(w, q, latent, idx, lengths, rows=sorted({0, B - 1}))
    row = {"B": B, "T": T, "err_output": err, "bound": bound}
    if not err <= bound:
        row["refused"] = True
        return row
    sel_bytes = B * W * R * 2
    row["bytes_floor"] = sel_bytes
    # the convention of the issue and of bench_moe: bytes moved per second over the copy ceiling
    # (a copy's bytes read + written per second)
    row["floor_us"] = 1e6 * sel_bytes / copy_bw
    attend = graph(lambda: im.attend(w, q, latent, idx, lengths))
    row["ours_us"] = do_bench(attend) * 1e3
    kern = graph(lambda: im.sparse_absorbed(q_abs, latent, idx, lengths, DN ** -0.5))
    row["kernel_us"] = do_bench(kern) * 1e3
    launch = im._launch(q.device, B, H, W, R)
    row["launch"] = {k: launch[k] for k in ("bh", "bw", "num_warps", "num_stages")}
    row["splits"] = launch["splits"]
    # which sparse kernel ran (issue 14 step 49): the producer-warp-group one where impl.mla._producer_applies
    row["kernel"] = "producer" if im._producer_applies(q_abs, latent, H, R, launch) else "triton"
    row["kernel_pct_copy"] = 100 * sel_bytes / (row["kernel_us"] * 1e-6) / copy_bw
    row["ours_pct_copy"] = 100 * sel_bytes / (row["ours_us"] * 1e-6) / copy_bw
    if args.sweep and T == min(DECODE_CACHES):
        row["sweep_us"] = {}
        for cfg in SWEEP_CONFIGS:
            for ns in ((8, 16, 32) if B == 1 else (1, 2, 4, 8)):
                try:
                    k2 = graph(lambda: im.sparse_absorbed(q_abs, latent, idx, lengths, DN ** -0.5, ns, cfg))
                    t = do_bench(k2) * 1e3
                except Exception as e:  # a tile that does not fit is a sweep result, not a failure
                    t = float("nan")
                    print(f"  sweep {cfg} splits {ns}: {type(e).__name__}: {str(e)[:160]}")
                row["sweep_us"][f"{cfg} splits={ns}"] = t
        best = min(row["sweep_us"].items(), key=lambda kv: kv[1] if kv[1] == kv[1] else float("inf"))
        row["sweep_best"] = best
    dense_bytes = 2 * B * H * T * (DN + DV)                       # K and V of the dense cache, bf16
    if dense_bytes + latent.numel() * 2 > args.mem_gib * GiB:
        row["dense"] = f"not run: the dense K/V cache needs {dense_bytes / GiB:.0f} GiB"
    else:
        del latent
        torch.cuda.empty_cache()
        k = torch.randn(B, H, T, DN, device="cuda", generator=gen, dtype=torch.bfloat16)
        v = torch.randn(B, H, T, DV, device="cuda", generator=gen, dtype=torch.bfloat16)
        qd = q.transpose(1, 2)                                     # [B, H, 1, DN]
        sdpa = graph(lambda: torch.nn.functional.scaled_dot_product_attention(qd, k, v, scale=DN ** -0.5))
        row["dense_us"] = do_bench(sdpa) * 1e3
        row["dense_pct_copy"] = 100 * dense_bytes / (row["dense_us"] * 1e-6) / copy_bw
        row["speedup_vs_dense"] = row["dense_us"] / row["ours_us"]
        del k, v
    torch.cuda.empty_cache()
    return row


def _index_inputs(gen):
    """Indexer queries, head weights and pooled keys of a T = TI prefill (pools of KPOOL tokens)."""
    P = TI // KPOOL
    qI = torch.randn(1, TI, HI, DI, device="cuda", generator=gen, dtype=torch.bfloat16)
    wts = torch.randn(1, TI, HI, device="cuda", generator=gen) * HI ** -0.5
    kbar = torch.randn(1, P, DI, device="cuda", generator=gen, dtype=torch.bfloat16)
    pool_last = (torch.arange(P, device="cuda") * KPOOL + KPOOL - 1)[None]
    return qI, wts, kbar, pool_last


def torch_scores(qI, wts, kbar, pool_last, block: int = 2048):
    """The peer: per query block, bf16 matmul per head, ReLU, weighted head sum, causal candidates."""
    B, S, Hh, D = qI.shape
    out = torch.empty(B, S, kbar.shape[1], device=qI.device, dtype=torch.float32)
    for s0 in range(0, S, block):
        q = qI[0, s0:s0 + block]                                                  # [s, H, D]
        sig = torch.relu(torch.matmul(q.transpose(0, 1), kbar[0].T) * D ** -0.5)    # [H, s, P] bf16
        sc = torch.bmm(wts[0, s0:s0 + block, None, :].to(sig.dtype), sig.transpose(0, 1)).squeeze(1)
        pos = torch.arange(s0, s0 + q.shape[0], device=qI.device)
        out[0, s0:s0 + block] = sc.float().masked_fill(pool_last[0][None, :] > pos[:, None], float("-inf"))
    return out


def bench_index(copy_bw: float, args) -> dict:
    import numpy as np

    from impl import dsa as idsa
    gen = torch.Generator(device="cuda").manual_seed(5)
    qI, wts, kbar, pool_last = _index_inputs(gen)
    ours = idsa._scores(qI, wts, kbar, pool_last, 0)
    rows = [0, TI // 2, TI - 1]
    q64, w64, k64 = to_np(qI[0, rows]), to_np(wts[0, rows]), to_np(kbar[0])
    ref = np.einsum("sj,sjp->sp", w64, np.maximum(np.einsum("sjc,pc->sjp", q64, k64) * DI ** -0.5, 0))
    vis = to_np(pool_last[0])[None, :] <= np.asarray(rows)[:, None]
    got = to_np(ours[0, rows])
    err = rel_l2(got[vis], ref[vis])
    bound = bench_bound("dsa", "scores", "scores", "bfloat16")
    row = {"T": TI, "P": TI // KPOOL, "heads": HI, "head_dim": DI, "err_scores": err, "bound": bound}
    if not err <= bound:
        row["refused"] = True
        return row
    peer = torch_scores(qI, wts, kbar, pool_last)
    row["peer_vs_ours_rel_l2"] = rel_l2(to_np(peer[0, rows])[vis], got[vis])
    del ours, peer
    row["ours_ms"] = do_bench(lambda: idsa._scores(qI, wts, kbar, pool_last, 0), rep=50)
    row["torch_ms"] = do_bench(lambda: torch_scores(qI, wts, kbar, pool_last), rep=50)
    row["speedup"] = row["torch_ms"] / row["ours_ms"]
    flops = 2 * TI * (TI // KPOOL) * HI * DI
    row["ours_tflops"] = flops / (row["ours_ms"] * 1e-3) / 1e12
    row["out_bytes"] = TI * (TI // KPOOL) * 4
    row["kernels"] = kernel_times(lambda: idsa._scores(qI, wts, kbar, pool_last, 0), calls=2)
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="glmgate bench --mechanism mla", description=__doc__.split("\n")[0])
    p.add_argument("--json", default=None, help="write the results here")
    p.add_argument("--batches", default=None, help="decode batch list (default 1,32,128)")
    p.add_argument("--caches", default=None, help="decode cache lengths (default 32768,131072)")
    p.add_argument("--skip-decode", action="store_true")
    p.add_argument("--skip-index", action="store_true")
    p.add_argument("--sweep", action="store_true", help="also time every flash-decoding split count")
    p.add_argument("--mem-gib", type=float, default=120, help="device memory the dense peer may use")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_mla: no CUDA device; nothing timed", file=sys.stderr)
        return 2
    results = header({"decode": [], "index": None})
    copy_bw = copy_ceiling()
    results["copy_bytes_per_s"] = copy_bw
    print(f"device {results['device']}; copy ceiling {copy_bw / 1e12:.2f} TB/s (read + write)")
    refused = False
    if not args.skip_decode:
        batches = DECODE_BATCHES if args.batches is None else [int(x) for x in args.batches.split(",")]
        caches = DECODE_CACHES if args.caches is None else [int(x) for x in args.caches.split(",")]
        print(f"\nsparse absorbed decode: H={H} r_kv={R} d_n=d_v={DN}, {W} selected rows, bf16, CUDA graphs")
        print(f"{'B':>4} {'T':>7} {'ours us':>9} {'kernel us':>9} {'floor us':>9} {'%copy':>6} "
              f"{'dense us':>9} {'x dense':>8} {'err':>9}")
        for T in caches:
            for B in batches:
                t0 = time.time()
                row = bench_decode(B, T, copy_bw, args)
                row["wall_s"] = time.time() - t0
                results["decode"].append(row)
                if row.get("refused"):
                    print(f"REFUSED B={B} T={T}: rel-L2 vs oracle {row['err_output']:.3e} > {row['bound']:g}")
                    refused = True
                    continue
                print(f"{B:>4} {T:>7} {row['ours_us']:>9.2f} {row['kernel_us']:>9.2f} {row['floor_us']:>9.2f} "
                      f"{row['kernel_pct_copy']:>6.1f} {row.get('dense_us', float('nan')):>9.1f} "
                      f"{row.get('speedup_vs_dense', float('nan')):>8.1f} {row['err_output']:>9.2e}"
                      f"  {row['kernel']} kernel" + (f"  ({row['dense']})" if "dense" in row else "")
                      + (f"\n  sweep best {row['sweep_best']}; all {row['sweep_us']}" if "sweep_us" in row else ""))
    if not args.skip_index:
        row = bench_index(copy_bw, args)
        results["index"] = row
        if row.get("refused"):
            print(f"REFUSED index scoring: rel-L2 vs oracle {row['err_scores']:.3e} > {row['bound']:g}")
            refused = True
        else:
            print(f"\nindex scoring T={TI} P={TI // KPOOL} H_i={HI} d_i={DI}: ours {row['ours_ms']:.2f} ms "
                  f"({row['ours_tflops']:.0f} TFLOP/s), torch {row['torch_ms']:.2f} ms, "
                  f"{row['speedup']:.2f}x; err {row['err_scores']:.2e}; kernels {row['kernels']}")
    write_json(args.json, results)
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
