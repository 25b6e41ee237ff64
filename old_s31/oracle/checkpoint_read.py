"""Reading a checkpoint: HF safetensors -> float64 oracle containers (SPEC §11).

Reads a checkpoint directory holding `config.json` and either one `model.safetensors` or shards listed
in `model.safetensors.index.json`. The text-model prefix (`model.language_model.`, `model.`, or none for
a bare `Glm5NextTextModel`) is read from the keys; `lm_head.weight` is top level. Every tensor is read
under one of the names of oracle/checkpoint_names.py (on-disk or module form).

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
"""
from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any, Optional

import ml_dtypes  # noqa: F401  (registers bfloat16 / float8 with NumPy: safetensors' numpy reader needs it)
import numpy as np
from safetensors import safe_open

from oracle import nvfp4 as onv
from oracle.checkpoint_names import (CT, LEAVES, MODELOPT, NVFP4_SUFFIXES, ROUTED, Entry, entries,
                                     expert_shapes, ignored, model)
from oracle.config import SPARSE, Geometry
from oracle.fields import dims
from oracle.types import NVFP4_LEAVES, NVFP4ExpertWeights, NVFP4Tensor, Weights

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
_TEXT_PREFIXES = ("model.language_model.", "model.", "")
_IGNORED_OUTSIDE_TEXT = ("model.visual.",)

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
        if not key.endswith(NVFP4_SUFFIXES) or not key.startswith(prefix):
            continue                                # the vision tower is ignored, quantized or not
        rel = key[len(prefix):]
        m = ROUTED.match(rel)
        if m is None and ignored(rel, g):
            continue
        if m is None:
            raise CheckpointError(f"{where[key]}: tensor {key!r} is NVFP4-quantized, but only routed experts "
                                  f"(mlp.experts.{{e}}.{{gate,up,down}}_proj) are read quantized", where[key], key)
        for layout, leaves in LEAVES.items():
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


def _wanted_leaves(layout: str, N: int, K: int) -> dict[str, tuple[str, tuple, str]]:
    """{leaf: (dtype, shape, what)} of the tensors every quantized [N, K] module has (NVFP4_LEAVES)."""
    out = {}
    for field in ("packed", "block_scale", "global_decode"):
        leaf = NVFP4_LEAVES[field]
        one = leaf.shape == "[]"
        shape = LEAVES[layout].global_shape if one else dims(leaf.shape, {"N": N, "K": K})
        out[leaf.names[layout]] = (leaf.dtype, shape, ("one " if one else leaf.shape + " ") + leaf.what)
    return out


def _read_module(reader: "_Reader", layout: str, module: str, shape: tuple[int, int], config: Path,
                 used: set) -> NVFP4Tensor:
    """One expert projection's NVFP4Tensor; CheckpointError naming the file and tensor on any defect."""
    L, (N, K) = LEAVES[layout], shape
    if module + "." + L.packed not in reader.where and module + ".weight" in reader.where:
        key = module + ".weight"       # a bf16 expert in an NVFP4 checkpoint (compressed-tensors naming)
        raise CheckpointError(f"{reader.where[key]}: tensor {key!r} is unquantized ({reader.dtype(key)}), but "
                              f"this is a {layout} NVFP4 checkpoint: mixes NVFP4 and plain experts",
                              reader.where[key], key)
    tensors = {}
    for leaf, (dtype, want, what) in _wanted_leaves(layout, N, K).items():
        key = f"{module}.{leaf}"
        if key not in reader.where:
            raise CheckpointError(f"{reader.listing}: missing tensor {key!r} ({layout} NVFP4 needs {what})",
                                  reader.listing, key)
        file, got = reader.where[key], reader.shape(key)
        if reader.dtype(key) != dtype:
            hint = " (mixes NVFP4 and plain experts)" if leaf == "weight" else ""
            raise CheckpointError(f"{file}: tensor {key!r} has dtype {reader.dtype(key)}, expected {dtype} "
                                  f"({layout} NVFP4){hint}", file, key)
        if not (got in ((), (1,)) if leaf == L.global_scale else got == want):
            raise CheckpointError(f"{file}: tensor {key!r} has shape {list(got)}, but {config} implies "
                                  f"{list(want)} = {what} of a [{N}, {K}] expert weight", file, key)
        tensors[key] = reader.raw(key)
    _read_input_scale(reader, f"{module}.{L.input_scale}", tensors)
    used.update(tensors)
    try:
        return (onv.from_compressed_tensors if layout == CT else onv.from_modelopt)(tensors, module)
    except ValueError as e:            # the reader names the tensor first: map it back to its file
        bad = next((k for k in sorted(tensors, key=len, reverse=True) if str(e).startswith(k)), module)
        file = reader.where.get(bad, reader.listing)
        raise CheckpointError(f"{file}: {e}", file, bad) from e


