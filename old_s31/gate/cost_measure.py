"""The cost model held against the GPU: one full-size decoder layer of each kind, predicted beside measured.

For each layer kind of the geometry (gate/cost_layers.py `layer_predictions`, the kinds gate/bench_layer.py
builds) on ONE GPU:
  weights      bytes the layer's tensors hold on the device (torch.cuda.memory_allocated before / after
               building it; the sum of its tensors' bytes printed beside it) vs the predicted weights
  state        bytes of the layer's cache after a B=1 prefill of --context tokens vs predicted
  decode step  B=1 after that prefill: eager (host launches included) and, where the step captures,
               replayed from one CUDA graph, vs the predicted roofline (bytes read / HBM bandwidth, or
               FLOPs / peak, the larger); the copy ceiling measured in the same run beside it
  transient    peak device memory of one eager decode step above what it started from (activations)
With --tp-emulate N it also measures one GPU's share of a TP = N, EP = N plan, EMULATED on one GPU:
the layer of a geometry with 1/N of the attention and KDA heads, of the dense MLP's width, of the routed
experts and of the experts each token visits (a rank's expected share under uniform routing), the
replicated parts whole (the latent projection and cache, the indexer, mHC, norms). Deviations from
a real rank, stated: the router scores E/N experts instead of all E, the shared expert stays whole
(the plan splits it), and no communication runs (one GPU cannot measure the all-reduces: the model's
comm column is its prediction only).

    python -m gate.cost_measure --json out.json [--context 4096] [--tp-emulate 2]
"""
from __future__ import annotations

import argparse
import sys

import torch

from gate.benchlib import copy_ceiling, do_bench, graph, header, write_json


def tensor_bytes(obj) -> int:
    """Bytes of every torch tensor reachable from `obj` (weights containers, caches: NamedTuples,
    dataclasses, lists), each storage counted once."""
    seen, total, stack = set(), 0, [obj]
    while stack:
        o = stack.pop()
        if isinstance(o, torch.Tensor):
            key = (o.untyped_storage().data_ptr(), o.untyped_storage().nbytes())
            if key not in seen:
                seen.add(key)
                total += o.untyped_storage().nbytes()
        elif isinstance(o, (list, tuple)):
            stack.extend(o)
        elif isinstance(o, dict):
            stack.extend(o.values())
        elif hasattr(o, "__dataclass_fields__"):
            stack.extend(getattr(o, f) for f in o.__dataclass_fields__)
    return total


