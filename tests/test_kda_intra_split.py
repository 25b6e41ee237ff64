"""KDA chunked prefill with the intra-chunk pass split in four launches (issue 14 step 26's candidate,
impl.candidates.kda_intra_split; ours keeps the one whole-chunk kernel until its GPU gate): against the float64
oracle as closely as ours on every path of its kernels (dense rows, packed documents with an empty one,
partial chunks, chunks of fewer than 16 tokens, two K tiles, a head dim narrower than its tile, two V tiles, a
given state), under strong decays (the diagonal blocks' pairs), causal bit for bit whichever path a block's
products take, batch invariant, the gate made by its Γ kernel, NaN refused, and both planted bugs caught.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from impl import kda as ik
from impl.candidates import kda_intra_split as cand
from impl.mutants.catalogue import get as get_mutant
from oracle import kda as ok
from tests.test_kda_intra_blocked import _as_bf16_holds, _compare, _inputs, _np, _rel


@pytest.mark.parametrize("B,T,H,K,V,lo", [
    (1, 64, 1, 16, 16, -0.05),    # one whole chunk, one tile each way
    (2, 150, 2, 32, 32, -5.0),    # partial last chunk, two K tiles and two V tiles (interpreter tiles of 16)
    (2, 150, 2, 32, 32, -0.05),   # every 16-row block pair weighs in: X's off-diagonal blocks count
    (1, 130, 1, 40, 24, -0.5),    # head dims narrower than their last tile (masked lanes)
    (1, 7, 2, 16, 16, -0.05),     # a chunk of seven tokens: blocks 1-3 have no row
    (1, 83, 2, 16, 16, -1.0),     # the last chunk ends 3 rows into its second block
])
def test_the_split_pass_matches_the_oracle_as_closely_as_ours(B, T, H, K, V, lo):
    exact, work = _inputs(B, T, H, K, V, lo=lo, state=B == 2)
    _compare(exact, work, fn=cand.chunked)


def test_packed_documents_with_an_empty_one():
    exact, work = _inputs(1, 170, 2, 32, 16, lo=-0.1, seed=3)
    _compare(exact, work, torch.tensor([0, 49, 49, 120, 170]), fn=cand.chunked)


@pytest.mark.parametrize("lo,cu", [(-10.0, None), (-200.0, None), (-40.0, [0, 49, 49, 120, 150])])
def test_strong_decays_match_the_oracle(lo, cu):
    """The softplus gate's strength (a 16-row block falls past 75): the diagonal blocks' pairs inside their
    program, the off-diagonal blocks through their row block's first row (both factors <= 1): outputs,
    final and boundary states within float32's error of the float64 recurrence."""
    exact, work = _inputs(1 if cu else 2, 150, 2, 32, 32, lo=lo, state=cu is None)
    cu_t = None if cu is None else torch.tensor(cu)
    want = ok.chunked(*(None if a is None else a.numpy() for a in exact[:5]),
                      None if exact[5] is None else exact[5].numpy(), 64, None if cu is None else np.array(cu))
    got = cand.chunked(*work[:5], work[5], 64, cu_t, True)
    for name, w, c in zip(("output", "final state", "boundary states"), want, got):
        assert _rel(_np(c), w) < 2e-5, name


def test_outputs_before_a_position_do_not_see_what_comes_after_it():
    """kda.causal's property: rows < 37 bitwise equal when every later token changes (37: inside the third
    block, so changed rows share the diagonal block and the off-diagonal row block of unchanged ones)."""
    _, a = _inputs(1, 100, 2, 32, 16, seed=4)
    _, b = _inputs(1, 100, 2, 32, 16, seed=5)
    mixed = tuple(torch.cat([x[:, :37], y[:, 37:]], 1) for x, y in zip(a[:5], b[:5]))
    o1, _, _ = cand.chunked(*a[:5], None, 64, None, False)
    o2, _, _ = cand.chunked(*mixed, None, 64, None, False)
    assert torch.equal(o1[:, :37], o2[:, :37])
    assert not torch.equal(o1[:, 37:], o2[:, 37:])


def test_a_block_turning_to_the_pairs_for_later_rows_leaves_earlier_rows_bit_for_bit():
    """Mild gates, then gates 40x stronger from row 37 on: the block holding rows 32-47 now takes the pairs
    (for rows 37 on only); rows 0-36 bitwise as before."""
    _, mild = _inputs(1, 100, 2, 16, 16, lo=-1.0, seed=3)
    strong = [a.clone() for a in mild[:5]]
    strong[3][:, 37:] *= 40.0
    a = cand.chunked(*mild[:5], None, 64, None, False)[0]
    b = cand.chunked(*strong, None, 64, None, False)[0]
    assert torch.equal(a[:, :37], b[:, :37])
    assert not torch.equal(a[:, 37:], b[:, 37:])


