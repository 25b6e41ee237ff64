"""The quantization gate: per-token KL(ref || cand) and top-1 agreement of logits (NVFP4.md A9).

Two uses (kind `quantization_gate` of invariants/contracts.d/nvfp4.toml):
  kernel replacement  our NVFP4 kernels vs the oracle's NVFP4 math in float64 (same codes, scales and
                      activation quantization): mean KL < 1e-5 and 100% top-1, the practitioners' bar
  quantization effect the oracle's NVFP4 math vs the oracle unquantized: a measured, declared band

Layer harness (`LayerHarness`): an MoE layer's output y [N, D] read through a FIXED seeded vocabulary
projection, logits = rms_normalize(y) @ P with P [D, V] ~ N(0, (T / sqrt(D))^2), so logits have a
standard deviation of about T = 3 (a model's final norm + lm_head, without the residual stream:
the whole logit signal passes through the quantized layer, the strict view).

All metrics in float64 from log-softmax (no exp of large logits).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

LOGIT_STD = 3.0


def _logits(a) -> np.ndarray:
    if hasattr(a, "detach"):
        a = a.detach().double().cpu().numpy()
    a = np.asarray(a, dtype=np.float64)
    return a.reshape(-1, a.shape[-1])


def log_softmax(z) -> np.ndarray:
    """[N, V] -> log p, stable: z - max - log Σ exp(z - max)."""
    z = _logits(z)
    m = z.max(axis=-1, keepdims=True)
    return z - m - np.log(np.exp(z - m).sum(axis=-1, keepdims=True))


def kl_per_token(ref, cand) -> np.ndarray:
    """KL(p_ref || p_cand) = Σ_v p_ref (log p_ref - log p_cand) for each token row, [N] float64 >= 0."""
    lp, lq = log_softmax(ref), log_softmax(cand)
    if lp.shape != lq.shape:
        raise ValueError(f"logits: reference {lp.shape} vs candidate {lq.shape}")
    return np.maximum((np.exp(lp) * (lp - lq)).sum(axis=-1), 0.0)


def top1_agreement(ref, cand, tie_eps: float = 0.0) -> tuple[float, int]:
    """(fraction of tokens whose candidate argmax is a reference argmax, near-tie tokens accepted).

    A candidate pick agrees when the reference logit there is within tie_eps of the reference max
    (tie-aware, TESTING.md); the count is of tokens that agreed only through that tolerance.
    """
    r, c = _logits(ref), _logits(cand)
    if not len(r):
        return 1.0, 0
    pick = c.argmax(axis=-1)
    at_pick = np.take_along_axis(r, pick[:, None], axis=-1)[:, 0]
    strict = pick == r.argmax(axis=-1)
    ok = strict | (at_pick >= r.max(axis=-1) - tie_eps)
    return float(ok.mean()), int((ok & ~strict).sum())


class GateMetrics(NamedTuple):
    mean_kl: float
    p99_kl: float          # numpy's default (linear interpolation between order statistics)
    max_kl: float
    top1: float            # fraction of tokens, tie-aware within tie_eps
    tokens: int
    ties: int              # tokens that agreed only through the tie tolerance

    def line(self) -> str:
        return (f"KL mean {self.mean_kl:.3g}, p99 {self.p99_kl:.3g}, max {self.max_kl:.3g}; "
                f"top-1 {100 * self.top1:.2f}% of {self.tokens} tokens")


def gate_metrics(ref, cand, tie_eps: float = 0.0) -> GateMetrics:
    """KL(ref || cand) per token (mean, p99, max) and top-1 agreement of two logit arrays [..., V]."""
    if not np.isfinite(_logits(cand)).all():           # a non-finite candidate logit fails every bound
        n = len(_logits(cand))
        return GateMetrics(np.inf, np.inf, np.inf, 0.0, n, 0)
    kl = kl_per_token(ref, cand)
    top1, ties = top1_agreement(ref, cand, tie_eps)
    if not len(kl):
        return GateMetrics(0.0, 0.0, 0.0, 1.0, 0, 0)
    return GateMetrics(float(kl.mean()), float(np.percentile(kl, 99)), float(kl.max()), top1, len(kl), ties)


# ----------------------------------------------------------------------------- the layer harness


def projection(hidden: int, vocab: int, seed: int = 0) -> np.ndarray:
    """The fixed vocabulary projection P [D, V], N(0, (LOGIT_STD / sqrt(D))^2), from `seed` alone."""
    rng = np.random.default_rng(np.random.SeedSequence([0x9A7E, seed, hidden, vocab]))
    return rng.standard_normal((hidden, vocab)) * (LOGIT_STD / np.sqrt(hidden))


def layer_logits(y, P) -> np.ndarray:
    """logits [N, V] = rms_normalize(y) @ P in float64 (a zero row stays zero)."""
    y = _logits(y)
    rms = np.sqrt((y * y).mean(axis=-1, keepdims=True))
    return (y / np.where(rms > 0, rms, 1.0)) @ np.asarray(P, dtype=np.float64)
