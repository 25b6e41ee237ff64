"""Model geometry: every field of SPEC §1, read from a HF config.json and validated (SPEC §1, §13).

Letters (SPEC notation): L layers, D hidden_size, H MLA heads, d_n / d_v MLA per-head q·k / value
dims, r_q / r_kv query / KV latent ranks, h / d KDA heads / head dim, K conv kernel, H_i / d_i
indexer heads / head dim, P_k pool size (index_kpool), E routed experts, k_e experts per token,
I expert width, N mHC streams.

A field absent from a config dict takes the transformers class default (the "default" column of
SPEC §1), as the reference does. `from_pretrained` reads with `strict=True` instead, where a missing
shape-defining field is an error: transformers' `index_kpool` default is 16 while the released
checkpoint uses 4 (SPEC §12 pitfall 2), so a silent default builds a different model.

Schedules hold one string per layer: `layer_types` ("linear_attention" = KDA, "indexed_attention" =
MLA + DSA), `mlp_layer_types` ("dense", "sparse" = MoE), `indexer_types` ("full", "shared").
"""
from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

__all__ = [
    "ConfigError", "Geometry", "PRESETS", "LINEAR", "INDEXED", "DENSE", "SPARSE", "FULL", "SHARED",
    "default_layer_types", "default_mlp_layer_types", "indexer_types_from_rule",
    "indexer_types_from_pattern",
]

LINEAR, INDEXED = "linear_attention", "indexed_attention"
DENSE, SPARSE = "dense", "sparse"
FULL, SHARED = "full", "shared"

_LAYER_RENAMES = {"full_attention": INDEXED, "deepseek_sparse_attention": INDEXED}
_SCHEDULE_VALUES = {
    "layer_types": (LINEAR, INDEXED),
    "mlp_layer_types": (DENSE, SPARSE),
    "indexer_types": (FULL, SHARED),
}
_PATTERN_LETTERS = {"F": FULL, "S": SHARED, FULL: FULL, SHARED: SHARED}

# transformers' own defaults for the keys that only derive `indexer_types` (SPEC §1).
_INDEX_TOPK_FREQ, _INDEX_SKIP_TOPK_OFFSET = 1, 2

# every other int field is a size and must be positive (pad_token_id is typed `int | None`).
_NON_SIZE_INTS = frozenset({"qk_rope_head_dim"})
_POSITIVE_FLOATS = ("rms_norm_eps", "routed_scaling_factor", "swiglu_limit", "hc_eps")

# shape-defining fields that strict mode refuses to default: field -> (keys that provide it, type).
_REQUIRED = {
    "vocab_size": (("vocab_size",), "int"),
    "hidden_size": (("hidden_size",), "int"),
    "intermediate_size": (("intermediate_size",), "int"),
    "moe_intermediate_size": (("moe_intermediate_size",), "int"),
    "num_hidden_layers": (("num_hidden_layers",), "int"),
    "num_attention_heads": (("num_attention_heads",), "int"),
    "num_key_value_heads": (("num_key_value_heads",), "int"),
    "q_lora_rank": (("q_lora_rank",), "int"),
    "kv_lora_rank": (("kv_lora_rank",), "int"),
    "qk_nope_head_dim": (("qk_nope_head_dim",), "int"),
    "v_head_dim": (("v_head_dim",), "int"),
    "index_n_heads": (("index_n_heads",), "int"),
    "index_head_dim": (("index_head_dim",), "int"),
    "index_topk": (("index_topk",), "int"),
    "index_kpool": (("index_kpool",), "int"),
    "linear_num_heads": (("linear_num_heads", "linear_attn_config.num_heads"), "int"),
    "linear_head_dim": (("linear_head_dim", "linear_attn_config.head_dim"), "int"),
    "linear_conv_kernel_dim": (
        ("linear_conv_kernel_dim", "linear_attn_config.short_conv_kernel_size"), "int"),
    "n_routed_experts": (("n_routed_experts", "num_local_experts"), "int"),
    "num_experts_per_tok": (("num_experts_per_tok",), "int"),
    "n_shared_experts": (("n_shared_experts",), "int"),
    "hc_mult": (("hc_mult",), "int"),
}

