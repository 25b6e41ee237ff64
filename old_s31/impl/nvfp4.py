"""NVFP4 on torch, mirroring oracle/nvfp4.py by name and argument order (torch tensors in/out), plus the
stacked expert weights the MoE kernels take (impl/moe.py `experts(..., nvfp4=...)`).

Letters: E experts, N rows (output features), K reduction dim (K/2 packed bytes, K/16 block scales),
D hidden, I expert width.

`quantize` / `dequantize` (and the other oracle names) are the plain-torch recipe of
impl/baseline/nvfp4.py: float32 quantization bit-identical to the oracle's codes and scales, and a
dequantization (e2m1 · scale) · global_decode in float32 that is bit-exact against the oracle's
float64 result cast to float32 (the contract). The GEMMs never materialise the dequantized weight:
impl/kernels/moe.py dequantizes tiles in registers.

Expert layout (`NVFP4Experts`): per projection an NVFP4Tensor of stacked tensors, packed uint8
[E, N, K/2] (element 2j in the low nibble), block_scale float8_e4m3fn [E, N, K/16] LINEAR row-major,
or [E, Mp, Kp] in the 128x4 swizzled layout of CUTLASS/FlashInfer (each expert's matrix swizzled on
its own, N and K/16 padded to 128 and 4) when the tensor's scale_layout is "swizzled" (a marker, not
a guess from shapes: at GLM-5.3 shapes both layouts have the same shape). global_decode float32:
gate_up [E, 2] (DECODE, the gate's then the up's value, as a checkpoint's separate gate_proj and
up_proj modules carry them) or [E] (one value shared by both halves); down [E]. The kernels read
them from device memory: no host sync per expert. W4A4 adds input_global_scale float32 [E] (ENCODE)
per projection, or None for the dynamic scale of `dynamic_input_scale` (computed on the device at
call time); gate_up has ONE input scale per expert because the fused GEMM quantizes x once. `qdq_activation` runs the W4A4 GEMMs'
activation prologue on its own (impl/kernels/moe.py nvfp4_qdq_fwd_kernel).
"""
from __future__ import annotations

import torch
import triton

from impl.baseline import nvfp4 as _base
from impl.baseline.nvfp4 import BLOCK, FP8
from impl.kernels.moe import nvfp4_qdq_fwd_kernel
from oracle.types import NVFP4Experts, NVFP4Tensor, fused_experts  # noqa: F401  (NVFP4Experts re-exported)

quantize_e2m1 = _base.quantize_e2m1
dequantize_e2m1 = _base.dequantize_e2m1
pack = _base.pack
unpack = _base.unpack
global_scale_encode = _base.global_scale_encode
global_scale_decode = _base.global_scale_decode
flip_global_scale = _base.flip_global_scale
quantize = _base.quantize
dequantize = _base.dequantize
check_tensor = _base.check_tensor
swizzle_scales = _base.swizzle_scales
unswizzle_scales = _base.unswizzle_scales
dequantize_swizzled = _base.dequantize_swizzled
swizzle_experts = _base.swizzle_experts
SCALE_LAYOUTS = ("linear", "swizzled")
# bitwise batch invariance (impl.registry.batch_invariant; the check nvfp4.batch): qdq_activation
# quantizes each row's 16-element blocks under the scale it is given, elementwise after that. The
# dynamic W4A4 scale (dynamic_input_scale) is the amax of the whole call's activations BY DEFINITION
# (oracle.nvfp4), so a W4A4-dynamic GEMM row depends on its companions: the batch checks use static scales
BATCH_INVARIANT = ("qdq_activation",)


def tensor(a, device=None) -> torch.Tensor:
    """A NumPy field of an NVFP4 container (uint8, float8_e4m3fn, float32) -> torch, bits unchanged."""
    if isinstance(a, torch.Tensor):
        return a if device is None else a.to(device)
    import numpy as np
    a = np.asarray(a)
    if a.dtype.name == "float8_e4m3fn":
        return torch.from_numpy(a.view(np.uint8).copy()).view(FP8).to(device)
    return torch.from_numpy(a.copy()).to(device)


def experts_to(nv, device=None) -> NVFP4Experts:
    """oracle NVFP4Experts (or a checkpoint's NVFP4ExpertWeights) with NumPy fields -> torch fields on `device`."""
    return fused_experts(nv).map(lambda a: tensor(a, device))


def with_input_scales(nv: NVFP4Experts, gate_up_input, down_input) -> NVFP4Experts:
    """oracle.nvfp4.with_input_scales: static W4A4 input scales (ENCODE, float32 [E]; None = dynamic)."""
    def f(a, like):
        return None if a is None else torch.as_tensor(a, dtype=torch.float32, device=like.device).reshape(-1)
    return NVFP4Experts(nv.gate_up._replace(input_global_scale=f(gate_up_input, nv.gate_up.packed)),
                        nv.down._replace(input_global_scale=f(down_input, nv.down.packed)))


