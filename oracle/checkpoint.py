"""HF safetensors checkpoint -> float64 oracle containers (SPEC §11).

Reads a checkpoint directory holding `config.json` and either one `model.safetensors` or shards listed
in `model.safetensors.index.json`. The text-model prefix (`model.language_model.`, `model.`, or none for
a bare `Glm5NextTextModel`) is read from the keys; `lm_head.weight` is top level.

Both the on-disk names and the module names of SPEC §11 are accepted:

* `self_attn.{f_a_proj,f_b_proj,dt_bias,A_log}`      -> `self_attn.forget_gate.*`
* `hc_attn_{fn,base,scale}` / `hc_ffn_*`              -> `attn_hc.*` / `ffn_hc.*`
* `mlp.experts.{e}.{gate,up}_proj.weight`             -> `mlp.experts.gate_up_proj` [E, 2I, D] (gate rows first)
* `mlp.experts.{e}.down_proj.weight`                  -> `mlp.experts.down_proj` [E, D, I]
* `self_attn.{q,k,v}_conv1d.weight`                   -> `self_attn.conv1d.weight` (concatenated q, k, v)

Ignored: the MTP layer (`layers.{num_hidden_layers}.*`), `layers.*.shared_head.*`, the vision tower
(`model.visual.*`). Every other tensor must be one the config implies, with the shape it implies.
Errors (CheckpointError) name the FILE and the TENSOR: missing, unexpected, duplicated, mis-shaped,
non-float, or lying beyond the end of a truncated file. Pickle (`*.bin`, `*.pt`) is never read.

NVFP4 routed experts (NVFP4.md A5), per expert and projection `mlp.experts.{e}.{gate,up,down}_proj.`:
* compressed-tensors: `weight_packed` U8 [N, K/2], `weight_scale` F8_E4M3 [N, K/16], `weight_global_scale`
  F32 [1] (ENCODE 2688/amax), optional `input_global_scale` F32 [1] (ENCODE)
* ModelOpt: `weight` U8 [N, K/2], `weight_scale` F8_E4M3 [N, K/16], `weight_scale_2` F32 [] (DECODE
  amax/2688), optional `input_scale` F32 [] (DECODE)
The layout comes from config.json `quantization_config` (or ModelOpt's hf_quant_config.json) and the
keys, which must agree; one layout per checkpoint, every routed expert quantized, nothing else. The
experts load as their exact float64 dequantization (so the oracle runs unchanged) and, on
MoEWeights.nvfp4, as the codes and scales themselves (NVFP4ExpertWeights) for the quantized kernels.
`quantize_checkpoint` / `write_random(..., nvfp4=layout)` write either layout.
"""
from __future__ import annotations

import dataclasses
import json
import re
import struct
from pathlib import Path
from typing import Any, Callable, Optional, Union

import ml_dtypes  # noqa: F401  (registers bfloat16 / float8 with NumPy: safetensors' numpy reader needs it)
import numpy as np
from safetensors import safe_open

from oracle import nvfp4 as onv
from oracle.config import DENSE, FULL, LINEAR, SPARSE, Geometry
from oracle.types import (DenseMLPWeights, IndexerWeights, KDAWeights, MHCWeights, MLAWeights, MoEWeights,
                          NVFP4ExpertWeights, NVFP4Tensor)

__all__ = ["CheckpointError", "LayerWeights", "Weights", "load", "read_named", "expected_shapes",
           "SINGLE_FILE", "INDEX_FILE", "NVFP4_LAYOUTS", "nvfp4_layout", "quantize_checkpoint",
           "write_random", "tensor_map"]

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
_TEXT_PREFIXES = ("model.language_model.", "model.", "")
_IGNORED_OUTSIDE_TEXT = ("model.visual.",)
_NVFP4_SUFFIXES = (".weight_packed", ".weight_global_scale", ".input_global_scale", ".weight_scale",
                   ".weight_scale_2", ".input_scale")
_FLOAT_DTYPES = {"F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2"}
_RAW_DTYPES = {"F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"),
               "BF16": np.dtype(ml_dtypes.bfloat16), "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn),
               "F8_E5M2": np.dtype(ml_dtypes.float8_e5m2), "I64": np.dtype("<i8"), "I32": np.dtype("<i4"),
               "I16": np.dtype("<i2"), "I8": np.dtype("i1"), "U8": np.dtype("u1"), "BOOL": np.dtype(bool)}
_SAFETENSORS_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "I64": 8,
                      "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1, "U16": 2, "U32": 4, "U64": 8}


class CheckpointError(ValueError):
    """A checkpoint the oracle refuses; `file` and `tensor` name where (either may be None)."""

    def __init__(self, message: str, file: Optional[Path] = None, tensor: Optional[str] = None):
        super().__init__(message)
        self.file, self.tensor = file, tensor


# ----------------------------------------------------------------------------- containers


@dataclasses.dataclass(frozen=True)
class LayerWeights:
    """One decoder layer (SPEC §5): norms, both mHC instances, the attention kind's weights, the MLP.

    attention: "linear_attention" (kda set) or "indexed_attention" (mla set; indexer set on "full"
    layers, None on "shared" ones); mlp: DenseMLPWeights ("dense") or MoEWeights ("sparse").
    """

    index: int
    attention: str
    indexer_type: str
    input_layernorm: np.ndarray
    post_attention_layernorm: np.ndarray
    attn_hc: MHCWeights
    ffn_hc: MHCWeights
    kda: Optional[KDAWeights]
    mla: Optional[MLAWeights]
    indexer: Optional[IndexerWeights]
    mlp: Union[DenseMLPWeights, MoEWeights]


