"""One decoder layer of each kind, predicted: gate/costmodel.py's terms for a single layer on one GPU of a
plan, as the GPU scripts hold them beside measurements (gate/cost_measure.py, `glmgate cost --layers`)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Union

from gate.costmodel import (H200_BF16_FLOPS, H200_HBM_BW, NVLINK_BW, Cost, Plan, layer_cost,
                            resolve_geometry)
from oracle.config import LINEAR, Geometry

__all__ = ["layer_kinds", "layer_predictions", "layer_table"]


def layer_kinds(g: Geometry) -> dict[str, int]:
    """{kind: first layer of that kind}, named as gate/bench_layer.py names them (kda+dense,
    kda+sparse, dsa-full+sparse, dsa-shared+sparse)."""
    out = {}
    for i in range(g.num_hidden_layers):
        att = "kda" if g.layer_types[i] == LINEAR else f"dsa-{g.indexer_types[i]}"
        out.setdefault(f"{att}+{g.mlp_layer_types[i]}", i)
    return out


def layer_predictions(geometry: Union[str, Path, Geometry] = "full", tp: int = 1, *, ep: Optional[int] = None,
                      experts: str = "nvfp4", batch: int = 1, context: int = 4096,
                      hbm_bw: float = H200_HBM_BW, link_bw: float = NVLINK_BW, peak_flops: float = H200_BF16_FLOPS,
                      collective_latency_s: float = 0.0) -> dict[str, dict]:
    """Predicted decode-step numbers of ONE decoder layer of each kind on one GPU of the plan.

    Args:
        geometry: preset name ("full", "tiny"), a checkpoint directory / config.json, or a Geometry
        tp, ep, experts: the plan (ep defaults to tp; experts "nvfp4" as gate/bench_layer.py runs them)
        batch: sequences in the step (one new token each);  context: cached tokens, the new one included
        hbm_bw: bytes/s (H200: 4.8e12);  link_bw: bytes/s each GPU puts on the link (NVLink 4: 450e9)
        peak_flops: FLOP/s (H200 dense bf16: 989e12);  collective_latency_s: fixed cost per collective
    Returns:
        {kind: {"layer", "weights_bytes", "state_bytes_per_seq", "bytes_per_step", "bytes_per_token",
        "flops_per_token", "hbm_s", "compute_s", "roofline_s" (max of the two), "comm_bytes",
        "collectives", "comm_s", "step_s" (roofline + comm), "by_mechanism": {key: {"weights_bytes",
        "bytes_per_step", "flops_per_token"}}}}; kinds as layer_kinds names them.
    """
    g, _ = resolve_geometry(geometry)
    plan = Plan.make(g, tp, ep, experts)
    out = {}
    for kind, i in layer_kinds(g).items():
        terms = layer_cost(g, plan, i, batch, context)
        t = Cost()
        for c in terms.values():
            t.add(c)
        hbm_s, compute_s = t.hbm / hbm_bw, t.flops * batch / peak_flops
        comm_s = t.comm / link_bw + t.collectives * collective_latency_s
        out[kind] = {
            "layer": i, "tp": plan.tp, "ep": plan.ep, "experts": plan.experts, "batch": batch, "context": context,
            "weights_bytes": t.weights, "state_bytes_per_seq": t.state_cache(context),
            "bytes_per_step": t.hbm, "bytes_per_token": t.hbm / batch, "flops_per_token": t.flops,
            "hbm_s": hbm_s, "compute_s": compute_s, "roofline_s": max(hbm_s, compute_s),
            "comm_bytes": t.comm, "collectives": t.collectives, "comm_s": comm_s,
            "step_s": max(hbm_s, compute_s) + comm_s,
            "by_mechanism": {k: {"weights_bytes": c.weights, "bytes_per_step": c.hbm, "flops_per_token": c.flops}
                             for k, c in terms.items()},
        }
    return out


def layer_table(geometry: Union[str, Path, Geometry] = "full", tps=(1, 2), **kw) -> str:
    """Plain-text table of `layer_predictions` for each TP in `tps` (one line per kind and TP), for a
    GPU script to print beside its measurements."""
    lines = [f"{'kind':18s} {'TP':>3s} {'weights':>11s} {'bytes/step':>11s} {'GFLOP/tok':>10s} "
             f"{'roofline':>10s} {'comm':>10s} {'comm time':>10s} {'step':>10s}"]
    for tp in tps:
        for kind, p in layer_predictions(geometry, tp, **kw).items():
            lines.append(f"{kind:18s} {tp:3d} {_mib(p['weights_bytes']):>11s} {_mib(p['bytes_per_step']):>11s} "
                         f"{p['flops_per_token'] / 1e9:10.3f} {_us(p['roofline_s']):>10s} "
                         f"{_kib(p['comm_bytes']):>10s} {p['comm_s'] * 1e6:7.3f} us {_us(p['step_s']):>10s}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- units


def _mib(b: float) -> str:
    return f"{b / 2**20:.2f} MiB"


def _kib(b: float) -> str:
    return f"{b / 2**10:.1f} KiB"


def _us(s: float) -> str:
    return f"{s * 1e6:.1f} us"
