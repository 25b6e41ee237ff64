"""`glmgate cost`: the predicted per-GPU memory equation, HBM bytes, FLOPs and communication per
mechanism for a geometry, a dtype plan and a parallel plan (the arithmetic: gate/costmodel.py)."""
from __future__ import annotations

import argparse
import json
import sys

from gate.cli import EXIT_PASS, UsageError

DESCRIPTION = """\
Predicted (not measured) per-GPU memory, HBM traffic, FLOPs and communication of the decoder,
itemized per mechanism, from the geometry alone: no GPU, no checkpoint tensors.

What is split and what is whole on every GPU:
  /TP   KDA q, k, v, b, f_b, g_b, o_proj, dt_bias, A_log, the conv and both KDA states (by head);
        MLA q_b, kv_b, o_proj (by head); the dense MLP and the shared expert (by width)
  /EP   routed experts, by expert id (E / EP whole experts per GPU); when EP < TP each expert is
        also split by width over TP / EP ranks (EP 1: every expert width-split over TP)
  whole mHC, every RMSNorm, the router, KDA f_a / g_a / o_norm, MLA q_a and kv_a (the latent
        projections) and the latent cache, the DSA indexer's weights and its cache; embeddings and
        lm_head too unless --vocab-parallel
A plan of max(TP, EP) GPUs; with EP > TP attention runs data-parallel (each TP group its own
--batch sequences) and tokens reach their experts by all-to-all. Each sublayer whose output is
split by rank ends with an all-reduce of [B, D] bf16 (ring: 2(n-1)/n of it on each GPU's link).

Columns: weights held per GPU; state + cache per sequence at --context tokens (KDA states do not
grow, MLA latent and indexer rows grow per token); HBM bytes read + written per decode step of
--batch tokens (routed experts: those the step's tokens are expected to touch); FLOPs per decode
token on this GPU (2 x weights multiplied + attention: KDA recurrence, MLA over the index_topk
selected tokens, the indexer's pooling and scoring over every cached token); bytes each GPU sends
per decode step.
"""

EPILOG = """examples:
  glmgate cost --geometry full --tp 8 --experts nvfp4
  glmgate cost --geometry full --tp 2 --ep 2 --batch 64 --context 131072 --json cost.json
  glmgate cost --config /path/to/checkpoint --tp 4 --vocab-parallel
  glmgate cost --geometry full --tp 2 --layers     one layer of each kind: roofline and comm time
"""


def add_parser(sub) -> None:
    p = sub.add_parser("cost", help="predicted per-GPU memory, bytes, FLOPs and communication per mechanism "
                                    "for a geometry and a TP / EP plan (arithmetic, no GPU)",
                       description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--geometry", default=None, help="preset: full (the released checkpoint's, the default) "
                                                      "or tiny (SPEC §13)")
    src.add_argument("--config", default=None, metavar="DIR",
                     help="a checkpoint directory holding config.json (or the config.json itself); every size "
                          "and schedule comes from it, shape-defining fields must be present")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel ranks: must divide num_attention_heads, "
                                                     "linear_num_heads, intermediate_size and the shared expert's "
                                                     "width (default 1)")
    p.add_argument("--ep", type=int, default=None, help="expert-parallel ranks: must divide n_routed_experts "
                                                        "(default: --tp, experts spread over the same GPUs)")
    p.add_argument("--experts", choices=["bf16", "nvfp4"], default="bf16",
                   help="routed experts' dtype: bf16 (default) or nvfp4 (0.5 B a weight + one e4m3 scale per "
                        "16 + a float32 global scale per expert tensor); everything else is bf16 (KDA conv, "
                        "dt_bias, A_log and the router bias float32)")
    p.add_argument("--vocab-parallel", action="store_true",
                   help="split embeddings and lm_head by vocab rows over TP (an all-reduce of the embeddings "
                        "and an all-gather of the logits per step); default: whole on every GPU")
    p.add_argument("--batch", type=int, default=1, help="sequences per TP group (default 1)")
    p.add_argument("--context", type=int, default=4096, help="tokens in each sequence's cache, the new one "
                                                             "included (default 4096)")
    p.add_argument("--chunk", type=int, default=4096, help="prefill chunk tokens for the activation estimate "
                                                           "(default 4096; at most --context)")
    p.add_argument("--json", default=None, metavar="FILE", help="write the itemized prediction as JSON ('-' = "
                                                                "stdout, the table then on stderr)")
    p.add_argument("--layers", action="store_true",
                   help="also print one decoder layer of each kind (weights, bytes per step, roofline time at "
                        "--hbm-bw / --peak-flops, comm time at --link-bw), as gate.cost_layers.layer_predictions")
    p.add_argument("--hbm-bw", type=float, default=None, help="HBM bytes/s for --layers (default 4.8e12, H200)")
    p.add_argument("--link-bw", type=float, default=None, help="link bytes/s per GPU for --layers (default "
                                                               "450e9, NVLink 4 one way)")
    p.add_argument("--peak-flops", type=float, default=None, help="FLOP/s for --layers (default 989e12, H200 "
                                                                  "dense bf16)")
    p.set_defaults(fn=cmd_cost)


