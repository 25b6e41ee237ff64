"""`glmgate cost` and gate/costmodel.py: the predicted per-GPU memory, traffic, FLOPs and communication.

The weight and state counts are held against real arrays: a tiny model written and loaded by the
repo (oracle.checkpoint.write_random, impl.weights.to_torch in bf16), its NVFP4 copy on disk, and the
cache a real oracle forward leaves. The parallel plan is held to properties (what stays whole, what
halves), never to numbers copied from the implementation.
"""
from __future__ import annotations

import dataclasses
import json
from fractions import Fraction

import numpy as np
import pytest

from gate import cli
from gate import cost_layers as cl
from gate import costmodel as cm
from oracle.config import Geometry

FULL, TINY = Geometry.preset("full"), Geometry.preset("tiny")
# the terms no plan splits: whole on every GPU (module docstring of gate/costmodel.py)
WHOLE = ("embeddings", "lm_head", "mhc", "norms", "router", "indexer", "mla_latent_cache", "indexer_cache")


def report(g=FULL, tp=1, ep=None, experts="bf16", batch=1, context=4096, **kw):
    return cm.model_cost(g, cm.Plan.make(g, tp, ep, experts, **kw), batch, context)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from oracle import checkpoint as ock
    d = tmp_path_factory.mktemp("tiny")
    ock.write_random(d, TINY, seed=0)
    return d


def _tensors(obj):
    """(field name, tensor) of every torch tensor field of a weight container."""
    import torch
    return [(f.name, getattr(obj, f.name)) for f in dataclasses.fields(obj)
            if isinstance(getattr(obj, f.name), torch.Tensor)]


def _layer_bytes(lw, out: dict) -> None:
    """Add a loaded layer's tensors into out[term], sorted by where the model keeps them."""
    def put(key, t):
        out[key] = out.get(key, 0) + t.nbytes
    for name in ("input_layernorm", "post_attention_layernorm"):
        put("norms", getattr(lw, name))
    for hc in (lw.attn_hc, lw.ffn_hc):
        for _, t in _tensors(hc):
            put("mhc", t)
    if lw.kda is not None:
        for name, t in _tensors(lw.kda):
            put("kda_conv" if name == "conv1d" else "kda_proj", t)
    for part, key in ((lw.mla, "mla_proj"), (lw.indexer, "indexer")):
        for _, t in _tensors(part) if part is not None else ():
            put(key, t)
    moe = type(lw.mlp).__name__ == "MoEWeights"
    for name, t in _tensors(lw.mlp):
        if not moe:
            put("dense_mlp", t)
        elif name in ("router", "e_score_correction_bias"):
            put("router", t)
        else:
            put("shared_expert" if name.startswith("shared_") else "experts", t)


def test_tiny_weight_bytes_equal_the_tensors_of_a_tiny_model(tiny_dir):
    """Per mechanism, the predicted bytes at TP = 1 equal the bytes of the bf16 tensors the repo loads
    (impl.weights.to_torch keeps its declared float32 fields in float32)."""
    import torch

    from impl.weights import to_torch
    from oracle import checkpoint as ock
    w = to_torch(ock.load(tiny_dir), dtype=torch.bfloat16)
    real = {"embeddings": w.embed_tokens.nbytes, "lm_head": w.lm_head.nbytes, "norms": w.norm.nbytes}
    for lw in w.layers:
        _layer_bytes(lw, real)
    predicted = {k: c.weights for k, c in report(TINY).terms.items() if c.weights}
    assert predicted == real
    assert sum(predicted.values()) == report(TINY).total.weights


def test_tiny_nvfp4_expert_bytes_equal_the_stored_tensors(tmp_path):
    """NVFP4 routed experts: the bytes of every expert leaf a compressed-tensors checkpoint stores
    (packed codes, e4m3 block scales, one float32 global scale per gate / up / down)."""
    from oracle import checkpoint as ock
    ock.write_random(tmp_path, TINY, seed=0, nvfp4="compressed-tensors")
    raw = (tmp_path / "model.safetensors").read_bytes()
    header = json.loads(raw[8:8 + int.from_bytes(raw[:8], "little")])     # the file's own byte ranges
    stored = {k: v for k, v in header.items() if ".mlp.experts." in k}
    assert {v["dtype"] for v in stored.values()} == {"U8", "F8_E4M3", "F32"}
    nbytes = sum(v["data_offsets"][1] - v["data_offsets"][0] for v in stored.values())
    assert report(TINY, experts="nvfp4").terms["experts"].weights == nbytes


