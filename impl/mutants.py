"""The planted-bug catalogue: one deliberate mistake per entry, each a TorchKDA overriding one method.

A mutant that no test catches marks an untested property (TESTING.md: "a test that cannot fail is
a defect"). Every entry names the property that must catch it, as `mechanism.path.quantity`
(invariants/contracts.toml keys); `glmgate zoo` and impl/registry.py ("mutant:<name>") read
`MUTANTS`. Add a mutant as a TorchKDA subclass overriding ONE small method, plus one table row.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Optional

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
        dtype: None: the zoo runs the mutant in the run's dtype (float32 on the CPU, bfloat16 on a
            GPU); a dtype name ("float32"): caught_by is a contract of that dtype, so the zoo runs it in
            that dtype on every device (a bf16 run cannot resolve the bug below its own rounding)
    """

    name: str
    mechanism: str
    description: str
    caught_by: str
    factory: Callable[[], object]
    dtype: Optional[str] = None


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

    # A float32 property (dtype "float32" in its table row): the recurrent state is carried in float32
    # (SPEC §2). In a bf16 run the state error of a CORRECT kernel is already dominated by the
    # bf16-rounded inputs and, for a GPU kernel, its bf16 operands inside the chunk (measured on the
    # H200: our kernel's final-state error ~3.4x the torch baseline's, more than one bf16 rounding of
    # the state per chunk adds), so no bf16 bound separates this bug from a correct kernel. In float32
    # a bf16 rounding is 2^16 x the run's own, and the float32 contract catches it.

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
    """Each run flips the last mantissa bit of a random half of the sublayer output (an unordered atomic reduction)."""

    def sublayer(self, w, x, state=None, mask=None, cu_seqlens=None):
        y, s = super().sublayer(w, x, state, mask, cu_seqlens)
        # made on the output's own bits: noise added in float32 and cast back rounds away in bf16,
        # where a real race still shows as a last-bit difference
        bits, lsb = _LAST_BIT[y.dtype]
        flip = torch.randint(0, 2, y.shape, device=y.device, dtype=bits) * lsb
        return (y.contiguous().view(bits) ^ flip).view(y.dtype), s


# (same-width integer view, the bit an unordered reduction leaves nondeterministic): the last one of
# the output dtype, or of the float32 accumulator when the output is wider (float64: 52 - 23 = bit 29)
_LAST_BIT = {torch.bfloat16: (torch.int16, 1), torch.float16: (torch.int16, 1), torch.float32: (torch.int32, 1),
             torch.float64: (torch.int64, 1 << 29)}


def _row(cls, name: str, caught_by: str, dtype: Optional[str] = None) -> tuple[str, Mutant]:
    return name, Mutant(name, "kda", cls.__doc__.strip(), caught_by, cls, dtype)


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
    _row(StateBf16AcrossChunks, "kda_state_bf16_across_chunks", "kda.chunked.final_state", dtype="float32"),
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


# ----------------------------------------------------------------------------- DSA / MLA mutants
# Each a TorchDSA / TorchMLA (impl/baseline/dsa.py, mla.py) overriding ONE small method.

from impl.baseline.dsa import TorchDSA  # noqa: E402
from impl.baseline.mla import TorchMLA, _linear  # noqa: E402


class DsaTailOffByOne(TorchDSA):
    """The tail starts one token late: the first token of the current incomplete pool is never attended."""

    def _tail(self, first, val, pos, kpool):
        return super()._tail(first + 1, val, pos, kpool)


class DsaTailOmitted(TorchDSA):
    """No tail: the current incomplete pool's tokens are not force-included (always_select_tail ignored)."""

    def _tail(self, first, val, pos, kpool):
        return torch.full((val.shape[0], pos.shape[0], 0), -1, dtype=torch.int64, device=val.device)


class DsaMeanPooling(TorchDSA):
    """Pool keys are the plain mean of the members' keys, not the per-channel softmax(gsc + ape) mix."""

    def _pool_softmax(self, lam):
        real = torch.isfinite(lam).to(lam.dtype)
        return real / real.sum(dim=-2, keepdim=True).clamp(min=1.0)


class DsaVisibleByFirstToken(TorchDSA):
    """A pool is a candidate once its FIRST member is visible (it should be its last): future tokens leak."""

    def _visible_member(self, member_idx):
        return member_idx[..., 0]


class DsaBudgetTopk(TorchDSA):
    """The selection has topk slots (2048) instead of topk + P_k - 1 (2051): a full tail is cut off."""

    def _width(self, w):
        return w.topk