def cmd_cost(args) -> int:
    from gate import cost_layers as cl
    from gate import costmodel as cm
    from gate.cli import _rich

    try:
        from pathlib import Path
        g, name = cm.resolve_geometry(Path(args.config) if args.config else (args.geometry or "full"))
        plan = cm.Plan.make(g, args.tp, args.ep, args.experts, args.vocab_parallel)
        report = cm.model_cost(g, plan, args.batch, args.context, args.chunk, name=name)
        rates = {k: v for k, v in (("hbm_bw", args.hbm_bw), ("link_bw", args.link_bw),
                                   ("peak_flops", args.peak_flops)) if v is not None}
        if any(v <= 0 for v in rates.values()):
            raise cm.CostError("--hbm-bw, --link-bw, --peak-flops: expected positive numbers (bytes/s, FLOP/s)")
        layers = ({tp: cl.layer_predictions(g, tp, ep=None if tp != plan.tp else args.ep, experts=args.experts,
                                            batch=args.batch, context=args.context, **rates)
                   for tp in sorted({1, plan.tp})} if args.layers else None)
    except cm.CostError as e:
        raise UsageError(str(e)) from None
    console = _rich(stderr=args.json == "-")
    render(report, console)
    if layers:
        render_layers(layers, console, rates)
    if args.json:
        doc = report.to_json()
        if layers:
            doc["layer_predictions"] = {str(tp): p for tp, p in layers.items()}
        text = json.dumps(doc, indent=1)
        if args.json == "-":
            sys.stdout.write(text + "\n")
        else:
            with open(args.json, "w", encoding="utf-8") as fh:
                fh.write(text + "\n")
    return EXIT_PASS


def render(report, console) -> None:
    from rich.table import Table

    from gate.costmodel import human_bytes as hb, human_flops as hf

    g, plan, T, B = report.geometry, report.plan, report.context, report.batch
    title = (f"glmgate cost: {report.name}, {g.num_hidden_layers} layers ({len(g.kda_layers)} KDA, "
             f"{len(g.dsa_layers)} MLA/DSA of which {len(g.full_indexer_layers)} with an indexer; "
             f"{len(g.dense_layers)} dense, {len(g.moe_layers)} MoE), per GPU")
    t = Table(title=title, title_justify="left")
    for col, just in (("mechanism", "left"), ("layers", "right"), ("split", "left"), ("weights", "right"),
                      ("of which whole", "right"), (f"state+cache /seq @{T}", "right"),
                      (f"HBM /step (B={B})", "right"), ("FLOPs /token", "right"), ("comm /step", "right")):
        t.add_column(col, justify=just)
    for key, c in report.terms.items():
        t.add_row(key, str(c.layers or ""), _split(key, plan), hb(c.weights), hb(c.replicated),
                  hb(c.state_cache(T)), hb(c.hbm), hf(c.flops), _comm(c))
    tot = report.total
    t.add_section()
    t.add_row("total", "", "", hb(tot.weights), hb(tot.replicated), hb(tot.state_cache(T)), hb(tot.hbm),
              hf(tot.flops), _comm(tot), style="bold")
    console.print(t)
    a = report.activations
    console.print(f"plan: {plan.describe()}", markup=False)
    console.print(f"activations: decode step ({B} token{'s' if B > 1 else ''}) {hb(a['decode_step']['peak'])}; "
                  f"prefill chunk ({report.chunk} tokens at context {T}) {hb(a['prefill_chunk']['peak'])} "
                  f"(largest sublayer: {a['prefill_chunk']['sublayer_kind']})", markup=False)
    console.print(report.equation(), markup=False)
    console.print(f"per decode token: {hb(tot.hbm / B)} of HBM traffic, {hf(tot.flops)}FLOPs; "
                  f"{tot.collectives} collectives per step", markup=False)
    for n in report.notes:
        console.print(f"note: {n}", markup=False)
    console.print("These are PREDICTIONS from the geometry's arithmetic (gate/costmodel.py), not measurements: "
                  "hold them against `glmgate bench --mechanism layer`.", markup=False)


def render_layers(layers: dict, console, rates: dict) -> None:
    from rich.table import Table

    from gate.costmodel import H200_BF16_FLOPS, H200_HBM_BW, NVLINK_BW, human_bytes as hb, human_flops as hf

    bw, link, fl = (rates.get("hbm_bw", H200_HBM_BW), rates.get("link_bw", NVLINK_BW),
                    rates.get("peak_flops", H200_BF16_FLOPS))
    t = Table(title=f"one decoder layer of each kind, decode step (HBM {bw / 1e12:g} TB/s, {fl / 1e12:g} TFLOP/s, "
                    f"link {link / 1e9:g} GB/s)", title_justify="left")
    for col in ("kind", "layer", "TP", "weights", "HBM /step", "FLOPs /token", "roofline", "comm /step",
                "comm time", "step"):
        t.add_column(col, justify="left" if col == "kind" else "right")
    for tp, preds in layers.items():
        for kind, p in preds.items():
            t.add_row(kind, str(p["layer"]), str(tp), hb(p["weights_bytes"]), hb(p["bytes_per_step"]),
                      hf(p["flops_per_token"]), f"{p['roofline_s'] * 1e6:.1f} us", hb(p["comm_bytes"]),
                      f"{p['comm_s'] * 1e6:.2f} us", f"{p['step_s'] * 1e6:.1f} us")
    console.print(t)


def _split(key: str, plan) -> str:
    if key in ("experts",):
        return f"/{plan.ep} EP" + (f", /{plan.expert_tp} width" if plan.expert_tp > 1 else "")
    if key in ("embeddings", "lm_head"):
        return f"/{plan.tp} vocab" if plan.vocab_parallel else "whole"
    if key in ("kda_proj", "mla_proj"):
        return f"/{plan.tp} + whole"
    if key in ("kda_conv", "kda_state", "dense_mlp", "shared_expert"):
        return f"/{plan.tp}"
    return "whole"


def _comm(c) -> str:
    from gate.costmodel import human_bytes as hb
    return f"{hb(c.comm)} ({c.collectives})" if c.collectives else "-"
