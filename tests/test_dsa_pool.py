"""impl.dsa.pool_keys (dsa_pool_fwd_kernel, issue 14 step 9) and its torch form impl.dsa.pool_keys_torch
(the peer it is timed beside), each against the float64 oracle (oracle.dsa.pool_keys).

K̄ is held to the dsa.pool_keys.kbar[kernel_unit] contract; the member tokens, the pools' validity, the
anchors and the kept pools are integers and booleans: equal. Shapes cover left-padded rows, an all-pad
row (its pools empty: K̄ 0, not NaN), a last pool cut by T, P_k = 1, 3 (not a power of two) and 4, a
head dim above the 16-lane minimum, and the keep_all form a CUDA-graph capture asks for.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from impl import dsa as idsa
from impl.candidates import dsa_pool_torch
from invariants.contracts import assert_contract
from oracle import dsa as odsa


def t32(a):
    return torch.from_numpy(np.asarray(a, dtype=np.float64)).float()


def packed_rows(rng, B, T, K, pads, holes=()):
    """[B, T, 2K + 1] rows: random keys and gates, valid flags left-padded by `pads` per row, and row 0's
    tokens `holes` not real (a member inside a pool that is not real: the pool is invalid, the member
    weighs nothing in K̄)."""
    rows = rng.standard_normal((B, T, 2 * K + 1))
    rows[..., 2 * K] = (np.arange(T)[None, :] >= np.array(pads)[:, None]).astype(float)
    rows[0, list(holes), 2 * K] = 0.0
    return rows


CASES = [
    (3, 17, 8, 4, (0, 3, 17), ()),        # left padding, an all-pad row, a pool cut by T
    (2, 1, 8, 4, (0, 1), ()),
    (2, 40, 24, 3, (5, 0), (9, 20, 21)),  # P_k not a power of two, K above the 16-lane minimum, holes
    (1, 9, 16, 1, (2,), (4,)),
    (2, 70, 128, 4, (0, 6), (13, 40)),    # the released head dim; several pool blocks
]


def check_case(B, T, K, kpool, pads, holes, keep_all, device="cpu", pool=idsa.pool_keys, dtype=torch.float32):
    """dtype: the packed rows' (bf16 on the GPU, as the model's cache); the oracle pools the same rounded
    values, so the float32 pooling is held to the float32 contract either way."""
    rng = np.random.default_rng(T * 7 + K)
    rows = t32(packed_rows(rng, B, T, K, pads, holes)).to(dtype)
    ape = rng.standard_normal((kpool, K))
    kbar, member_idx, pool_valid, first, kept = odsa.pool_keys(rows.double().numpy(), ape, kpool)
    got = [x.cpu() for x in pool(rows.to(device), t32(ape).to(device), kpool, keep_all=keep_all)]
    np.testing.assert_array_equal(got[3].numpy(), first, err_msg="first")
    np.testing.assert_array_equal(got[4].numpy(), kept, err_msg="kept")
    g_kbar, g_idx, g_valid = (x.numpy() for x in got[:3])
    if keep_all:
        # every ceil(T / P_k) pool kept: those the oracle drops are invalid in every row
        assert not g_valid[:, ~kept].any()
        g_kbar, g_idx, g_valid = g_kbar[:, kept], g_idx[:, kept], g_valid[:, kept]
    np.testing.assert_array_equal(g_idx, member_idx, err_msg="member_idx")
    np.testing.assert_array_equal(g_valid, pool_valid, err_msg="pool_valid")
    assert np.isfinite(got[0].numpy()).all()
    assert_contract("dsa", "pool_keys", "kbar", "kernel_unit", "float32", g_kbar, kbar)


@pytest.mark.parametrize("case", CASES, ids=lambda v: str(v))
@pytest.mark.parametrize("keep_all", [False, True], ids=["kept", "keep_all"])
@pytest.mark.parametrize("pool", [idsa.pool_keys, idsa.pool_keys_torch], ids=["kernel", "torch"])
def test_pool_keys_is_the_oracles(case, keep_all, pool):
    check_case(*case, keep_all, pool=pool)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bf16"])
def test_pool_keys_compiled_is_the_oracles(dtype):
    """The compiled kernel on the GPU under the same contract: float32 rows, and bf16 rows (the model's)
    held to the bf16 contract."""
    for case in CASES:
        for keep_all in (False, True):
            check_case(*case, keep_all, device="cuda", dtype=dtype)


def test_the_index_over_the_torch_pools_is_ours_up_to_float32_rounding():
    """impl.dsa.index over the kernel's K̄ and over pool_keys_torch's (the peer) select equal tokens where
    no two pool scores are closer than the pooling's float32 rounding (none here: seeded, 16 heads)."""
    from tests.test_dsa_mla_kernels import indexer_weights
    rng = np.random.default_rng(3)
    iw = indexer_weights(rng)
    a = rng.standard_normal((2, 29, iw.wk.shape[1]))
    q_lat = rng.standard_normal((2, 29, iw.wq_b.shape[1]))
    packed = odsa.index_rows(iw, a)
    ours = idsa.index(iw.map(t32), t32(a), t32(q_lat), t32(packed))
    cand = dsa_pool_torch.index(iw.map(t32), t32(a), t32(q_lat), t32(packed))
    assert torch.equal(ours.indices, cand.indices)
    fin = torch.isfinite(ours.scores)
    assert torch.equal(fin, torch.isfinite(cand.scores))
    assert_contract("dsa", "index", "scores", "kernel_unit", "float32", cand.scores[fin].numpy(),
                    ours.scores[fin].double().numpy())


@pytest.mark.parametrize("index", [idsa.index, dsa_pool_torch.index], ids=["ours", "torch_pools"])
def test_a_selection_over_mask_holes_is_the_oracles_set_without_repeats(index):
    """With pads inside the cache the oracle's tail can repeat a picked pool's tokens (SPEC §8.7); ours
    gives the same set with each position once (impl.mla.absorbed sums over slots)."""
    from tests.test_dsa_mla_kernels import indexer_weights
    rng = np.random.default_rng(5)
    iw = indexer_weights(rng)
    T = 21
    a = rng.standard_normal((1, T, iw.wk.shape[1]))
    q_lat = rng.standard_normal((1, T, iw.wq_b.shape[1]))
    mask = np.ones((1, T))
    mask[0, [5, 9]] = 0.0
    packed = odsa.index_rows(iw, a, mask)
    ref = odsa.index(iw, a, q_lat, packed, mask).indices[0]
    got = index(iw.map(t32), t32(a), t32(q_lat), t32(packed), t32(mask)).indices[0].numpy()
    repeats = 0
    for s in range(T):
        g, r = got[s][got[s] >= 0], ref[s][ref[s] >= 0]
        assert len(np.unique(g)) == len(g), f"query {s} repeats a position: {g}"
        assert set(g.tolist()) == set(r.tolist()), f"query {s}: {sorted(g)} vs the oracle's {sorted(r)}"
        repeats += len(r) - len(np.unique(r))
    assert repeats > 0, "the case no longer makes the oracle repeat a position (the property is untested)"
