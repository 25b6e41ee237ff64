"""The DSA pooled-key cache (issue 14): oracle.dsa.pooled_rows (the definition), impl.dsa.pooled_rows
(dsa_pool_append_kernel: appends the pools a call completes), impl.dsa.pool_keys_cached / index_pooled
(dsa_pool_read_kernel: the selection reads K̄ back instead of pooling again), and the state operations that
cut the cache (truncate, row, serialize).

K̄ is held to the dsa.pool_keys.kbar[kernel_unit] contract against the float64 oracle; flags, member tokens,
validity and anchors are integers and booleans: equal. What the design promises bitwise is asserted bitwise:
a cache appended in any cuts equals the cache pooled whole, and a selection over the cache equals the one
that pools again (scores, candidates, indices).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from impl import dsa as idsa
from impl.graph import simulated_capture
from impl.state import HybridState as TorchState
from invariants.contracts import assert_contract
from oracle import dsa as odsa
from oracle.state import HybridState
from oracle.types import DSACache
from tests.test_dsa_pool import CASES, packed_rows, t32


def _case(B, T, K, kpool, pads, holes, dtype=torch.float32):
    rng = np.random.default_rng(T * 7 + K)
    rows = t32(packed_rows(rng, B, T, K, pads, holes)).to(dtype)
    ape = rng.standard_normal((kpool, K))
    return rows, ape


@pytest.mark.parametrize("case", CASES, ids=lambda v: str(v))
def test_the_oracles_definition_cut_at_n_is_the_cache_of_the_first_n_tokens(case):
    """Append-only by definition: the pooled rows of T tokens, cut at n, are those of the first n tokens
    (left padding, an all-pad row, mask holes, P_k 1 / 3 / 4): what makes truncate and row exact."""
    B, T, K, kpool, pads, holes = case
    rows, ape = _case(*case)
    whole = odsa.pooled_rows(rows.double().numpy(), ape, kpool)
    assert whole.shape == (B, T, K + 1)
    for n in range(T + 1):
        np.testing.assert_array_equal(odsa.pooled_rows(rows[:, :n].double().numpy(), ape, kpool), whole[:, :n],
                                      err_msg=f"cut at {n}")


@pytest.mark.parametrize("case", CASES, ids=lambda v: str(v))
def test_the_oracles_pooled_rows_hold_the_pool_keys_at_each_complete_pools_last_member(case):
    B, T, K, kpool, pads, holes = case
    rows, ape = _case(*case)
    kbar, member_idx, pool_valid, _, _ = odsa.pool_keys(rows.double().numpy(), ape, kpool)
    whole = odsa.pooled_rows(rows.double().numpy(), ape, kpool)
    ends = {(b, int(member_idx[b, p, -1])): p for b, p in zip(*np.nonzero(pool_valid))}
    for b in range(B):
        for t in range(T):
            if (b, t) in ends:
                assert whole[b, t, K] == 1.0
                np.testing.assert_array_equal(whole[b, t, :K], kbar[b, ends[b, t]])
            else:
                assert not whole[b, t].any(), f"row {b} token {t}: no complete pool ends there"


def check_append(case, device="cpu", dtype=torch.float32):
    """The kernel's cache of every token against the oracle's (flags equal, K̄ under the contract), and
    appended after every cut T0 equal to the cache pooled whole, bit for bit."""
    B, T, K, kpool, pads, holes = case
    rows, ape = _case(*case, dtype=dtype)
    rows, ape_t = rows.to(device), t32(ape).to(device)
    whole = idsa.pooled_rows(rows, ape_t, kpool)
    assert whole.dtype == rows.dtype and tuple(whole.shape) == (B, T, K + 1)
    ref = odsa.pooled_rows(rows.double().cpu().numpy(), ape, kpool)
    got = whole.double().cpu().numpy()
    np.testing.assert_array_equal(got[..., K], ref[..., K], err_msg="pool flags")
    assert_contract("dsa", "pool_keys", "kbar", "kernel_unit", "float32" if dtype == torch.float32 else "bfloat16",
                    got[..., :K], ref[..., :K])
    for T0 in range(1, T):
        part = idsa.pooled_rows(rows[:, :T0], ape_t, kpool)
        assert torch.equal(idsa.pooled_rows(rows, ape_t, kpool, part), whole), f"appended after {T0} rows"
        # a decode step after each prefix: one row at a time from T0 on
        step = part
        for t in range(T0 + 1, min(T, T0 + kpool + 1) + 1):
            step = idsa.pooled_rows(rows[:, :t], ape_t, kpool, step)
        assert torch.equal(step, whole[:, :step.shape[1]]), f"decode steps after {T0} rows"


@pytest.mark.parametrize("case", CASES, ids=lambda v: str(v))
def test_the_appended_cache_is_the_oracles_and_any_cut_appends_the_same_bits(case):
    check_append(case)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bf16"])
def test_the_appended_cache_is_the_oracles_compiled(dtype):
    for case in CASES:
        check_append(case, device="cuda", dtype=dtype)


def check_read(case, device="cpu", keep_all=False):
    """pool_keys_cached over the cache gives pool_keys' member tokens, validity, anchors and kept pools,
    and its K̄ where the pool is valid (an invalid pool's K̄ is 0 from the cache: it is no candidate)."""
    B, T, K, kpool, pads, holes = case
    rows, ape = _case(*case)
    rows, ape_t = rows.to(device), t32(ape).to(device)
    pooled = idsa.pooled_rows(rows, ape_t, kpool)
    a = idsa.pool_keys(rows, ape_t, kpool, keep_all=keep_all)
    b = idsa.pool_keys_cached(rows, ape_t, kpool, pooled, keep_all=keep_all)
    for name, x, y in zip(("member_idx", "pool_valid", "first", "kept"), a[1:], b[1:]):
        assert torch.equal(x, y), name
    assert torch.equal(torch.where(a[2][..., None], a[0], 0.0), b[0])


@pytest.mark.parametrize("case", CASES, ids=lambda v: str(v))
@pytest.mark.parametrize("keep_all", [False, True], ids=["kept", "keep_all"])
def test_reading_the_cache_gives_what_pooling_again_gives(case, keep_all):
    check_read(case, keep_all=keep_all)


def _index_inputs(T=29, B=2, pads=(0, 3), holes=(9,), seed=3):
    from tests.test_dsa_mla_kernels import indexer_weights
    rng = np.random.default_rng(seed)
    iw = indexer_weights(rng)
    a = rng.standard_normal((B, T, iw.wk.shape[1]))
    q_lat = rng.standard_normal((B, T, iw.wq_b.shape[1]))
    mask = np.ones((B, T))
    for r, p in enumerate(pads):
        mask[r, :p] = 0.0
    mask[0, list(holes)] = 0.0
    return iw, a, q_lat, mask


@pytest.mark.parametrize("S", [1, 4, 29])
@pytest.mark.parametrize("capture", [False, True], ids=["eager", "capture"])
def test_the_selection_over_the_cache_is_the_one_that_pools_again_bit_for_bit(S, capture):
    """Every field of the Selection equal, exact score ties included (seeded rows with holes and left
    padding), eagerly and on the capture path (every pool kept, nothing read back)."""
    iw, a, q_lat, mask = _index_inputs()
    w = iw.map(t32)
    packed = idsa.index_rows(w, t32(a), t32(mask))
    pooled = idsa.pooled_rows(packed, w.compress_ape, w.kpool)
    args = (w, t32(a[:, -S:]), t32(q_lat[:, -S:]), packed)
    with simulated_capture() if capture else torch.no_grad():
        ref = idsa.index(*args, t32(mask[:, -S:]))
        got = idsa.index_pooled(*args, pooled, t32(mask[:, -S:]))
    for name in ("indices", "scores", "candidate", "pool_first", "kept"):
        assert torch.equal(getattr(got, name), getattr(ref, name)), name
    assert got.k_sel == ref.k_sel


def test_index_with_refuses_a_pooling_function_and_a_cache_together():
    iw, a, q_lat, mask = _index_inputs()
    w = iw.map(t32)
    packed = idsa.index_rows(w, t32(a))
    pooled = idsa.pooled_rows(packed, w.compress_ape, w.kpool)
    with pytest.raises(ValueError, match="^pool: a pooling function and a pooled-key cache"):
        idsa.index_with(w, t32(a), t32(q_lat), packed, pool=idsa.pool_keys_torch, pooled=pooled)


# ----------------------------------------------------------------------------- the state operations


def _state(T=13, kpool=4, K=8):
    rows, ape = _case(2, T, K, kpool, (0, 3), ())
    pooled = odsa.pooled_rows(rows.double().numpy(), ape, kpool)
    latent = np.random.default_rng(0).standard_normal((2, T, 5))
    st = HybridState(("indexed_attention",), [DSACache(latent, rows.double().numpy(), pooled)], T)
    return st, rows, ape


def test_truncate_and_row_keep_exactly_the_pools_complete_within_the_cut():
    st, rows, ape = _state()
    for n in range(st.seq_len + 1):
        cut = st.truncate(n).layers[0]
        np.testing.assert_array_equal(cut.pooled, odsa.pooled_rows(rows[:, :n].double().numpy(), ape, 4))
    # row 1 without its 3 left pads: its own cache, anchored at its first real token
    own = st.row(1, 3).layers[0]
    np.testing.assert_array_equal(own.pooled, odsa.pooled_rows(rows[1:, 3:].double().numpy(), ape, 4))


def test_serialize_round_trips_the_pooled_rows_and_refuses_them_without_index_rows():
    st, _, _ = _state()
    back = HybridState.deserialize(st.serialize())
    assert back.equal(st) and back.layers[0].pooled is not None
    ts = TorchState.from_oracle(st, dtype=torch.float64)
    torch_back = TorchState.deserialize(ts.serialize())
    assert torch_back.equal(ts)
    np.testing.assert_array_equal(torch_back.layers[0].pooled.numpy(), st.layers[0].pooled)
    e = st.layers[0]
    with pytest.raises(ValueError, match="pooled rows"):
        HybridState(st.layer_types, [DSACache(e.latent, None, e.pooled)], st.seq_len)
    with pytest.raises(ValueError, match="pooled rows"):
        HybridState(st.layer_types, [DSACache(e.latent, e.index_rows, e.pooled[:, :-1])], st.seq_len)


# ----------------------------------------------------------------------------- through the MLA sublayer


def _sublayer_steps(mla, cuts=(9, 17, 18, 19, 20)):
    """Prefill cut at `cuts` then decode steps of our MLA sublayer in namespace `mla`: each call's output,
    the final cache and the last selection."""
    from tests.test_dsa_mla_kernels import indexer_weights, mla_weights
    rng = np.random.default_rng(11)
    iw = indexer_weights(rng)
    w = mla_weights(rng)
    T = cuts[-1] + 1
    a = t32(rng.standard_normal((2, T, iw.wk.shape[1])))
    mask = torch.ones(2, T)
    mask[1, :3] = 0.0
    cache, ys = None, []
    for s, e in zip((0, *cuts), (*cuts, T)):
        y, cache, sel = mla.sublayer(w.map(t32), iw.map(t32), a[:, s:e], cache, mask[:, s:e])
        ys.append(y)
    return ys, cache, sel


def test_the_sublayer_appends_the_cache_call_by_call_and_selects_as_the_repooling_peer():
    """impl.mla.sublayer keeps the pooled-key cache (appended per call: the oracle's pooled rows of the
    whole cache) and selects over it; the peer (impl.candidates.dsa_repool: our `index`, pooling again)
    gives the same outputs, cache and selection bit for bit."""
    from impl import registry
    ours = _sublayer_steps(registry.get("triton").mla)
    peer_impl = registry.get("impl.candidates.dsa_repool:Candidate")
    assert not hasattr(peer_impl.mla.dsa, "index_pooled")
    # a candidate without a dsa namespace runs ours whole, the cache's read included (its replays and
    # gates then differ from ours only in what it brings)
    assert registry.get("impl.candidates.norms_fused:Candidate").mla.dsa.index_pooled is not None
    peer = _sublayer_steps(peer_impl.mla)
    for y, z in zip(ours[0], peer[0]):
        assert torch.equal(y, z)
    for f in ("latent", "index_rows", "pooled"):
        assert torch.equal(getattr(ours[1], f), getattr(peer[1], f)), f
    assert torch.equal(ours[2].indices, peer[2].indices)
    from tests.test_dsa_mla_kernels import indexer_weights
    iw = indexer_weights(np.random.default_rng(11))
    rows = ours[1].index_rows.double().numpy()
    ref = odsa.pooled_rows(rows, iw.compress_ape, iw.kpool)
    got = ours[1].pooled.double().numpy()
    np.testing.assert_array_equal(got[..., -1], ref[..., -1])
    assert_contract("dsa", "pool_keys", "kbar", "kernel_unit", "float32", got[..., :-1], ref[..., :-1])


class NoPooledCache:
    """An mla namespace whose sublayer is ours with the pooled-key cache dropped from the cache it returns
    (what a port keeping no pooled cache hands back)."""

    class mla:
        @staticmethod
        def sublayer(*args, **kwargs):
            from impl import mla as im
            y, cache, sel = im.sublayer(*args, **kwargs)
            return y, DSACache(cache.latent, cache.index_rows), sel


def test_a_sublayer_keeping_no_pooled_cache_fails_with_a_message_that_says_so():
    from impl import registry
    from invariants.engine import run_check
    from invariants.matrix import BY_NAME
    from invariants.target import Target
    from oracle.config import Geometry
    cand = Target(registry.get("test_dsa_pooled:NoPooledCache"), "cpu", torch.float32)
    base = Target(registry.get("torch"), "cpu", torch.float32)
    r = run_check(BY_NAME["mla.paths"], Geometry.preset("tiny"), cand, base, "ci", max_examples=1)
    assert r.status == "fail", r
    assert "pooled_keys" in r.worst_line and "DSACache.pooled is None; our mla.sublayer keeps one" in r.worst_line, r
