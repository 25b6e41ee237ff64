"""Metrics between a candidate and a reference array (TESTING.md: report several, gate on one).

Letters: any shape; both arrays are brought to float64 NumPy first.
"""
from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple, Optional

import numpy as np


class Metrics(NamedTuple):
    rel_l2: float            # ||c - r|| / ||r|| over the finite entries of r
    max_abs_scaled: float    # max |c - r| / max |r|
    cosine: float
    worst_index: Optional[tuple]
    worst_candidate: float
    worst_reference: float
    nonfinite_mismatch: int  # entries finite in one and not in the other
    rms_abs: float = 0.0     # sqrt(mean((c - r)^2)) over the finite entries: for quantities already in
                             # units of their own magnitude, where ||r|| may cancel to near 0
    # the criteria the hand-written kernel / baseline tests were written with (kinds kernel_unit,
    # baseline_unit): a bound moved from such a test into invariants/contracts.d/ keeps its meaning
    max_abs_floored: float = 0.0  # max |c - r| / max(1, max |r|): an all-small r does not magnify rounding
    max_abs: float = 0.0          # max |c - r|: for quantities of a known O(1) scale
    max_rel: float = 0.0          # max |c_i - r_i| / |r_i| (np.allclose with atol 0: r_i = 0 needs c_i = 0)
    max_mixed: float = 0.0        # max |c_i - r_i| / (1 + |r_i|) (np.allclose with rtol = atol)

    def get(self, metric: str) -> float:
        if self.nonfinite_mismatch:
            return float("inf")
        if metric not in METRICS:
            raise ValueError(f"metric: expected one of {METRICS}, got {metric!r}")
        return getattr(self, metric)


METRICS = ("rel_l2", "max_abs_scaled", "rms_abs", "max_abs_floored", "max_abs", "max_rel", "max_mixed")


def to_numpy(x) -> np.ndarray:
    """float64 NumPy from NumPy or torch (any device, any dtype)."""
    if hasattr(x, "detach"):
        # via float64: exact for every float dtype (float32 would round a float64 tensor)
        x = x.detach().double().cpu().numpy() if x.dtype.is_floating_point else x.detach().cpu().numpy()
    return np.asarray(x, dtype=np.float64)


def metrics(candidate, reference) -> Metrics:
    from invariants import device_metrics
    device = device_metrics.device_of(candidate, reference)
    if device is not None:                    # a full-geometry array: measured where it lives
        return device_metrics.metrics(candidate, reference, device)
    c, r = to_numpy(candidate), to_numpy(reference)
    if c.shape != r.shape:
        raise ValueError(f"shape mismatch: candidate {c.shape} vs reference {r.shape}")
    fc, fr = np.isfinite(c), np.isfinite(r)
    mismatch = int(np.count_nonzero(fc != fr))
    both = fc & fr
    with np.errstate(invalid="ignore"):         # -inf - -inf where both are -inf: np.where drops it
        d = np.where(both, c - r, 0.0)
    rr = np.where(both, r, 0.0)
    cc = np.where(both, c, 0.0)
    nr, nd = np.linalg.norm(rr), np.linalg.norm(d)
    rel = nd / nr if nr > 0 else nd
    ref_max = np.abs(rr).max(initial=0.0)
    mas = np.abs(d).max(initial=0.0) / ref_max if ref_max > 0 else np.abs(d).max(initial=0.0)
    nc = np.linalg.norm(cc)
    cos = float(np.sum(cc * rr) / (nc * nr)) if nc > 0 and nr > 0 else float(nc == nr)
    if mismatch:
        idx = tuple(int(i) for i in np.argwhere(fc != fr)[0])
    elif d.size:
        idx = tuple(int(i) for i in np.unravel_index(np.argmax(np.abs(d)), d.shape))
    else:
        idx = None
    wc = float(c[idx]) if idx is not None else 0.0
    wr = float(r[idx]) if idx is not None else 0.0
    rms = nd / np.sqrt(max(int(np.count_nonzero(both)), 1))
    ad, ar = np.abs(d), np.abs(rr)
    floored = ad.max(initial=0.0) / max(1.0, ref_max)
    with np.errstate(divide="ignore", invalid="ignore"):
        per = np.where(ad == 0, 0.0, ad / ar)          # ad / 0 = inf: a nonzero where r is exactly 0
    return Metrics(float(rel), float(mas), cos, idx, wc, wr, mismatch, float(rms), float(floored),
                   float(ad.max(initial=0.0)), float(per.max(initial=0.0)), float((ad / (1.0 + ar)).max(initial=0.0)))


