"""The MLA / DSA caches appended in place (issue 14 step 19's candidate, impl.candidates.cache_in_place):
the same bits as ours' copying append through prefill and decode steps, no new buffer while the tip has
room, every branch of a shared state kept apart (a sibling continuation, a rolled-back state stepped
again), batches of several rows copied, and the bug the tip rule prevents shown where it bites.
mla.paths' sibling continuation (invariants/mla_checks.py) catches that bug as a check
(mutant mla_cache_in_place_without_the_tip_rule)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from impl import dsa as idsa
from impl import mla as imla
from impl import registry
from impl.candidates import cache_in_place as cip
from oracle.config import Geometry
from strategies.geometry import DSAGeometry
from strategies import tensors as tz

G = DSAGeometry.from_geometry(Geometry.preset("tiny"))


def _layer(seed=0):
    rng = np.random.default_rng(seed)
    t = lambda a: torch.as_tensor(np.asarray(a), dtype=torch.float32)  # noqa: E731
    return tz.mla_weights(rng, G).map(t), tz.indexer_weights(rng, G).map(t), rng


def _steps(mla, w, iw, xs):
    """The full layer's sublayer over the calls xs from an empty cache: (outputs, caches after each call)."""
    cache, ys, caches = None, [], []
    for x in xs:
        y, cache, _ = mla.sublayer(w, iw, x, cache, torch.ones(x.shape[:2]))
        ys.append(y)
        caches.append(cache)
    return ys, caches


def test_prefill_then_decode_steps_are_ours_bit_for_bit_and_grow_in_place():
    w, iw, rng = _layer()
    xs = [torch.as_tensor(rng.standard_normal((1, n, 32)), dtype=torch.float32) for n in (9, 1, 1, 1, 3, 1)]
    cand = registry.get("impl.candidates.cache_in_place:Candidate").mla
    ours_y, ours_c = _steps(imla, w, iw, xs)
    cand_y, cand_c = _steps(cand, w, iw, xs)
    for a, b in zip(ours_y, cand_y):
        assert torch.equal(a, b)
    for a, b in zip(ours_c, cand_c):
        for f in ("latent", "index_rows", "pooled"):
            assert torch.equal(getattr(a, f), getattr(b, f)), f
    # every call after the first wrote into the first call's buffers: no new storage while the tip had room
    for f in ("latent", "index_rows", "pooled"):
        ptrs = {getattr(c, f).untyped_storage().data_ptr() for c in cand_c}
        assert len(ptrs) == 1, f
    # and every earlier state still reads its own rows (nothing below a view's length was written)
    _, again = _steps(imla, w, iw, xs[:3])
    assert torch.equal(cand_c[2].latent, again[2].latent) and torch.equal(cand_c[2].pooled, again[2].pooled)


def test_a_sibling_branch_and_a_rolled_back_state_are_copied_not_written_over():
    base = torch.arange(12.).view(1, 4, 3)
    s = cip.append_rows(None, base, "latent")                       # a buffer's tip at 4
    a = cip.append_rows(s, torch.full((1, 2, 3), 7.), "latent")     # the tip: in place
    assert a.data_ptr() == s.data_ptr()
    b = cip.append_rows(s, torch.full((1, 1, 3), -1.), "latent")    # a sibling of a: copied
    assert b.data_ptr() != s.data_ptr()
    assert torch.equal(a[0, 4:], torch.full((2, 3), 7.)) and torch.equal(b[0, 4:], torch.full((1, 3), -1.))
    back = a[:, :5]                                                 # a rolled back by one token
    c = cip.append_rows(back, torch.full((1, 1, 3), 3.), "latent")
    assert c.data_ptr() != a.data_ptr() and torch.equal(a[0, 5], torch.full((3,), 7.))
    assert torch.equal(c[0, :5], a[0, :5]) and torch.equal(c[0, 5], torch.full((3,), 3.))