class DsaAnchorAtZero(TorchDSA):
    """Pools are anchored at position 0, not at the first real token: left padding shifts every pool."""

    def _anchor(self, val):
        return torch.zeros(val.shape[0], dtype=torch.int64, device=val.device)


class MlaScaleMoved(TorchMLA):
    """The softmax scale is (d_n + d_v)^-1/2 instead of d_qk^-1/2 = d_n^-1/2 (no rope part)."""

    def _scale(self, w):
        return (w.nope_dim + w.v_dim) ** -0.5


class MlaUnnormalizedLatentCached(TorchMLA):
    """The cache holds the raw kv_a output, not the kv_a_layernorm-normalized latent (pitfall 9)."""

    def _cache_latent(self, w, a, c):
        return _linear(a, w.kv_a_proj_with_mqa, w.kv_a_bias)


class MlaSharedRerunsIndexer(TorchMLA):
    """A "shared" layer runs the indexer `iw` it is given instead of reusing the previous selection."""

    def _select(self, iw, a, q_lat, old_rows, mask, prev, kind, T):
        return super()._select(iw, a, q_lat, old_rows, mask, prev, "full", T)


class DsaNewestPoolStaleKey(TorchDSA):
    """The newest kept pool is scored with the pool key before it (a pooled-key cache one pool behind): only the last positions pick wrongly, the caches stay right."""

    # what a bug near the end of the selection looks like from outside: in an MLA layer only the last
    # positions' attention output is wrong while the latent cache and the index rows agree

    def pool_keys(self, packed, ape, kpool):
        kbar, member_idx, pool_valid, first, kept = super().pool_keys(packed, ape, kpool)
        if kbar.shape[1] >= 2:
            kbar = torch.cat([kbar[:, :-1], kbar[:, -2:-1]], dim=1)
        return kbar, member_idx, pool_valid, first, kept


def _dsa_mla_row(cls, name: str, caught_by: str) -> tuple[str, Mutant]:
    return name, Mutant(name, caught_by.split(".", 1)[0], cls.__doc__.strip(), caught_by, cls)


MUTANTS.update((
    _dsa_mla_row(DsaTailOffByOne, "dsa_tail_off_by_one", "dsa.index.selection"),
    _dsa_mla_row(DsaTailOmitted, "dsa_tail_omitted", "dsa.index.selection"),
    _dsa_mla_row(DsaMeanPooling, "dsa_mean_pooling", "dsa.index.scores"),
    _dsa_mla_row(DsaVisibleByFirstToken, "dsa_visible_by_first_token", "dsa.index.selection"),
    _dsa_mla_row(DsaBudgetTopk, "dsa_budget_topk", "dsa.index.selection"),
    _dsa_mla_row(DsaAnchorAtZero, "dsa_anchor_at_zero", "dsa.index.selection"),
    _dsa_mla_row(MlaScaleMoved, "mla_scale_moved", "mla.absorbed.output"),
    _dsa_mla_row(MlaUnnormalizedLatentCached, "mla_unnormalized_latent_cached", "mla.paths.latent_cache"),
    _dsa_mla_row(MlaSharedRerunsIndexer, "mla_shared_reruns_indexer", "mla.paths.shared_output"),
    _dsa_mla_row(DsaNewestPoolStaleKey, "dsa_newest_pool_stale_key", "dsa.index.scores"),
))


# ----------------------------------------------------------------------------- mHC mutants
# Each a TorchMHC (impl/baseline/mhc.py) overriding ONE small method.

from impl.baseline.mhc import COLS, ROWS, TorchMHC  # noqa: E402


class MhcCombNotTransposed(TorchMHC):
    """write_back mixes the streams with C instead of Cᵀ: output stream n takes row n of C, not column n."""

    def _comb_for_write_back(self, comb):
        return comb


class MhcRowFirstSinkhorn(TorchMHC):
    """Sinkhorn starts with a row normalization: row, then (iters-1) x (column, row), ending on rows."""

    def _sinkhorn_step_order(self, iters):
        return (ROWS,) + (COLS, ROWS) * (iters - 1)


class MhcPreNormalized(TorchMHC):
    """pre = sigmoid + hc_eps divided by its sum over the streams (a convex combination; SPEC: not normalized)."""

    def _pre(self, logits, eps):
        pre = super()._pre(logits, eps)
        return pre / pre.sum(dim=-1, keepdim=True)