# linear_attn_config key -> Geometry field (SPEC §1 "Accepted extra kwargs").
_LINEAR_ATTN_KEYS = {
    "head_dim": "linear_head_dim",
    "num_heads": "linear_num_heads",
    "short_conv_kernel_size": "linear_conv_kernel_dim",
    "gate_lower_bound": "linear_lower_bound",
}


class ConfigError(ValueError):
    """A config SPEC §1 / §13 rejects; the message names the field, the value, the expectation."""


def _fail(field: str, found: Any, expected: str) -> ConfigError:
    """Build the one error shape used everywhere (SPEC §1)."""
    return ConfigError(f"{field}={found!r}: expected {expected}")


def default_layer_types(num_layers: int) -> tuple[str, ...]:
    """SPEC §1: layer i is MLA + DSA iff i % 4 == 3, else KDA."""
    return tuple(INDEXED if i % 4 == 3 else LINEAR for i in range(num_layers))


def default_mlp_layer_types(num_layers: int) -> tuple[str, ...]:
    """SPEC §1: the first min(3, L) layers are dense, the rest MoE."""
    return tuple(DENSE if i < 3 else SPARSE for i in range(num_layers))


def indexer_types_from_rule(
    num_layers: int, freq: int = _INDEX_TOPK_FREQ, offset: int = _INDEX_SKIP_TOPK_OFFSET
) -> tuple[str, ...]:
    """SPEC §1: layer i is "full" iff max(i - offset + 1, 0) % freq == 0, else "shared"."""
    return tuple(FULL if max(i - offset + 1, 0) % freq == 0 else SHARED for i in range(num_layers))


def indexer_types_from_pattern(pattern: str | Sequence[str]) -> tuple[str, ...]:
    """SPEC §1: `index_topk_pattern`, a string of F/S or a list (of F/S or full/shared)."""
    entries = list(pattern) if isinstance(pattern, (str, Sequence)) else [None]
    if any(not isinstance(p, str) or p not in _PATTERN_LETTERS for p in entries):
        raise _fail("index_topk_pattern", pattern,
                    'a string of "F"/"S" or a list of "F"/"S" (or "full"/"shared")')
    return tuple(_PATTERN_LETTERS[p] for p in entries)


def _is_int(v: Any) -> bool:
    # bool is an int subclass; `true` in a config.json where a size belongs is a typo, not 1.
    return isinstance(v, int) and not isinstance(v, bool)


def _is_real(v: Any) -> bool:
    return (_is_int(v) or isinstance(v, float)) and math.isfinite(v)