def bitwise_equal(a, b) -> bool:
    from invariants import device_metrics
    device = device_metrics.device_of(a, b)
    if device is not None:
        return device_metrics.bitwise_equal(a, b, device)
    a, b = to_numpy(a), to_numpy(b)
    return a.shape == b.shape and np.array_equal(a, b, equal_nan=True)


# axes a message names after the others, in parentheses ("token 3, expert 1 (batch 0)"): the row an
# element belongs to matters less than where in that row it sits
CONTEXT_AXES = ("batch",)


def check_axes(axes: tuple, shape: tuple, what: str = "comparison") -> None:
    """ValueError unless `axes` (names, one per dimension) fits `shape`; () names nothing (always fits)."""
    if axes and len(axes) != len(shape):
        raise ValueError(f"{what}: axes {tuple(axes)} name {len(axes)} dimensions, the reference has "
                         f"{len(shape)} (shape {tuple(shape)})")


def name_index(idx, axes: tuple = ()) -> str:
    """An element's index in the check's own terms: "token 3, expert 1 (batch 0)" (CONTEXT_AXES last,
    in parentheses); the plain tuple when no axes are named."""
    if idx is None or not axes:
        return f"{idx}"
    main = [f"{a} {i}" for a, i in zip(axes, idx) if a not in CONTEXT_AXES]
    rest = [f"{a} {i}" for a, i in zip(axes, idx) if a in CONTEXT_AXES]
    text = ", ".join(main) or ", ".join(rest)
    return f"{text} ({', '.join(rest)})" if main and rest else text


def first_difference(candidate, reference, axes: tuple = ()) -> str:
    """Where two arrays held to bit-exactness differ: how many elements, the first one (named by `axes`,
    one name per dimension: "first at token 3, expert 1 (batch 0)") and both values (hexadecimal for
    integer data: packed NVFP4 codes read as bytes). One line."""
    from invariants import device_metrics
    device = device_metrics.device_of(candidate, reference)
    if device is not None:
        found = device_metrics.first_difference(candidate, reference, device, axes)
        if found is not None:
            return found
    c, r = to_numpy(candidate), to_numpy(reference)
    if c.shape != r.shape:
        return f"shape {c.shape} vs reference {r.shape}"
    check_axes(axes, r.shape)
    differ = ~((c == r) | (np.isnan(c) & np.isnan(r)))
    if not differ.any():
        return "equal"
    idx = tuple(int(i) for i in np.argwhere(differ)[0])
    dtype = getattr(candidate, "dtype", None)
    ints = (not dtype.is_floating_point) if hasattr(dtype, "is_floating_point") else \
        np.issubdtype(np.asarray(candidate).dtype, np.integer)            # a torch dtype, else NumPy's
    fmt = (lambda x: f"0x{int(x):02x}") if ints else (lambda x: f"{x:.9g}")
    return (f"{int(differ.sum())} of {differ.size} elements differ; first at {name_index(idx, axes)}: "
            f"candidate {fmt(c[idx])} vs reference {fmt(r[idx])}")


@dataclasses.dataclass(frozen=True)
class Comparison:
    """One comparison a check asks for, judged by invariants.matrix.evaluate under the contract
    (mechanism, path, quantity, kind) of invariants/contracts.d/<mechanism>.toml.

    baseline_reference: what the baseline is measured against when it is not `reference` (the oracle
    re-run with the baseline's own discrete decisions); where: a label for messages ("layer 3");
    held_reference: the float64 oracle run on the inputs exactly as the candidate's working dtype holds
    them: its distance to `reference` is the error exact arithmetic makes from those rounded inputs, a
    floor under the baseline's error (a baseline can land closer by luck on a small or cancelling output).
    axes: one name per dimension of `reference` ("batch", "token", "head", "dim"): messages name the first
    differing (exact) or worst (tolerance) element in those terms; () prints the index tuple.
    conditioning: (held, exact) for a self_consistency comparison: the float64 oracle on the inputs as the
    working dtype holds them and on the exact inputs. Their distance is the example's own sensitivity to
    rounding, a floor under the bound: two paths of one implementation in a rounding dtype cannot be asked to
    agree more closely than exact arithmetic agrees with itself when only its inputs are rounded.
    """

    path: str
    quantity: str
    candidate: Any
    reference: Any
    baseline: Any = None
    kind: str = "kernel_replacement"
    baseline_reference: Any = None
    where: str = ""
    held_reference: Any = None
    axes: tuple = ()
    conditioning: Any = None