def _read_input_scale(reader: "_Reader", key: str, tensors: dict) -> None:
    """The optional activation global scale into `tensors` (W4A4 checkpoints have one per module)."""
    if key not in reader.where:
        return
    leaf, got = NVFP4_LEAVES["input_global_scale"], reader.shape(key)
    if reader.dtype(key) != leaf.dtype or got not in ((), (1,)):
        raise CheckpointError(f"{reader.where[key]}: tensor {key!r} is {reader.dtype(key)} {list(got)}, "
                              f"expected one {leaf.what}", reader.where[key], key)
    tensors[key] = reader.raw(key)


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
        for proj, shape in expert_shapes(g).items():
            mods = [f"{prefix}layers.{i}.mlp.experts.{e}.{proj}_proj" for e in range(g.n_routed_experts)]
            stacked[proj] = _stack([_read_module(reader, layout, m, shape, config, used)
                                    for m in mods], [f"{m}.{LEAVES[layout].input_scale}" for m in mods],
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
    used: set[str] = set()
    out: dict[str, np.ndarray] = {}
    quant: dict[int, NVFP4ExpertWeights] = {}
    if layout is not None:
        out, quant = _read_experts(reader, g, prefix, layout, config, used)
    for entry in entries(g):
        if entry.name not in out:                               # NVFP4 experts are read above
            out[entry.name] = _read_entry(reader, entry, prefix, config, used)
    if g.tie_word_embeddings:
        out["lm_head.weight"] = out["embed_tokens.weight"]
    _refuse_unexpected(where, used, prefix, g, config)
    return g, out, quant


def _disk_key(rel: str, prefix: str) -> str:
    return rel if rel == "lm_head.weight" else prefix + rel


def _read_entry(reader: "_Reader", entry: Entry, prefix: str, config: Path, used: set) -> np.ndarray:
    """One module tensor from the one complete stored form of it; CheckpointError naming file and tensor."""
    where = reader.where
    present = [[_disk_key(p.rel, prefix) in where for p in parts] for parts, _ in entry.forms]
    full = [i for i, pr in enumerate(present) if all(pr)]
    if len(full) > 1:
        keys = [_disk_key(entry.forms[i][0][0].rel, prefix) for i in full]
        raise CheckpointError(f"{where[keys[0]]}: tensor {entry.name!r} is stored twice "
                              f"(as {keys[0]!r} and as {keys[1]!r})", where[keys[0]], keys[1])
    if not full:
        # name the missing piece of the form that is partly there, else of the first (on-disk) form
        best = max(range(len(present)), key=lambda i: sum(present[i]))
        missing = next(_disk_key(p.rel, prefix) for p, ok in zip(entry.forms[best][0], present[best]) if not ok)
        alt = "" if len(entry.forms) == 1 else \
            f" (module tensor {_disk_key(entry.name, prefix)!r}; no complete on-disk form of it was found)"
        raise CheckpointError(f"{reader.listing}: missing tensor {missing!r}{alt}", reader.listing, missing)
    parts, combine = entry.forms[full[0]]
    arrays = []
    for part in parts:
        key = _disk_key(part.rel, prefix)
        file, got = where[key], reader.shape(key)
        if got != part.shape:
            raise CheckpointError(
                f"{file}: tensor {key!r} has shape {list(got)}, but {config} implies {list(part.shape)} "
                f"= {part.formula}", file, key)
        if reader.dtype(key) not in _FLOAT_DTYPES:
            raise CheckpointError(f"{file}: tensor {key!r} has dtype {reader.dtype(key)}, expected a float "
                                  f"type ({', '.join(sorted(_FLOAT_DTYPES))})", file, key)
        arrays.append(reader.read(key))
        used.add(key)
    return combine(arrays)


def _refuse_unexpected(where: dict[str, Path], used: set, prefix: str, g: Geometry, config: Path) -> None:
    """CheckpointError on the first tensor (by name) that was not read and is not one the oracle skips."""
    for key in sorted(where):
        if key in used:
            continue
        if key.startswith(prefix):
            if ignored(key[len(prefix):], g):
                continue
        elif key.startswith(_IGNORED_OUTSIDE_TEXT):
            continue
        raise CheckpointError(f"{where[key]}: unexpected tensor {key!r} (not part of the text model that "
                              f"{config} describes)", where[key], key)


def from_named(geometry: Geometry, named: dict[str, Any],
               nvfp4: Optional[dict[int, NVFP4ExpertWeights]] = None) -> Weights:
    """Group module-named float64 arrays (read_named's output) into the oracle containers.

    nvfp4: {sparse layer index: NVFP4ExpertWeights} for a quantized checkpoint (MoEWeights.nvfp4).
    """
    return model(geometry, {k: np.asarray(v, dtype=np.float64) for k, v in named.items()}, nvfp4)


def load(checkpoint_dir, geometry: Optional[Geometry] = None) -> Weights:
    """Read `checkpoint_dir` (config.json + safetensors) into float64 Weights (SPEC §11).

    geometry: override config.json (default: Geometry.from_pretrained(checkpoint_dir), strict).
    NVFP4 experts (either layout, NVFP4.md A5) load as their exact dequantization, the codes and scales
    kept on MoEWeights.nvfp4. Raises CheckpointError naming the file and tensor.
    """
    g, named, quant = _read(checkpoint_dir, geometry)
    return from_named(g, named, quant)


def tensor_map(directory) -> list[tuple[str, tuple, str]]:
    """(name on disk, shape, dtype) of every tensor of a checkpoint, in name order (`checkpoint inspect`)."""
    directory = Path(directory)
    index = directory / INDEX_FILE
    files = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.exists() else [SINGLE_FILE]
    out = []
    for f in files:
        for name, entry in _check_file(directory / f).items():
            out.append((name, tuple(entry["shape"]), entry["dtype"]))
    return sorted(out)
