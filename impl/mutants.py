"""The planted-bug catalogue: one deliberate mistake per entry, each a TorchKDA overriding one method.

A mutant that no test catches marks an untested property (TESTING.md: "a test that cannot fail is
a defect"). Every entry names the property that must catch it, as `mechanism.path.quantity`
(invariants/contracts.toml keys); `glmgate zoo` and impl/registry.py ("mutant:<name>") read
`MUTANTS`. Add a mutant as a TorchKDA subclass overriding ONE small method, plus one table row.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import torch
import torch.nn.functional as F

from impl.baseline.kda import TorchKDA, compute_dtype
from oracle.types import KDAState


@dataclasses.dataclass(frozen=True)
class Mutant:
    """One planted bug.

    Args:
        name: the catalogue key ("kda_tail_chunk_dropped")
        mechanism: the oracle module it breaks ("kda")
        description: one line saying what is wrong
        caught_by: the property that must catch it, "mechanism.path.quantity"
        factory: zero-arg callable building a fresh implementation object (TorchKDA's methods)
    """

    name: str
    mechanism: str
    description: str
    caught_by: str
    factory: Callable[[], object]


def _carry(seqs, initial, zero, run):
    """Documents of one packed row start from the previous document's final state; batch rows
    (different b) still start from their own."""
    finals, row = [], None
    for i, (b, s, e) in enumerate(seqs):
        if b != row:
            state, row = (zero if initial is None else initial[i].to(zero.dtype)), b
        state = run(b, s, e, state)
        finals.append(state)
    return torch.stack(finals)


class DecayAfterCorrection(TorchKDA):
    """Corrects with the undecayed state, then decays: M <- D((I - βkkᵀ)M + βkvᵀ)."""

    def _step(self, M, q_t, k_t, v_t, g_t, beta_t):
        r = torch.einsum("hkv,hk->hv", M, k_t)
        M = M + k_t[..., None] * (beta_t[:, None] * (v_t - r))[:, None, :]
        M = torch.exp(g_t)[..., None] * M
        return torch.einsum("hkv,hk->hv", M, q_t), M


class OutputBeforeUpdate(TorchKDA):
    """o_t is read from M_{t-1}, the state before token t's decay and correction."""

    def _step(self, M, q_t, k_t, v_t, g_t, beta_t):
        o = torch.einsum("hkv,hk->hv", M, q_t)
        return o, super()._step(M, q_t, k_t, v_t, g_t, beta_t)[1]


class TailChunkDropped(TorchKDA):
    """chunked skips the trailing partial chunk: zero outputs there, final state = last boundary."""

    def _chunks(self, q, k, v, g, beta, chunk):
        return [p for p in super()._chunks(q, k, v, g, beta, chunk) if p[0].shape[0] == chunk]


class PaddedStepsUpdateState(TorchKDA):
    """chunked pads to a multiple of L with beta 0.5 and k = last real k, so pads move the state."""

    def _chunks(self, q, k, v, g, beta, chunk):
        pad = -q.shape[0] % chunk
        if pad:
            q, v, g = (torch.cat([a, a.new_zeros(pad, *a.shape[1:])]) for a in (q, v, g))
            k = torch.cat([k, k[-1:].expand(pad, *k.shape[1:])])
            beta = torch.cat([beta, beta.new_full((pad, *beta.shape[1:]), 0.5)])
        return super()._chunks(q, k, v, g, beta, chunk)


class ConvStateNotCarried(TorchKDA):
    """sublayer/decode treat the incoming conv window as zeros (a continuation restarts the conv)."""

    def conv(self, z, weight, conv_state=None, cu_seqlens=None):
        return super().conv(z, weight, None, cu_seqlens)


class StateLeakAcrossCuSeqlens(TorchKDA):
    """With cu_seqlens each document's recurrence starts from the previous document's final state."""

    def _documents(self, seqs, state, zero, run):
        return _carry(seqs, state, zero, run)


class ConvSlidesAcrossDocuments(TorchKDA):
    """With cu_seqlens the conv window is not reset: a document sees the previous one's last inputs."""

    def _conv_documents(self, seqs, conv_state, zero, run):
        return _carry(seqs, conv_state, zero, run)


class SoftplusGate(TorchKDA):
    """The softplus gate -exp(A_log)·softplus(f) even when lower_bound is set."""

    def gate(self, f, A_log, lower_bound):
        return super().gate(f, A_log, None)


class L2EpsOutsideSqrt(TorchKDA):
    """L2 norm as x / max(sqrt(Σx²), sqrt(1e-6)): eps clamps the norm instead of sitting in the sqrt."""

    def l2norm(self, x):
        x = x.to(compute_dtype(x.dtype))
        return x / torch.sqrt(torch.sum(x * x, dim=-1, keepdim=True)).clamp(min=1e-3)


class StateBf16AcrossChunks(TorchKDA):
    """chunked rounds the carried state to bfloat16 at every chunk boundary (contract: float32)."""

    def _chunk_step(self, q, k, v, g, beta, M):
        o, M = super()._chunk_step(q, k, v, g, beta, M)
        return o, M.to(torch.bfloat16).to(M.dtype)


class QNotScaled(TorchKDA):
    """q is L2-normalised but not scaled by K^-1/2."""

    def _qk_norm(self, q, k):
        return self.l2norm(q), self.l2norm(k)


class SiluGateNorm(TorchKDA):
    """The output norm gate is silu(z) instead of sigmoid(z) (the Qwen3-Next GDN form)."""

    def _norm_gate(self, zg):
        return F.silu(zg)


class DecodeWindowNotShifted(TorchKDA):
    """decode returns the incoming conv window unchanged: the new token never enters the window."""

    def decode(self, w, z, f, b, state):
        o, new = super().decode(w, z, f, b, state)
        return o, KDAState(new.recurrent, state.conv)


class MaskIgnored(TorchKDA):
    """sublayer does not zero padded inputs, so left-padding tokens move the state (SPEC §6.1)."""

    def sublayer(self, w, x, state=None, mask=None, cu_seqlens=None):
        return super().sublayer(w, x, state, None, cu_seqlens)


class NondeterministicOutput(TorchKDA):
    """sublayer output carries run-to-run noise of ~2^-22 relative (an unordered atomic reduction)."""

    def sublayer(self, w, x, state=None, mask=None, cu_seqlens=None):
        y, s = super().sublayer(w, x, state, mask, cu_seqlens)
        noise = torch.rand(y.shape, device=y.device, dtype=torch.float32) - 0.5
        return (y.float() * (1 + 2.0 ** -22 * noise)).to(y.dtype), s


def _row(cls, name: str, caught_by: str) -> tuple[str, Mutant]:
    return name, Mutant(name, "kda", cls.__doc__.strip(), caught_by, cls)


MUTANTS: dict[str, Mutant] = dict((
    _row(DecayAfterCorrection, "kda_decay_after_correction", "kda.recurrent.output"),
    _row(OutputBeforeUpdate, "kda_output_before_update", "kda.recurrent.output"),
    _row(TailChunkDropped, "kda_tail_chunk_dropped", "kda.chunked.output"),
    _row(PaddedStepsUpdateState, "kda_padded_steps_update_state", "kda.chunked.final_state"),
    _row(ConvStateNotCarried, "kda_conv_state_not_carried", "kda.paths.output"),
    _row(StateLeakAcrossCuSeqlens, "kda_state_leak_across_cu_seqlens", "kda.chunked.output"),
    _row(ConvSlidesAcrossDocuments, "kda_conv_slides_across_documents", "kda.packed.output"),
    _row(SoftplusGate, "kda_softplus_gate", "kda.sublayer.output"),
    _row(L2EpsOutsideSqrt, "kda_l2_eps_outside_sqrt", "kda.sublayer.output"),
    _row(StateBf16AcrossChunks, "kda_state_bf16_across_chunks", "kda.chunked.final_state"),
    _row(QNotScaled, "kda_q_not_scaled", "kda.sublayer.output"),
    _row(SiluGateNorm, "kda_silu_gate_norm", "kda.sublayer.output"),
    _row(DecodeWindowNotShifted, "kda_decode_window_not_shifted", "kda.decode.conv_state"),
    _row(MaskIgnored, "kda_mask_ignored", "kda.sublayer.output"),
    _row(NondeterministicOutput, "kda_nondeterministic_output", "kda.rerun.output"),
))


def get(name: str) -> Mutant:
    """The catalogue entry `name`; KeyError listing the known names otherwise."""
    try:
        return MUTANTS[name]
    except (KeyError, TypeError):
        raise KeyError(f"unknown mutant {name!r}: expected one of {sorted(MUTANTS)}") from None
