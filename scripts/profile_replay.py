"""Where one decoder layer's decode step spends its device time (issue 14, step 3's measurement).

For each layer kind (full geometry, NVFP4 experts, B = 1 after --context tokens, as gate.cost_measure
builds it): the kernels of the step replayed from one CUDA graph, with torch.profiler (CUDA activity):
per kernel name its count per step, total device us per step and share; the sum of kernel time beside
the replay's wall time (their difference is what the graph still spends between kernels); and the ops
of one EAGER step that allocate the most device memory (the transient account). With --peer MOD:OBJ
(a candidate of impl/candidates/, e.g. impl.candidates.mhc_one_program:Candidate) the replay of the same
layer on our Triton implementation with the candidate's namespaces in place is timed beside ours,
--repeats times alternating (median and spread of the do_bench medians), and its output compared.

    PYTHONPATH=. python3 scripts/profile_replay.py [--kinds kda+dense,...] [--context 4096] [--json F]
        [--peer impl.candidates.mhc_one_program:Candidate --repeats 5] [--copy-sites]
"""
from __future__ import annotations

import argparse
import functools
import importlib
import sys

import torch


def _self_bytes(e) -> int:
    for name in ("self_device_memory_usage", "self_cuda_memory_usage"):
        v = getattr(e, name, None)
        if v is not None:
            return int(v)
    return 0


def compare(backends: dict, step, do_bench, graph, repeats: int) -> dict:
    """Each backend's step replayed from its own graph, timed `repeats` times alternating; the outputs
    (layer output and new cache) of the two replays compared. step(name, backend)."""
    outs, replays = {}, {}
    for name, b in backends.items():
        got = []
        replays[name] = graph(lambda b=b, got=got, name=name: got.append(step(name, b)))
        outs[name] = got[-1]
    from gate.benchlib import alternating
    res = alternating(replays, repeats, "us", functools.partial(do_bench, warmup=5, rep=50))
    for r in replays.values():
        r()
    torch.cuda.synchronize()
    a, b = (outs[n][0] for n in backends)
    rel = float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30))
    res["ours_over_peer_speed"] = res["peer"]["median_us"] / res["ours"]["median_us"]
    res["output_rel_l2_ours_vs_peer"] = rel
    print("  compare (graph replay, us, %d runs): " % repeats + "; ".join(
        f"{n} median {r['median_us']:.1f} [{r['min_us']:.1f}-{r['max_us']:.1f}]" for n, r in res.items()
        if isinstance(r, dict)) + f"; speed ours/peer {res['ours_over_peer_speed']:.3f}x; output rel_l2 {rel:.2e}")
    return res