def test_a_row_has_the_same_bits_alone_and_in_a_batch():
    """kda.batch's claim (BATCH_INVARIANT): fixed tiles, per-(chunk, head) programs."""
    _, work = _inputs(3, 90, 2, 32, 16, lo=-0.5, seed=8, state=True)
    together = cand.chunked(*work[:5], work[5], 64, None, True)
    alone = cand.chunked(*(a[1:2] for a in work[:5]), work[5][1:2], 64, None, True)
    for name, t, a in zip(("output", "final state", "boundary states"), together, alone):
        assert torch.equal(t[1:2], a), name


@pytest.mark.parametrize("lower_bound", [None, -5.0])
def test_the_gate_made_by_the_gamma_kernel_matches_the_torch_gate(lower_bound):
    """gated_chunked (step 24's fusion on the split pass) against the split pass fed the torch gate's g, and
    both against the float64 oracle."""
    gen = torch.Generator().manual_seed(11)
    B, T, H, K = 1, 150, 2, 32
    q = torch.nn.functional.normalize(torch.randn(B, T, H, K, generator=gen), dim=-1) * K ** -0.5
    k = torch.nn.functional.normalize(torch.randn(B, T, H, K, generator=gen), dim=-1)
    v, f = torch.randn(B, T, H, K, generator=gen), 2.0 * torch.randn(B, T, H, K, generator=gen)
    beta = torch.rand(B, T, H, generator=gen)
    A_log, dt_bias = 0.5 * torch.randn(H, generator=gen), -1.0 + 0.5 * torch.randn(H * K, generator=gen)
    g = ik.gate(f + dt_bias.view(H, K), A_log, lower_bound)
    fused = cand.gated_chunked(q, k, v, f, beta, None, 64, None, True, A_log=A_log, dt_bias=dt_bias,
                               lower_bound=lower_bound)
    torch_gate = cand.chunked(q, k, v, g, beta, None, 64, None, True)
    want = ok.chunked(*(a.double().numpy() for a in (q, k, v)),
                      ok.gate((f + dt_bias.view(H, K)).double().numpy(), A_log.double().numpy(), lower_bound),
                      beta.double().numpy(), None, 64)
    for name, a, b, w in zip(("output", "final state", "boundary states"), fused, torch_gate, want):
        assert _rel(_np(a), w) <= 2 * _rel(_np(b), w) + 1e-6, name


@pytest.mark.parametrize("what", ["g", "beta"])
def test_a_nan_gate_or_beta_is_refused(what):
    _, work = _inputs(1, 80, 1, 16, 16, seed=6)
    q, k, v, g, beta, _ = work
    (g if what == "g" else beta).view(-1)[70 * (16 if what == "g" else 1)] = float("nan")
    with pytest.raises(ValueError, match=f"^{what}: contains NaN"):
        cand.chunked(q, k, v, g, beta, None, 64, None, False)


def test_the_diagonal_pairs_skipped_is_caught_only_under_strong_decays():
    """The planted skip (impl/mutants/kda.py IntraSplitDiagPairsSkipped) changes no bit at the bounded gate's
    extreme (g = -4.999: a block falls 74.985) and loses products one step stronger."""
    m = get_mutant("kda_intra_split_diag_pairs_skipped").factory()
    for lo, taken in ((-4.999, False), (-5.1, True)):
        _, work = _inputs(1, 130, 2, 16, 16, lo=-1.0, seed=4)
        g = torch.full_like(work[3], lo)
        args = (work[0], work[1], work[2], g, work[4])
        ours = cand.chunked(*args, None, 64, None, True)
        planted = m.chunked(*args, None, 64, None, True)
        assert all(torch.equal(a, b) for a, b in zip(ours, planted)) is not taken, lo


def test_the_merge_missing_a_term_is_caught():
    """The planted bug (IntraSplitX30DropsATerm) moves rows 48-63 of a chunk, and only those."""
    m = get_mutant("kda_intra_split_x30_drops_a_term").factory()
    exact, work = _inputs(1, 64, 1, 16, 16, lo=-0.05, seed=7)
    want = ok.chunked(*(a.numpy() for a in exact[:5]), None, 64)[0]
    o, _, _ = m.chunked(*work[:5], None, 64, None, False)
    assert _rel(_np(o)[:, :48], want[:, :48]) < 1e-5
    assert _rel(_np(o)[:, 48:], want[:, 48:]) > 1e-3
    o_ok, _, _ = cand.chunked(*work[:5], None, 64, None, False)
    assert _rel(_np(o_ok)[:, 48:], want[:, 48:]) < 1e-5