MUTANTS.update((
    _dsa_mla_row(MhcCombNotTransposed, "mhc_comb_not_transposed", "mhc.write_back.output"),
    _dsa_mla_row(MhcRowFirstSinkhorn, "mhc_row_first_sinkhorn", "mhc.coefficients.comb"),
    _dsa_mla_row(MhcPreNormalized, "mhc_pre_normalized", "mhc.coefficients.pre"),
))


# ----------------------------------------------------------------------------- MoE / NVFP4 mutants
# Each a TorchMoE (impl/baseline/moe.py) or TorchNVFP4 (impl/baseline/nvfp4.py) overriding ONE small method.

from impl.baseline.moe import TorchMoE  # noqa: E402
from impl.baseline.nvfp4 import E2M1, TorchNVFP4  # noqa: E402


class MoeBiasInWeights(TorchMoE):
    """The mixture weights are made of the biased selection scores sigmoid + bias, not the raw sigmoid."""

    def _picked(self, s, bias, ids):
        return torch.gather(s + bias, -1, ids)


class MoeTwoSidedGateClamp(TorchMoE):
    """The SwiGLU gate is clamped on both sides, clip(gate, -L, L) (SPEC: from above only)."""

    def _clamp_gate(self, gate, limit):
        return gate.clamp(-limit, limit)


class MoeScalingBeforeNorm(TorchMoE):
    """routed_scaling_factor multiplies before the renormalization, which then cancels it (weights sum to 1)."""

    def mixture_weights(self, picked, norm_topk_prob, routed_scaling_factor):
        picked = picked * routed_scaling_factor
        if norm_topk_prob:
            picked = picked / (picked.sum(dim=-1, keepdim=True) + 1e-20)
        return picked