class SelectionReport(NamedTuple):
    ok: bool
    rows: int                 # query rows (tokens, for routing) compared
    tie_rows: int             # rows that differ from the oracle only among choices tied within eps (legal flips)
    first_bad: Optional[tuple]
    reason: str


DecisionReport = SelectionReport


class RoutingReference(NamedTuple):
    """What an expert choice is judged against: the oracle's Routing on the same tokens (its scores,
    biased scores and group scores) and the router's shape (SPEC: groups, then experts)."""

    routing: object           # oracle.types.Routing: expert_ids [N, k], scores [N, E], group_scores [N, G]
    bias: object              # [E] e_score_correction_bias
    top_k: int
    topk_group: int
    n_group: int


def _groups_of(experts, per: int) -> set:
    return {int(e) // per for e in experts}


def _legal_experts(c: set, full, groups, ref: RoutingReference, per: int, eps: float) -> bool:
    """Is expert set c a top-k the oracle could have made if its scores moved by at most eps?

    Groups first: every group scoring above the topk_group-th cut by more than eps must be kept, any kept
    group must lie within eps of the cut, and c's experts must come from kept groups. Among the kept
    groups (the undetermined ones tried in every combination), c must hold every expert beating the k-th
    biased score by more than eps and nothing below it by more than eps.
    """
    from itertools import combinations

    gk = np.sort(groups)[::-1][ref.topk_group - 1]
    must_g = {g for g in range(ref.n_group) if groups[g] > gk + eps}
    ok_g = {g for g in range(ref.n_group) if groups[g] >= gk - eps}
    base = _groups_of(c, per) | must_g
    if not base <= ok_g or len(base) > ref.topk_group:
        return False
    rest = sorted(ok_g - base)
    for fill in combinations(rest, min(ref.topk_group - len(base), len(rest))):
        kept = base | set(fill)
        sc = np.where([e // per in kept for e in range(len(full))], full, -np.inf)
        kth = np.sort(sc)[::-1][ref.top_k - 1]
        must = {e for e in range(len(full)) if sc[e] > kth + eps}
        free = {e for e in range(len(full)) if sc[e] >= kth - eps}
        if must <= c <= must | free:
            return True
    return False


def compare_experts(candidate, ref: RoutingReference, eps: float) -> DecisionReport:
    """Tie-aware expert sets (TESTING.md): per token, k distinct experts that the oracle's top-k could
    have been had its group and biased scores moved by at most eps (_legal_experts); such a difference
    is a legal flip (counted). Equal sets pass without one."""
    ids = to_int(candidate)
    r = ref.routing
    oid = to_int(r.expert_ids)
    scores, groups = np.asarray(r.scores, float), np.asarray(r.group_scores, float)
    E = scores.shape[-1]
    full = scores + np.asarray(ref.bias, float)                                  # unmasked biased scores
    if ids.shape != oid.shape:
        return DecisionReport(False, 0, 0, None, f"expert ids shape {ids.shape} != oracle {oid.shape}")
    ties, per = 0, E // ref.n_group
    for t in range(ids.shape[0]):
        c = set(ids[t].tolist())
        if len(c) != ref.top_k or min(c) < 0 or max(c) >= E:
            return DecisionReport(False, t, ties, (t,), f"ids {sorted(c)} are not {ref.top_k} distinct experts "
                                                        f"in [0, {E})")
        if c == set(oid[t].tolist()):
            continue
        if _legal_experts(c, full[t], groups[t], ref, per, eps):
            ties += 1
            continue
        gk = np.sort(groups[t])[::-1][ref.topk_group - 1]
        kth = full[t, oid[t]].min()                                   # the oracle's k-th pick's biased score
        return DecisionReport(False, t, ties, (t,),
                              f"experts {sorted(c)} vs oracle {sorted(oid[t].tolist())} (k-th biased score "
                              f"{kth:.6g}, group scores {np.round(groups[t], 6).tolist()} (cut {gk:.6g}), "
                              f"tie eps {eps:g})")
    return DecisionReport(True, ids.shape[0], ties, None, "")


def compare_selection(candidate, ref_indices, ref_scores, ref_candidate, k_sel: int, token_pool,
                      eps: float, scale=None) -> SelectionReport:
    """Tie-aware comparison of a top-k pool selection (TESTING.md: selections are compared tie-aware).

    Args:
        candidate: [B, S, W] token indices from the implementation, -1 padded
        ref_indices: [B, S, W] the oracle's (its tail tokens are the ones outside its picked pools)
        ref_scores: [B, S, P] the oracle's scores of every kept pool (non-candidates anything)
        ref_candidate: [B, S, P] which pools may be picked for each query
        k_sel: picks per query before non-candidates are dropped
        token_pool: [B, T] kept-pool id of every cached token, -1 for tokens in no kept pool
        eps: scores within eps x scale[b, s] of the k-th oracle score are a tie: any choice among them
            is accepted
        scale: [B, S] the size of each query's scores' terms (Selection.scale: what their rounding
            scales with); None: the row's largest |candidate score|
    Each row must hold valid (0 <= t < T) and unique indices; the oracle's tail tokens; whole pools
    only; every pool scoring above the k-th place by more than eps; nothing below it by more than
    eps; and as many pools as the oracle picked.
    """
    cand, ref = to_int(candidate), to_int(ref_indices)
    scores, cands, tpool = np.asarray(ref_scores, float), np.asarray(ref_candidate, bool), to_int(token_pool)
    if cand.shape != ref.shape:
        return SelectionReport(False, 0, 0, None, f"width/shape {cand.shape} != oracle {ref.shape}")
    B, S, _ = cand.shape
    T = tpool.shape[1]
    ties = 0
    for b in range(B):
        for s in range(S):
            c = cand[b, s][cand[b, s] >= 0]
            r = ref[b, s][ref[b, s] >= 0]
            where = (b, s)
            if np.any(c >= T) or len(np.unique(c)) != len(c):
                return SelectionReport(False, b * S + s, ties, where, f"indices out of range or duplicated: {sorted(c.tolist())}")
            if np.any(cand[b, s][cand[b, s] < 0] != -1):
                return SelectionReport(False, b * S + s, ties, where, "negative index other than the -1 padding")
            rp = {int(tpool[b, t]) for t in r if tpool[b, t] >= 0}
            tail = {int(t) for t in r if tpool[b, t] < 0 or not _pool_fully_in(tpool[b], tpool[b, t], r)}
            rp = {p for p in rp if _pool_fully_in(tpool[b], p, r)}
            cset = {int(t) for t in c}
            if not tail <= cset:
                return SelectionReport(False, b * S + s, ties, where, f"tail tokens {sorted(tail - cset)} missing")
            cp = {int(tpool[b, t]) for t in cset - tail}
            if -1 in cp or any(not _pool_fully_in(tpool[b], p, c) for p in cp):
                return SelectionReport(False, b * S + s, ties, where, "a partial pool or a token outside every pool")
            if cp == rp:
                continue
            sc = np.where(cands[b, s], scores[b, s], -np.inf)
            order = np.sort(sc)[::-1]
            kth = order[min(k_sel, len(order)) - 1] if k_sel > 0 and len(order) else -np.inf
            # relative to the size of the terms: the signed head mix cancels, so its rounding error
            # scales with Σ|w||q||K̄|, not with the score (and a "large" input family scales both alike)
            finite = np.abs(sc[np.isfinite(sc)])
            size = float(scale[b, s]) if scale is not None else (finite.max() if finite.size else 0.0)
            tol = eps * (size if size > 0 else 1.0)
            must = {p for p in range(len(sc)) if sc[p] > kth + tol}
            free = {p for p in range(len(sc)) if abs(sc[p] - kth) <= tol and cands[b, s, p]}
            if must <= cp and cp <= must | free and len(cp) == len(rp):
                ties += 1
                continue
            return SelectionReport(False, b * S + s, ties, where,
                                   f"pools {sorted(cp)} vs oracle {sorted(rp)} (k-th score {kth:.6g}, "
                                   f"tied within {tol:.3g} = eps {eps:g} x the query's score magnitude: "
                                   f"{sorted(free)})")
    return SelectionReport(True, B * S, ties, None, "")


def _pool_fully_in(tpool_row, p, tokens) -> bool:
    members = np.flatnonzero(tpool_row == p)
    return len(members) > 0 and set(members.tolist()) <= {int(t) for t in tokens}


def to_int(x) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x).astype(np.int64)