def copy_sites(step) -> list:
    """One eager step's copy ops (aten copy_ / clone / _to_copy) by call site: [count, op, input shapes and
    dtypes, the last repo frames of its Python stack], printed and returned (which of the replay's
    direct_copy / dtype-conversion kernels each line launches)."""
    import collections

    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], with_stack=True, record_shapes=True) as pc:
        step()
        torch.cuda.synchronize()
    sites = collections.Counter()
    for e in pc.events():
        if e.name not in ("aten::copy_", "aten::clone", "aten::_to_copy"):
            continue
        frames = [f for f in (e.stack or []) if ("impl/" in f or "oracle/" in f or "gate/" in f)
                  and "profile_replay" not in f][:4]
        sites[(e.name, str(list(zip(e.input_shapes or [], getattr(e, "input_dtypes", None) or [])))[:140],
               " <- ".join(frames))] += 1
    rows = [[n, *k] for k, n in sites.most_common()]
    print("  eager step, copy ops by call site (count, op, inputs, stack):")
    for n, op, shapes, where in rows:
        print(f"    {n:3d} {op} {shapes}\n          {where[:400]}")
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--kinds", default=None)
    p.add_argument("--context", type=int, default=4096)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--json", default=None)
    p.add_argument("--peer", default=None)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--copy-sites", action="store_true",
                   help="also list where one eager step's copies come from (aten copy_ / clone / _to_copy: "
                        "their shapes and dtypes and the repo lines that called them)")
    args = p.parse_args(argv)
    from torch.profiler import ProfilerActivity, profile

    from gate.bench_layer import _context, _streams, handoff, random_layer
    from gate.benchlib import copy_ceiling, do_bench, graph, kernel_table, write_json
    from gate.cost_layers import layer_predictions
    from gate.cost_measure import nvfp4_only
    from impl import registry
    from impl.model import decoder_layer
    from oracle.config import Geometry
    backends = {"ours": registry.get("triton")}
    if args.peer:
        # composed over ours and linked as the gate does (impl.registry.get): a partial namespace (moe with
        # `experts` only) is completed from ours, and our compositions reach the peer's other namespaces
        # (impl.mla.sublayer calls ops.dsa, so a dsa-only peer is timed inside our MLA layer)
        backends["peer"] = registry.get(args.peer)
        peer_module = importlib.import_module(args.peer.split(":")[0])
    g, dtype = Geometry.preset("full"), torch.bfloat16
    gen = torch.Generator(device="cuda").manual_seed(7)
    # the bytes floor at this device's copy speed, measured in the same run (the "within 3x its floor")
    copy_bw = copy_ceiling()
    print(f"copy ceiling {copy_bw / 1e12:.2f} TB/s (a 2 GiB device-to-device copy, this run)")
    out = {"copy_ceiling_bytes_per_s": copy_bw}
    for kind, pr in layer_predictions(g, 1, batch=1, context=args.context, hbm_bw=4.27e12).items():
        if args.kinds and kind not in args.kinds.split(","):
            continue
        lw = nvfp4_only(random_layer(g, pr["layer"], "cuda", dtype))
        cache, _ = _context(lw, None, g, 1, args.context, gen, dtype)
        x1 = _streams(1, 1, g, gen, dtype)
        m1 = torch.ones(1, 1, dtype=torch.bool, device="cuda")
        prev, _ = handoff(None, g, x1, m1, None)

        # a peer that keeps its caches in buffers of its own (impl.candidates.cache_in_place: bench_state)
        # starts from its form of the same state, marked its buffers' tip before every step it runs
        states = {"ours": (cache, lambda: None)}
        if args.peer:
            states["peer"] = getattr(peer_module, "bench_state", lambda c: (c, lambda: None))(cache)

        def step(name="ours", backend=backends["ours"]):
            state, rewind = states[name]
            rewind()
            return decoder_layer(lw, g, x1, m1, state, prev, backend)
        step()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], profile_memory=True) as pm:
            step()
            torch.cuda.synchronize()
        mem = sorted(((e.key, _self_bytes(e)) for e in pm.key_averages()), key=lambda r: -r[1])[:12]
        eager_kernels = kernel_table(pm, 1)
        if args.copy_sites:
            out.setdefault("copy_sites", {})[kind] = copy_sites(step)
        replay = graph(step)
        ms = do_bench(replay, warmup=5, rep=50)
        with profile(activities=[ProfilerActivity.CUDA]) as pg:
            for _ in range(args.steps):
                replay()
            torch.cuda.synchronize()
        traced = kernel_table(pg, args.steps)
        rows = traced or eager_kernels
        src = "graph replay" if traced else "EAGER step (the replay's kernels were not traced)"
        total = sum(r[2] for r in rows)
        print(f"\n=== {kind}: replay {ms * 1e3:.1f} us; kernel time {total:.1f} us per step ({src}); "
              f"{sum(r[1] for r in rows):.0f} kernels; gaps {ms * 1e3 - total:.1f} us")
        floor_us = pr["bytes_per_step"] / copy_bw * 1e6
        print(f"  bytes floor {pr['bytes_per_step'] / 1e6:.1f} MB a step: {floor_us:.1f} us at this run's copy "
              f"speed; the replay is {ms * 1e3 / floor_us:.2f}x it")
        for n, c, us in rows[:30]:
            print(f"  {us:8.1f} us {100 * us / max(total, 1e-9):5.1f}%  x{c:4.1f}  {n[:150]}")
        print("  eager step, device memory allocated by op (self, allocated minus freed; top 12):")
        for k, b in mem:
            print(f"    {b / 2**20:9.1f} MiB  {k[:120]}")
        out[kind] = {"replay_us": ms * 1e3, "kernel_us": total, "source": src, "kernels": rows,
                     "bytes_per_step": pr["bytes_per_step"], "floor_us": floor_us,
                     "memory_by_op": mem, "eager_kernels": eager_kernels}
        if args.peer:
            out[kind]["compare"] = compare(backends, step, do_bench, graph, args.repeats)
        del lw, cache, replay, states
        torch.cuda.empty_cache()
    write_json(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
