"""The sharded decoder's own properties (impl/sharded.py, impl/sharded_pool.py): clear errors for a
geometry that does not divide, world 1 is the unsharded decoder bit for bit, every weight and state
channel lands on exactly one rank, and a rank that raises, dies or hangs is an error naming it, never a
hang. model.sharded (tests/test_matrix.py) holds world 2 to world 1 and to the oracle; its mutants
(tests/test_framework_mutants.py) show it can fail."""
from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest
import torch

from impl import sharded as sh
from impl import sharded_pool as sp
from impl.model import TorchDecoder, to_torch
from invariants import sharded_checks as sc
from invariants.model_checks import state_arrays
from oracle import checkpoint as ock
from oracle.config import Geometry

TINY = Geometry.preset("tiny")


@pytest.mark.parametrize("world", [0, -1, 1.5, True, "2"])
def test_a_world_that_is_no_positive_integer_is_refused(world):
    with pytest.raises(sh.ShardingError, match=r"world: .* expected an integer >= 1"):
        sh.check_world(sc.sharded_geometry("tiny", 2), world)


@pytest.mark.parametrize("field,value,world,what", [
    ("linear_num_heads", 3, 2, r"KDA heads: 3 \(linear_num_heads\) is not divisible by world = 2"),
    ("num_attention_heads", 2, 4, r"MLA heads: 2 \(num_attention_heads\) is not divisible by world = 4"),
    ("intermediate_size", 66, 4, r"dense MLP's width F: 66 \(intermediate_size\) is not divisible by world = 4"),
    ("n_routed_experts", 6, 4, r"routed experts: 6 \(n_routed_experts\) is not divisible by world = 4"),
    ("moe_intermediate_size", 6, 4, r"shared expert's width F: 6 \(moe_intermediate_size \* n_shared_experts\)"),
])
def test_a_dimension_that_does_not_divide_is_named_with_its_config_field(field, value, world, what):
    g = sc.sharded_geometry("tiny", world)
    g = g.replace(**{field: value}, **({"num_key_value_heads": value} if field == "num_attention_heads" else {}))
    with pytest.raises(sh.ShardingError, match=what):
        sh.check_world(g, world)


def test_too_few_experts_per_rank_for_the_top_k_is_refused():
    g = sc.sharded_geometry("tiny", 8).replace(n_routed_experts=16, num_experts_per_tok=4, n_group=1, topk_group=1)
    with pytest.raises(sh.ShardingError, match=r"routed experts per rank: 2 \(n_routed_experts / world = 16 / 8\) "
                                              r"is below 4"):
        sh.check_world(g, 8)


def test_a_cuda_world_beyond_the_devices_is_a_clear_error():
    n = torch.cuda.device_count()
    with pytest.raises(sh.ShardingError, match=f"world: {n + 1} ranks on CUDA need {n + 1} devices .* this host has {n}"):
        sp.check_devices(n + 1, "cuda")