@pytest.mark.parametrize("kwargs,match", [
    (dict(intra="split", split=(2, 16)), "split: expected an impl.kda.SplitTiles or None, got tuple"),
    (dict(intra="columns", split=ik.SplitTiles()), "split: the SplitTiles of intra='split' only"),
    (dict(inv_merge=False, intra_bk=16), "inv_merge, intra_bk: options of intra='columns'"),
    (dict(intra="rows"), "intra: expected 'columns', 'blocked' or 'split'"),
])
def test_bad_split_options_are_refused(kwargs, match):
    _, work = _inputs(1, 8, 1, 16, 16)
    with pytest.raises(ValueError, match=match):
        ik._chunked(*work[:5], None, 64, None, False, **kwargs)


@pytest.mark.gpu
@pytest.mark.parametrize("low_dots", [True, False])
@pytest.mark.parametrize("lo", [-0.1, -5.0])
def test_in_bf16_on_the_gpu_the_split_pass_matches_the_oracle_as_closely_as_ours(low_dots, lo):
    """Full head dims (K = V = 128), bf16 inputs; W and U on bf16 operands (low_dots) or tf32: within 2x ours'
    error against the oracle fed the same bf16-rounded q, k, v."""
    import functools
    fn = functools.partial(ik._chunked, intra="split", split=ik.SplitTiles(low_dots=low_dots))
    for B, T, H in ((1, 300, 4), (2, 64, 2), (1, 1000, 3)):
        exact, work = _inputs(B, T, H, 128, 128, lo=lo, device="cuda", dtype=torch.bfloat16, state=True)
        exact = _as_bf16_holds(exact)
        _compare(exact, work, factor=2.0, fn=fn)


@pytest.mark.gpu
@pytest.mark.parametrize("lo", [-10.0, -200.0])
def test_strong_decays_in_bf16_on_the_gpu(lo):
    """The diagonal blocks' pairs in bf16 on the GPU: within the bench bound of the bounded gate's prefill."""
    from invariants.contracts import bench_bound
    for B, T, H in ((1, 300, 4), (2, 64, 2)):
        exact, work = _inputs(B, T, H, 128, 128, lo=lo, device="cuda", dtype=torch.bfloat16, state=True)
        exact = _as_bf16_holds(exact)
        want = ok.chunked(*(a.numpy() for a in exact[:5]), exact[5].numpy(), 64)
        got = cand.chunked(*work[:5], work[5], 64, None, True)
        errs = [_rel(_np(c), w) for c, w in zip(got, want)]
        bounds = [bench_bound("kda", "chunked", q, "bfloat16") for q in ("output", "final_state", "final_state")]
        assert all(e <= b for e, b in zip(errs, bounds)), (errs, bounds)


# ---------------------------------------------------------------- step 27: the diagonal kernel makes q e^Γ, k e^(Γ_last - Γ), β k e^Γ
def _w_u_makes_them(*args):
    """Ours with the W / U kernel making q e^Γ, k e^(Γ_last - Γ) and β k e^Γ itself (step 26's place for them)."""
    return ik._chunked(*args, intra="split", split=ik.SplitTiles(diag_qk=False, diag_sub_first=False, diag_gamma=False))


def _made_by_the_diagonal_kernel(*args):
    """Ours at step 27-29: the same with the diagonal kernel making them, Γ read from the Γ launch."""
    return ik._chunked(*args, intra="split", split=ik.SplitTiles(diag_sub_first=False, diag_gamma=False))


@pytest.mark.parametrize("B,T,H,K,V,lo,cu", [
    (2, 150, 2, 32, 32, -0.05, None),                 # partial last chunk, two K and V tiles
    (1, 7, 2, 16, 16, -0.05, None),                   # a chunk of seven tokens
    (1, 170, 2, 32, 16, -0.1, [0, 49, 49, 120, 170]),  # packed, with an empty document
    (1, 100, 2, 32, 16, -20.0, None),                 # strong decays: the pairs in the same program
])
def test_the_diagonal_kernel_making_qg_kg_and_kb_is_bit_for_bit_the_w_u_kernel_making_them(B, T, H, K, V, lo, cu):
    """The same expressions on the same values, moved from the W / U kernel to the diagonal one (ours since
    step 27): the same bits, so the verdicts of step 26's gate carry over."""
    _, work = _inputs(B, T, H, K, V, lo=lo, state=B == 2)
    cu_t = None if cu is None else torch.tensor(cu)
    ours = _made_by_the_diagonal_kernel(*work[:5], work[5], 64, cu_t, True)
    moved = _w_u_makes_them(*work[:5], work[5], 64, cu_t, True)
    for name, o, c in zip(("output", "final state", "boundary states"), ours, moved):
        assert torch.equal(o, c), name


