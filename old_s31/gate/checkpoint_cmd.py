"""`glmgate checkpoint make-tiny DIR` / `inspect DIR`: a random tiny checkpoint in the on-disk layout, and
what a checkpoint directory holds (every layer, its kind, MLP and state shapes; --tensors: all)."""
from __future__ import annotations

from gate.cli import UsageError, _geometry


def cmd_checkpoint(args) -> int:
    from oracle import checkpoint as ock
    from oracle.config import ConfigError

    if args.action == "make-tiny":
        g = _geometry(args)
        d = ock.write_random(args.dir, g, args.seed, nvfp4=args.nvfp4)
        experts = f", routed experts NVFP4 ({args.nvfp4})" if args.nvfp4 else ""
        print(f"wrote {d}/model.safetensors and config.json ({len(ock.tensor_map(d))} tensors, "
              f"geometry {args.config or args.geometry}, seed {args.seed}{experts})")
        return 0
    try:
        w = ock.load(args.dir)
    except (ock.CheckpointError, ConfigError, OSError) as e:
        raise UsageError(f"checkpoint inspect: {e}")
    g = w.geometry
    layout = next((lw.mlp.nvfp4.layout for lw in w.layers if getattr(lw.mlp, "nvfp4", None) is not None), None)
    print(f"{args.dir}: {g.num_hidden_layers} layers, hidden {g.hidden_size}, vocab {g.vocab_size}, "
          f"kpool {g.index_kpool} ({g.index_slots} slots), {g.n_routed_experts} experts top-{g.num_experts_per_tok}"
          f", routed experts {'NVFP4 (' + layout + ' layout)' if layout else 'unquantized'}")
    for lw in w.layers:
        kind = "KDA" if lw.kda is not None else f"DSA({lw.indexer_type})"
        mlp = type(lw.mlp).__name__.replace("Weights", "") + ("+NVFP4" if getattr(lw.mlp, "nvfp4", None) else "")
        state = (f"state: recurrent [B,{g.linear_num_heads},{g.linear_head_dim},{g.linear_head_dim}] f32 + conv "
                 f"[B,{g.conv_dim},{g.linear_conv_kernel_dim}]" if lw.kda is not None else
                 f"state: latent [B,T,{g.kv_lora_rank}]" + (f" + indexer rows [B,T,{2 * g.index_head_dim + 1}]"
                                                           if lw.indexer is not None else ""))
        print(f"  layer {lw.index:3d}  {kind:14s} {mlp:9s} {state}")
    if layout:
        _print_nvfp4(args.dir, g, layout)
        _print_gate_up_scales(w)
    if args.tensors:
        for name, shape, dtype in ock.tensor_map(args.dir):
            print(f"    {name:90s} {str(list(shape)):20s} {dtype}")
    return 0


def _print_nvfp4(directory, g, layout: str) -> None:
    """The quantized expert tensors on disk: expert 0 of each sparse layer, dtype and shape."""
    from oracle import checkpoint as ock

    print(f"  NVFP4 routed experts, {layout} layout (expert 0 shown; {g.n_routed_experts} per layer):")
    for name, shape, dtype in ock.tensor_map(directory):
        if ".mlp.experts.0." in name:          # every tensor of an expert is quantized in both layouts
            print(f"    {name:72s} {dtype:8s} {list(shape)}")


def _print_gate_up_scales(w) -> None:
    """How far apart each expert's gate_proj and up_proj global scales are: the fused gate_up kernels
    keep both ([E, 2]); a loader taking the gate's for both halves misscales up by this ratio."""
    import numpy as np

    pairs = [np.asarray(lw.mlp.nvfp4.gate_up().global_decode, np.float64) for lw in w.layers
             if getattr(lw.mlp, "nvfp4", None) is not None]
    g = np.concatenate(pairs)                                                    # [layers·E, 2]
    ratio = np.maximum(g[:, 0] / g[:, 1], g[:, 1] / g[:, 0])
    print(f"  gate/up global scales: {int((ratio != 1).sum())} of {len(ratio)} expert pairs differ, "
          f"largest ratio {ratio.max():.3g} (both kept: global_decode [E, 2])")
