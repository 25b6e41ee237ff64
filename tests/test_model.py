"""impl.model (Triton backend, float32, CPU interpreter) against the float64 oracle decoder.

Bounds: the model's kernel_replacement contracts (invariants/contracts.d/model.toml), for logits and for
every returned cache array (KDA recurrent / conv, DSA latent / index_rows): model.forward (one call against
the oracle's same call), model.continuation (prefill, decodes, a continuation), model.token_decode.

The geometry is preset "tiny" cut to its first 5 layers (KDA, full DSA, KDA, full DSA, shared DSA;
dense and sparse MLPs) with 4 Sinkhorn iterations: every mechanism and the shared-layer hand-off stay,
and the interpreter (one mHC program per token) keeps the file under the time budget.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

import impl.model as im
import oracle.model as om
from impl.state import HybridState
from invariants.contracts import assert_contract
from oracle.checkpoint import write_random
from oracle.config import Geometry
from oracle.types import KDAState


def _geometry() -> Geometry:
    g = Geometry.preset("tiny")
    n = 5
    return dataclasses.replace(g, num_hidden_layers=n, layer_types=g.layer_types[:n],
                               mlp_layer_types=g.mlp_layer_types[:n], indexer_types=g.indexer_types[:n],
                               hc_sinkhorn_iters=4)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = write_random(tmp_path_factory.mktemp("ckpt"), _geometry(), seed=3)
    return om.load(d), im.load(d), im.load(d, backend="torch")


# rel-L2 as the model contracts measure it
def _rel(x, ref) -> float:
    x = x.detach().double().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x, np.float64)
    ref = np.asarray(ref, np.float64)
    assert x.shape == ref.shape, (x.shape, ref.shape)
    den = np.linalg.norm(ref)
    return float(np.linalg.norm(x - ref) / (den if den > 0 else 1.0))


def _check(name, got, base, ref, path="forward", quantity="logits"):
    v = assert_contract("model", path, quantity, "kernel_replacement", "float32", got, ref, base, name)
    print(f"{name}: impl {v.value:.3e}  torch {v.baseline_err:.3e}")          # shown with pytest -s


def _check_state(tag, got, base, ref, path="forward"):
    assert isinstance(got, HybridState) and got.seq_len == ref.seq_len
    assert got.layer_types == ref.layer_types
    for i, (g, b, r) in enumerate(zip(got.layers, base.layers, ref.layers)):
        assert type(g) is type(r), f"{tag} layer {i}: {type(g).__name__} vs {type(r).__name__}"
        if isinstance(r, KDAState):
            assert g.recurrent.dtype == torch.float32
            _check(f"{tag} L{i} recurrent", g.recurrent, b.recurrent, r.recurrent, path, "kda_recurrent")
            _check(f"{tag} L{i} conv", g.conv, b.conv, r.conv, path, "kda_conv")
        else:
            _check(f"{tag} L{i} latent", g.latent, b.latent, r.latent, path, "dsa_latent")
            assert (g.index_rows is None) == (r.index_rows is None)
            if r.index_rows is not None:
                _check(f"{tag} L{i} index_rows", g.index_rows, b.index_rows, r.index_rows, path, "index_rows")


def test_effective_mask_rule():
    m = np.array([[0, 1, 1, 1], [1, 1, 1, 1]])
    assert im.effective_mask(None, 2, 3).all()
    assert im.effective_mask(np.ones((2, 5)), 2, 3).all()
    assert im.effective_mask(m, 2, 1).all()                       # S == 1: never padding
    assert im.effective_mask(m, 2, 4).tolist() == m.astype(bool).tolist()
    assert im.effective_mask(m, 2, 2).tolist() == [[True, True], [True, True]]
    with pytest.raises(ValueError):
        im.effective_mask(m, 2, 5)


@pytest.mark.parametrize("B,S", [(1, 13), (1, 70)])
def test_one_forward(models, B, S):
    o, m, t = models
    ids = np.random.default_rng(S).integers(0, o.geometry.vocab_size, (B, S))
    ref, rs = o.forward(ids)
    got, gs = m.forward(ids)
    base, bs = t.forward(torch.as_tensor(ids))
    assert got.dtype == torch.float32 and tuple(got.shape) == (B, S, o.geometry.vocab_size)
    _check(f"logits S={S}", got, base, ref)
    _check_state(f"S={S}", gs, bs, rs)


def test_prefill_decode_continue(models):
    o, m, t = models
    ids = np.random.default_rng(7).integers(0, o.geometry.vocab_size, (1, 17))
    ref, rs = o.forward(ids)
    parts = [(0, 9), (9, 10), (10, 11), (11, 12), (12, 17)]
    outs = {}
    for name, mod in (("impl", m), ("torch", t)):
        state, logits = None, []
        for a, b in parts:
            before = None if state is None else state.snapshot()
            lg, new = mod.forward(ids[:, a:b], state=state)
            if before is not None:
                assert state.equal(before), "forward mutated its input state"
                assert new is not state
            logits.append(lg)
            state = new
        outs[name] = (torch.cat(logits, 1), state)
    assert outs["impl"][1].seq_len == 17
    _check("logits 9+1+1+1+5", outs["impl"][0], outs["torch"][0], ref, "continuation")
    _check_state("9+1+1+1+5", outs["impl"][1], outs["torch"][1], rs, "continuation")


def test_left_padded_batch(models):
    o, m, t = models
    B, S = 2, 10
    ids = np.random.default_rng(11).integers(0, o.geometry.vocab_size, (B, S))
    mask = np.ones((B, S), dtype=np.int64)
    mask[0, :4] = 0
    ids[0, :4] = 0
    ref, rs = o.forward(ids, attention_mask=mask)
    got, gs = m.forward(ids, attention_mask=mask)
    base, bs = t.forward(ids, attention_mask=torch.as_tensor(mask))
    real = mask.astype(bool)
    _check("padded logits (real rows)", got[torch.as_tensor(real)], base[torch.as_tensor(real)], ref[real])
    _check_state("padded", gs, bs, rs)
    # one decode step after the padded prefill: the padding lives in the caches
    nxt = np.array([[5], [6]])
    mask2 = np.concatenate([mask, np.ones((B, 1), np.int64)], 1)
    ref2, rs2 = o.forward(nxt, attention_mask=mask2, state=rs)
    got2, gs2 = m.forward(nxt, attention_mask=mask2, state=gs)
    base2, bs2 = t.forward(nxt, attention_mask=mask2, state=bs)
    _check("padded decode logits", got2, base2, ref2, "token_decode")
    _check_state("padded decode", gs2, bs2, rs2, "token_decode")


def test_state_copies_and_bytes(models):
    o, m, _ = models
    ids = np.random.default_rng(5).integers(0, o.geometry.vocab_size, (1, 6))
    _, s = m.forward(ids)
    snap = s.snapshot()
    assert snap.equal(s)
    snap.layers[0].recurrent.add_(1.0)
    assert not snap.equal(s)
    back = HybridState.deserialize(s.serialize())
    assert back.equal(s)
    with pytest.raises(ValueError):
        s.truncate(3)                                            # KDA layers cannot be cut