def test_without_the_tip_rule_a_sibling_writes_over_the_first_branch():
    s = cip.append_rows(None, torch.zeros(1, 4, 3), "latent")
    a = cip.append_rows(s, torch.full((1, 1, 3), 7.), "latent", tip_rule=False)
    cip.append_rows(s, torch.full((1, 1, 3), -1.), "latent", tip_rule=False)
    assert torch.equal(a[0, 4], torch.full((3,), -1.))              # what the rule is there to prevent


def test_a_batch_of_rows_is_copied_whole_and_contiguous():
    s = cip.append_rows(None, torch.zeros(2, 4, 3), "latent")
    a = cip.append_rows(s, torch.ones(2, 1, 3), "latent")
    assert a.is_contiguous() and a.data_ptr() != s.data_ptr() and torch.equal(s, torch.zeros(2, 4, 3))


def test_a_full_buffer_moves_to_a_larger_one_keeping_every_row():
    x = torch.randn(1, cip.APPEND_BLOCK - 1, 2)
    s = cip.append_rows(None, x, "latent")
    a = cip.append_rows(s, torch.ones(1, 1, 2), "latent")           # fills the buffer: in place
    b = cip.append_rows(a, torch.full((1, 1, 2), 2.), "latent")     # past it: a new buffer of 2 blocks
    assert a.data_ptr() == s.data_ptr() and b.data_ptr() != a.data_ptr()
    assert b._base.shape[1] == 2 * cip.APPEND_BLOCK
    assert torch.equal(b[0, :-2], x[0]) and torch.equal(b[0, -1], torch.full((2,), 2.))


def test_bad_cache_arrays_are_refused_as_ours():
    with pytest.raises(ValueError, match=r"cache.latent: expected \[B=1, T, 3\]"):
        cip.append_rows(torch.zeros(1, 4, 5), torch.zeros(1, 1, 3), "latent")
    packed = torch.zeros(1, 6, 2 * 8 + 1)
    with pytest.raises(ValueError, match="pooled"):
        cip.pooled_rows(packed, torch.zeros(4, 8), 4, torch.zeros(1, 3, 5))


def test_the_pooled_cache_appended_in_place_is_ours_bit_for_bit():
    _, iw, rng = _layer(3)
    a = torch.as_tensor(rng.standard_normal((1, 14, 32)), dtype=torch.float32)
    rows = idsa.index_rows(iw, a, torch.ones(1, 14))
    ours = cand = None
    for t in (5, 8, 9, 12, 14):
        ours = idsa.pooled_rows(rows[:, :t], iw.compress_ape, iw.kpool, ours)
        cand = cip.pooled_rows(rows[:, :t], iw.compress_ape, iw.kpool, cand)
        assert torch.equal(ours, cand)


def test_a_replayed_step_from_bench_state_writes_in_place_every_time_with_ours_bits():
    """scripts/profile_replay.py --peer: one decode step replayed from one state. bench_state moves the
    state into buffers with room; marked their tip before each step, every step writes in place (no new
    storage) and gives ours' output and cache."""
    w, iw, rng = _layer(5)
    prefix = torch.as_tensor(rng.standard_normal((1, 11, 32)), dtype=torch.float32)
    x = torch.as_tensor(rng.standard_normal((1, 1, 32)), dtype=torch.float32)
    _, cache, _ = imla.sublayer(w, iw, prefix, None, torch.ones(1, 11))
    want_y, want_c, _ = imla.sublayer(w, iw, x, cache, torch.ones(1, 1))
    cand = registry.get("impl.candidates.cache_in_place:Candidate").mla
    state, rewind = cip.bench_state(cache)
    for _ in range(3):
        rewind()
        y, c, _ = cand.sublayer(w, iw, x, state, torch.ones(1, 1))
        assert torch.equal(y, want_y)
        for f in ("latent", "index_rows", "pooled"):
            assert torch.equal(getattr(c, f), getattr(want_c, f)), f
            assert getattr(c, f).data_ptr() == getattr(state, f).data_ptr(), f
    # without the rewind the next step from the same state is a sibling: copied, the same bits
    y2, c2, _ = cand.sublayer(w, iw, x, state, torch.ones(1, 1))
    assert c2.latent.data_ptr() != state.latent.data_ptr() and torch.equal(y2, want_y)
