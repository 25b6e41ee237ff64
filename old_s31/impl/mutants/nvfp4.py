"""NVFP4 mutants: each a TorchNVFP4 (impl/baseline/nvfp4.py) overriding ONE small method."""
from __future__ import annotations

import torch

from impl.baseline.nvfp4 import E2M1, GLOBAL_NUMERATOR, TorchNVFP4
from impl.mutants.catalogue import mutant


@mutant("nvfp4.dequantize", "weights")
class Nvfp4HighNibbleFirst(TorchNVFP4):
    """unpack reads element 2j from the HIGH nibble and 2j+1 from the low one (A4: low nibble first)."""

    def unpack(self, packed):
        codes = super().unpack(packed)
        return codes.reshape(*codes.shape[:-1], -1, 2).flip(-1).reshape(codes.shape)


@mutant("nvfp4.dequantize", "weights")
class Nvfp4GlobalScaleWrongDirection(TorchNVFP4):
    """dequantize multiplies by the ENCODE scale 1/global_decode (the reciprocal of the right factor)."""

    def _decode_scale(self, t):
        return 1.0 / super()._decode_scale(t)


@mutant("nvfp4.dequantize", "weights")
class Nvfp4ScalesReadLinear(TorchNVFP4):
    """A 128x4-swizzled scale buffer is read as if it were linear row-major (no unswizzle)."""

    def _linear_scales(self, sw, shape):
        M, Kb = (int(d) for d in shape)
        Kp = -(-Kb // 4) * 4
        return sw.reshape(-1, Kp)[:M, :Kb]


@mutant("nvfp4.quantize", "codes")
class Nvfp4ArgminRounding(TorchNVFP4):
    """E2M1 rounding by argmin over the table: ties go to the SMALLER magnitude (0.75 -> 0.5, 1.75 -> 1.5)."""

    def _magnitude_code(self, mag):
        table = torch.tensor(E2M1, dtype=mag.dtype, device=mag.device)
        return (mag[..., None] - table).abs().argmin(dim=-1).to(torch.uint8)


# the two W4A4 mutants are caught only by the quantization gate's kernel comparison: no cheaper check
# runs the activation quantizer

@mutant("nvfp4.gate", "kernel_w4a4")
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


@mutant("nvfp4.gate", "kernel_w4a4")
class Nvfp4W4A4InputScaleDecodeDirection(TorchNVFP4):
    """W4A4 activation qdq takes the DECODE input scale (ModelOpt input_scale = 1/G) where the ENCODE G belongs."""

    def qdq_activation(self, x, input_global_scale):
        return super().qdq_activation(x, 1.0 / torch.as_tensor(input_global_scale, dtype=torch.float32))


# the fused-MoE scale bugs: caught by the quantization gate, whose NVFP4 mixture dequantizes the stacked
# experts (gate/up global scales up to 10x apart; linear and swizzled block scales both drawn)

@mutant("nvfp4.gate", "kernel_w4a16")
class Nvfp4FusedGateScaleBothHalves(TorchNVFP4):
    """A fused gate_up applies the gate's global scale to both halves (vLLM #54974: the up half misscaled)."""

    def _half_scales(self, g):
        return g[..., :1].expand(g.shape)


@mutant("nvfp4.gate", "kernel_w4a16")
class Nvfp4ExpertSwizzledScalesReadLinear(TorchNVFP4):
    """Stacked experts' 128x4-swizzled block scales are read as if linear row-major (the marker ignored)."""

    def _expert_linear_scales(self, sw, shape):
        M, Kb = (int(d) for d in shape)
        return sw.reshape(*sw.shape[:-2], -1, sw.shape[-1])[..., :M, :Kb]


@mutant("nvfp4.batch", "batch")
class Nvfp4ActivationScaleFromBatch(TorchNVFP4):
    """qdq_activation quantizes under the amax of the whole batch it is handed, not the scale it is given (a per-batch online scale, sgl-project/sglang #8134)."""

    def qdq_activation(self, x, input_global_scale):
        amax = x.detach().abs().amax().float()
        return super().qdq_activation(x, GLOBAL_NUMERATOR / amax if amax > 0 else input_global_scale)


@mutant("nvfp4.rerun", "rerun")
class Nvfp4StochasticRounding(TorchNVFP4):
    """E2M1 codes are rounded stochastically (the training recipe's RS mode) on an inference path, so the codes change from run to run (pytorch/ao #3264)."""

    def _magnitude_code(self, mag):
        table = torch.tensor(E2M1, dtype=torch.float32, device=mag.device)
        m = mag.float().clamp(max=table[-1]).contiguous()
        lo = torch.searchsorted(table, m, right=True) - 1
        gap = table[(lo + 1).clamp(max=7)] - table[lo]
        up = torch.rand_like(m) * gap < m - table[lo]
        return (lo + up.long()).to(torch.uint8)
