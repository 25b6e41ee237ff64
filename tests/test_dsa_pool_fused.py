"""impl.candidates.dsa_pool_fused (issue 14 step 9, a candidate; docs/optimization_log.md): the DSA
pooled keys in one kernel, against the float64 oracle (oracle.dsa.pool_keys) in the interpreter.

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
from impl.candidates import dsa_pool_fused as fused
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


def check_case(B, T, K, kpool, pads, holes, keep_all, device="cpu"):
    rng = np.random.default_rng(T * 7 + K)
    packed = packed_rows(rng, B, T, K, pads, holes)
    ape = rng.standard_normal((kpool, K))
    kbar, member_idx, pool_valid, first, kept = odsa.pool_keys(packed, ape, kpool)
    got = [x.cpu() for x in fused.pool_keys(t32(packed).to(device), t32(ape).to(device), kpool, keep_all=keep_all)]
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
def test_fused_pool_keys_is_the_oracles(case, keep_all):
    check_case(*case, keep_all)


@pytest.mark.gpu
def test_fused_pool_keys_compiled_is_the_oracles():
    """The compiled kernel (float32 rows on the GPU) under the same contract."""
    for case in CASES:
        for keep_all in (False, True):
            check_case(*case, keep_all, device="cuda")


def test_the_index_with_the_fused_pools_is_ours_up_to_float32_rounding():
    """impl.dsa.index(pool=...) runs the same selection over the fused K̄: equal tokens where no two pool
    scores are closer than the pooling's float32 rounding (none here: seeded, 16 heads)."""
    from tests.test_dsa_mla_kernels import indexer_weights
    rng = np.random.default_rng(3)
    iw = indexer_weights(rng)
    a = rng.standard_normal((2, 29, iw.wk.shape[1]))
    q_lat = rng.standard_normal((2, 29, iw.wq_b.shape[1]))
    packed = odsa.index_rows(iw, a)
    ours = idsa.index(iw.map(t32), t32(a), t32(q_lat), t32(packed))
    cand = fused.index(iw.map(t32), t32(a), t32(q_lat), t32(packed))
    assert torch.equal(ours.indices, cand.indices)
    fin = torch.isfinite(ours.scores)
    assert torch.equal(fin, torch.isfinite(cand.scores))
    assert_contract("dsa", "index", "scores", "kernel_unit", "float32", cand.scores[fin].numpy(),
                    ours.scores[fin].double().numpy())