def _leaves(obj) -> list:
    """The tensors of a step's (X, cache) in a fixed order (NamedTuples, tuples, lists; None skipped)."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for o in obj for t in _leaves(o)]
    return []


def graphed_ms(step) -> tuple:
    """(ms of the step replayed from one CUDA graph, whether the replay's layer output and new cache equal
    an eager step's bit for bit), or (None, None) when it does not capture (a host sync). The selection
    is left out of the comparison: under capture its pool axis spans every pool (impl/dsa.py keep_all)."""
    try:
        outs = []                               # the last one: the captured call's (static) outputs
        replay = graph(lambda: outs.append(step()))
        out = outs[-1]
        ms = do_bench(replay, warmup=5, rep=50)
        replay()
        torch.cuda.synchronize()
        got, want = _leaves(out[:2]), _leaves(step()[:2])
        same = len(got) == len(want) and all(a.shape == b.shape and torch.equal(a, b) for a, b in zip(got, want))
        return ms, same
    except Exception as e:                      # the step syncs with the host: not capturable as written
        print(f"  (CUDA graph capture failed: {type(e).__name__}: {str(e)[:160]})")
        return None, None


def nvfp4_only(lw):
    """The layer as an NVFP4 deployment holds it: the routed experts' codes and scales only (bench_layer's
    random_layer also keeps the bf16 masters it quantized; impl.moe.experts runs without them)."""
    import dataclasses
    if getattr(lw.mlp, "nvfp4", None) is None:
        return lw
    # shape-only stand-ins (one element, broadcast): the router's validation reads the expert width from them
    def hollow(t):
        return t.new_zeros(()).expand(t.shape)
    return dataclasses.replace(lw, mlp=dataclasses.replace(lw.mlp, gate_up_proj=hollow(lw.mlp.gate_up_proj),
                                                           down_proj=hollow(lw.mlp.down_proj)))


def measure_layer(lw_of, g, i: int, context: int, gen, dtype) -> dict:
    """Weights, state, decode-step time and transient memory of layer i built by lw_of(i)."""
    from gate.bench_layer import _context, _streams, handoff
    from impl.model import decoder_layer
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    lw = lw_of(i)
    torch.cuda.synchronize()
    row = {"weights_allocated": torch.cuda.memory_allocated() - before, "weights_tensors": tensor_bytes(lw)}
    cache, _ = _context(lw, None, g, 1, context, gen, dtype)
    row["state_bytes"] = tensor_bytes(cache)
    x1 = _streams(1, 1, g, gen, dtype)
    m1 = torch.ones(1, 1, dtype=torch.bool, device="cuda")
    prev, _ = handoff(None, g, x1, m1, None)

    def step():
        return decoder_layer(lw, g, x1, m1, cache, prev)
    step()
    torch.cuda.synchronize()
    start = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step()
    torch.cuda.synchronize()
    row["transient_bytes"] = torch.cuda.max_memory_allocated() - start
    row["eager_ms"] = do_bench(step, warmup=5, rep=50)
    row["graph_ms"], row["graph_bitwise_eager"] = graphed_ms(step)
    del lw, cache
    torch.cuda.empty_cache()
    return row


def rank_geometry(g, n: int):
    """One GPU's share of a TP = EP = n plan as a geometry (the --tp-emulate approximation above)."""
    import dataclasses
    return dataclasses.replace(
        g, num_attention_heads=g.num_attention_heads // n, num_key_value_heads=g.num_key_value_heads // n,
        linear_num_heads=g.linear_num_heads // n, intermediate_size=g.intermediate_size // n,
        n_routed_experts=g.n_routed_experts // n, num_experts_per_tok=max(1, g.num_experts_per_tok // n))


def _mib(b) -> str:
    return f"{b / 2**20:9.1f} MiB"


def _line(kind: str, tp: int, pred: dict, m: dict, ceiling: float) -> str:
    """Predicted beside measured, one kind at one TP."""
    floor_ms = pred["bytes_per_step"] / ceiling * 1e3
    g = "      -  " if m["graph_ms"] is None else \
        f"{m['graph_ms']:8.3f} ({'= eager bitwise' if m['graph_bitwise_eager'] else 'DIFFERS from eager'})"
    return (f"{kind:16s} {tp:2d}  weights {_mib(pred['weights_bytes'])} pred / {_mib(m['weights_allocated'])} meas "
            f"({m['weights_allocated'] / pred['weights_bytes']:5.3f}x)  state {_mib(pred['state_bytes_per_seq'])} / "
            f"{_mib(m['state_bytes'])}  step pred {pred['roofline_s'] * 1e3:7.3f} ms (copy floor {floor_ms:7.3f}) "
            f"eager {m['eager_ms']:7.3f} graph {g} ms  transient {_mib(m['transient_bytes'])}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m gate.cost_measure", description=__doc__.split("\n")[0])
    p.add_argument("--json", default=None, help="write predicted and measured numbers here")
    p.add_argument("--geometry", default="full", help="preset (default full)")
    p.add_argument("--context", type=int, default=4096, help="cached tokens before the decode step (B=1)")
    p.add_argument("--kinds", default=None, help="only these kinds (comma-separated, e.g. kda+sparse)")
    p.add_argument("--tp-emulate", type=int, default=0,
                   help="also one GPU's share of a TP = EP = N plan, emulated by a 1/N geometry (see above)")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("cost_measure: no CUDA device; nothing measured", file=sys.stderr)
        return 2
    from gate.bench_layer import random_layer
    from gate.cost_layers import layer_predictions
    from oracle.config import Geometry
    g, dtype = Geometry.preset(args.geometry), torch.bfloat16
    ceiling = copy_ceiling()
    out = header({"geometry": args.geometry, "context": args.context, "copy_ceiling_Bps": ceiling, "kinds": {}})
    print(f"device {out['device']}; copy ceiling {ceiling / 1e12:.2f} TB/s; decode B=1 at context {args.context}")
    tps = [1] + ([args.tp_emulate] if args.tp_emulate > 1 else [])
    preds = {tp: layer_predictions(g, tp, batch=1, context=args.context, hbm_bw=ceiling) for tp in tps}
    gen = torch.Generator(device="cuda").manual_seed(7)
    for kind, pr in preds[1].items():
        if args.kinds and kind not in args.kinds.split(","):
            continue
        i = pr["layer"]
        res = {}
        for tp in tps:
            gt = g if tp == 1 else rank_geometry(g, tp)

            def lw_of(j, gt=gt):
                return nvfp4_only(random_layer(gt, j, "cuda", dtype))
            m = measure_layer(lw_of, gt, i, args.context, gen, dtype)
            res[tp] = {"predicted": {k: v for k, v in preds[tp][kind].items() if k != "by_mechanism"}, "measured": m}
            print(_line(kind, tp, preds[tp][kind], m, ceiling), flush=True)
        out["kinds"][kind] = res
    write_json(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
