"""The KDA chunked prefill under strong decays (the softplus gate, no lower bound: g below -5 a token).

The intra-chunk kernel factorises each pair's decay e^(Γ_i - Γ_j) through a reference row of its 16-row
block; past a fall of 75 within a block the factor leaves float32's range (inf, then NaN: ours returned
NaN for every such prefill until stop 35). Those entries now go through the exact pairs pass
(impl/kernels/kda.py _intra_pairs). Here: against the float64 oracle at every strength, every intra
variant (both inverses, the stacked dot, Γ first), packed documents with an empty one, a given state; the
choice of path bitwise causal; the bounded gate never taking the new path; the planted skip caught.
"""
from __future__ import annotations

import pytest
import torch

from impl import kda as ik
from impl.mutants.catalogue import get as get_mutant
from invariants.kernel_paths import _decays_past_factor_range
from oracle import kda as ok
from tests.test_kda_intra_blocked import _inputs as _blocked_inputs
from tests.test_kda_intra_blocked import _rel


def _inputs(B, T, H, K, V, lo, seed=0, device="cpu", dtype=torch.float32):
    """q, k, v, g (uniform in [lo, 0]), beta and a given state: float64 and on the target, as a list."""
    exact, work = _blocked_inputs(B, T, H, K, V, lo=lo, seed=seed, device=device, dtype=dtype, state=True)
    return exact, list(work)


def _errors(exact, got, cu=None):
    want = ok.chunked(*(a.numpy() for a in exact), 64, None if cu is None else cu.numpy())
    return [_rel(c.detach().double().cpu().numpy(), w) for c, w in zip(got, want)]


# the whole-chunk kernel (intra="columns", ours before issue 14 step 26) and its options are not ours: the bench's
# baseline and the candidates' base, marked slow (CI deselects them; `pytest -m slow` runs them)
_COLUMNS = pytest.mark.slow
@pytest.mark.parametrize("lo,variant", [(-10.0, {}), (-200.0, {}),
                                        pytest.param(-10.0, dict(intra="columns"), marks=_COLUMNS),
                                        pytest.param(-200.0, dict(intra="columns"), marks=_COLUMNS),
                                        pytest.param(-30.0, dict(intra="columns", inv_merge=False), marks=_COLUMNS),
                                        pytest.param(-30.0, dict(intra="columns", intra_stack=True), marks=_COLUMNS),
                                        pytest.param(-30.0, dict(intra="columns", g_cumsum=True), marks=_COLUMNS)])
def test_strong_decays_match_the_oracle(lo, variant):
    """Partial last chunk, two K tiles and two V tiles (the interpreter's tiles of 16): outputs, final and
    boundary states within float32's error of the float64 recurrence (they were NaN)."""
    exact, work = _inputs(2, 150, 2, 32, 32, lo)
    got = ik._chunked(*work, 64, None, True, **variant)
    for name, e in zip(("output", "final state", "boundary states"), _errors(exact, got)):
        assert e < 2e-5, f"{name}: rel-L2 {e:.3g}"


def test_strong_decays_in_packed_documents_with_an_empty_one():
    exact, work = _inputs(1, 170, 2, 16, 16, -40.0, seed=1)
    cu = torch.tensor([0, 49, 49, 120, 170], dtype=torch.int32)
    state = 0.1 * torch.randn(4, 2, 16, 16, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    exact = exact[:5] + (state,)
    got = ik.chunked(*work[:5], state.float(), 64, cu, True)
    for name, e in zip(("output", "final state", "boundary states"), _errors(exact, got, cu)):
        assert e < 2e-5, f"{name}: rel-L2 {e:.3g}"


def _mild_then_strong(T, H, K, cut, seed, intra=None, **target):
    """Outputs of the same call with mild gates, and with the gates from `cut` on made 40x stronger."""
    _, mild = _inputs(1, T, H, K, K, -1.0, seed=seed, **target)
    strong = [a.clone() for a in mild]
    strong[3][:, cut:] = strong[3][:, cut:] * 40.0
    return (ik._chunked(*mild[:5], None, 64, None, False, intra=intra)[0],
            ik._chunked(*strong[:5], None, 64, None, False, intra=intra)[0])


@pytest.mark.parametrize("intra", [None, pytest.param("columns", marks=_COLUMNS)])
def test_which_path_a_product_takes_does_not_see_later_gates(intra):
    """Rows 0-36 with mild decays, then the gates after row 37 turned strong (the block holding row 37 and
    the ones after it cross into the pairs path): outputs before 37 bitwise unchanged, ours (the split pass)
    and the whole-chunk kernel's second launch."""
    a, b = _mild_then_strong(100, 2, 16, 37, seed=3, intra=intra)
    assert torch.equal(a[:, :37], b[:, :37])
    assert not torch.equal(a[:, 37:], b[:, 37:])


def _launch_args(g, T):
    return dict(g=g, T=T, BT=64, BC=16, GC=False, IS_VARLEN=False)


def test_the_bounded_gate_never_takes_the_pairs_path():
    """At the bound's extreme (g = -4.999 on every token: a block falls 74.985) the whole-chunk kernel's fast
    path holds every product, so the planted skip of its pairs pass changes nothing; one step stronger it does
    (the split pass's own: tests/test_kda_intra_split.py)."""
    m = get_mutant("kda_intra_strong_decay_pairs_skipped").factory()
    for lo, taken in ((-4.999, False), (-5.1, True)):
        _, work = _inputs(1, 130, 2, 16, 16, 1.0, seed=4)
        work[3] = torch.full_like(work[3], lo)
        assert _decays_past_factor_range(_launch_args(work[3], 130)) is taken
        ours = ik._chunked(*work[:5], None, 64, None, True, intra="columns")
        planted = m.chunked(*work[:5], None, 64, None, True)
        assert all(torch.equal(a, b) for a, b in zip(ours, planted)) is not taken, lo


@pytest.mark.gpu
@pytest.mark.parametrize("lo", [-10.0, -200.0])
def test_strong_decays_in_bf16_on_the_gpu(lo):
    """Full head dims (K = V = 128), bf16 operands, tf32 dots for the factorised products and float32 for
    the pairs: within the bench bound of the bounded gate's own prefill against the oracle fed the same
    bf16-rounded q, k, v."""
    from invariants.contracts import bench_bound
    for B, T, H in ((1, 300, 4), (2, 64, 2)):
        exact, work = _inputs(B, T, H, 128, 128, lo, device="cuda", dtype=torch.bfloat16)
        exact = tuple(a.to(torch.bfloat16).double() if i < 3 else a for i, a in enumerate(exact))
        errs = _errors(exact, ik.chunked(*work, 64, None, True))
        bounds = [bench_bound("kda", "chunked", q, "bfloat16") for q in ("output", "final_state", "final_state")]
        assert all(e <= b for e, b in zip(errs, bounds)), (errs, bounds)


@pytest.mark.gpu
def test_on_the_gpu_the_second_compile_leaves_chunks_without_strong_decays_bit_for_bit():
    """Mild gates, then strong ones from token 300 on (the call takes the PAIRS launch): outputs before 300 are
    bitwise those of the mild-only call, whose launch never flagged (two compiles, the same bits where the
    pairs pass adds nothing)."""
    a, b = _mild_then_strong(600, 4, 128, 300, seed=5, intra="columns", device="cuda", dtype=torch.bfloat16)
    assert torch.equal(a[:, :300], b[:, :300])
    assert not torch.equal(a[:, 300:], b[:, 300:])