@pytest.mark.gpu
def test_on_the_gpu_the_diagonal_kernel_making_qg_kg_and_kb_is_bit_for_bit_the_w_u_kernel_making_them():
    """bf16, full head dims: β k e^Γ stored in bf16 is the rounding the W / U kernel makes in registers."""
    for B, T, H, lo, cu in ((1, 1000, 4, -0.1, None), (1, 300, 3, -200.0, None),
                            (1, 700, 2, -1.0, [0, 130, 130, 700])):
        _, work = _inputs(B, T, H, 128, 128, lo=lo, device="cuda", dtype=torch.bfloat16, state=cu is None)
        cu_t = None if cu is None else torch.tensor(cu, device="cuda")
        state = work[5] if cu is None else None
        ours = _made_by_the_diagonal_kernel(*work[:5], state, 64, cu_t, True)
        moved = _w_u_makes_them(*work[:5], state, 64, cu_t, True)
        for name, o, c in zip(("output", "final state", "boundary states"), ours, moved):
            assert torch.equal(o, c), (name, B, T, H, lo)


# ---------------------------------------------------------------- step 31: the diagonal kernel's exps flushed (diag_ftz, ours)
_FTZ = ik.SplitTiles(diag_ftz=True)
_NO_FTZ = ik.SplitTiles(diag_ftz=False)


def test_on_the_interpreter_the_flushed_exps_option_changes_nothing():
    """The interpreter runs no PTX, so diag_ftz keeps tl.exp there (the same bits on or off): the CPU's verdicts
    hold tl.exp's arithmetic; the GPU tests below judge the flushed exps themselves."""
    _, work = _inputs(2, 150, 2, 32, 32, lo=-20.0, state=True)
    flushed = ik._chunked(*work[:5], work[5], 64, None, True, split=_FTZ)
    kept = ik._chunked(*work[:5], work[5], 64, None, True, split=_NO_FTZ)
    assert all(torch.equal(a, b) for a, b in zip(flushed, kept))


@pytest.mark.gpu
@pytest.mark.parametrize("lo", [-0.1, -5.0, -20.0])
def test_in_bf16_on_the_gpu_the_flushed_exps_match_the_oracle_as_closely_as_tl_exp(lo):
    """Full head dims, bf16: within 2x the error of tl.exp's path (ours before step 31) against the oracle fed the
    same bf16-rounded q, k, v; at -20 a token a 16-row block falls past e^-87 (the flushed factors) and past the
    factorised range (the pairs)."""
    import functools
    fn = functools.partial(ik._chunked, split=_FTZ)
    kept = functools.partial(ik._chunked, split=_NO_FTZ)
    for B, T, H in ((1, 300, 4), (2, 64, 2), (1, 1000, 3)):
        exact, work = _inputs(B, T, H, 128, 128, lo=lo, device="cuda", dtype=torch.bfloat16, state=True)
        exact = _as_bf16_holds(exact)
        _compare(exact, work, factor=2.0, fn=fn, ours=kept)


@pytest.mark.gpu
def test_on_the_gpu_the_flushed_exps_make_the_same_qg_kg_kb_in_either_kernel():
    """With diag_ftz both the diagonal kernel and the W / U kernel make q e^Γ, k e^(Γ_last - Γ), β k e^Γ through
    the same _gated_qk: the same bits wherever they are made, strong decays included."""
    for B, T, H, lo in ((1, 1000, 4, -0.1), (1, 300, 3, -200.0)):
        _, work = _inputs(B, T, H, 128, 128, lo=lo, device="cuda", dtype=torch.bfloat16, state=True)
        diag = ik._chunked(*work[:5], work[5], 64, None, True, split=_FTZ)
        wu = ik._chunked(*work[:5], work[5], 64, None, True, split=ik.SplitTiles(diag_qk=False, diag_ftz=True))
        for name, a, b in zip(("output", "final state", "boundary states"), diag, wu):
            assert torch.equal(a, b), (name, lo)
