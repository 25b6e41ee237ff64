"""oracle.config: Geometry from HF configs, schedules, presets and validation (SPEC §1, §13)."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oracle.config import (
    PRESETS, ConfigError, Geometry, indexer_types_from_pattern, indexer_types_from_rule,
)

FULL_DSA = (3, 7, 11, 15, 19, 23, 27, 31, 35, 39, 43)


def tiny_dict(**changes):
    """The SPEC §13 text_config as a flat dict, with `changes` applied."""
    return {**PRESETS["tiny"].to_dict(), **changes}


def without(d, *keys):
    return {k: v for k, v in d.items() if k not in keys}


def released_text_config():
    """A text_config in the released layout: linear_attn_config, legacy names, extra keys."""
    d = without(PRESETS["full"].to_dict(), "linear_num_heads", "linear_head_dim",
                "linear_conv_kernel_dim", "linear_lower_bound")
    d["layer_types"] = [
        "deepseek_sparse_attention" if i % 4 == 3 else "linear_attention" for i in range(45)]
    d["linear_attn_config"] = {
        "kda_layers": [i for i in range(45) if i % 4 != 3], "num_heads": 64, "head_dim": 128,
        "short_conv_kernel_size": 4, "gate_lower_bound": -5.0,
    }
    d.update(model_type="glm5_next_text", qk_head_dim=256, topk_method="noaux_tc", mhc=True)
    return d


def test_full():
    g = Geometry.preset("full")
    assert g.num_hidden_layers == 45 and len(g.layer_types) == 45
    assert g.dsa_layers == FULL_DSA
    assert g.kda_layers == tuple(i for i in range(45) if i not in FULL_DSA)
    assert g.dense_layers == (0, 1, 2) and g.moe_layers == tuple(range(3, 45))
    assert g.full_indexer_layers == FULL_DSA and g.shared_indexer_layers == ()
    assert (g.kda_dim, g.conv_dim) == (8192, 24576)
    assert (g.index_kpool, g.index_slots, g.index_topk_pools) == (4, 2051, 512)
    assert (g.qk_head_dim, g.mla_q_dim, g.kv_b_dim, g.index_q_dim) == (256, 16384, 32768, 4096)
    assert (g.hc_rows, g.hc_dim, g.shared_intermediate_size) == (24, 16384, 2048)
    assert g == Geometry().replace(index_kpool=4)


def test_transformers_defaults():
    g = Geometry()
    assert (g.index_kpool, g.index_slots) == (16, 2063)
    assert g.linear_lower_bound == -5.0 and g.pad_token_id == 154820
    assert set(g.indexer_types) == {"full"}


def test_tiny():
    g = Geometry.preset("tiny")
    assert (g.num_hidden_layers, g.hidden_size, g.vocab_size) == (8, 32, 64)
    assert (g.index_n_heads, g.pad_token_id, g.max_position_embeddings) == (16, 0, 256)
    assert g.kda_layers == (0, 2, 5, 6) and g.dsa_layers == (1, 3, 4, 7)
    assert g.dense_layers == (0, 1) and g.moe_layers == (2, 3, 4, 5, 6, 7)
    assert g.full_indexer_layers == (1, 3, 7) and g.shared_indexer_layers == (4,)
    assert (g.n_routed_experts, g.n_group, g.topk_group, g.num_experts_per_tok) == (8, 2, 1, 2)
    assert (g.index_topk, g.index_kpool, g.index_slots) == (8, 4, 11)


def test_from_dict_flat_equals_nested():
    flat = tiny_dict()
    nested = {"model_type": "glm5_next", "tie_word_embeddings": True, "text_config": flat,
              "vision_config": {"depth": 1, "hidden_size": 16}}
    assert Geometry.from_dict(flat) == Geometry.from_dict(nested) == PRESETS["tiny"]


def test_from_dict_released_layout():
    g = Geometry.from_dict({"text_config": released_text_config()}, strict=True)
    assert g == PRESETS["full"]


def test_from_dict_num_local_experts_alias():
    d = without(tiny_dict(num_local_experts=8), "n_routed_experts")
    assert Geometry.from_dict(d, strict=True).n_routed_experts == 8


@pytest.mark.parametrize("lac, bound", [
    ({"gate_lower_bound": -3.0}, -3.0),
    ({}, -5.0),
    ({"gate_lower_bound": None}, -5.0),
    ({"gate_lower_bound": None, "safe_gate": True}, -5.0),
    ({"gate_lower_bound": None, "safe_gate": False}, None),
], ids=["explicit bound", "no bound key", "null bound, safe_gate default", "null bound, safe_gate",
        "null bound, no safe_gate -> softplus"])
def test_from_dict_linear_attn_config(lac, bound):
    d = without(tiny_dict(), "linear_num_heads", "linear_head_dim", "linear_conv_kernel_dim",
                "linear_lower_bound")
    d["linear_attn_config"] = {"num_heads": 4, "head_dim": 16, "short_conv_kernel_size": 3,
                               "kda_layers": [0, 2], "full_attn_layers": [1], **lac}
    g = Geometry.from_dict(d, strict=True)
    assert (g.linear_num_heads, g.linear_head_dim, g.linear_conv_kernel_dim) == (4, 16, 3)
    assert g.linear_lower_bound == bound
    assert (g.kda_dim, g.conv_dim) == (64, 192)


def test_from_dict_flat_null_bound_is_softplus():
    assert Geometry.from_dict(tiny_dict(linear_lower_bound=None)).linear_lower_bound is None


@pytest.mark.parametrize("pattern", [
    "FFFFSFFF", list("FFFFSFFF"), ["full"] * 4 + ["shared"] + ["full"] * 3,
], ids=["string", "list of letters", "list of names"])
def test_from_dict_index_topk_pattern(pattern):
    g = Geometry.from_dict(without(tiny_dict(index_topk_pattern=pattern), "indexer_types"))
    assert g == PRESETS["tiny"]


def test_from_dict_explicit_indexer_types_beat_pattern():
    g = Geometry.from_dict(tiny_dict(index_topk_pattern="SSSSSSSS"))
    assert g.shared_indexer_layers == (4,)


def test_indexer_types_from_rule():
    assert indexer_types_from_rule(4) == ("full",) * 4
    # max(i - 2 + 1, 0) = 0, 0, 1, 2, 3, 4 -> full iff even
    assert indexer_types_from_rule(6, freq=2, offset=2) == (
        "full", "full", "shared", "full", "shared", "full")
    assert indexer_types_from_rule(5, freq=3, offset=0) == (
        "shared", "shared", "full", "shared", "shared")


def test_from_dict_freq_offset_rule():
    d = without(tiny_dict(layer_types=["indexed_attention"] * 8, index_topk_freq=2,
                          index_skip_topk_offset=1), "indexer_types")
    g = Geometry.from_dict(d)
    assert g.indexer_types == indexer_types_from_rule(8, 2, 1)
    assert g.full_indexer_layers == (0, 2, 4, 6) and g.shared_indexer_layers == (1, 3, 5, 7)


def test_shared_indexer_type_on_kda_layer_is_inert():
    # freq 2, offset 2 marks layers 2, 4, 6 "shared"; of those only DSA layer 4 shares.
    d = without(tiny_dict(index_topk_freq=2), "indexer_types")
    g = Geometry.from_dict(d)
    assert g.indexer_types[2] == g.indexer_types[6] == "shared"
    assert g.full_indexer_layers == (1, 3, 7) and g.shared_indexer_layers == (4,)


def test_from_dict_default_schedules():
    d = without(tiny_dict(), "layer_types", "mlp_layer_types", "indexer_types")
    g = Geometry.from_dict(d)
    assert g.dsa_layers == (3, 7) and g.dense_layers == (0, 1, 2)
    assert set(g.indexer_types) == {"full"}
    assert Geometry(num_hidden_layers=2, mlp_layer_types=None).dense_layers == (0, 1)


@pytest.mark.parametrize("legacy", ["full_attention", "deepseek_sparse_attention"])
def test_layer_type_renames(legacy):
    types = [legacy if t == "indexed_attention" else t for t in PRESETS["tiny"].layer_types]
    assert Geometry.from_dict(tiny_dict(layer_types=types)) == PRESETS["tiny"]
    assert PRESETS["tiny"].replace(layer_types=types) == PRESETS["tiny"]


def test_from_dict_absent_kpool_takes_transformers_default():
    g = Geometry.from_dict(without(tiny_dict(index_topk=32), "index_kpool"))
    assert (g.index_kpool, g.index_slots) == (16, 47)


def test_from_dict_ignores_unknown_keys():
    assert Geometry.from_dict(tiny_dict(rope_theta=1e6, initializer_range=0.02)) == PRESETS["tiny"]


def test_from_pretrained(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"text_config": tiny_dict()}))
    assert Geometry.from_pretrained(tmp_path) == PRESETS["tiny"]
    assert Geometry.from_pretrained(str(tmp_path / "config.json")) == PRESETS["tiny"]


def test_from_pretrained_non_strict(tmp_path):
    config = without(tiny_dict(index_topk=16), "index_kpool")
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert Geometry.from_pretrained(tmp_path, strict=False).index_kpool == 16


@pytest.mark.parametrize("name", ["tiny", "full"])
def test_round_trip(name):
    g = PRESETS[name]
    assert Geometry.from_dict(json.loads(json.dumps(g.to_dict())), strict=True) == g
    assert hash(g) == hash(Geometry.from_dict(g.to_dict()))


def test_replace_revalidates():
    assert PRESETS["tiny"].replace(index_topk=16).index_slots == 19
    with pytest.raises(ConfigError, match="index_topk=6"):
        PRESETS["tiny"].replace(index_topk=6)


def test_floats_given_as_ints_become_floats():
    g = Geometry.from_dict(tiny_dict(swiglu_limit=10))
    assert type(g.swiglu_limit) is float and g == PRESETS["tiny"]


# bad configs: id reads like the error; the message must name the field (a regex on it).
def bad(case, config, message):
    """One row of the bad-config table: the id reads like the error, `message` is a regex."""
    return pytest.param(config, message, id=case)


def pattern_dict(pattern):
    return without(tiny_dict(index_topk_pattern=pattern), "indexer_types")


TINY = tiny_dict()
ALL_DSA = ["indexed_attention"] * 8

BAD_DICTS = [
    bad("strict: hidden_size missing", without(TINY, "hidden_size"),
        r"hidden_size \(hidden_size: expected int\)"),
    bad("strict: index_kpool missing", without(TINY, "index_kpool"), r"index_kpool .*strict=False"),
    bad("strict: linear_num_heads missing", without(TINY, "linear_num_heads"),
        r"linear_num_heads \(linear_num_heads or linear_attn_config\.num_heads"),
    bad("strict: n_routed_experts missing", without(TINY, "n_routed_experts"),
        r"n_routed_experts \(n_routed_experts or num_local_experts"),
    bad("strict: every missing field named", {"text_config": {"hidden_size": 32}},
        r"vocab_size.*num_hidden_layers.*index_topk.*index_kpool.*hc_mult"),
    bad("layer_types has 7 entries for 8 layers", tiny_dict(layer_types=["linear_attention"] * 7),
        r"layer_types has 7 entries: expected 8, one per layer \(num_hidden_layers=8\)"),
    bad("mlp_layer_types has 9 entries for 8 layers", tiny_dict(mlp_layer_types=["dense"] * 9),
        r"mlp_layer_types has 9 entries: expected 8"),
    bad("indexer_types[1] is a bad value", tiny_dict(indexer_types=["full", "F"] + ["full"] * 6),
        r"indexer_types\[1\]='F': expected one of \['full', 'shared'\]"),
    bad("layer_types[0] is a bad value", tiny_dict(layer_types=["mamba"] + ALL_DSA[1:]),
        r"layer_types\[0\]='mamba'"),
    bad("layer_types is a string", tiny_dict(layer_types="linear_attention"),
        r"layer_types='linear_attention'"),
    bad("shared layer 3 follows KDA layer 2",
        tiny_dict(indexer_types=["full"] * 3 + ["shared"] + ["full"] * 4),
        r"indexer_types\[3\]='shared'.*layer 2 is a linear_attention layer"),
    bad("shared layer 5 follows shared layer 4",
        tiny_dict(layer_types=ALL_DSA, indexer_types=["full"] * 4 + ["shared"] * 2 + ["full"] * 2),
        r"indexer_types\[5\]='shared'.*layer 4 is a \"shared\" indexed_attention layer"),
    bad("shared layer 0 has no layer before it",
        tiny_dict(layer_types=ALL_DSA, indexer_types=["shared"] + ["full"] * 7),
        r"indexer_types\[0\]='shared'.*no layer before layer 0"),
    bad("index_topk 10 not divisible by index_kpool 4", tiny_dict(index_topk=10),
        r"index_topk=10: expected a multiple of index_kpool=4"),
    bad("index_kpool 0", tiny_dict(index_kpool=0), r"index_kpool=0: expected a positive int"),
    bad("num_key_value_heads 1 != num_attention_heads 2", tiny_dict(num_key_value_heads=1),
        r"num_key_value_heads=1: expected num_attention_heads=2"),
    bad("qk_rope_head_dim 64 != 0", tiny_dict(qk_rope_head_dim=64),
        r"qk_rope_head_dim=64: expected 0"),
    bad("q_lora_rank null", tiny_dict(q_lora_rank=None), r"q_lora_rank=None: expected an int"),
    bad("hidden_size is a string", tiny_dict(hidden_size="32"),
        r"hidden_size='32': expected an int"),
    bad("hidden_size is a bool", tiny_dict(hidden_size=True), r"hidden_size=True: expected an int"),
    bad("num_hidden_layers is a float", tiny_dict(num_hidden_layers=8.0),
        r"num_hidden_layers=8\.0: expected an int"),
    bad("attention_bias is 0", tiny_dict(attention_bias=0),
        r"attention_bias=0: expected true or false"),
    bad("rms_norm_eps is a string", tiny_dict(rms_norm_eps="1e-5"), r"rms_norm_eps='1e-5'"),
    bad("rms_norm_eps 0", tiny_dict(rms_norm_eps=0.0),
        r"rms_norm_eps=0\.0: expected a positive number"),
    bad("swiglu_limit nan", tiny_dict(swiglu_limit=float("nan")), r"swiglu_limit=nan"),
    bad("linear_lower_bound positive", tiny_dict(linear_lower_bound=5.0),
        r"linear_lower_bound=5\.0: expected a negative number"),
    bad("hidden_act gelu", tiny_dict(hidden_act="gelu"), r"hidden_act='gelu': expected \"silu\""),
    bad("n_routed_experts 9 not divisible by n_group 2", tiny_dict(n_routed_experts=9),
        r"n_routed_experts=9: expected a multiple of n_group=2"),
    bad("one expert per group", tiny_dict(n_routed_experts=2, num_experts_per_tok=1),
        r"n_routed_experts=2: expected >= 2 experts per group"),
    bad("topk_group 3 > n_group 2", tiny_dict(topk_group=3),
        r"topk_group=3: expected <= n_group=2"),
    bad("num_experts_per_tok 5 > 1 group of 4", tiny_dict(num_experts_per_tok=5),
        r"num_experts_per_tok=5: expected <= topk_group \* n_routed_experts / n_group = 4"),
    bad("pad_token_id outside the vocabulary", tiny_dict(pad_token_id=64), r"pad_token_id=64"),
    bad("index_topk_pattern with a bad letter", pattern_dict("FFFFXFFF"),
        r"index_topk_pattern='FFFFXFFF'"),
    bad("index_topk_pattern too short", pattern_dict("FFF"),
        r"index_topk_pattern='FFF': expected one entry per layer \(8"),
    bad("index_topk_freq 0", without(tiny_dict(index_topk_freq=0), "indexer_types"),
        r"index_topk_freq=0"),
    bad("linear_attn_config disagrees with linear_num_heads",
        tiny_dict(linear_attn_config={"num_heads": 4}),
        r"linear_num_heads=2: expected the same value as linear_attn_config\.num_heads=4"),
    bad("num_local_experts disagrees with n_routed_experts", tiny_dict(num_local_experts=16),
        r"n_routed_experts=8: expected the same value as num_local_experts=16"),
    bad("text_config is a list", {"text_config": [1, 2]}, r"text_config=\[1, 2\]"),
    bad("config is a list", [1, 2], r"config='list'"),
]


@pytest.mark.parametrize("config, message", BAD_DICTS)
def test_from_dict_rejects(config, message):
    with pytest.raises(ConfigError, match=message):
        Geometry.from_dict(config, strict=True)


def test_from_dict_rejects_unknown_preset():
    with pytest.raises(ConfigError, match=r"preset='huge': expected one of \['full', 'tiny'\]"):
        Geometry.preset("huge")


def test_replace_rejects_unknown_field():
    with pytest.raises(ConfigError, match=r"unknown Geometry field\(s\) \['hidden'\]"):
        PRESETS["tiny"].replace(hidden=3)


def test_from_pretrained_rejects_missing_file(tmp_path):
    with pytest.raises(ConfigError, match=r"config\.json: no such file"):
        Geometry.from_pretrained(tmp_path)
    with pytest.raises(ConfigError, match=r"nope\.json: no such file"):
        Geometry.from_pretrained(tmp_path / "nope.json")


def test_from_pretrained_rejects_bad_json(tmp_path):
    (tmp_path / "config.json").write_text("{'hidden_size': 32,")
    with pytest.raises(ConfigError, match=r"config\.json: not a JSON config"):
        Geometry.from_pretrained(tmp_path)


def test_from_pretrained_names_file_and_missing_field(tmp_path):
    file = tmp_path / "config.json"
    file.write_text(json.dumps({"text_config": without(tiny_dict(), "index_kpool")}))
    message = rf"^{file}: missing .*index_kpool \(index_kpool: expected int\)"
    with pytest.raises(ConfigError, match=message):
        Geometry.from_pretrained(tmp_path)


def test_from_pretrained_names_file_and_bad_value(tmp_path):
    file = tmp_path / "config.json"
    file.write_text(json.dumps({"text_config": tiny_dict(index_topk=10)}))
    with pytest.raises(ConfigError, match=rf"^{file}: index_topk=10"):
        Geometry.from_pretrained(file)


def test_indexer_types_from_pattern_rejects_non_sequence():
    with pytest.raises(ConfigError, match="index_topk_pattern=3"):
        indexer_types_from_pattern(3)


@st.composite
def geometries(draw):
    """Valid small geometries with arbitrary schedules (shared only where SPEC §8.8 allows)."""
    L = draw(st.integers(1, 10))
    layers = draw(st.lists(st.sampled_from(["linear_attention", "indexed_attention"]),
                           min_size=L, max_size=L))
    indexer = ["full"] * L
    for i in range(1, L):
        if layers[i - 1] == layers[i] == "indexed_attention" and indexer[i - 1] == "full":
            indexer[i] = draw(st.sampled_from(["full", "shared"]))
    kpool = draw(st.integers(1, 8))
    return Geometry(
        num_hidden_layers=L, layer_types=layers, indexer_types=indexer,
        mlp_layer_types=draw(st.lists(st.sampled_from(["dense", "sparse"]), min_size=L,
                                      max_size=L)),
        index_kpool=kpool, index_topk=kpool * draw(st.integers(1, 8)),
        linear_lower_bound=draw(st.none() | st.floats(-10, -0.5)),
        pad_token_id=draw(st.none() | st.integers(0, 10)),
    )


@settings(max_examples=60, deadline=None)
@given(geometries())
def test_round_trip_any_geometry(g):
    assert Geometry.from_dict(json.loads(json.dumps(g.to_dict())), strict=True) == g
    assert set(g.kda_layers) | set(g.dsa_layers) == set(range(g.num_hidden_layers))
    assert set(g.shared_indexer_layers) <= {i + 1 for i in g.full_indexer_layers}


def test_a_config_without_pad_token_id_pads_with_token_0():
    """pad_token_id null is legal (SPEC §1); left padding then carries id 0 (masked). The model checks'
    prompts used the null itself and crashed every model.sharded example with left padding."""
    from invariants.model_checks import ModelCase, prompt
    g = Geometry.from_dict(tiny_dict(pad_token_id=None))
    assert g.pad_id == 0 and Geometry.from_dict(tiny_dict(pad_token_id=5)).pad_id == 5
    ids, mask = prompt(ModelCase("tiny", 2, 0, 2, 6, (0, 3), (6,), 0, 1), g)
    assert (ids[1, :3] == 0).all() and (mask[1, :3] == 0).all() and (mask[:, 3:] == 1).all()
    assert (ids[0] > 0).all() and (ids[1, 3:] > 0).all()


def test_the_serving_programs_run_on_the_geometry_given():
    """serving.state_machine ran every drawn program on the preset "tiny" whatever `glmgate run --config`
    gave: a config sweep's verdicts on it judged the same model 13 times. A drawn program now names its
    geometry (ServingCase.base), and its engines' states have that geometry's shapes."""
    import torch
    from hypothesis import HealthCheck
    from impl import registry
    from invariants import serving_checks as svc
    from invariants.matrix import BY_NAME, evaluate
    from invariants.target import Target
    conv3 = Geometry.from_dict(tiny_dict(linear_conv_kernel_dim=3))
    drawn = []

    @settings(max_examples=1, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(svc.serving_cases(conv3))
    def draw(case):
        drawn.append(case)
    draw()
    assert svc.geometry(drawn[0].base).linear_conv_kernel_dim == 3
    assert svc.geometry().linear_conv_kernel_dim == 4 and svc.ServingCase(()).base == "tiny"
    case = svc.ServingCase((["admit", [3, 1, 4]], ["prefill", 0, 3], ["decode", 0, 5]), drawn[0].base)
    cand, base = (Target(registry.get(n), "cpu", torch.float32) for n in ("triton", "torch"))
    verdicts = evaluate(BY_NAME["serving.state_machine"], case, cand, base)
    assert verdicts and all(v.ok for v in verdicts), [v.detail for v in verdicts if not v.ok]
    conv = [c for c in BY_NAME["serving.state_machine"].run(case, cand, base) if c.where.endswith(".conv")]
    assert conv and all(c.reference.shape[-1] == 3 for c in conv), [c.reference.shape for c in conv]


def test_serving_refuses_a_vocab_smaller_than_its_drawn_token_ids():
    from invariants import serving_checks as svc
    from invariants.model_checks import base_name
    with pytest.raises(ValueError, match="vocab_size >= 64"):
        svc.geometry(base_name(Geometry.from_dict(tiny_dict(vocab_size=32))))


def test_a_geometry_too_large_for_this_machine_is_refused_with_its_numbers(monkeypatch):
    """The released geometry cut to its first four layers holds 9.5 G parameters: building its float64
    checkpoint would be killed for memory, which reports nothing. The whole-decoder, sharded and serving
    checks refuse it first, naming the sizes."""
    from invariants import model_checks as mc
    from invariants import serving_checks as svc
    monkeypatch.setattr(mc, "available_memory", lambda: 64 * 2 ** 30)
    with pytest.raises(MemoryError, match=r"9\.54 G parameters, about 142 GiB .* 64 GiB available"):
        mc.oracle_weights.__wrapped__("full", 4, 0)
    with pytest.raises(MemoryError, match="serving.state_machine"):
        svc._checkpoint.__wrapped__("full")
    mc.require_memory(mc.geometry_of("tiny", 5), "tiny")        # 0.1 M parameters: no refusal
    monkeypatch.setattr(mc, "available_memory", lambda: None)   # unknown (not Linux): nothing refused
    mc.require_memory(mc.geometry_of("full", 4), "full")