@pytest.mark.parametrize("world", [2, 4])
def test_every_channel_weight_and_expert_lands_on_exactly_one_rank(world):
    """The plan's slices over all ranks cover each head's rows, conv channels, gate values, experts and
    F columns exactly once; replicated tensors are whole on every rank; o_proj's bias on rank 0 only."""
    w = to_torch(ock.load(sc.checkpoint("tiny", world, 0)), "cpu", torch.float64)
    shards = [sh.shard_weights(w, r, world) for r in range(world)]
    kda, mla, moe, dense = (lambda s: s.layers[0].kda), (lambda s: s.layers[1].mla), (lambda s: s.layers[1].mlp), \
        (lambda s: s.layers[0].mlp)
    H, K = kda(w).num_heads, kda(w).head_dim
    ch = torch.cat([sh.ShardedOps().kda_channels(H, K, r, world) for r in range(world)])
    assert sorted(ch.tolist()) == list(range(3 * H * K))
    for name in ("q_proj", "conv1d", "f_b_proj", "dt_bias", "A_log", "b_proj", "g_b_proj"):
        got = torch.cat([getattr(kda(s), name) for s in shards])
        want = getattr(kda(w), name)[ch] if name == "conv1d" else getattr(kda(w), name)
        assert torch.equal(got, want), name
    assert torch.equal(torch.cat([kda(s).o_proj for s in shards], 1), kda(w).o_proj)
    for name in ("f_a_proj", "g_a_proj", "o_norm"):
        assert all(getattr(kda(s), name) is getattr(kda(w), name) for s in shards), name
    assert torch.equal(torch.cat([mla(s).kv_b_proj for s in shards]), mla(w).kv_b_proj)
    assert sum(mla(s).num_heads for s in shards) == mla(w).num_heads
    assert [mla(s).o_bias is not None for s in shards] == [True] + [False] * (world - 1)
    assert all(s.layers[1].indexer is w.layers[1].indexer for s in shards)
    assert torch.equal(torch.cat([moe(s).local.gate_up_proj for s in shards]), moe(w).gate_up_proj)
    assert [moe(s).first for s in shards] == [r * moe(w).num_experts // world for r in range(world)]
    assert torch.equal(torch.cat([moe(s).local.shared_down_proj for s in shards], 1), moe(w).shared_down_proj)
    assert torch.equal(torch.cat([dense(s).gate_proj for s in shards]), dense(w).gate_proj)
    assert all(torch.equal(moe(s).router.router, moe(w).router) for s in shards)


@pytest.mark.parametrize("world", [2, 4])
def test_every_nvfp4_expert_lands_on_one_rank_with_its_own_scales(world):
    """An NVFP4 checkpoint's routed experts: over the ranks, every code, block scale, global decode scale
    (gate's and up's apart) and the dequantized copy land exactly once, each rank's in its experts'
    order; the replicated router holds no expert codes."""
    w = to_torch(ock.load(sc.checkpoint("tiny", world, 0, "modelopt")), "cpu", torch.float64)
    nv = w.layers[1].mlp.nvfp4
    assert nv is not None and nv.gate_up.global_decode.shape[-1] == 2
    shards = [sh.shard_weights(w, r, world).layers[1].mlp for r in range(world)]
    for part in ("gate_up", "down"):
        for field in ("packed", "block_scale", "global_decode"):
            got = torch.cat([getattr(getattr(s.local.nvfp4, part), field).view(torch.uint8)
                             if field == "block_scale" else getattr(getattr(s.local.nvfp4, part), field)
                             for s in shards])
            want = getattr(getattr(nv, part), field)
            assert torch.equal(got, want.view(torch.uint8) if field == "block_scale" else want), (part, field)
    assert torch.equal(torch.cat([s.local.gate_up_proj for s in shards]), w.layers[1].mlp.gate_up_proj)
    assert all(s.router.nvfp4 is None for s in shards)


def test_world_one_is_the_unsharded_decoder_bit_for_bit():
    """No process group, world 1: the sharded composition IS impl.model's, logits and state."""
    w = to_torch(ock.load(sc.checkpoint("tiny", 2, 1)), "cpu", torch.float32)
    ids = np.random.default_rng(0).integers(1, 64, (2, 9))
    with torch.no_grad():
        ref = TorchDecoder("torch").forward(w, ids)
        dec = sh.ShardedDecoder("torch")
        got = dec.forward(sh.shard_weights(w, 0, 1, dec.plan), ids, sh.shard_state(None, 0, 1))
    assert torch.equal(got[0], ref[0])
    a, b = state_arrays(got[1]), state_arrays(ref[1])
    assert all(np.array_equal(a[q], b[q]) for q in b)
    assert [k for k, _ in dec.log] == ["selection", "experts"]


@pytest.mark.parametrize("index", [0, 1], ids=["kda+dense", "dsa+moe"])
def test_one_layer_of_each_kind_over_two_ranks_is_the_unsharded_layer(index):
    """SPEC §5 one layer alone (torch baseline, world 2): within model.sharded's world-1 bound, the
    gathered cache too, and every rank's streams bitwise alike."""
    from impl.state import HybridState
    d = sc.checkpoint("tiny", 2, 0)
    g = sc.sharded_geometry("tiny", 2)
    X = torch.as_tensor(np.random.default_rng(index).normal(size=(2, 9, g.hc_mult, g.hidden_size)), dtype=torch.float32)
    m = sp.load(d, 2, backend="torch")
    got, cache = m.layer(index, X)
    w = to_torch(ock.load(d), "cpu", torch.float32)
    with torch.no_grad():
        ref, ref_cache, _ = TorchDecoder("torch").decoder_layer(w.layers[index], g, X, torch.ones(2, 9, dtype=torch.bool),
                                                                None, None)
    assert float((got - ref).norm() / ref.norm()) < 2e-6
    for a, b in zip(cache.layers[0], ref_cache):
        assert float((a - b).norm() / b.norm()) < 2e-6
    assert all(np.array_equal(r["X"], m.ranks[0]["X"]) for r in m.ranks)
    assert HybridState.deserialize(m.ranks[1]["state"]).layer_types == (g.layer_types[index],)


def _packed_pair(backend: str, sharded: str):
    """(whole impl.model forward_packed, the same over world 2 ranks running `sharded`): two documents
    packed flat, one fresh, one continuing from its own 5-token prefix state."""
    from impl import model as im
    d = sc.checkpoint("tiny", 2, 0)
    w = to_torch(ock.load(d), "cpu", torch.float32)
    whole = im.Model(w, backend)
    _, prefix = whole.forward(torch.tensor([[5, 9, 13, 2, 7]]))
    ids, cu = torch.tensor([3, 8, 1, 4, 6, 10, 12]), torch.tensor([0, 3, 7])
    m = sp.load(d, 2, backend=sharded)
    return whole.forward_packed(ids, cu, [None, prefix]), m.forward_packed(ids, cu, [None, prefix]), m


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_a_packed_step_over_two_ranks_is_the_unsharded_packed_step(backend):
    """SERVING.md P4 sharded: the packed step over world 2 against impl.model's forward_packed of the same
    implementation: logits and every document's gathered state within model.sharded's world-1 bound;
    every rank's logits bitwise alike."""
    (ref_logits, ref_states), (logits, states), m = _packed_pair(backend, backend)
    assert float((logits - ref_logits).norm() / ref_logits.norm()) < 2e-6
    for got, ref in zip(states, ref_states):
        a, b = state_arrays(got), state_arrays(ref)
        assert set(a) == set(b)
        for q in b:
            den = float(np.linalg.norm(b[q])) or 1.0
            assert float(np.linalg.norm(a[q] - b[q])) / den < 2e-6, q
    assert all(np.array_equal(r["logits"], m.ranks[0]["logits"]) for r in m.ranks)


def test_a_sharding_bug_shows_in_the_packed_step():
    """The same comparison with the ranks running a planted bug (the attention sublayer not all-reduced)."""
    (ref_logits, _), (logits, _), _ = _packed_pair("torch", "mutant:model_sharded_attention_not_reduced")
    assert float((logits - ref_logits).norm() / ref_logits.norm()) > 1e-3


@pytest.fixture
def one_rank():
    p = sp.Pool(1, "cpu")
    yield p
    p.close(force=True)


def _forward(backend: str, world: int = 2) -> dict:
    return {"op": "forward", "checkpoint": sc.checkpoint("tiny", world, 0), "backend": backend, "dtype": "float32",
            "ids": np.ones((1, 3), dtype=np.int64), "mask": None, "state": None}


def test_a_rank_that_raises_is_an_error_with_its_traceback_and_ends_the_pool(one_rank):
    with pytest.raises(sp.ShardedWorkerError, match=r"(?s)task 'forward': rank 0 of 1 raised:\nTraceback .*"
                                                    r"unknown implementation 'no-such-backend'"):
        one_rank.call(_forward("no-such-backend"))
    assert one_rank.closed and not any(p.is_alive() for p in one_rank.procs)
    with pytest.raises(sp.ShardedWorkerError, match="shut down"):
        one_rank.call(_forward("torch"))


def test_a_rank_that_dies_is_an_error_naming_it_not_a_hang(one_rank):
    assert one_rank.call(_forward("torch"))[0]["logits"].shape == (1, 3, 64)
    os.kill(one_rank.procs[0].pid, signal.SIGKILL)
    t0 = time.monotonic()
    with pytest.raises(sp.ShardedWorkerError, match=r"rank 0 of 1 died \(exit code -9\) without an answer"):
        one_rank.call(_forward("torch"))
    assert time.monotonic() - t0 < 10


def test_a_rank_that_does_not_answer_in_time_is_an_error_and_the_pool_is_stopped(one_rank):
    with pytest.raises(sp.ShardedWorkerError, match=r"rank\(s\) \[0\] of 1 gave no answer within 0 s"):
        one_rank.call(_forward("torch"), timeout=0.01)
    assert one_rank.closed and not any(p.is_alive() for p in one_rank.procs)


@pytest.mark.slow
@pytest.mark.skipif(bool(os.environ.get("CI")), reason="world 4 spawns 4 ranks on CI's 2 cores (~20 s): "
                                                      "run locally, or on CUDA where model.sharded draws it")
def test_world_four_matches_world_one_and_every_rank_agrees():
    """world 4 on the 4-head geometry, torch baseline: within model.sharded's world-1 bound, ranks bitwise alike."""
    d = sc.checkpoint("tiny", 4, 0)
    ids = np.random.default_rng(1).integers(1, 64, (2, 9))
    m = sp.load(d, 4, backend="torch")
    lg, st = m.forward(ids)
    lg2, st2 = m.forward(ids[:, :2], None, st)
    with torch.no_grad():
        w = to_torch(ock.load(d), "cpu", torch.float32)
        ref, ref_st = TorchDecoder("torch").forward(w, ids)
        ref2, ref_st2 = TorchDecoder("torch").forward(w, ids[:, :2], ref_st)
    for a, b in ((lg, ref), (lg2, ref2)):
        assert float((a - b).norm() / b.norm()) < 1e-6
    a, b = state_arrays(st2), state_arrays(ref_st2)
    for q in b:
        assert np.linalg.norm(a[q] - b[q]) <= 1e-6 * np.linalg.norm(b[q]), q
    from impl.state import HybridState
    first = [m.ranks[0]["logits"], state_arrays(HybridState.deserialize(m.ranks[0]["state"]))]
    for r in m.ranks[1:]:
        assert np.array_equal(r["logits"], first[0])
        arrays = state_arrays(HybridState.deserialize(r["state"]))
        assert all(np.array_equal(arrays[q], first[1][q]) for q in first[1])


def test_on_cuda_with_fewer_devices_than_ranks_the_check_is_not_run_saying_why(monkeypatch):
    from impl import registry
    from invariants.engine import run_check
    from invariants.matrix import BY_NAME
    from invariants.target import Target
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    cand, base = (Target(registry.get(n), "cuda", torch.float32) for n in ("torch", "torch"))
    r = run_check(BY_NAME["model.sharded"], TINY, cand, base, "ci", max_examples=1)
    assert r.status == "not run", r.message
    assert "world 2 on CUDA needs 2 devices (rank r on cuda:r), this host has 1" in r.message


def _packed_verdicts(monkeypatch=None, wrong_doc=None):
    """model.sharded's verdicts on a two-document prompt (rows of 8 and 5 real tokens); wrong_doc: the
    sharded packed steps' logits of that document moved by 1e-3 of their size (the ranks' answers kept)."""
    from impl import registry
    from invariants.matrix import BY_NAME, evaluate
    from invariants.target import Target
    if wrong_doc is not None:
        inner = sp.ShardedModel.forward_packed

        def forward_packed(self, ids, cu, states):
            lg, new = inner(self, ids, cu, states)
            c = [int(x) for x in cu]
            lg = lg.clone()
            lg[c[wrong_doc]:c[wrong_doc + 1]] *= 1.001
            return lg, new
        monkeypatch.setattr(sp.ShardedModel, "forward_packed", forward_packed)
    cand, base = (Target(registry.get(n), "cpu", torch.float32) for n in ("triton", "torch"))
    case = sc.ShardedCase("tiny", 2, 0, 2, 8, (0, 3), (4, 4), 1, 2)
    return [v for v in evaluate(BY_NAME["model.sharded"], case, cand, base)
            if v.contract.path == "sharded_packed"]


def test_each_packed_document_is_held_to_the_oracle_and_a_wrong_one_fails(monkeypatch):
    """The packed path against the oracle per document (sharded_packed): logits and every state quantity of
    both documents at the prefill and the decode step, the decisions of both tie-aware; all within the
    contracts. One document's logits moved by 1e-3 of their size break its own logits verdicts only."""
    good = _packed_verdicts()
    seen = {(v.contract.quantity, v.detail.split(":")[0]) for v in good}
    for d in (0, 1):
        for step in ("prefill", "decode"):
            assert {("logits", f"document {d} {step}"), ("kda_recurrent", f"document {d} {step}"),
                    ("dsa_latent", f"document {d} {step}")} <= seen, seen
        assert ("selection", f"document {d}") in seen and ("expert_ids", f"document {d}") in seen
    assert all(v.ok for v in good), [v for v in good if not v.ok]
    bad = [v for v in _packed_verdicts(monkeypatch, wrong_doc=1) if not v.ok]
    assert bad and {(v.contract.quantity, v.detail.split(":")[0].rsplit(" ", 1)[0]) for v in bad} == {
        ("logits", "document 1")}
