"""An NVFP4 candidate: a quantizer and a dequantizer that keep their block scales SWIZZLED and their
global scale in the ENCODE direction, wrapped into the protocol's linear scales and DECODE scale.

`vendor_quantize` / `vendor_dequantize` stand in for your kernels (plain torch; the quantizer is
built on our baseline so its codes are right, the dequantizer reads the swizzled bytes itself).
Their conventions, and what the protocol (impl/nvfp4.py, oracle/types.py NVFP4Tensor) wants:

  block scales  swizzled: the 128x4-tiled layout CUTLASS / cuBLASLt read, [Mp, Kp] (rows padded to
                128, scale columns to 4, zero filled); the protocol's NVFP4Tensor.block_scale is LINEAR
                row-major [N, K/16]. unswizzle_scales / swizzle_scales convert (they are exact).
  global scale  ENCODE G = 2688 / amax (compressed-tensors' weight_global_scale); the protocol's
                global_decode is the DECODE scale, and bit-exactly the float32 reciprocal 1 / G
                (what a compressed-tensors loader computes). amax / 2688 (ModelOpt's weight_scale_2
                computed from the amax) can differ from 1 / G in the last bit, and nvfp4.quantize
                compares the scale's bits.
  dequantize    (e2m1 · block scale) · global_decode in float32, in that order: e2m1 · scale is
                exact, the product with global_decode rounds once. Dividing by G instead of
                multiplying by 1 / G is not bit-exact.
  packing       uint8 [N, K/2], element 2j in the LOW nibble (the same here; a kernel packing the
                other way must swap nibbles: (p >> 4) | (p << 4)).

Gate it from this directory:  glmgate gate --candidate nvfp4_vendor_layout:Candidate --mechanism nvfp4
"""
from __future__ import annotations

import torch

from impl.baseline.nvfp4 import BLOCK, FP8, nvfp4 as _baseline
from oracle.types import NVFP4Tensor

E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def vendor_quantize(w, encode_scale=None):
    """The stand-in quantizer. w [N, K] float32 -> (packed uint8 [N, K/2], swizzled fp8 scales
    [Mp, Kp], encode scale float32 0-dim: G = 2688 / amax unless given)."""
    G = _baseline.global_scale_encode(w.abs().max()) if encode_scale is None else encode_scale
    t = _baseline.quantize(w, global_scale=G)
    return t.packed, _baseline.swizzle_scales(t.block_scale), G


def _swizzled_offset(m, k, scale_cols: int):
    """Byte offset of scale (row m, scale column k) in the 128x4 swizzled layout of Kb = scale_cols."""
    kt = -(-scale_cols // 4)
    return ((m // 128 * kt + k // 4) * 32 + m % 32) * 16 + (m // 32) % 4 * 4 + k % 4


def vendor_dequantize(packed, swizzled, decode_scale, dtype=torch.float32):
    """The stand-in dequantizer. packed uint8 [N, K/2], swizzled fp8 [Mp, Kp], decode_scale float32
    0-dim -> [N, K] in dtype = (e2m1 · block scale) · decode_scale."""
    N, K = packed.shape[0], 2 * packed.shape[1]
    codes = torch.stack([packed & 0xF, packed >> 4], dim=-1).reshape(N, K).long()
    table = torch.tensor(E2M1, dtype=dtype, device=packed.device)
    vals = torch.where(codes >= 8, -1.0, 1.0).to(dtype) * table[codes & 7]
    m = torch.arange(N, device=packed.device)[:, None]
    k = torch.arange(K // BLOCK, device=packed.device)[None, :]
    scale = swizzled.reshape(-1)[_swizzled_offset(m, k, K // BLOCK)].to(dtype)        # [N, K/16]
    return (vals * scale.repeat_interleave(BLOCK, dim=-1)) * decode_scale.to(dtype)


class NVFP4:
    """The nvfp4 namespace: quantize, dequantize, dequantize_swizzled."""

    @staticmethod
    def quantize(w, global_scale=None) -> NVFP4Tensor:
        """impl.nvfp4.quantize: w [N, K] (K % 16 == 0), global_scale ENCODE or None ->
        NVFP4Tensor(packed [N, K/2], LINEAR fp8 scales [N, K/16], global_decode float32 0-dim)."""
        w = w.float()
        if w.ndim != 2 or w.shape[1] % BLOCK:
            raise ValueError(f"w: expected [N, K] with K a multiple of {BLOCK}, got shape {tuple(w.shape)}")
        packed, swizzled, G = vendor_quantize(w, global_scale)
        linear = _baseline.unswizzle_scales(swizzled, (w.shape[0], w.shape[1] // BLOCK))
        decode = torch.ones((), dtype=torch.float32, device=w.device) / G.float().reshape(())
        return NVFP4Tensor(packed, linear, decode)

    @staticmethod
    def dequantize_swizzled(packed, swizzled_scale, global_decode, dtype=torch.float32):
        """impl.nvfp4.dequantize_swizzled: packed [N, K/2], swizzled scales, DECODE scale -> [N, K]."""
        if swizzled_scale.dtype != FP8:
            raise ValueError(f"swizzled_scale: expected {FP8}, got {swizzled_scale.dtype}")
        return vendor_dequantize(packed, swizzled_scale, torch.as_tensor(global_decode).float(), dtype)

    @staticmethod
    def dequantize(t: NVFP4Tensor, dtype=torch.float32):
        """impl.nvfp4.dequantize: NVFP4Tensor [N, K/2] with LINEAR scales [N, K/16], or stacked experts
        [E, N, K/2] with scales in t.scale_layout and global_decode [E] or [E, 2] (a fused gate_up's gate
        and up halves) -> [..., N, K] in dtype."""
        _baseline.check_tensor(t)
        if t.packed.ndim > 2:
            E, N = t.packed.shape[:2]
            g = torch.as_tensor(t.global_decode).float().reshape(E, -1)                  # [E, 1] or [E, 2]
            rows = g.repeat_interleave(N // g.shape[1], dim=1).to(dtype)                 # [E, N]: per half
            one = torch.ones((), dtype=torch.float32, device=t.packed.device)
            # the vendor dequantizer reads swizzled scales itself; x 1 is exact, so the order stays
            # (e2m1 · scale) · global_decode with one rounding
            return torch.stack([vendor_dequantize(p, s if t.scale_layout == "swizzled" else _baseline.swizzle_scales(s),
                                                  one, dtype) * r[:, None]
                                for p, s, r in zip(t.packed, t.block_scale, rows)])
        swizzled = _baseline.swizzle_scales(t.block_scale)
        return vendor_dequantize(t.packed, swizzled, torch.as_tensor(t.global_decode).float().reshape(()), dtype)


class Candidate:
    nvfp4 = NVFP4