class MoeTop1GroupScore(TorchMoE):
    """A group's score is its single best biased score, not the sum of its top 2."""

    def group_scores(self, biased, n_group):
        N, E = biased.shape
        return biased.reshape(N, n_group, E // n_group).amax(dim=-1)


class Nvfp4HighNibbleFirst(TorchNVFP4):
    """unpack reads element 2j from the HIGH nibble and 2j+1 from the low one (A4: low nibble first)."""

    def unpack(self, packed):
        codes = super().unpack(packed)
        return codes.reshape(*codes.shape[:-1], -1, 2).flip(-1).reshape(codes.shape)


class Nvfp4GlobalScaleWrongDirection(TorchNVFP4):
    """dequantize multiplies by the ENCODE scale 1/global_decode (the reciprocal of the right factor)."""

    def _decode_scale(self, t):
        return 1.0 / super()._decode_scale(t)


class Nvfp4ScalesReadLinear(TorchNVFP4):
    """A 128x4-swizzled scale buffer is read as if it were linear row-major (no unswizzle)."""

    def _linear_scales(self, sw, shape):
        M, Kb = (int(d) for d in shape)
        Kp = -(-Kb // 4) * 4
        return sw.reshape(-1, Kp)[:M, :Kb]


class Nvfp4ArgminRounding(TorchNVFP4):
    """E2M1 rounding by argmin over the table: ties go to the SMALLER magnitude (0.75 -> 0.5, 1.75 -> 1.5)."""

    def _magnitude_code(self, mag):
        table = torch.tensor(E2M1, dtype=mag.dtype, device=mag.device)
        return (mag[..., None] - table).abs().argmin(dim=-1).to(torch.uint8)


MUTANTS.update((
    _dsa_mla_row(MoeBiasInWeights, "moe_bias_in_weights", "moe.route.weights"),
    _dsa_mla_row(MoeTwoSidedGateClamp, "moe_two_sided_gate_clamp", "moe.forward.output"),
    _dsa_mla_row(MoeScalingBeforeNorm, "moe_scaling_before_norm", "moe.route.weights"),
    _dsa_mla_row(MoeTop1GroupScore, "moe_top1_group_score", "moe.route.expert_ids"),
    _dsa_mla_row(Nvfp4HighNibbleFirst, "nvfp4_high_nibble_first", "nvfp4.dequantize.weights"),
    _dsa_mla_row(Nvfp4GlobalScaleWrongDirection, "nvfp4_global_scale_wrong_direction", "nvfp4.dequantize.weights"),
    _dsa_mla_row(Nvfp4ScalesReadLinear, "nvfp4_scales_read_linear", "nvfp4.dequantize.weights"),
    _dsa_mla_row(Nvfp4ArgminRounding, "nvfp4_argmin_rounding", "nvfp4.quantize.codes"),
))


class Nvfp4W4A4NeighbourBlockScale(TorchNVFP4):
    """W4A4 activation qdq scales each 16-block by its right neighbour's scale (the last block by the first's)."""

    def qdq_activation(self, x, input_global_scale):
        x32 = x.float()
        G = torch.as_tensor(input_global_scale, dtype=torch.float32, device=x32.device).reshape(())
        blocks = x32.reshape(*x32.shape[:-1], -1, 16)
        amax = blocks.abs().amax(dim=-1).roll(-1, dims=-1)                      # the wrong block's amax
        s = torch.clamp_max(G * (amax / 6.0), 448.0).to(torch.float8_e4m3fn).float()[..., None]
        v = torch.where(s > 0, (blocks * G) / torch.where(s > 0, s, 1.0), 0.0).clamp(-6.0, 6.0)
        return (self.dequantize_e2m1(self.quantize_e2m1(v)) * s / G).reshape(x32.shape)


class Nvfp4W4A4InputScaleDecodeDirection(TorchNVFP4):
    """W4A4 activation qdq takes the DECODE input scale (ModelOpt input_scale = 1/G) where the ENCODE G belongs."""

    def qdq_activation(self, x, input_global_scale):
        return super().qdq_activation(x, 1.0 / torch.as_tensor(input_global_scale, dtype=torch.float32))


# caught only by the quantization gate's kernel comparison: no cheaper check runs the activation quantizer
MUTANTS.update((
    _dsa_mla_row(Nvfp4W4A4NeighbourBlockScale, "nvfp4_w4a4_neighbour_block_scale", "nvfp4.gate.kernel_w4a4"),
    _dsa_mla_row(Nvfp4W4A4InputScaleDecodeDirection, "nvfp4_w4a4_input_scale_decode_direction",
                 "nvfp4.gate.kernel_w4a4"),
))


# ---------------------------------------------------------------------------------------- serving
# Engine subclasses (impl/serving.py), one hook overridden each; caught by tests/test_serving_state.py.
# Kept in their own table: MUTANTS rows must name a check of invariants/matrix.py (registry.get
# "mutant:<name>" swaps a mechanism namespace), which the serving state machine is not (yet).
# factory() returns the Engine class; build it with Engine(model).

from impl.serving import Engine  # noqa: E402


class ServingRollbackKeepsConvWindow(Engine):
    """Rollback restores the KDA recurrent state and DSA caches but keeps the post-speculation conv window."""

    def _restore(self, snapshot, current):
        s = snapshot.snapshot()
        s.layers = [KDAState(e.recurrent, c.conv) if isinstance(e, KDAState) else e
                    for e, c in zip(s.layers, current.layers)]
        return s


class ServingForkAliasesBuffers(Engine):
    """Fork shares the donor's state object (and its in-place KDA buffers) instead of deep-copying."""

    def _fork_state(self, state):
        return state


class ServingPrefixHitDropsIndexerRows(Engine):
    """A prefix-cache hit restores the latent caches but zeroed indexer rows."""

    def _prefix_state(self, state):
        from oracle.types import DSACache
        state.layers = [DSACache(e.latent, e.index_rows * 0)
                        if isinstance(e, DSACache) and e.index_rows is not None else e for e in state.layers]
        return state


class ServingPaddedStepsUpdateKdaState(Engine):
    """A padded batch prefill pads on the RIGHT: the pad steps after a short prompt still decay the KDA
    recurrent state and shift zeros into the conv window that the request keeps."""

    def _pad(self, prompt, S):
        n = len(prompt)
        return list(prompt) + [self.model.geometry.pad_token_id] * (S - n), [1] * n + [0] * (S - n)


def _serving_row(cls, name: str) -> tuple[str, Mutant]:
    return name, Mutant(name, "serving", cls.__doc__.strip(), "serving.state_machine.state", lambda: cls)


SERVING_MUTANTS: dict[str, Mutant] = dict((
    _serving_row(ServingRollbackKeepsConvWindow, "serving_rollback_keeps_conv_window"),
    _serving_row(ServingForkAliasesBuffers, "serving_fork_aliases_buffers"),
    _serving_row(ServingPrefixHitDropsIndexerRows, "serving_prefix_hit_drops_indexer_rows"),
    _serving_row(ServingPaddedStepsUpdateKdaState, "serving_padded_steps_update_kda_state"),
))


# ----------------------------------------------------------------------------- whole-decoder mutants
# A model namespace (impl/registry.py FUNCTIONS["model"]: forward, deserialize) over impl.model and
# impl.state with ONE planted wiring bug; every mechanism namespace stays the torch baseline. No
# per-mechanism check can see these: they live in how the decoder composes layers, masks and states
# across calls. Caught by the model check (invariants/model_checks.py).

import dataclasses as _dc  # noqa: E402

from oracle.config import SHARED as _SHARED  # noqa: E402
from oracle.types import DSACache as _DSACache  # noqa: E402
from oracle.types import Selection as _Selection  # noqa: E402


class ModelOps:
    """impl.model.forward and impl.state.HybridState.deserialize as methods a model mutant overrides."""

    def forward(self, weights, input_ids, state=None, attention_mask=None, backend=None):
        from impl import model as im
        return im.forward(weights, input_ids, state, attention_mask, backend)

    def deserialize(self, data, device="cpu"):
        from impl.state import HybridState
        return HybridState.deserialize(data, device=device)


class _StaleHandoff:
    """An mla namespace whose shared layers read a hand-off buffer that only multi-token calls refresh."""

    def __init__(self, mla, buffer: dict):
        self.mla, self.buffer = mla, buffer

    def __getattr__(self, name):
        return getattr(self.mla, name)

    def sublayer(self, w, iw, a, cache, mask, prev, kind):
        if kind == _SHARED and a.shape[1] > 1:
            s = prev
            self.buffer[id(w)] = _Selection(s.indices[:, -1:], s.scores[:, -1:], s.candidate[:, -1:], s.k_sel,
                                            s.pool_first, s.kept)
        elif kind == _SHARED and id(w) in self.buffer:
            prev = self.buffer[id(w)]
        return self.mla.sublayer(w, iw, a, cache, mask, prev, kind)


class ModelStaleSharedSelectionInDecode(ModelOps):
    """1-token decode hands the shared DSA layer the selection of the last PREFILL query (a hand-off
    buffer only multi-token calls refresh), not the one its full layer just made."""

    def __init__(self):
        self.buffer = {}

    def forward(self, weights, input_ids, state=None, attention_mask=None, backend=None):
        from impl import model as im
        if state is None or state.seq_len == 0:
            self.buffer.clear()                    # a new sequence
        be = backend if backend is not None else im.backend_for("triton")
        return super().forward(weights, input_ids, state, attention_mask,
                               _dc.replace(be, mla=_StaleHandoff(be.mla, self.buffer)))


class ModelRestoreDropsConvWindow(ModelOps):
    """A deserialized state comes back with zeroed KDA conv windows (the prefix cache loses them)."""

    def deserialize(self, data, device="cpu"):
        s = super().deserialize(data, device)
        s.layers = [KDAState(e.recurrent, torch.zeros_like(e.conv)) if isinstance(e, KDAState) else e
                    for e in s.layers]
        return s


class ModelDecodeForgetsPadding(ModelOps):
    """A 1-token decode reads every cached token as real: the valid flags remembering left padding are
    reset to 1 (SPEC §10: earlier padding lives in the caches)."""

    def forward(self, weights, input_ids, state=None, attention_mask=None, backend=None):
        if state is not None and input_ids.shape[1] == 1:
            state = state.snapshot()
            state.layers = [_DSACache(e.latent, torch.cat([e.index_rows[..., :-1], torch.ones_like(
                e.index_rows[..., -1:])], -1)) if isinstance(e, _DSACache) and e.index_rows is not None else e
                for e in state.layers]
        return super().forward(weights, input_ids, state, attention_mask, backend)


class ModelMaskFirstColumns(ModelOps):
    """A multi-token call masks its S tokens with the FIRST S columns of a longer 2-D mask, not the
    last S (SPEC §3): a continuation after left padding treats its first real tokens as pads."""

    def forward(self, weights, input_ids, state=None, attention_mask=None, backend=None):
        S = input_ids.shape[1]
        if attention_mask is not None and S > 1 and attention_mask.shape[1] > S:
            attention_mask = attention_mask[:, :S]
        return super().forward(weights, input_ids, state, attention_mask, backend)


MUTANTS.update((
    _dsa_mla_row(ModelStaleSharedSelectionInDecode, "model_stale_shared_selection_in_decode",
                 "model.paths.logits"),
    _dsa_mla_row(ModelRestoreDropsConvWindow, "model_restore_drops_conv_window", "model.paths.kda_conv"),
    _dsa_mla_row(ModelDecodeForgetsPadding, "model_decode_forgets_padding", "model.paths.valid_flags"),
    _dsa_mla_row(ModelMaskFirstColumns, "model_mask_first_columns", "model.paths.logits"),
))