def dynamic_input_scale(a) -> torch.Tensor:
    """oracle.nvfp4.dynamic_input_scale on the device (no host sync): float32 0-dim 2688 / amax(a), 1 if a == 0."""
    amax = a.detach().abs().amax().float() if a.numel() else torch.zeros((), device=a.device)
    return torch.where(amax > 0, torch.full_like(amax, _base.GLOBAL_NUMERATOR) / amax, torch.ones_like(amax))


def qdq_activation(x, input_global_scale):
    """oracle.nvfp4.qdq_activation through the W4A4 GEMM prologue (nvfp4_qdq_fwd_kernel): float32 (float64
    for float64 x) [..., K]; bit-exact against the oracle's result cast to that dtype."""
    x32 = _base._f32(x)
    _base._check_k(x32.shape[-1] if x32.ndim else 1, "x")
    if not torch.isfinite(x32).all():
        raise ValueError("x: contains NaN or inf (in float32), expected finite activations")
    G = _base._positive_finite("input_global_scale", input_global_scale).reshape(())
    K = x32.shape[-1]
    rows = x32.reshape(-1, K).contiguous()
    qs = torch.empty_like(rows)
    if rows.numel():
        BM, BK = 16, 64
        nvfp4_qdq_fwd_kernel[(triton.cdiv(rows.shape[0], BM), triton.cdiv(K, BK))](
            rows, qs, rows.shape[0], float(G), K=K, BM=BM, BK=BK)
    acc = torch.float64 if isinstance(x, torch.Tensor) and x.dtype == torch.float64 else torch.float32
    # q · s is exact; one correctly rounded division by G (float32 '/' in torch is IEEE)
    return (qs.to(acc) / G.to(device=qs.device, dtype=acc)).reshape(x32.shape)


def stack(tensors) -> NVFP4Tensor:
    """Per-expert NVFP4Tensors (torch or NumPy fields, one scale layout) -> one stacked NVFP4Tensor
    (global_decode [E], or [E, 2] for per-expert (gate, up) pairs)."""
    def t(a, dtype=None):
        if isinstance(a, torch.Tensor):
            return a
        import numpy as np
        a = np.asarray(a)
        if a.dtype.name == "float8_e4m3fn":
            return torch.from_numpy(a.view(np.uint8).copy()).view(FP8)
        return torch.from_numpy(np.array(a, dtype=dtype))
    tensors = list(tensors)
    layouts = {x.scale_layout for x in tensors}
    if len(layouts) > 1:
        raise ValueError(f"stack: experts in different scale layouts {sorted(layouts)}")
    g = torch.stack([t(x.global_decode, "float32").reshape(-1) for x in tensors]).float()
    return NVFP4Tensor(torch.stack([t(x.packed) for x in tensors]),
                       torch.stack([t(x.block_scale) for x in tensors]),
                       g[:, 0] if g.shape[1] == 1 else g, None, layouts.pop() if layouts else "linear")


def _halves_of(w) -> NVFP4Tensor:
    """One expert's gate_up [2I, D] quantized as a checkpoint holds it: each half from its own amax."""
    I = w.shape[0] // 2
    g, u = quantize(w[:I]), quantize(w[I:])
    return NVFP4Tensor(torch.cat([g.packed, u.packed]), torch.cat([g.block_scale, u.block_scale]),
                       torch.stack([g.global_decode.reshape(()), u.global_decode.reshape(())]))


def quantize_experts(gate_up, down) -> NVFP4Experts:
    """oracle.nvfp4.quantize_experts: gate_up [E, 2I, D] with each half's own global scale
    (global_decode [E, 2]), down [E, D, I] with one per expert ([E])."""
    return NVFP4Experts(stack(_halves_of(gate_up[e]) for e in range(gate_up.shape[0])),
                        stack(quantize(down[e]) for e in range(down.shape[0])))