_TYPE_CHECKS = {
    "int": (_is_int, "an int"),
    "float": (_is_real, "a finite number"),
    "float | None": (lambda v: v is None or _is_real(v), "a finite number or null"),
    "int | None": (lambda v: v is None or _is_int(v), "an int or null"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "str": (lambda v: isinstance(v, str), "a string"),
}


@dataclass(frozen=True)
class Geometry:
    """Every field of SPEC §1 plus the three layer schedules; defaults are transformers' (full).

    A schedule left as None is derived (SPEC §1); lists become tuples and the legacy layer-type
    names are renamed, so the instance is hashable and compares by value. `indexer_types` matters
    only on indexed_attention layers: use `full_indexer_layers` / `shared_indexer_layers`.
    """

    vocab_size: int = 154880
    hidden_size: int = 4096
    intermediate_size: int = 12288
    moe_intermediate_size: int = 2048
    num_hidden_layers: int = 45
    num_attention_heads: int = 64
    num_key_value_heads: int = 64
    q_lora_rank: int = 1536
    kv_lora_rank: int = 512
    qk_nope_head_dim: int = 256
    qk_rope_head_dim: int = 0
    v_head_dim: int = 256
    attention_bias: bool = False
    index_n_heads: int = 32
    index_head_dim: int = 128
    index_topk: int = 2048
    # transformers' class default; the released checkpoint (preset "full") uses 4.
    index_kpool: int = 16
    index_kpool_always_select_tail: bool = True
    linear_num_heads: int = 64
    linear_head_dim: int = 128
    linear_conv_kernel_dim: int = 4
    linear_lower_bound: float | None = -5.0
    hidden_act: str = "silu"
    rms_norm_eps: float = 1e-5
    n_routed_experts: int = 288
    num_experts_per_tok: int = 8
    n_shared_experts: int = 1
    n_group: int = 1
    topk_group: int = 1
    norm_topk_prob: bool = True
    routed_scaling_factor: float = 2.5
    swiglu_limit: float = 10.0
    hc_mult: int = 4
    hc_sinkhorn_iters: int = 20
    hc_eps: float = 1e-6
    pad_token_id: int | None = 154820
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 1048576
    layer_types: tuple[str, ...] | None = None
    mlp_layer_types: tuple[str, ...] | None = None
    indexer_types: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        """Type-check, derive the schedules, then check SPEC §1 / §13 constraints."""
        self._check_types()
        self._set_schedules()
        self._check_sizes()
        self._check_constraints()
        self._check_schedules()

    def _check_types(self) -> None:
        """SPEC §1 types: ints are ints (not bools or strings); an int given for a float is cast."""
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.type not in _TYPE_CHECKS:
                continue
            ok, expected = _TYPE_CHECKS[f.type]
            if not ok(value):
                raise _fail(f.name, value, expected)
            if f.type.startswith("float") and value is not None:
                object.__setattr__(self, f.name, float(value))

    def _set_schedules(self) -> None:
        """SPEC §1 schedules: derive the absent ones, tuple-ify, rename legacy layer types."""
        L = self.num_hidden_layers
        defaults = {
            "layer_types": default_layer_types, "mlp_layer_types": default_mlp_layer_types,
            "indexer_types": indexer_types_from_rule,
        }
        for name, derive in defaults.items():
            value = getattr(self, name)
            if value is None:
                value = derive(L)
            if isinstance(value, str) or not isinstance(value, Sequence):
                raise _fail(name, value, f"a list of {L} strings (one per layer)")
            if name == "layer_types":
                value = [_LAYER_RENAMES.get(v, v) if isinstance(v, str) else v for v in value]
            object.__setattr__(self, name, tuple(value))

    def _check_sizes(self) -> None:
        """SPEC §1: every size is a positive int, every eps/scale/limit a positive number."""
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.type == "int" and f.name not in _NON_SIZE_INTS and value < 1:
                raise _fail(f.name, value, "a positive int")
        for name in _POSITIVE_FLOATS:
            if getattr(self, name) <= 0:
                raise _fail(name, getattr(self, name), "a positive number")

    def _check_constraints(self) -> None:
        """SPEC §1 validation and §13 constraints, first violation wins."""
        E, G = self.n_routed_experts, self.n_group
        rules = (
            ("qk_rope_head_dim", self.qk_rope_head_dim == 0, "0 (NoPE: the model has no RoPE)"),
            ("num_key_value_heads", self.num_key_value_heads == self.num_attention_heads,
             f"num_attention_heads={self.num_attention_heads} (MLA has one KV head per head)"),
            ("index_topk", self.index_topk % self.index_kpool == 0,
             f"a multiple of index_kpool={self.index_kpool}"),
            ("linear_lower_bound", self.linear_lower_bound is None or self.linear_lower_bound < 0,
             "a negative number (safe gate) or null (softplus gate)"),
            ("hidden_act", self.hidden_act == "silu", '"silu" (MLP and KDA conv activation)'),
            ("n_routed_experts", E % G == 0, f"a multiple of n_group={G}"),
            ("n_routed_experts", E // G >= 2,
             f">= 2 experts per group (n_group={G}; the group score sums the top 2)"),
            ("topk_group", self.topk_group <= G, f"<= n_group={G}"),
            ("num_experts_per_tok", self.num_experts_per_tok <= self.topk_group * (E // G),
             f"<= topk_group * n_routed_experts / n_group = {self.topk_group * (E // G)}"),
            ("pad_token_id", self.pad_token_id is None or 0 <= self.pad_token_id < self.vocab_size,
             f"null or a token id in [0, vocab_size={self.vocab_size})"),
        )
        for field, ok, expected in rules:
            if not ok:
                raise _fail(field, getattr(self, field), expected)

    def _check_schedules(self) -> None:
        """SPEC §1 / §13: one allowed value per layer; §8.8: where "shared" may stand."""
        L = self.num_hidden_layers
        for name, allowed in _SCHEDULE_VALUES.items():
            value = getattr(self, name)
            if len(value) != L:
                raise ConfigError(
                    f"{name} has {len(value)} entries: expected {L}, one per layer "
                    f"(num_hidden_layers={L}); give schedules that match, or null to derive them")
            bad = [(i, v) for i, v in enumerate(value) if v not in allowed]
            if bad:
                i, v = bad[0]
                raise _fail(f"{name}[{i}]", v, f"one of {list(allowed)}")
        # only DSA layers: the freq / offset rule marks KDA layers "shared" too, and they ignore it.
        for i in self.shared_indexer_layers:
            if i - 1 not in self.full_indexer_layers:
                raise _fail(f"indexer_types[{i}]", SHARED,
                            f'layer {i - 1} to be a "full" indexed_attention layer: a "shared" '
                            f"indexed_attention layer reuses the selection of the layer directly "
                            f"before it, but {self._describe(i - 1)}")

    def _describe(self, i: int) -> str:
        """Name layer i's attention kind for the §8.8 error message."""
        if i < 0:
            return "there is no layer before layer 0"
        if self.layer_types[i] == LINEAR:
            return f"layer {i} is a linear_attention layer"
        return f'layer {i} is a "{self.indexer_types[i]}" indexed_attention layer'

    # derived sizes (SPEC §1 "Derived full-size sizes")

    @property
    def qk_head_dim(self) -> int:
        """SPEC §1: d_n + 0 (no rope part); the MLA softmax scale is its -1/2 power."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def kda_dim(self) -> int:
        """SPEC §6: h·d, the width of each of KDA's q, k, v (8192 at full size)."""
        return self.linear_num_heads * self.linear_head_dim

    @property
    def conv_dim(self) -> int:
        """SPEC §6: channels of the short conv over q, k and v together (24576)."""
        return 3 * self.kda_dim

    @property
    def mla_q_dim(self) -> int:
        """SPEC §7: q_b_proj output rows, H·qk_head_dim (16384)."""
        return self.num_attention_heads * self.qk_head_dim

    @property
    def kv_b_dim(self) -> int:
        """SPEC §7: kv_b_proj output rows, H·(d_n + d_v) (32768)."""
        return self.num_attention_heads * (self.qk_nope_head_dim + self.v_head_dim)

    @property
    def index_q_dim(self) -> int:
        """SPEC §8: indexer wq_b output rows, H_i·d_i (4096)."""
        return self.index_n_heads * self.index_head_dim

    @property
    def pad_id(self) -> int:
        """The token id left padding carries: pad_token_id, or 0 for a config that names none (null is
        legal, SPEC §1). A padded position is masked out, so no real token ever sees its id."""
        return 0 if self.pad_token_id is None else self.pad_token_id

    @property
    def index_slots(self) -> int:
        """SPEC §8: selection width per query, topk + P_k - 1 (2051 with P_k = 4)."""
        return self.index_topk + self.index_kpool - 1

    @property
    def index_topk_pools(self) -> int:
        """SPEC §8: most pools one query selects, index_topk / P_k (k_sel before the min)."""
        return self.index_topk // self.index_kpool

    @property
    def shared_intermediate_size(self) -> int:
        """SPEC §9: shared expert width, I·n_shared_experts."""
        return self.moe_intermediate_size * self.n_shared_experts

    @property
    def hc_rows(self) -> int:
        """SPEC §4: mHC projection rows, (2 + N)·N (24)."""
        return (2 + self.hc_mult) * self.hc_mult

    @property
    def hc_dim(self) -> int:
        """SPEC §4: mHC projection input, N·D (16384)."""
        return self.hc_mult * self.hidden_size

    # layer index sets (SPEC §1 schedules)

    @property
    def kda_layers(self) -> tuple[int, ...]:
        """SPEC §1: indices of the linear_attention (KDA) layers."""
        return tuple(i for i, t in enumerate(self.layer_types) if t == LINEAR)

    @property
    def dsa_layers(self) -> tuple[int, ...]:
        """SPEC §1: indices of the indexed_attention (MLA + DSA) layers."""
        return tuple(i for i, t in enumerate(self.layer_types) if t == INDEXED)

    @property
    def dense_layers(self) -> tuple[int, ...]:
        """SPEC §1: indices of the dense-MLP layers."""
        return tuple(i for i, t in enumerate(self.mlp_layer_types) if t == DENSE)

    @property
    def moe_layers(self) -> tuple[int, ...]:
        """SPEC §1: indices of the MoE ("sparse") layers."""
        return tuple(i for i, t in enumerate(self.mlp_layer_types) if t == SPARSE)

    @property
    def full_indexer_layers(self) -> tuple[int, ...]:
        """SPEC §8: DSA layers that run their own indexer (and own indexer weights)."""
        return tuple(i for i in self.dsa_layers if self.indexer_types[i] == FULL)

    @property
    def shared_indexer_layers(self) -> tuple[int, ...]:
        """SPEC §8.8: DSA layers that reuse the previous layer's selection."""
        return tuple(i for i in self.dsa_layers if self.indexer_types[i] == SHARED)

    # construction

    @classmethod
    def from_dict(cls, config: Mapping[str, Any], *, strict: bool = False) -> Geometry:
        """SPEC §1: build from a HF config dict, flat or with `text_config`; unknown keys ignored.

        Args:
            config: the parsed config.json (`Glm5NextConfig` with `text_config`, or a flat text
                config).
            strict: refuse to default a shape-defining field (see `_REQUIRED`); absent fields
                otherwise take the transformers defaults, as the reference does.
        """
        text = _text_config(config)
        if strict:
            _require(text)
        kw = {name: text[name] for name in _FIELD_NAMES if name in text}
        if "num_local_experts" in text:
            _merge(kw, "n_routed_experts", "num_local_experts", text["num_local_experts"])
        _merge_linear_attn_config(kw, text.get("linear_attn_config"))
        if kw.get("indexer_types") is None:
            L = kw.get("num_hidden_layers", cls.num_hidden_layers)
            kw["indexer_types"] = _indexer_types_from_config(text, L) if _is_int(L) else None
        return cls(**kw)

    @classmethod
    def from_pretrained(cls, path: str | Path, *, strict: bool = True) -> Geometry:
        """SPEC §1: read `path` (checkpoint directory or its config.json); errors name the file."""
        file = _config_file(Path(path))
        try:
            config = json.loads(file.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ConfigError(f"{file}: not a JSON config ({e})") from e
        except OSError as e:
            raise ConfigError(f"{file}: cannot read ({e.strerror or e})") from e
        try:
            return cls.from_dict(config, strict=strict)
        except ConfigError as e:
            raise ConfigError(f"{file}: {e}") from e

    @classmethod
    def preset(cls, name: str) -> Geometry:
        """SPEC §13 ("tiny") or the released checkpoint ("full"), by name."""
        try:
            return PRESETS[name]
        except (KeyError, TypeError):
            raise _fail("preset", name, f"one of {sorted(PRESETS)}") from None

    def to_dict(self) -> dict[str, Any]:
        """SPEC §1 field names, schedules as lists; `from_dict(g.to_dict()) == g`, JSON-ready."""
        fields = dataclasses.asdict(self).items()
        return {k: list(v) if isinstance(v, tuple) else v for k, v in fields}

    def replace(self, **changes: Any) -> Geometry:
        """SPEC §1: a copy with `changes`, re-validated (schedules are not re-derived)."""
        unknown = sorted(set(changes) - _FIELD_NAMES)
        if unknown:
            raise ConfigError(f"replace: unknown Geometry field(s) {unknown}")
        return dataclasses.replace(self, **changes)


_FIELD_NAMES = frozenset(f.name for f in dataclasses.fields(Geometry))


def _text_config(config: Any) -> Mapping[str, Any]:
    """SPEC §1: `text_config` when present, else the flat top level."""
    if not isinstance(config, Mapping):
        raise _fail("config", type(config).__name__, "a JSON object (dict)")
    text = config.get("text_config")
    if text is None:
        return config
    if not isinstance(text, Mapping):
        raise _fail("text_config", text, "a JSON object (dict)")
    return text


def _require(text: Mapping[str, Any]) -> None:
    """Strict mode: name every shape-defining field the config leaves to a default."""
    lac = text.get("linear_attn_config") or {}

    def present(key: str) -> bool:
        if key.startswith("linear_attn_config."):
            return isinstance(lac, Mapping) and key.split(".", 1)[1] in lac
        return key in text

    missing = [
        f"{field} ({' or '.join(keys)}: expected {kind})"
        for field, (keys, kind) in _REQUIRED.items()
        if not any(present(k) for k in keys)
    ]
    if missing:
        raise ConfigError(
            "missing shape-defining field(s): " + "; ".join(missing)
            + ". strict=True refuses transformers' defaults for these (e.g. its index_kpool is 16, "
            "the released checkpoint's 4); pass strict=False to accept them")


def _merge(kw: dict[str, Any], field: str, source: str, value: Any) -> None:
    """Fill `field` from an alias key; two different values are a conflict, not a precedence."""
    if field in kw and kw[field] != value:
        raise _fail(field, kw[field], f"the same value as {source}={value!r} (both are given)")
    kw[field] = value


def _merge_linear_attn_config(kw: dict[str, Any], lac: Any) -> None:
    """SPEC §1: map `linear_attn_config`; with safe_gate (default true) a null bound is -5.0."""
    if lac is None:
        return
    if not isinstance(lac, Mapping):
        raise _fail("linear_attn_config", lac, "a JSON object (dict)")
    for key, field in _LINEAR_ATTN_KEYS.items():
        if key in lac:
            _merge(kw, field, f"linear_attn_config.{key}", lac[key])
    if lac.get("safe_gate", True) and kw.get("linear_lower_bound", -5.0) is None:
        kw["linear_lower_bound"] = -5.0


def _indexer_types_from_config(text: Mapping[str, Any], L: int) -> tuple[str, ...]:
    """SPEC §1: `index_topk_pattern` if given, else the freq / offset rule."""
    pattern = text.get("index_topk_pattern")
    if pattern is not None:
        types = indexer_types_from_pattern(pattern)
        if len(types) != L:
            raise _fail("index_topk_pattern", pattern,
                        f"one entry per layer ({L}, num_hidden_layers), found {len(types)}")
        return types
    # a null in config.json means "not set", as in transformers' keyword defaults.
    freq = text.get("index_topk_freq")
    freq = _INDEX_TOPK_FREQ if freq is None else freq
    offset = text.get("index_skip_topk_offset")
    offset = _INDEX_SKIP_TOPK_OFFSET if offset is None else offset
    if not _is_int(freq) or freq < 1:
        raise _fail("index_topk_freq", freq, "a positive int")
    if not _is_int(offset):
        raise _fail("index_skip_topk_offset", offset, "an int")
    return indexer_types_from_rule(L, freq, offset)


def _config_file(path: Path) -> Path:
    """Resolve a checkpoint directory to its config.json; a clear error when there is none."""
    file = path / "config.json" if path.is_dir() else path
    if not file.is_file():
        raise ConfigError(f"{file}: no such file (expected a checkpoint directory holding "
                          "config.json, or the path of the config.json itself)")
    return file


# SPEC §13, verbatim: every mechanism at CPU size.
_TINY_TEXT_CONFIG = dict(
    vocab_size=64, hidden_size=32, intermediate_size=64, moe_intermediate_size=16,
    num_hidden_layers=8, num_attention_heads=2, num_key_value_heads=2,
    layer_types=[LINEAR, INDEXED, LINEAR, INDEXED, INDEXED, LINEAR, LINEAR, INDEXED],
    mlp_layer_types=[DENSE, DENSE, SPARSE, SPARSE, SPARSE, SPARSE, SPARSE, SPARSE],
    indexer_types=[FULL, FULL, FULL, FULL, SHARED, FULL, FULL, FULL],
    q_lora_rank=16, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=0, v_head_dim=8,
    index_n_heads=16, index_head_dim=8, index_topk=8, index_kpool=4,
    index_kpool_always_select_tail=True,
    linear_num_heads=2, linear_head_dim=8, linear_conv_kernel_dim=4, linear_lower_bound=-5.0,
    n_routed_experts=8, num_experts_per_tok=2, n_group=2, topk_group=1, n_shared_experts=1,
    routed_scaling_factor=2.5, norm_topk_prob=True, swiglu_limit=10.0,
    hc_mult=4, hc_sinkhorn_iters=20, hc_eps=1e-6, rms_norm_eps=1e-5,
    pad_token_id=0, max_position_embeddings=256,
)

PRESETS: Mapping[str, Geometry] = MappingProxyType({
    "tiny": Geometry.from_dict(_TINY_TEXT_CONFIG, strict=True),
    # the released checkpoint differs from transformers' defaults only in the pool size.
    "full": Geometry(index_kpool=4),
})