@dataclasses.dataclass(frozen=True)
class Weights:
    """The whole text decoder in float64 (SPEC §3)."""

    geometry: Geometry
    embed_tokens: np.ndarray        # [vocab, D]
    norm: np.ndarray                # [D]
    lm_head: np.ndarray             # [vocab, D]
    layers: tuple[LayerWeights, ...]


# ----------------------------------------------------------------------------- what the config implies


@dataclasses.dataclass(frozen=True)
class _Part:
    rel: str              # on-disk name relative to the text prefix ("lm_head.weight" is top level)
    shape: tuple
    formula: str


@dataclasses.dataclass(frozen=True)
class _Entry:
    """One module tensor: alternative on-disk forms (first = as transformers saves it)."""

    name: str
    forms: tuple[tuple[tuple[_Part, ...], Callable[[list], np.ndarray]], ...]


def _one(parts):
    return parts[0]


def _direct(name, shape, formula) -> _Entry:
    return _Entry(name, (((_Part(name, tuple(shape), formula),), _one),))


def _renamed(name, disk, shape, formula) -> _Entry:
    return _Entry(name, (((_Part(disk, tuple(shape), formula),), _one),
                         ((_Part(name, tuple(shape), formula),), _one)))


def _layer_entries(g: Geometry, i: int) -> list[_Entry]:
    D, N = g.hidden_size, g.hc_mult
    p = f"layers.{i}."
    out = [_direct(p + "input_layernorm.weight", (D,), "[D]"),
           _direct(p + "post_attention_layernorm.weight", (D,), "[D]")]
    for mod, disk in (("attn_hc", "hc_attn"), ("ffn_hc", "hc_ffn")):
        out += [_renamed(f"{p}{mod}.fn", f"{p}{disk}_fn", (g.hc_rows, g.hc_dim), "[(2+N)·N, N·D]"),
                _renamed(f"{p}{mod}.base", f"{p}{disk}_base", (g.hc_rows,), "[(2+N)·N]"),
                _renamed(f"{p}{mod}.scale", f"{p}{disk}_scale", (3,), "[3]")]
    a = p + "self_attn."
    if g.layer_types[i] == LINEAR:
        hd, d, h, K = g.kda_dim, g.linear_head_dim, g.linear_num_heads, g.linear_conv_kernel_dim
        for proj in ("q_proj", "k_proj", "v_proj"):
            out.append(_direct(f"{a}{proj}.weight", (hd, D), "[h·d, D]"))
        conv_parts = tuple(_Part(f"{a}{x}_conv1d.weight", (hd, 1, K), "[h·d, 1, K]") for x in "qkv")
        out.append(_Entry(a + "conv1d.weight", (
            (conv_parts, lambda parts: np.concatenate(parts, axis=0)),
            ((_Part(a + "conv1d.weight", (3 * hd, 1, K), "[3·h·d, 1, K]"),), _one))))
        for leaf, shape, formula in (("f_a_proj.weight", (d, D), "[d, D]"), ("f_b_proj.weight", (hd, d), "[h·d, d]"),
                                     ("dt_bias", (hd,), "[h·d]"), ("A_log", (h,), "[h]")):
            out.append(_renamed(f"{a}forget_gate.{leaf}", f"{a}{leaf}", shape, formula))
        out += [_direct(a + "b_proj.weight", (h, D), "[h, D]"),
                _direct(a + "g_a_proj.weight", (d, D), "[d, D]"),
                _direct(a + "g_b_proj.weight", (hd, d), "[h·d, d]"),
                _direct(a + "o_norm.weight", (d,), "[d]"),
                _direct(a + "o_proj.weight", (D, hd), "[D, h·d]")]
    else:
        rq, rkv, H = g.q_lora_rank, g.kv_lora_rank, g.num_attention_heads
        out += [_direct(a + "q_a_proj.weight", (rq, D), "[q_lora_rank, D]"),
                _direct(a + "q_a_layernorm.weight", (rq,), "[q_lora_rank]"),
                _direct(a + "q_b_proj.weight", (g.mla_q_dim, rq), "[H·qk_nope_head_dim, q_lora_rank]"),
                _direct(a + "kv_a_proj_with_mqa.weight", (rkv + g.qk_rope_head_dim, D), "[kv_lora_rank, D]"),
                _direct(a + "kv_a_layernorm.weight", (rkv,), "[kv_lora_rank]"),
                _direct(a + "kv_b_proj.weight", (g.kv_b_dim, rkv), "[H·(d_n + d_v), kv_lora_rank]"),
                _direct(a + "o_proj.weight", (D, H * g.v_head_dim), "[D, H·v_head_dim]")]
        if g.attention_bias:
            out += [_direct(a + "q_a_proj.bias", (rq,), "[q_lora_rank]"),
                    _direct(a + "kv_a_proj_with_mqa.bias", (rkv,), "[kv_lora_rank]"),
                    _direct(a + "o_proj.bias", (D,), "[D]")]
        if g.indexer_types[i] == FULL:
            x, di = a + "indexer.", g.index_head_dim
            out += [_direct(x + "wq_b.weight", (g.index_q_dim, rq), "[index_n_heads·index_head_dim, q_lora_rank]"),
                    _direct(x + "wk.weight", (di, D), "[index_head_dim, D]"),
                    _direct(x + "k_norm.weight", (di,), "[index_head_dim]"),
                    _direct(x + "k_norm.bias", (di,), "[index_head_dim]"),
                    _direct(x + "weights_proj.weight", (g.index_n_heads, D), "[index_n_heads, D]"),
                    _direct(x + "index_kpool_compress_gate", (di, D), "[index_head_dim, D]"),
                    _direct(x + "index_kpool_compress_ape", (g.index_kpool, di), "[index_kpool, index_head_dim]")]
    m = p + "mlp."
    if g.mlp_layer_types[i] == DENSE:
        F = g.intermediate_size
        out += [_direct(m + "gate_proj.weight", (F, D), "[intermediate_size, D]"),
                _direct(m + "up_proj.weight", (F, D), "[intermediate_size, D]"),
                _direct(m + "down_proj.weight", (D, F), "[D, intermediate_size]")]
    else:
        E, I = g.n_routed_experts, g.moe_intermediate_size
        out += [_direct(m + "gate.weight", (E, D), "[n_routed_experts, D]"),
                _direct(m + "gate.e_score_correction_bias", (E,), "[n_routed_experts]")]
        gate_up = tuple(_Part(f"{m}experts.{e}.{w}_proj.weight", (I, D), "[moe_intermediate_size, D]")
                        for e in range(E) for w in ("gate", "up"))
        out.append(_Entry(m + "experts.gate_up_proj", (
            (gate_up, lambda parts: np.stack([np.concatenate(parts[2 * e:2 * e + 2], axis=0)
                                              for e in range(len(parts) // 2)])),
            ((_Part(m + "experts.gate_up_proj", (E, 2 * I, D), "[n_routed_experts, 2·moe_intermediate_size, D]"),),
             _one))))
        down = tuple(_Part(f"{m}experts.{e}.down_proj.weight", (D, I), "[D, moe_intermediate_size]")
                     for e in range(E))
        out.append(_Entry(m + "experts.down_proj", (
            (down, lambda parts: np.stack(parts)),
            ((_Part(m + "experts.down_proj", (E, D, I), "[n_routed_experts, D, moe_intermediate_size]"),), _one))))
        if g.n_shared_experts:
            F = g.shared_intermediate_size
            s, w = m + "shared_experts.", "moe_intermediate_size·n_shared_experts"
            out += [_direct(s + "gate_proj.weight", (F, D), f"[{w}, D]"),
                    _direct(s + "up_proj.weight", (F, D), f"[{w}, D]"),
                    _direct(s + "down_proj.weight", (D, F), f"[D, {w}]")]
    return out


def _entries(g: Geometry) -> list[_Entry]:
    V, D = g.vocab_size, g.hidden_size
    out = [_direct("embed_tokens.weight", (V, D), "[vocab_size, D]"),
           _direct("norm.weight", (D,), "[D]")]
    if not g.tie_word_embeddings:
        out.append(_direct("lm_head.weight", (V, D), "[vocab_size, D]"))
    for i in range(g.num_hidden_layers):
        out += _layer_entries(g, i)
    return out


def expected_shapes(geometry: Geometry, on_disk: bool = True) -> dict[str, tuple]:
    """Every tensor the config implies, relative to the text prefix (`lm_head.weight` is top level).

    on_disk=True: the names transformers' save_pretrained writes (hc_attn_fn, per-expert weights,
    q/k/v_conv1d, self_attn.A_log, ...); False: the module names (attn_hc.fn, gate_up_proj, ...).
    """
    out = {}
    for e in _entries(geometry):
        parts, _ = e.forms[0] if on_disk else e.forms[-1]
        out.update({p.rel: p.shape for p in parts})
    return out


# ----------------------------------------------------------------------------- files


def _check_file(file: Path) -> dict[str, dict]:
    """Parse a safetensors header and check every tensor lies inside the file; {name: header entry}."""
    try:
        size = file.stat().st_size
        with open(file, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise CheckpointError(f"{file}: truncated safetensors file ({size} bytes, no header length)", file)
            n = struct.unpack("<Q", head)[0]
            if 8 + n > size:
                raise CheckpointError(f"{file}: truncated safetensors file: the header claims {n} bytes, "
                                      f"the file has {size - 8} after the length field", file)
            raw = f.read(n)
    except OSError as e:
        raise CheckpointError(f"{file}: cannot read ({e.strerror or e})", file) from e
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{file}: not a safetensors file (header is not JSON: {e})", file) from e
    if not isinstance(header, dict):
        raise CheckpointError(f"{file}: not a safetensors file (header is not a JSON object)", file)
    header.pop("__metadata__", None)
    data = size - 8 - n
    for name, info in header.items():
        try:
            begin, end = (int(x) for x in info["data_offsets"])
            dtype, shape = info["dtype"], tuple(int(s) for s in info["shape"])
        except (KeyError, TypeError, ValueError) as e:
            raise CheckpointError(f"{file}: tensor {name!r}: malformed header entry {info!r}", file, name) from e
        if end > data:
            raise CheckpointError(
                f"{file}: truncated safetensors file: tensor {name!r} needs bytes {begin}..{end} of the data "
                f"section, the file holds {data}", file, name)
        width = _SAFETENSORS_BYTES.get(dtype)
        if width is not None and end - begin != width * int(np.prod(shape, dtype=np.int64)):
            raise CheckpointError(f"{file}: tensor {name!r}: {end - begin} bytes for {dtype} {list(shape)}",
                                  file, name)
    return header


def _locate(directory: Path) -> tuple[dict[str, Path], Path]:
    """{tensor key: file} and the file that lists them (index json or the single file)."""
    index = directory / INDEX_FILE
    single = directory / SINGLE_FILE
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as e:
            raise CheckpointError(f"{index}: not a safetensors index (expected JSON with a weight_map): {e}",
                                  index) from e
        if not isinstance(weight_map, dict):
            raise CheckpointError(f"{index}: weight_map is not a JSON object", index)
        return {k: directory / v for k, v in weight_map.items()}, index
    if single.is_file():
        return {k: single for k in _check_file(single)}, single
    pickles = sorted(p.name for p in directory.glob("*.bin")) + sorted(p.name for p in directory.glob("*.pt"))
    hint = f" (found {pickles}: pickle checkpoints are never loaded; convert to safetensors)" if pickles else ""
    raise CheckpointError(f"{directory}: no {SINGLE_FILE} or {INDEX_FILE}{hint}", directory)


class _Reader:
    """Lazily opened safetensors files, every header checked before the first read."""

    def __init__(self, where: dict[str, Path], listing: Path):
        self.where, self.listing = where, listing
        self.headers: dict[Path, dict] = {}
        self.handles: dict[Path, Any] = {}
        for file in sorted(set(where.values())):
            if not file.is_file():
                key = next(k for k, f in where.items() if f == file)
                raise CheckpointError(f"{listing}: tensor {key!r} is mapped to {file.name}, which does not exist",
                                      listing, key)
            self.headers[file] = _check_file(file)
        for key, file in where.items():
            if key not in self.headers[file]:
                raise CheckpointError(f"{listing}: tensor {key!r} is mapped to {file}, which does not hold it",
                                      file, key)

    def shape(self, key: str) -> tuple:
        return tuple(int(s) for s in self.headers[self.where[key]][key]["shape"])

    def dtype(self, key: str) -> str:
        return self.headers[self.where[key]][key]["dtype"]

    def read(self, key: str) -> np.ndarray:
        file = self.where[key]
        try:
            if file not in self.handles:
                self.handles[file] = safe_open(str(file), framework="numpy")
            a = self.handles[file].get_tensor(key)
        except Exception as e:  # safetensors raises its own error type
            raise CheckpointError(f"{file}: tensor {key!r}: cannot read ({e})", file, key) from e
        return np.asarray(a).astype(np.float64)

    def raw(self, key: str) -> np.ndarray:
        """The tensor in its stored dtype, read from the header's byte range (safetensors' NumPy reader
        cannot make float8 arrays)."""
        file, info = self.where[key], self.headers[self.where[key]][key]
        dtype = _RAW_DTYPES.get(info["dtype"])
        if dtype is None:
            raise CheckpointError(f"{file}: tensor {key!r} has dtype {info['dtype']}, which the oracle "
                                  f"does not read", file, key)
        begin, end = (int(x) for x in info["data_offsets"])
        try:
            with open(file, "rb") as f:
                f.seek(8 + struct.unpack("<Q", f.read(8))[0] + begin)
                data = f.read(end - begin)
        except OSError as e:
            raise CheckpointError(f"{file}: tensor {key!r}: cannot read ({e.strerror or e})", file, key) from e
        return np.frombuffer(data, dtype=dtype).reshape(self.shape(key)).copy()


def _text_prefix(keys, listing: Path) -> str:
    for prefix in _TEXT_PREFIXES:
        if prefix + "embed_tokens.weight" in keys:
            return prefix
    raise CheckpointError(f"{listing}: missing tensor embed_tokens.weight (looked for "
                          f"{', '.join(p + 'embed_tokens.weight' for p in _TEXT_PREFIXES)})",
                          listing, "embed_tokens.weight")


# ----------------------------------------------------------------------------- NVFP4 experts (NVFP4.md A5)

CT, MODELOPT = "compressed-tensors", "modelopt"
NVFP4_LAYOUTS = (CT, MODELOPT)
PROJECTIONS = ("gate", "up", "down")


@dataclasses.dataclass(frozen=True)
class _Leaves:
    """One layout's tensor names under `<module>.` and their dtypes / global-scale shape."""

    packed: str
    scale: str
    global_scale: str
    input_scale: str
    global_shape: tuple        # as the tool writes it; both () and (1,) are read
    markers: tuple             # leaves only this layout has (weight_scale and weight are shared / plain)


_LEAVES = {CT: _Leaves("weight_packed", "weight_scale", "weight_global_scale", "input_global_scale", (1,),
                       ("weight_packed", "weight_global_scale", "input_global_scale")),
           MODELOPT: _Leaves("weight", "weight_scale", "weight_scale_2", "input_scale", (),
                             ("weight_scale_2", "input_scale"))}
_ROUTED = re.compile(r"^layers\.(\d+)\.mlp\.experts\.(\d+)\.(gate|up|down)_proj\.(\w+)$")


def _expert_dims(g: Geometry, proj: str) -> tuple[int, int]:
    """(N, K) of one expert's projection: gate/up [I, D], down [D, I] (SPEC §11)."""
    D, I = g.hidden_size, g.moe_intermediate_size
    return (D, I) if proj == "down" else (I, D)


def _config_layout(directory: Path) -> tuple[Optional[str], Optional[Path]]:
    """The NVFP4 layout config.json's `quantization_config` (or hf_quant_config.json) declares, and where."""
    config = directory / "config.json"
    try:
        q = json.loads(config.read_text(encoding="utf-8")).get("quantization_config")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        q = None                      # Geometry.from_pretrained reports an unreadable config.json
    if isinstance(q, dict):
        method = str(q.get("quant_method", "")).lower()
        formats = {str(q.get("format", ""))} | {str(c.get("format", "")) for c in
                                                (q.get("config_groups") or {}).values() if isinstance(c, dict)}
        if method == CT and "nvfp4-pack-quantized" in formats:
            return CT, config
        if method == MODELOPT and "NVFP4" in str(q.get("quant_algo", "")).upper():
            return MODELOPT, config
        raise CheckpointError(f"{config}: quantization_config {json.dumps(q)[:200]} is not an NVFP4 layout the "
                              f"oracle reads (compressed-tensors nvfp4-pack-quantized, or modelopt NVFP4)", config)
    hf = directory / "hf_quant_config.json"
    if hf.is_file():
        try:
            algo = str(json.loads(hf.read_text(encoding="utf-8"))["quantization"]["quant_algo"])
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as e:
            raise CheckpointError(f"{hf}: expected JSON with quantization.quant_algo ({e})", hf) from e
        if "NVFP4" not in algo.upper():
            raise CheckpointError(f"{hf}: quant_algo {algo!r} is not NVFP4", hf)
        return MODELOPT, hf
    return None, None


def _detect_layout(directory: Path, where: dict[str, Path], prefix: str, g: Geometry) -> Optional[str]:
    """One NVFP4 layout for the whole checkpoint (config and keys agree), or None for plain experts."""
    declared, source = _config_layout(directory)
    seen: dict[str, str] = {}                       # layout -> first key that marks it
    for key in sorted(where):
        if not key.endswith(_NVFP4_SUFFIXES) or not key.startswith(prefix):
            continue                                # the vision tower is ignored, quantized or not
        rel = key[len(prefix):]
        m = _ROUTED.match(rel)
        if m is None and _ignored(rel, g):
            continue
        if m is None:
            raise CheckpointError(f"{where[key]}: tensor {key!r} is NVFP4-quantized, but only routed experts "
                                  f"(mlp.experts.{{e}}.{{gate,up,down}}_proj) are read quantized", where[key], key)
        for layout, leaves in _LEAVES.items():
            if m.group(4) in leaves.markers:
                seen.setdefault(layout, key)
    if len(seen) > 1:
        a, b = seen[CT], seen[MODELOPT]
        raise CheckpointError(f"{where[b]}: mixes NVFP4 layouts: {a!r} is compressed-tensors, {b!r} is ModelOpt "
                              f"(one layout per checkpoint)", where[b], b)
    found = next(iter(seen), None)
    if declared is not None and found is not None and declared != found:
        raise CheckpointError(f"{where[seen[found]]}: tensor {seen[found]!r} is {found} NVFP4, but {source} "
                              f"declares {declared}", where[seen[found]], seen[found])
    layout = declared or found
    if layout is None:
        scale = next((k for k in sorted(where) if k.endswith(".weight_scale")), None)
        if scale is not None:
            raise CheckpointError(f"{where[scale]}: tensor {scale!r} is an NVFP4 block scale, but neither a "
                                  f"global scale (weight_global_scale / weight_scale_2) nor config.json's "
                                  f"quantization_config says which layout", where[scale], scale)
    return layout


def _read_module(reader: "_Reader", layout: str, module: str, shape: tuple[int, int], config: Path,
                 used: set) -> NVFP4Tensor:
    """One expert projection's NVFP4Tensor; CheckpointError naming the file and tensor on any defect."""
    L, (N, K) = _LEAVES[layout], shape
    want = {L.packed: ("U8", (N, K // 2), "[N, K/2] packed codes"),
            L.scale: ("F8_E4M3", (N, K // onv.BLOCK), "[N, K/16] block scales"),
            L.global_scale: ("F32", L.global_shape, "one float32 global scale")}
    if module + "." + L.packed not in reader.where and module + ".weight" in reader.where:
        key = module + ".weight"       # a bf16 expert in an NVFP4 checkpoint (compressed-tensors naming)
        raise CheckpointError(f"{reader.where[key]}: tensor {key!r} is unquantized ({reader.dtype(key)}), but "
                              f"this is a {layout} NVFP4 checkpoint: mixes NVFP4 and plain experts",
                              reader.where[key], key)
    tensors = {}
    for leaf, (dtype, dims, what) in want.items():
        key = f"{module}.{leaf}"
        if key not in reader.where:
            raise CheckpointError(f"{reader.listing}: missing tensor {key!r} ({layout} NVFP4 needs {what})",
                                  reader.listing, key)
        file, got = reader.where[key], reader.shape(key)
        if reader.dtype(key) != dtype:
            hint = " (mixes NVFP4 and plain experts)" if leaf == "weight" else ""
            raise CheckpointError(f"{file}: tensor {key!r} has dtype {reader.dtype(key)}, expected {dtype} "
                                  f"({layout} NVFP4){hint}", file, key)
        ok = got in ((), (1,)) if leaf == L.global_scale else got == dims
        if not ok:
            raise CheckpointError(f"{file}: tensor {key!r} has shape {list(got)}, but {config} implies "
                                  f"{list(dims)} = {what} of a [{N}, {K}] expert weight", file, key)
        tensors[key] = reader.raw(key)
    key = f"{module}.{L.input_scale}"
    if key in reader.where:
        got = reader.shape(key)
        if reader.dtype(key) != "F32" or got not in ((), (1,)):
            raise CheckpointError(f"{reader.where[key]}: tensor {key!r} is {reader.dtype(key)} {list(got)}, "
                                  f"expected one float32 activation global scale", reader.where[key], key)
        tensors[key] = reader.raw(key)
    used.update(tensors)
    try:
        return (onv.from_compressed_tensors if layout == CT else onv.from_modelopt)(tensors, module)
    except ValueError as e:            # the reader names the tensor first: map it back to its file
        bad = next((k for k in sorted(tensors, key=len, reverse=True) if str(e).startswith(k)), module)
        file = reader.where.get(bad, reader.listing)
        raise CheckpointError(f"{file}: {e}", file, bad) from e


def _stack(modules: list[NVFP4Tensor], input_keys: list[str], listing: Path) -> NVFP4Tensor:
    """Per-expert NVFP4Tensors -> stacked over E (global_decode [E]; input scales all or none)."""
    has_input = [t.input_global_scale is not None for t in modules]
    if any(has_input) and not all(has_input):
        bad, other = input_keys[has_input.index(False)], input_keys[has_input.index(True)]
        raise CheckpointError(f"{listing}: missing tensor {bad!r}: the activation global scale is there for "
                              f"{other!r} (all experts of a layer and projection, or none)", listing, bad)
    g_in = np.array([t.input_global_scale for t in modules], np.float32) if all(has_input) else None
    return NVFP4Tensor(np.stack([t.packed for t in modules]), np.stack([t.block_scale for t in modules]),
                       np.array([t.global_decode for t in modules], np.float32), g_in)


def _dequantized(t: NVFP4Tensor) -> np.ndarray:
    """Stacked NVFP4Tensor -> float64 [E, N, K], exact (oracle.nvfp4.dequantize per expert)."""
    return np.stack([onv.dequantize(NVFP4Tensor(t.packed[e], t.block_scale[e], np.float32(t.global_decode[e])))
                     for e in range(t.packed.shape[0])])


def _read_experts(reader: "_Reader", g: Geometry, prefix: str, layout: str, config: Path,
                  used: set) -> tuple[dict[str, np.ndarray], dict[int, NVFP4ExpertWeights]]:
    """Every sparse layer's routed experts: ({module name: dequantized float64}, {layer: NVFP4 data})."""
    named, quant = {}, {}
    for i in range(g.num_hidden_layers):
        if g.mlp_layer_types[i] != SPARSE:
            continue
        stacked = {}
        for proj in PROJECTIONS:
            mods = [f"{prefix}layers.{i}.mlp.experts.{e}.{proj}_proj" for e in range(g.n_routed_experts)]
            stacked[proj] = _stack([_read_module(reader, layout, m, _expert_dims(g, proj), config, used)
                                    for m in mods], [f"{m}.{_LEAVES[layout].input_scale}" for m in mods],
                                   reader.listing)
        m = f"layers.{i}.mlp.experts."
        named[m + "gate_up_proj"] = np.concatenate([_dequantized(stacked["gate"]), _dequantized(stacked["up"])],
                                                   axis=1)
        named[m + "down_proj"] = _dequantized(stacked["down"])
        quant[i] = NVFP4ExpertWeights(stacked["gate"], stacked["up"], stacked["down"], layout)
    return named, quant


def nvfp4_layout(checkpoint_dir) -> Optional[str]:
    """"compressed-tensors", "modelopt" or None (plain experts) for a checkpoint directory (NVFP4.md A5)."""
    directory = Path(checkpoint_dir)
    where, listing = _locate(directory)
    _Reader(where, listing)                          # checks every header first
    g = Geometry.from_pretrained(directory)
    return _detect_layout(directory, where, _text_prefix(where, listing), g)


def _ignored(rel: str, g: Geometry) -> bool:
    """The MTP layer and shared_head tensors (relative to the text prefix), which the oracle skips."""
    return re.match(rf"^layers\.{g.num_hidden_layers}\.|^layers\.\d+\.shared_head\.", rel) is not None


# ----------------------------------------------------------------------------- loading


def read_named(checkpoint_dir, geometry: Optional[Geometry] = None) -> tuple[Geometry, dict[str, np.ndarray]]:
    """Every text-model tensor as float64 under its MODULE name (SPEC §11), renames applied.

    Returns (geometry, {name: array}); names are relative to the text prefix, `lm_head.weight` top level,
    `self_attn.conv1d.weight` keeps its [3·h·d, 1, K] shape. NVFP4 experts come dequantized (exact).
    """
    g, named, _ = _read(checkpoint_dir, geometry)
    return g, named


def _read(checkpoint_dir, geometry: Optional[Geometry]):
    """(geometry, {module name: float64}, {sparse layer: NVFP4ExpertWeights} (empty for plain experts))."""
    directory = Path(checkpoint_dir)
    g = geometry if geometry is not None else Geometry.from_pretrained(directory)
    where, listing = _locate(directory)
    reader = _Reader(where, listing)
    prefix = _text_prefix(where, listing)
    config = directory / "config.json"
    layout = _detect_layout(directory, where, prefix, g)

    def disk_key(rel: str) -> str:
        return rel if rel == "lm_head.weight" else prefix + rel

    used: set[str] = set()
    out: dict[str, np.ndarray] = {}
    quant: dict[int, NVFP4ExpertWeights] = {}
    if layout is not None:
        out, quant = _read_experts(reader, g, prefix, layout, config, used)
    for entry in _entries(g):
        if entry.name in out:                                   # NVFP4 experts, read above
            continue
        present = [[disk_key(p.rel) in where for p in parts] for parts, _ in entry.forms]
        full = [i for i, pr in enumerate(present) if all(pr)]
        if len(full) > 1:
            keys = [disk_key(entry.forms[i][0][0].rel) for i in full]
            raise CheckpointError(f"{where[keys[0]]}: tensor {entry.name!r} is stored twice "
                                  f"(as {keys[0]!r} and as {keys[1]!r})", where[keys[0]], keys[1])
        if not full:
            # name the missing piece of the form that is partly there, else of the first (on-disk) form
            best = max(range(len(present)), key=lambda i: sum(present[i]))
            parts = entry.forms[best][0]
            missing = next(disk_key(p.rel) for p, ok in zip(parts, present[best]) if not ok)
            alt = "" if len(entry.forms) == 1 else \
                f" (module tensor {disk_key(entry.name)!r}; no complete on-disk form of it was found)"
            raise CheckpointError(f"{listing}: missing tensor {missing!r}{alt}", listing, missing)
        parts, combine = entry.forms[full[0]]
        arrays = []
        for part in parts:
            key = disk_key(part.rel)
            file = where[key]
            got = reader.shape(key)
            if got != part.shape:
                raise CheckpointError(
                    f"{file}: tensor {key!r} has shape {list(got)}, but {config} implies {list(part.shape)} "
                    f"= {part.formula}", file, key)
            if reader.dtype(key) not in _FLOAT_DTYPES:
                raise CheckpointError(f"{file}: tensor {key!r} has dtype {reader.dtype(key)}, expected a float "
                                      f"type ({', '.join(sorted(_FLOAT_DTYPES))})", file, key)
            arrays.append(reader.read(key))
            used.add(key)
        out[entry.name] = combine(arrays)
    if g.tie_word_embeddings:
        out["lm_head.weight"] = out["embed_tokens.weight"]
    for key in sorted(where):
        if key in used:
            continue
        if key.startswith(prefix):
            if _ignored(key[len(prefix):], g):
                continue
        elif key.startswith(_IGNORED_OUTSIDE_TEXT):
            continue
        raise CheckpointError(f"{where[key]}: unexpected tensor {key!r} (not part of the text model that "
                              f"{config} describes)", where[key], key)
    return g, out, quant


def _mhc(g: Geometry, named: dict, name: str) -> MHCWeights:
    return MHCWeights(named[name + ".fn"], named[name + ".base"], named[name + ".scale"], g.hc_mult,
                      g.hc_sinkhorn_iters, g.hc_eps, g.rms_norm_eps)


def _layer(g: Geometry, named: dict, i: int, nvfp4: Optional[NVFP4ExpertWeights] = None) -> LayerWeights:
    p = f"layers.{i}."
    a = p + "self_attn."
    kda = mla = indexer = None
    if g.layer_types[i] == LINEAR:
        f = a + "forget_gate."
        kda = KDAWeights(
            q_proj=named[a + "q_proj.weight"], k_proj=named[a + "k_proj.weight"], v_proj=named[a + "v_proj.weight"],
            conv1d=named[a + "conv1d.weight"][:, 0, :], f_a_proj=named[f + "f_a_proj.weight"],
            f_b_proj=named[f + "f_b_proj.weight"], dt_bias=named[f + "dt_bias"], A_log=named[f + "A_log"],
            b_proj=named[a + "b_proj.weight"], g_a_proj=named[a + "g_a_proj.weight"],
            g_b_proj=named[a + "g_b_proj.weight"], o_norm=named[a + "o_norm.weight"],
            o_proj=named[a + "o_proj.weight"], lower_bound=g.linear_lower_bound, eps=g.rms_norm_eps)
        kda.validate(g.hidden_size)
    else:
        mla = MLAWeights(
            q_a_proj=named[a + "q_a_proj.weight"], q_a_layernorm=named[a + "q_a_layernorm.weight"],
            q_b_proj=named[a + "q_b_proj.weight"], kv_a_proj_with_mqa=named[a + "kv_a_proj_with_mqa.weight"],
            kv_a_layernorm=named[a + "kv_a_layernorm.weight"], kv_b_proj=named[a + "kv_b_proj.weight"],
            o_proj=named[a + "o_proj.weight"], num_heads=g.num_attention_heads, nope_dim=g.qk_nope_head_dim,
            v_dim=g.v_head_dim, eps=g.rms_norm_eps, q_a_bias=named.get(a + "q_a_proj.bias"),
            kv_a_bias=named.get(a + "kv_a_proj_with_mqa.bias"), o_bias=named.get(a + "o_proj.bias"))
        mla.validate(g.hidden_size)
        if g.indexer_types[i] == FULL:
            x = a + "indexer."
            indexer = IndexerWeights(
                wq_b=named[x + "wq_b.weight"], wk=named[x + "wk.weight"], k_norm_weight=named[x + "k_norm.weight"],
                k_norm_bias=named[x + "k_norm.bias"], weights_proj=named[x + "weights_proj.weight"],
                compress_gate=named[x + "index_kpool_compress_gate"],
                compress_ape=named[x + "index_kpool_compress_ape"], n_heads=g.index_n_heads,
                head_dim=g.index_head_dim, topk=g.index_topk, kpool=g.index_kpool,
                always_select_tail=g.index_kpool_always_select_tail)
            indexer.validate(g.hidden_size, g.q_lora_rank)
    m = p + "mlp."
    if g.mlp_layer_types[i] == DENSE:
        mlp = DenseMLPWeights(named[m + "gate_proj.weight"], named[m + "up_proj.weight"],
                              named[m + "down_proj.weight"], g.swiglu_limit)
    else:
        s = m + "shared_experts."
        mlp = MoEWeights(
            router=named[m + "gate.weight"], e_score_correction_bias=named[m + "gate.e_score_correction_bias"],
            gate_up_proj=named[m + "experts.gate_up_proj"], down_proj=named[m + "experts.down_proj"],
            shared_gate_proj=named.get(s + "gate_proj.weight"), shared_up_proj=named.get(s + "up_proj.weight"),
            shared_down_proj=named.get(s + "down_proj.weight"), top_k=g.num_experts_per_tok, n_group=g.n_group,
            topk_group=g.topk_group, norm_topk_prob=g.norm_topk_prob,
            routed_scaling_factor=g.routed_scaling_factor, swiglu_limit=g.swiglu_limit, nvfp4=nvfp4)
    mlp.validate(g.hidden_size)
    return LayerWeights(i, g.layer_types[i], g.indexer_types[i], named[p + "input_layernorm.weight"],
                        named[p + "post_attention_layernorm.weight"], _mhc(g, named, p + "attn_hc"),
                        _mhc(g, named, p + "ffn_hc"), kda, mla, indexer, mlp)


def from_named(geometry: Geometry, named: dict[str, Any],
               nvfp4: Optional[dict[int, NVFP4ExpertWeights]] = None) -> Weights:
    """Group module-named float64 arrays (read_named's output) into the oracle containers.

    nvfp4: {sparse layer index: NVFP4ExpertWeights} for a quantized checkpoint (MoEWeights.nvfp4).
    """
    named = {k: np.asarray(v, dtype=np.float64) for k, v in named.items()}
    nvfp4 = nvfp4 or {}
    layers = tuple(_layer(geometry, named, i, nvfp4.get(i)) for i in range(geometry.num_hidden_layers))
    return Weights(geometry, named["embed_tokens.weight"], named["norm.weight"], named["lm_head.weight"], layers)


def load(checkpoint_dir, geometry: Optional[Geometry] = None) -> Weights:
    """Read `checkpoint_dir` (config.json + safetensors) into float64 Weights (SPEC §11).

    geometry: override config.json (default: Geometry.from_pretrained(checkpoint_dir), strict).
    NVFP4 experts (either layout, NVFP4.md A5) load as their exact dequantization, the codes and scales
    kept on MoEWeights.nvfp4. Raises CheckpointError naming the file and tensor.
    """
    g, named, quant = _read(checkpoint_dir, geometry)
    return from_named(g, named, quant)


# ----------------------------------------------------------------------------- writing tiny checkpoints

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

    modules[e] is `<prefix>layers.{i}.mlp.experts.{e}.`. Global scale from the float32 amax; gate and
    up share max(amax_gate, amax_up) when share_gate_up_scale, as llm-compressor and ModelOpt export a
    fused w13 pair (the fused kernel takes one scale per expert). input_amax: the static activation
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


def quantize_checkpoint(src_dir, dst_dir, layout: str, *, share_gate_up_scale: bool = True,
                        input_amax: Optional[float] = None) -> Path:
    """Quantize a bf16/f32 checkpoint's routed experts to NVFP4 in `layout` (NVFP4.md A3, A5).

    Every routed expert of every sparse layer (gate, up, down as separate tensors, per-expert stacked
    `experts.gate_up_proj` / `down_proj` split first) is quantized with the oracle's recipe; every other
    tensor is copied byte for byte under its name and dtype, into the file of the same name (shards and
    the index kept). config.json gets `quantization_config`, ModelOpt also hf_quant_config.json; other
    files are copied. Loading the result gives experts equal to oracle.nvfp4.dequantize(quantize(w, G)).

    layout: "compressed-tensors" or "modelopt";  share_gate_up_scale: one global scale per (gate, up)
    pair (default; what a fused w13 kernel needs) or one per tensor;  input_amax: write static activation
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
        m = rel is not None and (_ROUTED.match(rel) or stacked.match(rel))
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

    Every tensor `expected_shapes` names, under `model.language_model.` (lm_head at the top), with the
    parameters that init leaves inert randomized (SPEC §13: norms 1 + N(0, 0.1²), A_log / hc base and
    scale / kpool ape / correction bias / LayerNorm bias N(0, 0.5²)), a nested config.json, float64.

    nvfp4: None, "compressed-tensors" or "modelopt": the same random weights (same seed = same masters),
    routed experts quantized by `quantize_checkpoint` (gate/up sharing a global scale; input_amax as
    there). So write_random(a, g, s) and write_random(b, g, s, nvfp4=...) differ only by the NVFP4 error.
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
    for rel, shape in expected_shapes(geometry).items():
        key = rel if rel == "lm_head.weight" else "model.language_model." + rel
        if rel.endswith(("norm.weight", "layernorm.weight")):
            a = 1.0 + 0.1 * rng.standard_normal(shape)
        elif rel.endswith(("A_log", "_base", "_scale", "compress_ape", "e_score_correction_bias", "norm.bias")):
            a = 0.5 * rng.standard_normal(shape)
        elif rel == "embed_tokens.weight":
            a = rng.standard_normal(shape)
        else:
            a = rng.standard_normal(shape) * (0.5 / np.sqrt(shape[-1]))
        tensors[key] = np.ascontiguousarray(a)
    directory.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})
    (directory / "config.json").write_text(json.dumps({"model_type": "glm5_next", "text_config": geometry.to_dict()},
                                                      indent=1))
    return directory


def tensor_map(directory) -> list[tuple[str, tuple, str]]:
    """(name on disk, shape, dtype) of every tensor of a checkpoint, in name order (`checkpoint inspect`)."""
    directory = Path(directory)
    index = directory / "model.safetensors.index.json"
    files = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.exists() else ["model.safetensors"]
    out = []
    for f in files:
        for name, entry in _check_file(directory / f).items():
            out.append((name, tuple(entry["shape"]), entry["dtype"]))
    return sorted(out)
