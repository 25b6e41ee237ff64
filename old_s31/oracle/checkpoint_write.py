"""Writing checkpoints: random tiny ones (`checkpoint make-tiny`) and NVFP4 copies (NVFP4.md A3, A5).

`write_random` writes every tensor of the name table (oracle/checkpoint_names.py) in transformers'
on-disk layout, drawn as each field's declaration says (oracle/fields.py init kinds);
`quantize_checkpoint` rewrites a checkpoint's routed experts in either NVFP4 layout.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Optional

import numpy as np

from oracle import nvfp4 as onv
from oracle.checkpoint_names import CT, MODELOPT, NVFP4_LAYOUTS, ROUTED, stored_tensors
from oracle.checkpoint_read import INDEX_FILE, CheckpointError, _locate, _read, _Reader, _text_prefix
from oracle.config import Geometry
from oracle.fields import EMBED, INERT, NORM
from oracle.types import NVFP4Tensor

# ----------------------------------------------------------------------------- NVFP4 copies

# what config.json's quantization_config says, per layout: the minimum each tool's loader keys on
# (compressed-tensors: quant_method + format + one config group; ModelOpt: quant_method + quant_algo +
# group_size, with the same fields in hf_quant_config.json). Only routed experts are quantized.
_EXPERT_TARGET = r"re:.*mlp\.experts\.\d+\.(gate|up|down)_proj$"
_MODELOPT_EXCLUDE = ["lm_head", "*self_attn*", "*shared_experts*", "*mlp.gate", "*mlp.gate_proj", "*mlp.up_proj",
                     "*mlp.down_proj", "*hc_*"]


def _quantization_config(layout: str, w4a4: bool) -> tuple[dict, Optional[dict]]:
    """(config.json quantization_config, hf_quant_config.json or None) for `layout` (NVFP4.md A5).

    compressed-tensors: preset NVFP4A16 (weights tensor_group, group 16, fp8 scales) or NVFP4 (W4A4:
    input_activations dynamic "local", only the global scale static). ModelOpt: quant_algo "NVFP4"
    (W4A4, input_scale present) or "NVFP4_W4A16" (weights only).
    """
    if layout == CT:
        weights = {"num_bits": 4, "type": "float", "symmetric": True, "strategy": "tensor_group",
                   "group_size": onv.BLOCK, "dynamic": False, "observer": "minmax"}
        acts = dict(weights, dynamic="local") if w4a4 else None
        group = {"targets": [_EXPERT_TARGET], "weights": weights, "input_activations": acts,
                 "output_activations": None, "format": "nvfp4-pack-quantized"}
        return {"quant_method": CT, "format": "nvfp4-pack-quantized", "quantization_status": "compressed",
                "config_groups": {"group_0": group}, "ignore": ["lm_head"], "kv_cache_scheme": None}, None
    algo = "NVFP4" if w4a4 else "NVFP4_W4A16"
    quant = {"quant_algo": algo, "kv_cache_quant_algo": None, "group_size": onv.BLOCK,
             "exclude_modules": list(_MODELOPT_EXCLUDE)}
    producer = {"name": "glmgate", "version": "0"}
    return dict(quant_method=MODELOPT, producer=producer, **quant), {"producer": producer, "quantization": quant}


def _quantize_layer(gate_up: np.ndarray, down: np.ndarray, modules: list[str], share_gate_up_scale: bool,
                    input_amax: Optional[float], listing: Path) -> dict[str, NVFP4Tensor]:
    """{module key: NVFP4Tensor} for one layer's experts gate_up [E, 2I, D], down [E, D, I] (NVFP4.md A3).

    modules[e] is `<prefix>layers.{i}.mlp.experts.{e}.`. Global scale from each tensor's float32 amax,
    so gate and up differ as in published checkpoints (the fused kernels take both: global_decode
    [E, 2]); share_gate_up_scale gives the pair max(amax_gate, amax_up) instead, as llm-compressor's
    fused-w13 export option does. input_amax: the static activation
    amax of every projection (W4A4), as a float32 reciprocal so both directions round-trip exactly.
    """
    I = gate_up.shape[1] // 2
    g_in = None if input_amax is None else np.float32(onv.flip_global_scale(onv.global_scale_decode(input_amax)))
    out = {}
    for e, module in enumerate(modules):
        w = {"gate": gate_up[e, :I], "up": gate_up[e, I:], "down": down[e]}
        amax = {p: float(np.abs(a.astype(np.float32)).max(initial=0.0)) for p, a in w.items()}
        if share_gate_up_scale:
            amax["gate"] = amax["up"] = max(amax["gate"], amax["up"])
        for proj, a in w.items():
            key = f"{module}{proj}_proj"
            if amax[proj] == 0:
                raise CheckpointError(f"{listing}: tensor {key + '.weight'!r} is all zero: NVFP4 has no global "
                                      f"scale for it (2688 / 0)", listing, key + ".weight")
            t = onv.quantize(a, onv.global_scale_encode(amax[proj]))
            out[key] = t._replace(input_global_scale=g_in)
    return out


def quantize_checkpoint(src_dir, dst_dir, layout: str, *, share_gate_up_scale: bool = False,
                        input_amax: Optional[float] = None) -> Path:
    """Quantize a bf16/f32 checkpoint's routed experts to NVFP4 in `layout` (NVFP4.md A3, A5).

    Every routed expert of every sparse layer (gate, up, down as separate tensors, per-expert stacked
    `experts.gate_up_proj` / `down_proj` split first) is quantized with the oracle's recipe; every other
    tensor is copied byte for byte under its name and dtype, into the file of the same name (shards and
    the index kept). config.json gets `quantization_config`, ModelOpt also hf_quant_config.json; other
    files are copied. Loading the result gives experts equal to oracle.nvfp4.dequantize(quantize(w, G)).

    layout: "compressed-tensors" or "modelopt";  share_gate_up_scale: one global scale per tensor
    (default: gate and up differ, as on a published GLM-5.3-Flash checkpoint, NVFP4.md) or one per
    (gate, up) pair;  input_amax: write static activation
    global scales (input_global_scale / input_scale) from this amax, for W4A4; None = weight-only.
    """
    from safetensors.numpy import save_file

    if layout not in NVFP4_LAYOUTS:
        raise ValueError(f"layout: {layout!r}, expected one of {NVFP4_LAYOUTS}")
    src, dst = Path(src_dir), Path(dst_dir)
    if dst.exists() and src.resolve() == dst.resolve():
        raise ValueError(f"dst_dir: {dst} is the source checkpoint; write the quantized copy elsewhere")
    g, named, quant = _read(src, None)
    where, listing = _locate(src)
    if quant:
        raise CheckpointError(f"{src}: already NVFP4 ({next(iter(quant.values())).layout})", src)
    reader, prefix = _Reader(where, listing), _text_prefix(where, listing)
    stacked = re.compile(r"^layers\.(\d+)\.mlp\.experts\.(gate_up_proj|down_proj)$")
    files: dict[str, dict[str, np.ndarray]] = {f.name: {} for f in set(where.values())}
    home: dict[int, str] = {}                     # layer -> the file that held its experts
    for key, file in sorted(where.items()):
        rel = key[len(prefix):] if key.startswith(prefix) else None
        m = rel is not None and (ROUTED.match(rel) or stacked.match(rel))
        if m and int(m.group(1)) < g.num_hidden_layers:
            home.setdefault(int(m.group(1)), file.name)
            continue
        files[file.name][key] = reader.raw(key)
    write = onv.to_compressed_tensors if layout == CT else onv.to_modelopt
    for i, name in sorted(home.items()):
        m = f"layers.{i}.mlp.experts."
        modules = [f"{prefix}{m}{e}." for e in range(g.n_routed_experts)]
        for key, t in _quantize_layer(named[m + "gate_up_proj"], named[m + "down_proj"], modules,
                                      share_gate_up_scale, input_amax, listing).items():
            files[name].update(write(key, t))
    dst.mkdir(parents=True, exist_ok=True)
    for name, tensors in files.items():
        save_file(tensors, str(dst / name), metadata={"format": "pt"})
    if listing.name == INDEX_FILE:
        weight_map = {k: n for n, ts in files.items() for k in ts}
        (dst / INDEX_FILE).write_text(json.dumps({"metadata": {}, "weight_map": dict(sorted(weight_map.items()))},
                                                 indent=1))
    _write_configs(src, dst, layout, input_amax is not None)
    return dst


def _write_configs(src: Path, dst: Path, layout: str, w4a4: bool) -> None:
    """config.json with quantization_config (+ hf_quant_config.json for ModelOpt); other small files copied."""
    import shutil

    for f in src.iterdir():
        if f.is_file() and f.suffix != ".safetensors" and f.name not in (INDEX_FILE, "config.json",
                                                                        "hf_quant_config.json"):
            shutil.copy2(f, dst / f.name)
    config = json.loads((src / "config.json").read_text(encoding="utf-8"))
    config["quantization_config"], hf = _quantization_config(layout, w4a4)
    (dst / "config.json").write_text(json.dumps(config, indent=1))
    if hf is not None:
        (dst / "hf_quant_config.json").write_text(json.dumps(hf, indent=1))


def write_random(directory, geometry: Geometry, seed: int = 0, nvfp4: Optional[str] = None,
                 input_amax: Optional[float] = None) -> Path:
    """A random checkpoint in transformers' on-disk layout (`glmgate checkpoint make-tiny`).

    Every tensor `expected_shapes` names, under `model.language_model.` (lm_head at the top), drawn as
    its declaration's init kind says (`_draw`; SPEC §13 randomizes what init leaves inert), a nested
    config.json, float64.

    nvfp4: None, "compressed-tensors" or "modelopt": the same random weights (same seed = same masters),
    routed experts quantized by `quantize_checkpoint` (each of gate, up, down with its own global
    scale; input_amax as there). So write_random(a, g, s) and write_random(b, g, s, nvfp4=...) differ only by the NVFP4 error.
    """
    if nvfp4 is not None:
        import tempfile

        if nvfp4 not in NVFP4_LAYOUTS:
            raise ValueError(f"nvfp4: {nvfp4!r}, expected None or one of {NVFP4_LAYOUTS}")
        with tempfile.TemporaryDirectory(prefix="glmgate-master-") as tmp:
            write_random(tmp, geometry, seed)
            return quantize_checkpoint(tmp, directory, nvfp4, input_amax=input_amax)
    from safetensors.numpy import save_file

    directory = Path(directory)
    rng = np.random.default_rng(seed)
    tensors = {}
    for t in stored_tensors(geometry):
        key = t.rel if t.rel == "lm_head.weight" else "model.language_model." + t.rel
        tensors[key] = np.ascontiguousarray(_draw(rng, t.init, t.shape))
    directory.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})
    (directory / "config.json").write_text(json.dumps({"model_type": "glm5_next", "text_config": geometry.to_dict()},
                                                      indent=1))
    return directory


def _draw(rng: np.random.Generator, init: str, shape: tuple) -> np.ndarray:
    """One tensor of a random checkpoint: norms 1 + N(0, 0.1²); what init leaves inert (A_log, hc base and
    scale, kpool ape, correction bias, LayerNorm bias) N(0, 0.5²); the embedding N(0, 1); the rest
    N(0, 1)·0.5/sqrt(fan_in)."""
    if init == NORM:
        return 1.0 + 0.1 * rng.standard_normal(shape)
    if init == INERT:
        return 0.5 * rng.standard_normal(shape)
    if init == EMBED:
        return rng.standard_normal(shape)
    return rng.standard_normal(shape) * (0.5 / np.sqrt(shape[-1]))