def check_experts(nv: NVFP4Experts, E: int, D: int, I: int, device=None) -> None:
    """Dtypes, shapes, finite non-negative block scales and finite positive global scales of the
    stacked expert weights; raise ValueError naming the tensor ("nvfp4.down.block_scale")."""
    if not isinstance(nv, NVFP4Experts):
        raise ValueError(f"nvfp4: expected an NVFP4Experts, got {type(nv).__name__}")
    for proj, t, (N, K) in (("gate_up", nv.gate_up, (2 * I, D)), ("down", nv.down, (D, I))):
        name = f"nvfp4.{proj}"
        p, s, g = t.packed, t.block_scale, t.global_decode
        layout = getattr(t, "scale_layout", "linear")
        if layout not in SCALE_LAYOUTS:
            raise ValueError(f"{name}.scale_layout: {layout!r}, expected one of {SCALE_LAYOUTS}")
        if not isinstance(p, torch.Tensor) or p.dtype != torch.uint8 or p.ndim != 3:
            raise ValueError(f"{name}.packed: expected a uint8 tensor [E, N, K/2], got "
                             f"{getattr(p, 'dtype', type(p))} {tuple(getattr(p, 'shape', ()))}")
        Kp = 2 * int(p.shape[-1])
        if Kp % BLOCK:
            raise ValueError(f"{name}.packed: K={Kp} is not a multiple of {BLOCK} "
                             f"(one FP8 scale per 16 elements along K)")
        if tuple(p.shape) != (E, N, K // 2):
            raise ValueError(f"{name}.packed: shape {tuple(p.shape)}, expected [E, N, K/2] = {(E, N, K // 2)}")
        if not isinstance(s, torch.Tensor) or s.dtype != FP8:
            raise ValueError(f"{name}.block_scale: expected a float8_e4m3fn tensor, got {getattr(s, 'dtype', type(s))}")
        want = (E, *_base._padded(N, K // BLOCK)) if layout == "swizzled" else (E, N, K // BLOCK)
        if tuple(s.shape) != want:
            what = "[E, Mp, Kp] (swizzled: N, K/16 padded to 128, 4)" if layout == "swizzled" else \
                "[E, N, K/16] (linear layout)"
            raise ValueError(f"{name}.block_scale: shape {tuple(s.shape)}, expected {what} = {want} "
                             f"(scale_layout {layout!r})")
        if _scanned(s, g, t.input_global_scale):
            _check_device(name, device, p, s, g)
            continue
        bits = s.view(torch.uint8)
        if ((bits & 0x7F) == 0x7F).any():
            raise ValueError(f"{name}.block_scale: contains NaN (an E4M3 scale cast without the 448 clamp?)")
        if ((bits & 0x80) != 0).any() and (s.float() < 0).any():
            raise ValueError(f"{name}.block_scale: contains negative scales, expected >= 0 (UE4M3)")
        shapes = ((E,), (E, 2)) if proj == "gate_up" else ((E,),)
        if not isinstance(g, torch.Tensor) or g.dtype != torch.float32 or tuple(g.shape) not in shapes:
            want = f"[E] = [{E}] or [E, 2] = [{E}, 2] (gate, up)" if proj == "gate_up" else f"[E] = [{E}]"
            raise ValueError(f"{name}.global_decode: expected a float32 tensor {want}, got "
                             f"{getattr(g, 'dtype', type(g))} {tuple(getattr(g, 'shape', ()))}")
        if not torch.isfinite(g).all() or (g <= 0).any():
            bad = (~torch.isfinite(g) | (g <= 0)).nonzero()[0].tolist()
            where = f" at expert {bad[0]}" + (f" ({('gate', 'up')[bad[1]]} half)" if len(bad) == 2 else "")
            raise ValueError(f"{name}.global_decode: {g.tolist()}, expected finite values > 0; bad{where} (0 makes "
                             f"1/0 = inf and inf · 0 = NaN; a BF16 module put in an NVFP4 slot has 0 there)")
        gi = t.input_global_scale
        if gi is not None and (not isinstance(gi, torch.Tensor) or gi.dtype != torch.float32
                               or tuple(gi.shape) != (E,)):
            raise ValueError(f"{name}.input_global_scale: expected None or a float32 tensor [E] = [{E}] "
                             f"(ENCODE; gate_up has one for both halves: the fused GEMM quantizes x once), "
                             f"got {getattr(gi, 'dtype', type(gi))} {tuple(getattr(gi, 'shape', ()))}")
        if gi is not None and (not torch.isfinite(gi).all() or (gi <= 0).any()):
            raise ValueError(f"{name}.input_global_scale: {gi.tolist()}, expected finite values > 0")
        _check_device(name, device, p, s, g)
        _mark_scanned(s, g, gi)


def _scanned(*tensors) -> bool:
    """True when the value scans (NaN / negative scales, global scales) already passed on these very
    tensors, unmodified since (torch's in-place version counter): scanning every block scale of 288
    experts on every call cost milliseconds per decode step (bench_layer)."""
    return all(a is None or getattr(a, "_glmgate_scanned", None) == a._version for a in tensors)


def _mark_scanned(*tensors) -> None:
    for a in tensors:
        if a is not None:
            a._glmgate_scanned = a._version


def _check_device(name: str, device, p, s, g) -> None:
    if device is not None:
        for part, a in (("packed", p), ("block_scale", s), ("global_decode", g)):
            if a.device != device:
                raise ValueError(f"{name}.{part}: on {a.device}, expected {device} (that of x)")