def test_tiny_state_and_cache_bytes_equal_a_real_forwards_cache(tiny_dir):
    """After a forward of T tokens, B rows: every cache array of the oracle's HybridState at its
    serving dtype (SPEC §10: KDA recurrent float32, conv window, latent, indexer rows and pooled keys bf16)."""
    from oracle import model as om
    from oracle.types import KDAState
    B, T = 2, 13
    _, state = om.load(tiny_dir).forward(np.arange(1, 1 + B * T).reshape(B, T) % 60 + 1)
    real = 0
    for e in state.layers:
        for name, a in zip(e._fields, e):
            if a is not None:
                real += a.size * (4 if isinstance(e, KDAState) and name == "recurrent" else 2)
    r = report(TINY, batch=B, context=T)
    assert r.memory()["states_and_caches"] == real


def test_nvfp4_experts_are_the_format_ratio_of_bf16():
    """4.5 bits a weight against 16, plus three float32 global scales an expert (gate, up, down)."""
    I, D = FULL.moe_intermediate_size, FULL.hidden_size
    bf, nv = report(experts="bf16").terms["experts"], report(experts="nvfp4").terms["experts"]
    assert Fraction(nv.weights, bf.weights) == Fraction(9, 32) + Fraction(3 * 4, 3 * I * D * 2)
    assert nv.weights == FULL.n_routed_experts * len(FULL.moe_layers) * (3 * I * D * 9 // 16 + 3 * 4)


@pytest.mark.parametrize("g", [FULL, TINY], ids=["full", "tiny"])
def test_tp2_weights_lie_strictly_between_half_and_all_of_tp1(g):
    one, two = report(g, tp=1).total.weights, report(g, tp=2).total.weights
    assert one / 2 < two < one


@pytest.mark.parametrize("g", [FULL, TINY], ids=["full", "tiny"])
def test_exactly_the_replicated_terms_stay_whole_across_tp(g):
    """Whole terms are identical at TP 1, 2, 4; everything else is its whole part plus the split part
    over TP; the replicated total at TP = 2 is the whole terms' plus the whole parts of KDA and MLA."""
    r1 = report(g, tp=1)
    for tp in (2, 4) if g is FULL else (2,):
        r = report(g, tp=tp)
        for key, c1 in r1.terms.items():
            c = r.terms[key]
            assert c.replicated == c1.replicated, key
            if key in WHOLE:
                assert (c.weights, c.state, c.cache) == (c1.weights, c1.state, c1.cache), key
            else:
                assert c.weights - c.replicated == (c1.weights - c1.replicated) / tp, key
                assert c.state == c1.state / tp, key
    split = {k for k, c in r1.terms.items() if c.weights - c.replicated}
    assert split == {"kda_proj", "kda_conv", "mla_proj", "dense_mlp", "shared_expert", "experts"} & set(r1.terms)
    partly = {k for k, c in r1.terms.items() if 0 < c.replicated < c.weights}
    assert partly == {"kda_proj", "mla_proj"}


def test_vocab_parallel_splits_embeddings_and_lm_head_only():
    whole, split = report(tp=8), report(tp=8, vocab_parallel=True)
    for key in whole.terms:
        if key in ("embeddings", "lm_head"):
            assert split.terms[key].weights * 8 == whole.terms[key].weights and split.terms[key].replicated == 0
            assert split.terms[key].collectives == 1
        else:
            assert split.terms[key] == whole.terms[key], key


def test_experts_divide_by_ep_and_the_rest_by_tp():
    base = report(tp=2, ep=2)
    wide = report(tp=2, ep=8)                 # attention data-parallel x4, experts over 8 GPUs
    for key, c in base.terms.items():
        if key == "experts":
            assert wide.terms[key].weights * 4 == c.weights
            assert wide.terms[key].collectives == 2 * len(FULL.moe_layers)     # all-to-all dispatch + combine
        else:
            assert wide.terms[key].weights == c.weights, key
    # EP 1 under TP 8: each expert split by width over the 8 GPUs, same bytes as EP 8 in bf16
    assert report(tp=8, ep=1).terms["experts"].weights == report(tp=8, ep=8).terms["experts"].weights


@pytest.mark.parametrize("g", [FULL, TINY], ids=["full", "tiny"])
def test_cache_bytes_scale_linearly_with_context_and_batch(g):
    def states(batch, context):
        return report(g, tp=2, batch=batch, context=context).memory()["states_and_caches"]
    T = 1000
    step = states(1, 2 * T) - states(1, T)
    assert step > 0 and states(1, 3 * T) - states(1, 2 * T) == step
    assert states(5, T) == 5 * states(1, T)
    per_token = report(g).total.cache
    dsa, full_idx = len(g.dsa_layers), len(g.full_indexer_layers)
    # a full layer caches its packed row (2 d_i + 1) and its pooled-key row (d_i + 1) per token, bf16
    assert per_token == (dsa * (g.kv_lora_rank + g.qk_rope_head_dim) * 2
                         + full_idx * ((2 * g.index_head_dim + 1) + (g.index_head_dim + 1)) * 2)
    assert report(g).terms["kda_state"].state == len(g.kda_layers) * g.linear_num_heads * g.linear_head_dim ** 2 * 4


def test_only_the_indexer_grows_with_context_once_attention_is_sparse():
    """Past index_topk + kpool tokens MLA attends a fixed budget; the indexer still scores every pool
    (read back from its pooled-key cache): the only per-token FLOPs that keep growing."""
    k = FULL.index_kpool
    T = 4 * (FULL.index_topk + k)
    a, b = report(context=T).terms, report(context=2 * T).terms
    grew = {key for key in a if b[key].flops != a[key].flops}
    assert grew == {"indexer_cache"}
    assert b["indexer_cache"].flops > a["indexer_cache"].flops
    assert b["mla_latent_cache"].hbm == a["mla_latent_cache"].hbm


def test_layer_predictions_for_the_lead():
    from gate.bench_layer import _kinds
    one, two = cl.layer_predictions("full", 1), cl.layer_predictions("full", 2)
    assert list(one) == list(_kinds(FULL)) == list(cl.layer_kinds(FULL))
    for kind in one:
        p1, p2 = one[kind], two[kind]
        assert p1["weights_bytes"] / 2 < p2["weights_bytes"] < p1["weights_bytes"], kind
        assert p1["comm_bytes"] == 0 and p2["comm_bytes"] > 0
        assert p1["roofline_s"] == max(p1["bytes_per_step"] / cm.H200_HBM_BW,
                                       p1["flops_per_token"] / cm.H200_BF16_FLOPS)
        assert p2["comm_s"] == p2["comm_bytes"] / cm.NVLINK_BW
    slow = cl.layer_predictions("full", 2, hbm_bw=cm.H200_HBM_BW / 2)
    assert all(slow[k]["hbm_s"] == 2 * two[k]["hbm_s"] for k in two)


@pytest.mark.parametrize("argv, field", [
    (["--tp", "3"], "num_attention_heads"),
    (["--ep", "7"], "n_routed_experts"),
    (["--geometry", "huge"], "preset"),
    (["--tp", "0"], "tp"),
], ids=["tp-not-dividing-heads", "ep-not-dividing-experts", "unknown-geometry", "tp-zero"])
def test_bad_plans_exit_2_naming_the_field(argv, field, capsys):
    assert cli.main(["cost", *argv]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert field in err and "Traceback" not in err


def test_kda_heads_are_named_when_only_they_do_not_split():
    g = FULL.replace(linear_num_heads=6)
    with pytest.raises(cm.CostError, match="linear_num_heads=6"):
        cm.Plan.make(g, tp=4)


def test_a_config_dir_without_config_json_is_a_usage_error(tmp_path, capsys):
    assert cli.main(["cost", "--config", str(tmp_path)]) == cli.EXIT_USAGE
    assert "config.json" in capsys.readouterr().err


def test_json_has_every_mechanism_and_the_memory_equation(tmp_path, capsys):
    out = tmp_path / "cost.json"
    assert cli.main(["cost", "--geometry", "full", "--tp", "8", "--experts", "nvfp4", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert set(doc["mechanisms"]) == set(cm.MECHANISMS)
    assert doc["prediction"] is True and doc["plan"]["tp"] == 8 and doc["plan"]["experts"] == "nvfp4"
    m = doc["memory"]
    assert m["total"] == m["weights"] + m["batch"] * (m["state_per_seq"] + m["context"] * m["cache_per_token"]) \
        + m["activations"]
    assert sum(v["weights_bytes"] for v in doc["mechanisms"].values()) == doc["totals"]["weights_bytes"]
    printed = capsys.readouterr().out
    for key in cm.MECHANISMS:
        assert key in printed
    assert "per-GPU memory = weights + B x (states + T x cache per token) + activations" in printed
    assert "PREDICTIONS" in printed


def test_measured_side_holds_the_nvfp4_layer_as_deployed():
    """gate/cost_measure.py: the NVFP4-only layer computes what bench_layer's layer computes (its bf16
    masters replaced by one-element stand-ins), and tensor_bytes counts each storage once."""
    import torch

    from gate.bench_layer import _kinds, random_layer
    from gate.cost_measure import nvfp4_only, tensor_bytes
    from impl.model import decoder_layer
    from oracle.config import Geometry

    g = Geometry.preset("tiny")
    i = _kinds(g)["kda+sparse"]
    full = random_layer(g, i, "cpu", torch.float32)
    lean = nvfp4_only(full)
    X = torch.randn(1, 5, g.hc_mult, g.hidden_size, generator=torch.Generator().manual_seed(0))
    m = torch.ones(1, 5, dtype=torch.bool)
    assert torch.equal(decoder_layer(lean, g, X, m, None, None)[0], decoder_layer(full, g, X, m, None, None)[0])
    masters = full.mlp.gate_up_proj.numel() + full.mlp.down_proj.numel()
    assert tensor_bytes(full) - tensor_bytes(lean) == 4 * (masters - 2)
    t = torch.zeros(8)
    assert tensor_bytes([t, t[:4], (t,)]) == 32
