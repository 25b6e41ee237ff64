"""The whole-decoder oracle on its own (oracle.model, oracle.state, oracle.checkpoint), no reference:
HybridState copies are independent, serialization is exact, truncation refuses KDA layers and is exact
on DSA-only models, and every split of one token stream (prefill + decodes, chunked prefill,
continuation across the KDA chunk boundary) equals one forward.

The checkpoints are random safetensors files written here from `checkpoint.expected_shapes` (the
on-disk names of SPEC §11), so this file needs neither torch nor transformers.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from invariants.contracts import float64_tolerance
from oracle import checkpoint as ock
from oracle import model as om
from oracle.config import FULL, INDEXED, SHARED, SPARSE, Geometry
from oracle.state import HybridState, StateError
from oracle.types import DSACache, KDAState

TINY = Geometry.preset("tiny")
# exact algebra (the KDA chunk form vs its recurrence, reordered sums) leaves ~1e-15 relative
SAME_PATH = float64_tolerance("same_math")


def _write_checkpoint(directory, g: Geometry, seed: int):
    return ock.write_random(directory, g, seed)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return om.load(_write_checkpoint(tmp_path_factory.mktemp("tiny"), TINY, 0))


DSA_ONLY = TINY.replace(layer_types=(INDEXED,) * 4, mlp_layer_types=("dense",) + (SPARSE,) * 3,
                        indexer_types=(FULL, SHARED, FULL, FULL), num_hidden_layers=4)


@pytest.fixture(scope="module")
def dsa_model(tmp_path_factory):
    return om.load(_write_checkpoint(tmp_path_factory.mktemp("dsa"), DSA_ONLY, 1))


def _ids(seed, shape):
    return np.random.default_rng(seed).integers(1, TINY.vocab_size, shape)


def _close(what, got, want, bound=SAME_PATH):
    rel = np.linalg.norm(got - want) / np.linalg.norm(want)
    assert rel <= bound, f"{what}: rel-L2 {rel:.3g} > {bound:g}"


def _run(model, ids, splits, state=None):
    outs, start = [], 0
    for n in splits:
        o, state = model.forward(ids[:, start:start + n], state=state)
        outs.append(o)
        start += n
    assert start == ids.shape[1]
    return np.concatenate(outs, axis=1), state


# ----------------------------------------------------------------------------- paths


@pytest.mark.parametrize("splits", [[13, 1, 1, 1, 1, 1], [1] * 9, [5, 17, 1], [64, 6], [63, 2, 5]],
                         ids=lambda s: "+".join(map(str, s)))
def test_every_split_equals_one_forward(model, splits):
    ids = _ids(sum(splits), (2, sum(splits)))
    full, full_state = model.forward(ids)
    got, state = _run(model, ids, splits)
    _close(f"splits {splits}", got, full)
    assert state.seq_len == full_state.seq_len == ids.shape[1]
    for i, (a, b) in enumerate(zip(state.layers, full_state.layers)):
        for field, x, y in zip(a._fields, a, b):
            if x is not None:
                _close(f"layer {i} {field} after splits {splits}", x, y)


def test_state_shapes_follow_the_geometry(model):
    _, state = model.forward(_ids(0, (3, 10)))
    g = TINY
    for i in g.kda_layers:
        assert isinstance(state[i], KDAState)
        assert state[i].recurrent.shape == (3, g.linear_num_heads, g.linear_head_dim, g.linear_head_dim)
        assert state[i].conv.shape == (3, g.conv_dim, g.linear_conv_kernel_dim)
    for i in g.dsa_layers:
        assert isinstance(state[i], DSACache)
        assert state[i].latent.shape == (3, 10, g.kv_lora_rank)
        if i in g.shared_indexer_layers:
            assert state[i].index_rows is None
        else:
            assert state[i].index_rows.shape == (3, 10, 2 * g.index_head_dim + 1)
    assert state.seq_len == 10 and state.batch == 3


def test_all_ones_mask_is_no_mask_and_padding_is_remembered(model):
    ids = _ids(1, (2, 12))
    a, _ = model.forward(ids)
    b, _ = model.forward(ids, attention_mask=np.ones((2, 12)))
    np.testing.assert_array_equal(a, b)
    mask = np.ones((2, 12))
    mask[1, :4] = 0
    padded, state = model.forward(ids, attention_mask=mask)
    alone, alone_state = model.forward(ids[1:, 4:])
    _close("left-padded row vs unpadded", padded[1:, 4:], alone)
    nxt = _ids(2, (2, 1))
    step, _ = model.forward(nxt, attention_mask=np.ones((2, 13)), state=state)
    step_alone, _ = model.forward(nxt[1:], state=alone_state)
    _close("decode after a left-padded prefill", step[1:], step_alone)


def test_forward_refuses_a_mismatched_state(model, dsa_model):
    _, state = model.forward(_ids(3, (2, 5)))
    with pytest.raises(StateError, match="batch"):
        model.forward(_ids(3, (3, 1)), state=state)
    with pytest.raises(StateError, match="layer types"):
        dsa_model.forward(_ids(3, (2, 1)), state=state)


# ----------------------------------------------------------------------------- HybridState


def test_forward_never_mutates_the_state_it_is_given(model):
    _, state = model.forward(_ids(4, (2, 9)))
    before = state.snapshot()
    model.forward(_ids(5, (2, 3)), state=state)
    assert state.equal(before)


def test_snapshot_and_fork_are_independent(model):
    ids = _ids(6, (2, 15))
    _, state = model.forward(ids[:, :10])
    snap, fork = state.snapshot(), state.fork()
    assert snap.equal(state) and fork.equal(state)
    # in-place edits of every array of the fork (and of the original) never reach the others
    for e in fork.layers:
        for a in e:
            if a is not None:
                a += 1.0
    assert not fork.equal(state) and snap.equal(state)
    for e in state.layers:
        for a in e:
            if a is not None:
                a *= 2.0
    assert not snap.equal(state)
    # continuing the snapshot equals never having forked
    _, fresh = model.forward(ids[:, :10])
    cont_snap, _ = model.forward(ids[:, 10:], state=snap)
    cont_fresh, _ = model.forward(ids[:, 10:], state=fresh)
    np.testing.assert_array_equal(cont_snap, cont_fresh)


def test_serialize_round_trip_is_exact(model):
    ids = _ids(7, (2, 20))
    _, state = model.forward(ids[:, :12])
    data = state.serialize()
    assert isinstance(data, bytes)
    back = HybridState.deserialize(data)
    assert back.equal(state) and back.seq_len == 12 and back.layer_types == TINY.layer_types
    a, _ = model.forward(ids[:, 12:], state=state)
    b, _ = model.forward(ids[:, 12:], state=back)
    np.testing.assert_array_equal(a, b)
    empty = HybridState.empty(TINY)
    assert HybridState.deserialize(empty.serialize()).equal(empty)
    with pytest.raises(StateError):
        HybridState.deserialize(b"not a state")


def test_a_snapshot_persisted_in_bf16_restores_rounded_kda_states_and_every_other_array_exactly(model):
    import ml_dtypes
    _, state = model.forward(_ids(9, (2, 11)))
    back = HybridState.deserialize(state.serialize("bfloat16"))
    for e, b in zip(state.layers, back.layers):
        if e.__class__.__name__ == "KDAState":
            want = e.recurrent.astype(ml_dtypes.bfloat16).astype(np.float64)
            np.testing.assert_array_equal(b.recurrent, want)
            assert np.abs(b.recurrent - e.recurrent).max() > 0          # a real rounding, not a copy
            assert np.all(np.abs(b.recurrent - e.recurrent) <= 2.0 ** -8 * np.abs(e.recurrent))
            np.testing.assert_array_equal(b.conv, e.conv)
        else:
            assert all(np.array_equal(x, y) for x, y in zip(e, b) if x is not None)
    with pytest.raises(StateError, match=r"kda_dtype='float16', expected one of \(None, 'bfloat16'\)"):
        state.serialize("float16")


def test_truncate_refuses_kda_layers(model):
    _, state = model.forward(_ids(8, (1, 10)))
    with pytest.raises(StateError, match=r"layer 0 .*KDA.*cannot be truncated"):
        state.truncate(7)
    assert state.truncate(10).equal(state)
    with pytest.raises(StateError, match="n_tokens"):
        state.truncate(11)


def test_truncate_is_rollback_on_dsa_layers(dsa_model):
    ids = _ids(9, (2, 14))
    spec = _ids(10, (2, 4))
    _, state = dsa_model.forward(ids[:, :10])
    _, speculated = dsa_model.forward(spec, state=state)
    rolled = speculated.truncate(10)
    assert rolled.equal(state) and rolled.seq_len == 10
    got, _ = dsa_model.forward(ids[:, 10:], state=rolled)
    want, _ = dsa_model.forward(ids)
    _close("speculate 4, roll back, continue vs one forward", got, want[:, 10:])


# ----------------------------------------------------------------------------- checkpoint


def test_expected_shapes_module_names_group_the_renames():
    disk, module = ock.expected_shapes(TINY), ock.expected_shapes(TINY, on_disk=False)
    E, I, D = TINY.n_routed_experts, TINY.moe_intermediate_size, TINY.hidden_size
    assert module["layers.2.mlp.experts.gate_up_proj"] == (E, 2 * I, D)
    assert disk["layers.2.mlp.experts.7.up_proj.weight"] == (I, D)
    assert module["layers.0.self_attn.conv1d.weight"] == (TINY.conv_dim, 1, TINY.linear_conv_kernel_dim)
    assert "layers.0.hc_attn_fn" in disk and "layers.0.attn_hc.fn" in module
    assert "layers.4.self_attn.indexer.wk.weight" not in disk      # the shared layer has no indexer


def test_missing_checkpoint_files_are_named(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"text_config": TINY.to_dict()}))
    (tmp_path / "pytorch_model.bin").write_bytes(b"\x80\x04")
    with pytest.raises(ock.CheckpointError, match="pickle"):
        om.load(tmp_path)
