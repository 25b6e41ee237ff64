"""impl.dsa.select_pools (dsa_select_fwd_kernel, issue 14 step 10) and its torch form
impl.dsa.select_pools_torch (the peer it is timed beside), each against the float64 oracle's pick
(oracle.dsa._pick_pools, _tail, _compact).

The kernel's row is exact: the picked pools' tokens in pool order (the oracle's picks, lowest pool first
among exactly tied scores), then the tail's tokens (none when the tail's pool was picked: a mask hole),
then -1. The torch form picks by torch.topk (any of exactly tied pools), so it is held to the same SET on
scores without ties. Shapes: left padding, holes, an all-pad row, P_k = 1 (no tail), 3 and 4, fewer
candidates than k_sel, k_sel 0, pools over several tiles (block_pools), every search step (radix_bits),
the digit counts packed (the GPU's form) and not (the interpreter's).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from impl import dsa as idsa
from oracle import dsa as odsa

F32_MIN = -3.4028234663852886e38


def pools(rng, B, T, M, holes):
    """Random real flags (left padding, `holes` pads after it) and the kept pools oracle.dsa.pool_keys
    anchors on them: (val [B, T] bool, first [B], member_idx [B, P, M], pool_valid [B, P])."""
    val = np.ones((B, T), dtype=bool)
    for b in range(B):
        val[b, :int(rng.integers(0, T + 1)) if b else int(rng.integers(0, max(T // 3, 1)))] = False
        if holes and b == 0:
            val[b, rng.integers(0, T, size=holes)] = False
    # rows of a 1-wide index key (the pooling's anchors and members read only the valid flags)
    rows = np.concatenate([np.zeros((B, T, 2)), val[..., None].astype(np.float64)], axis=-1)
    _, idx, valid, first, _ = odsa.pool_keys(rows, np.zeros((M, 1)), M)
    return val, first, idx, valid


def draw(seed):
    rng = np.random.default_rng(seed)
    B, M = int(rng.integers(1, 3)), int(rng.choice([1, 3, 4]))
    T = int(rng.integers(1, 90))
    S = int(rng.choice([1, T, int(rng.integers(1, T + 1))]))
    val, first, idx, valid = pools(rng, B, T, M, int(rng.integers(0, 4)))
    P = idx.shape[1]
    topk_pools = int(rng.choice([0, 1, 3, 8, 20]))
    ties = bool(rng.random() < 0.4)
    I = (rng.integers(-3, 4, (B, S, P)) if ties else rng.standard_normal((B, S, P))).astype(np.float32)
    if ties:
        I[rng.random(I.shape) < 0.2] = -0.0       # -0 ties +0, as in the oracle's sort
    return dict(val=val, first=first, idx=idx, valid=valid, I=I, S=S, T=T, M=M, k_sel=min(topk_pools, P),
                width=topk_pools * M + M - 1, tail=bool(rng.random() < 0.8), ties=ties)


def expected(c):
    """The oracle's selection, in the kernel's order: (indices [B, S, W], scores, candidate)."""
    S, T, M = c["S"], c["T"], c["M"]
    pos = T - S + np.arange(S)
    cand = odsa.candidates(c["idx"], c["valid"], c["val"], pos)
    I = np.where(cand, c["I"].astype(np.float64), -np.inf)
    picked = odsa._pick_pools(I, cand, c["idx"], c["k_sel"])                           # score order
    tail = odsa._tail(c["first"], c["val"], pos, M) if c["tail"] and M > 1 else None
    B = I.shape[0]
    out = np.full((B, S, c["width"]), -1, dtype=np.int64)
    for b in range(B):
        for s in range(S):
            if not c["val"][b, T - S + s]:
                continue
            pk = sorted(t for t in picked[b, s].tolist() if t >= 0)
            tl = [] if tail is None else [t for t in tail[b, s].tolist() if t >= 0 and t not in pk]
            row = pk + tl
            out[b, s, :len(row)] = row
    return out, np.where(cand, c["I"], -np.inf).astype(np.float32), cand


def run(select, c, device="cpu", **kw):
    t = lambda a: torch.as_tensor(np.asarray(a)).to(device)
    pos = c["T"] - c["S"] + np.arange(c["S"])
    cand = odsa.candidates(c["idx"], c["valid"], c["val"], pos)
    I = np.where(cand, c["I"], F32_MIN).astype(np.float32)      # as dsa_score_fwd_kernel writes it
    pool_last = np.where(c["valid"], c["idx"][..., -1], -1)
    n_vis = np.cumsum(c["val"], 1)[:, c["T"] - c["S"]:]
    got = select(t(I), t(pool_last), t(c["idx"]), t(c["val"]), t(n_vis), t(c["first"]), c["k_sel"], c["width"],
                 c["tail"], **kw)
    return [g.cpu().numpy() for g in got]


SEEDS = range(60)


# the overrides cost the interpreter most (many tiles, many passes): a subset of the draws each (half the
# subsets before stop 41: CI's 15-minute budget). 1- and 2-bit digits are counted packed (the GPU's form,
# which the interpreter's checks do not take), and unpacked when asked (step 10's form:
# impl.candidates.dsa_select_digits)
@pytest.mark.parametrize("block_pools,radix_bits,packed,every", [
    (None, None, None, 2), (2, 8, None, 12), (8, 1, None, 20), (4, 4, None, 16), (None, 2, None, 10),
    (8, 1, False, 24), (None, 2, False, 20)],
    ids=["defaults", "tiles2_rb8", "packed_tiles8_rb1", "tiles4_rb4", "packed_rb2", "tiles8_rb1", "rb2"])
def test_the_kernel_is_the_oracles_pick(block_pools, radix_bits, packed, every):
    for seed in SEEDS[::every]:
        c = draw(seed)
        want, scores, cand = expected(c)
        got, g_scores, g_cand = run(idsa.select_pools, c, block_pools=block_pools, radix_bits=radix_bits,
                                    packed=packed)
        np.testing.assert_array_equal(got, want, err_msg=f"seed {seed}: indices")
        np.testing.assert_array_equal(g_cand, cand, err_msg=f"seed {seed}: candidate")
        np.testing.assert_array_equal(g_scores, scores, err_msg=f"seed {seed}: scores")


def test_the_torch_form_picks_the_oracles_set_without_ties():
    n = 0
    for seed in SEEDS:
        c = draw(seed)
        if c["ties"]:
            continue
        n += 1
        want, scores, cand = expected(c)
        got, g_scores, g_cand = run(idsa.select_pools_torch, c)
        for b in range(got.shape[0]):
            for s in range(got.shape[1]):
                g = got[b, s]
                k = int((g >= 0).sum())
                assert (g[k:] == -1).all(), f"seed {seed}: row ({b}, {s}) not compacted: {g}"
                assert sorted(g[:k].tolist()) == sorted(want[b, s][want[b, s] >= 0].tolist()), f"seed {seed}"
        np.testing.assert_array_equal(g_cand, cand)
        np.testing.assert_array_equal(g_scores, scores)
    assert n >= 20


def test_the_cases_reach_what_they_claim():
    """The draws the defaults run (every second seed) hold the shapes the module docstring lists (else the tests
    above prove less)."""
    cs = [draw(s) for s in SEEDS[::2]]
    assert any(c["M"] == 1 for c in cs) and any(c["M"] == 3 for c in cs) and any(c["k_sel"] == 0 for c in cs)
    assert any(c["idx"].shape[1] > 8 and c["k_sel"] > 0 for c in cs)
    assert any((~c["val"][:, c["T"] - c["S"]:]).any() for c in cs)
    assert any(not c["val"][b].any() for c in cs for b in range(c["val"].shape[0]))
    assert any(c["ties"] for c in cs) and any(not c["ties"] for c in cs)


@pytest.mark.parametrize("bad,match", [
    (lambda a: a.update(I=a["I"].double()), "I: expected float32"),
    (lambda a: a.update(val=a["val"].long()), "val: expected bool"),
    (lambda a: a.update(n_vis=a["n_vis"][:, :1]), "n_vis: expected shape"),
    (lambda a: a.update(k_sel=99), "k_sel"),
    (lambda a: a.update(width=1), "width"),
    (lambda a: a.update(radix_bits=4, packed=True), "packed: needs radix_bits <= 2"),
], ids=["I_dtype", "val_dtype", "n_vis_shape", "k_sel", "width", "packed_rb4"])
def test_bad_arguments_are_refused(bad, match):
    a = dict(I=torch.zeros(1, 3, 2), pool_last=torch.tensor([[3, 7]]), member_idx=torch.arange(8).view(1, 2, 4),
             val=torch.ones(1, 9, dtype=torch.bool), n_vis=torch.tensor([[7, 8, 9]]), first=torch.zeros(1, dtype=torch.long),
             k_sel=1, width=7, tail=True)
    bad(a)
    with pytest.raises(ValueError, match=match):
        idsa.select_pools(**a)


@pytest.mark.gpu
def test_the_compiled_kernel_is_the_oracles_pick():
    """On the GPU: the drawn cases, and the released shape's one (4097, 8192 and 8300 cached tokens in
    pools of 4: 1025 to ~2070 pools in one or two 2048-pool tiles; 512 picks; a wide tie at the k-th
    place)."""
    for seed in SEEDS:
        c = draw(seed)
        want, _, _ = expected(c)
        np.testing.assert_array_equal(run(idsa.select_pools, c, device="cuda")[0], want, err_msg=f"seed {seed}")
    rng = np.random.default_rng(7)
    for T in (4097, 8192, 8300):
        val, first, idx, valid = pools(rng, 1, T, 4, 2)
        P = idx.shape[1]
        I = rng.standard_normal((1, 3, P)).astype(np.float32)
        I[0, 1, :P // 2] = 0.5                    # a wide tie at the k-th place
        c = dict(val=val, first=first, idx=idx, valid=valid, I=I, S=3, T=T, M=4, k_sel=min(512, P),
                 width=2051, tail=True)
        want, _, _ = expected(c)
        np.testing.assert_array_equal(run(idsa.select_pools, c, device="cuda")[0], want, err_msg=f"T={T}")
