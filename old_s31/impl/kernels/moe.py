"""Triton kernels of the MoE feed-forward (oracle/moe.py) and its NVFP4 W4A16 expert weights (oracle/nvfp4.py).
Host wrappers live in impl/moe.py.

Letters: N tokens, D hidden, E experts, k experts per token, G groups, I expert width, P = N·k (token,
slot) pairs, BT token tile, BE >= E and BG >= G power-of-two lanes, BM pair-rows per block (one expert
per block), BN output columns, BK reduction tile.

  router   per BT tokens (BKE >= k lanes of picks), from logits = x Wr^T (f32, a host GEMM): s = sigmoid, ŝ = s + bias, top-2 group sums,
           topk_group group passes, k expert passes (argmax, lowest id on ties), weights from s
  gate_up  per (row block of sorted pairs, BN columns of I): gate and up accumulators from the
           block's expert, clamped SwiGLU epilogue -> h [P, I] (row = pair id)
  down     per (row block, BN columns of D): h Wdown[e]^T x routing weight -> out [P, D] (row = pair id)
  align    one program (decode): the pairs sorted by expert into BM-row blocks, the blocks' experts
  combine  per (token, BD columns): out.view(N, k, D) summed over slots in slot order (deterministic,
           no atomics), in the output's dtype

NVFP4 (W4A16): packed uint8 [E, Nw, Kw/2] (element 2j in the low nibble), fp8-e4m3 block scales
[E, Nw, Kw/16] in the LINEAR row-major layout, or (SWIZZLED) [E, Mp, Kp] with each expert's matrix in
the 128x4 swizzle (NVFP4.md A5: expert base e·Mp·Kp, then ((m//128·Kp/4 + k//4)·32 + m%32)·16 +
(m//32)%4·4 + k%4); float32 decode scales loaded from a device tensor: gate_up's [E, 2] (the gate and
up halves each its own, as checkpoints have them), down's [E]. The tile is dequantized in registers: E2M1 by arithmetic
(2^(e-1)·(1 + m/2), 0.5·m for e = 0), times the fp8 scale (exact in float32 and in bf16), cast to the
dot dtype; the per-expert global decode multiplies the float32 accumulator in the epilogue.
SPLIT (issue 14, docs/optimization_log.md step 1): no re-interleave of the nibbles. The low nibbles
(even k) and the high nibbles (odd k) are dequantized as two [BN, BK/2] tiles, each dotted with the
matching strided half of the A-tile (two dots per K step), and e2m1 · 2^-14 is multiplied by the fp8
scale in fp16 (exact, tests/test_nvfp4_split.py) before one conversion to the dot dtype; the 2^14 joins
the global decode scale in the epilogue.

NVFP4 W4A4 emulation (W4A4 constexpr, NVFP4.md A6): the A-tile (x for gate_up, h for down) is
quantize-dequantized in the prologue, per row and 16-element block along K, with the expert's ENCODE
input scale G_a (`gin` [E], loaded from device memory): the dot takes q · s_a (exact in bf16) and the
epilogue multiplies by g_w / G_a, the FP4 GEMM's alpha. q and s_a are bit-identical to
oracle.nvfp4.qdq_activation (nvfp4_qdq_fwd_kernel runs the same prologue alone, for the tests).
"""
import triton
import triton.language as tl


@triton.jit
def _argmax_lowest(b_s, o_idx, BIG: tl.constexpr):
    """[BT, BX] scores -> [BT] index of the row max, the lowest index among equal maxima."""
    b_m = tl.max(b_s, 1)
    return tl.min(tl.where(b_s == b_m[:, None], o_idx[None, :], BIG), 1)


@triton.jit
def moe_router_fwd_kernel(
    logits, bias, scores, biased, groups, ids, weights,
    N, scaling,
    E: tl.constexpr, G: tl.constexpr, TOPK_GROUP: tl.constexpr, TOP_K: tl.constexpr,
    NORM: tl.constexpr, BT: tl.constexpr, BE: tl.constexpr, BG: tl.constexpr, BKE: tl.constexpr,
):
    """Selection from float32 router logits [N, E] (the x·Wr^T GEMM runs on the host: one program per
    16 tokens streaming all of Wr was 1.2-1.5 ms of a decode step, bench_layer)."""
    i_t = tl.program_id(0).to(tl.int64)
    o_t = i_t * BT + tl.arange(0, BT)
    mask_t = o_t < N
    o_e = tl.arange(0, BE)
    mask_e = o_e < E
    b_l = tl.load(logits + o_t[:, None] * E + o_e[None, :], mask=mask_t[:, None] & mask_e[None, :], other=0.)
    b_s = tl.sigmoid(b_l)                                                        # [BT, BE]
    b_bias = tl.load(bias + o_e, mask=mask_e, other=0.).to(tl.float32)
    b_sel = tl.where(mask_e[None, :], b_s + b_bias[None, :], float("-inf"))       # ŝ, -inf on pad lanes
    mask_te = mask_t[:, None] & mask_e[None, :]
    tl.store(scores + o_t[:, None] * E + o_e[None, :], b_s, mask=mask_te)

    # group scores: the top-2 sum of each group of E/G contiguous experts (a duplicate max counts twice)
    PER: tl.constexpr = E // G
    o_g = tl.arange(0, BG)
    g_of_e = o_e // PER
    b_gs = tl.full([BT, BG], float("-inf"), dtype=tl.float32)
    for i_g in tl.static_range(G):
        in_g = (g_of_e == i_g) & mask_e
        b_in = tl.where(in_g[None, :], b_sel, float("-inf"))
        i_1 = _argmax_lowest(b_in, o_e, BE)
        b_1 = tl.max(b_in, 1)
        b_2 = tl.max(tl.where(o_e[None, :] == i_1[:, None], float("-inf"), b_in), 1)
        b_gs = tl.where((o_g == i_g)[None, :], (b_1 + b_2)[:, None], b_gs)
    tl.store(groups + o_t[:, None] * G + o_g[None, :], b_gs, mask=mask_t[:, None] & (o_g < G)[None, :])

    # keep the TOPK_GROUP best groups (lowest id on ties); experts elsewhere get -inf
    b_keep = tl.zeros([BT, BE], dtype=tl.int32)
    b_left = b_gs
    for _ in tl.static_range(TOPK_GROUP):
        i_best = _argmax_lowest(b_left, o_g, BG)
        b_keep = b_keep | (g_of_e[None, :] == i_best[:, None]).to(tl.int32)
        b_left = tl.where(o_g[None, :] == i_best[:, None], float("-inf"), b_left)
    b_sel = tl.where((b_keep != 0) & mask_e[None, :], b_sel, float("-inf"))
    tl.store(biased + o_t[:, None] * E + o_e[None, :], b_sel, mask=mask_te)

    # top-k: k argmax passes over the experts not taken yet (pad lanes count as taken), lowest id on ties
    o_k = tl.arange(0, BKE)
    b_ids = tl.zeros([BT, BKE], dtype=tl.int64)
    b_w = tl.zeros([BT, BKE], dtype=tl.float32)
    b_taken = tl.zeros([BT, BE], dtype=tl.int32) + (o_e >= E).to(tl.int32)[None, :]
    for i_k in tl.static_range(TOP_K):
        b_cand = tl.where(b_taken != 0, float("-inf"), b_sel)
        b_m = tl.max(b_cand, 1)
        i_e = tl.min(tl.where((b_cand == b_m[:, None]) & (b_taken == 0), o_e[None, :], BE), 1)
        b_taken = b_taken | (o_e[None, :] == i_e[:, None]).to(tl.int32)
        b_pick = tl.sum(tl.where(o_e[None, :] == i_e[:, None], b_s, 0.), 1)
        b_ids = tl.where((o_k == i_k)[None, :], i_e[:, None].to(tl.int64), b_ids)
        b_w = tl.where((o_k == i_k)[None, :], b_pick[:, None], b_w)
    if NORM:
        b_w = b_w / (tl.sum(b_w, 1)[:, None] + 1e-20)
    b_w = b_w * scaling
    mask_tk = mask_t[:, None] & (o_k < TOP_K)[None, :]
    tl.store(ids + o_t[:, None] * TOP_K + o_k[None, :], b_ids, mask=mask_tk)
    tl.store(weights + o_t[:, None] * TOP_K + o_k[None, :], b_w, mask=mask_tk)


@triton.jit
def _scale_offsets(i_e, o_m, o_s, NW: tl.constexpr, KB: tl.constexpr, SWIZZLED: tl.constexpr):
    """[BN, BK/16] element offsets of scales (row o_m of expert i_e's [NW, KB] matrix, scale column o_s).

    Linear: (e·NW + m)·KB + k. Swizzled (A5): each expert's [Mp, Kp] buffer starts at e·Mp·Kp and
    holds 128x4 tiles of 512 contiguous bytes, tile (m//128, k//4) at (m//128·Kp/4 + k//4)·512, and in
    it row m%32 of 16 bytes, (m//32)%4 picking 4 of them, k%4 the byte.
    """
    # one return after a constexpr if / else: no early return inside a branch (older Triton refuses it)
    KT: tl.constexpr = (KB + 3) // 4
    MP: tl.constexpr = (NW + 127) // 128 * 128
    m, k = o_m[:, None], o_s[None, :]
    if SWIZZLED:
        o = i_e * (MP * KT * 4) + ((m // 128 * KT + k // 4) * 32 + m % 32) * 16 + (m // 32) % 4 * 4 + k % 4
    else:
        o = (i_e * NW + m) * KB + k
    return o


@triton.jit
def _nvfp4_tile(packed, scale, i_e, r0, o_n, mask_n, k0, NW: tl.constexpr, KW: tl.constexpr, BK: tl.constexpr,
                DOT: tl.constexpr, SWIZZLED: tl.constexpr):
    """Dequantize rows r0 + o_n, columns k0..k0+BK of expert i_e's NVFP4 weight [NW, KW] to e2m1 · fp8
    scale in DOT.

    r0: the first row within the expert (gate_up's up half starts at I); the global decode scale is
    left to the epilogue.
    Whole bytes and whole scale rows are loaded as tiles (one byte per 2 codes, one scale per 16), the
    nibbles split and re-interleaved with join: per-element gathers of bytes and scales made the tile
    ~16x slower than a bf16 one. E2M1 by bits: sign << 15 | (e, m) << 9 is an fp16 equal to the
    value · 2^-14 for every code (e = 0 lands on the fp16 subnormals with the same factor), so
    value = fp16 · 2^14, folded into the scale. All products are exact in float32 and in bf16.
    """
    o_m = (r0 + o_n).to(tl.int64)                                               # row within the expert
    o_r = i_e * NW + o_m
    o_b = k0 // 2 + tl.arange(0, BK // 2)
    b_b = tl.load(packed + o_r[:, None] * (KW // 2) + o_b[None, :],
                  mask=mask_n[:, None] & (o_b < KW // 2)[None, :], other=0).to(tl.int32)   # [BN, BK/2]
    b_c = tl.reshape(tl.join(b_b & 0xF, b_b >> 4), (o_n.shape[0], BK))                  # low nibble = even k
    b_bits = ((b_c & 8) << 12) | ((b_c & 7) << 9)
    b_v = b_bits.to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)             # value · 2^-14
    o_s = k0 // 16 + tl.arange(0, BK // 16)
    b_s = tl.load(scale + _scale_offsets(i_e, o_m, o_s, NW, KW // 16, SWIZZLED),
                  mask=mask_n[:, None] & (o_s < KW // 16)[None, :], other=0.).to(tl.float32) * 16384.0
    b_w = tl.reshape(b_v, (o_n.shape[0], BK // 16, 16)) * b_s[:, :, None]
    return tl.reshape(b_w, (o_n.shape[0], BK)).to(DOT)


@triton.jit
def _nvfp4_split_tiles(packed, scale, i_e, r0, o_n, mask_n, k0, NW: tl.constexpr, KW: tl.constexpr,
                       BK: tl.constexpr, SWIZZLED: tl.constexpr):
    """(bytes [BN, BK/2] uint8, fp8 scales [BN, BK/16]) of rows r0 + o_n, columns k0..k0+BK of expert i_e's
    NVFP4 weight [NW, KW], as stored: byte j holds columns k0 + 2j (low nibble) and k0 + 2j + 1 (high),
    the scale column of half-column j is k0/16 + j // 8. Masked entries read 0."""
    o_m = (r0 + o_n).to(tl.int64)                                               # row within the expert
    o_r = i_e * NW + o_m
    o_b = k0 // 2 + tl.arange(0, BK // 2)
    b_b = tl.load(packed + o_r[:, None] * (KW // 2) + o_b[None, :],
                  mask=mask_n[:, None] & (o_b < KW // 2)[None, :], other=0)
    o_s = k0 // 16 + tl.arange(0, BK // 16)
    b_s = tl.load(scale + _scale_offsets(i_e, o_m, o_s, NW, KW // 16, SWIZZLED),
                  mask=mask_n[:, None] & (o_s < KW // 16)[None, :], other=0.)
    return b_b, b_s


@triton.jit
def _nvfp4_halves(packed, scale, i_e, r0, o_n, mask_n, k0, NW: tl.constexpr, KW: tl.constexpr, BK: tl.constexpr,
                  DOT: tl.constexpr, SWIZZLED: tl.constexpr):
    """(even, odd): rows r0 + o_n of expert i_e's NVFP4 weight [NW, KW] at columns k0 + 2j and k0 + 2j + 1,
    j < BK/2, as e2m1 · fp8 scale · 2^-14 in DOT (the caller's epilogue multiplies by 2^14).

    The low nibble of byte j is column k0 + 2j, the high one k0 + 2j + 1: each half is a tile of its own,
    with no join back into K order. The fp16 pattern sign << 15 | (e, m) << 9 (= value · 2^-14) is cut
    from the byte in place: low nibble bits 3 and 0-2, high nibble bits 7 and 4-6. Its product with the
    fp8 scale is taken in fp16, exact (2 x 4 significant bits, a multiple of 2^-24 and below 0.17), and
    so is the one conversion to bf16 or float32.
    """
    b_b, b_s = _nvfp4_split_tiles(packed, scale, i_e, r0, o_n, mask_n, k0, NW, KW, BK, SWIZZLED)
    b_b = b_b.to(tl.int32)                                                                  # [BN, BK/2]
    b_lo = (((b_b << 12) & 0x8000) | ((b_b << 9) & 0xE00)).to(tl.int16).to(tl.float16, bitcast=True)
    b_hi = (((b_b << 8) & 0x8000) | ((b_b << 5) & 0xE00)).to(tl.int16).to(tl.float16, bitcast=True)
    b_s = b_s.to(tl.float16)[:, :, None]
    b_lo = tl.reshape(tl.reshape(b_lo, (o_n.shape[0], BK // 16, 8)) * b_s, (o_n.shape[0], BK // 2)).to(DOT)
    b_hi = tl.reshape(tl.reshape(b_hi, (o_n.shape[0], BK // 16, 8)) * b_s, (o_n.shape[0], BK // 2)).to(DOT)
    return b_lo, b_hi


# Two e2m1 codes per 32-bit instruction (PAIRS: inline PTX, CUDA GPUs of sm >= 80 only; the CPU twin of its
# bit arithmetic, step for step, is `twin` in tests/test_nvfp4_pairs.py). Input: 4 bytes (4 half-columns'
# code pairs) and their 4 bf16 scales in two bf16x2 registers; output: the 4 low-nibble values (even k) and
# the 4 high-nibble ones (odd k), as bf16x2. Each byte is spread into a 16-bit lane (prmt), the code's 3
# magnitude bits moved to bits 6-8 (bf16's exponent LSBs and mantissa MSB: the value · 2^-126 for every
# code, e = 0 landing on the bf16 subnormals with the same factor) and its sign to bit 15; fma by the
# scale · 2^119 with -0 added is the exact product value · scale · 2^-7 (bf16 subnormals are kept:
# fma.bf16x2 has no flush-to-zero).
_E2M1X2_ASM = tl.constexpr("""{
.reg .b32 t0, t1, a, b, z;
mov.b32 z, 0x80008000;
prmt.b32 t0, $4, 0, 0x4140;
prmt.b32 t1, $4, 0, 0x4342;
shl.b32 a, t0, 6;
shl.b32 b, t0, 12;
and.b32 b, b, 0x80008000;
lop3.b32 a, a, 0x01C001C0, b, 0xEA;
fma.rn.bf16x2 $0, a, $5, z;
shl.b32 a, t1, 6;
shl.b32 b, t1, 12;
and.b32 b, b, 0x80008000;
lop3.b32 a, a, 0x01C001C0, b, 0xEA;
fma.rn.bf16x2 $1, a, $6, z;
shl.b32 a, t0, 2;
shl.b32 b, t0, 8;
and.b32 b, b, 0x80008000;
lop3.b32 a, a, 0x01C001C0, b, 0xEA;
fma.rn.bf16x2 $2, a, $5, z;
shl.b32 a, t1, 2;
shl.b32 b, t1, 8;
and.b32 b, b, 0x80008000;
lop3.b32 a, a, 0x01C001C0, b, 0xEA;
fma.rn.bf16x2 $3, a, $6, z;
}""")


@triton.jit
def _nvfp4_halves_x2(packed, scale, i_e, r0, o_n, mask_n, k0, NW: tl.constexpr, KW: tl.constexpr, BK: tl.constexpr,
                     SWIZZLED: tl.constexpr):
    """_nvfp4_halves' (even, odd) tiles in bf16 as e2m1 · fp8 scale · 2^-7 (the caller's epilogue multiplies
    by 2^7), two codes per 32-bit instruction (_E2M1X2_ASM). GPU only (inline PTX)."""
    b_b, b_s = _nvfp4_split_tiles(packed, scale, i_e, r0, o_n, mask_n, k0, NW, KW, BK, SWIZZLED)
    # fp8 -> float32 -> x 2^119 -> bf16: all exact (4 significant bits; 448 · 2^119 < 2^128)
    b_s = (b_s.to(tl.float32) * 6.646139978924579e+35).to(tl.bfloat16)
    b_s = tl.reshape(tl.broadcast_to(b_s[:, :, None], (o_n.shape[0], BK // 16, 8)), (o_n.shape[0], BK // 2))
    b_lo, b_hi = tl.inline_asm_elementwise(_E2M1X2_ASM, "=r,=r,=r,=r,r,r,r", [b_b, b_s],
                                           dtype=(tl.bfloat16, tl.bfloat16), is_pure=True, pack=4)
    return b_lo, b_hi


@triton.jit
def _a_halves(p_rows, mask_m, k0, K: tl.constexpr, BM: tl.constexpr, BK: tl.constexpr, W4A4: tl.constexpr,
              b_gin, DOT: tl.constexpr):
    """(even, odd) [BM, BK/2] columns k0 + 2j, k0 + 2j + 1 of the A-tile rows p_rows [BM, 1] (K % 16 == 0),
    in DOT; W4A4: quantize-dequantized first (its 16-blocks span both halves).

    One contiguous load, then split: two stride-2 loads cannot use 16-byte cp.async copies (sm_90 SASS,
    scripts/sass_loop.py: +1.1 instructions per weight element at decode), while the split costs nothing
    (Triton 3.6's linear layouts deliver both halves straight in the dot operand layout)."""
    o_k = k0 + tl.arange(0, BK)
    b_a = tl.load(p_rows + o_k[None, :], mask=mask_m[:, None] & (o_k < K)[None, :], other=0.)
    if W4A4:
        b_a = _nvfp4_qdq_tile(b_a.to(tl.float32), b_gin, BM, BK)
    b_ae, b_ao = tl.split(tl.reshape(b_a, (BM, BK // 2, 2)))
    return b_ae.to(DOT), b_ao.to(DOT)


@triton.jit
def _fp8_e4m3_rne(b_v):
    """float32 0 <= v <= 448 -> the nearest float8_e4m3fn value (ties to even), as float32.

    By bit arithmetic, not .to(tl.float8e4nv): the interpreter's cast misrounds a carry into the next
    binade (31.5 -> 16). Normal (v >= 2^-6): keep 3 of 23 mantissa bits, rounding half to even.
    Subnormal: multiples of 2^-9, rounded by adding 2^23 (float32 addition rounds to nearest even).
    """
    b_bits = b_v.to(tl.int32, bitcast=True)
    b_bits = (b_bits + 0x7FFFF + ((b_bits >> 20) & 1)) & -1048576                 # -1048576 = ~0xFFFFF
    b_norm = b_bits.to(tl.float32, bitcast=True)
    b_sub = ((b_v * 512.0 + 8388608.0).to(tl.int32, bitcast=True) - 0x4B000000).to(tl.float32) * (1.0 / 512.0)
    return tl.where(b_v < 0.015625, b_sub, b_norm)


@triton.jit
def _nvfp4_qdq_tile(b_x, G, BM: tl.constexpr, BK: tl.constexpr):
    """W4A4 activation quant-dequant of a float32 [BM, BK] tile, BK % 16 == 0 (NVFP4.md A6, oracle qdq_activation).

    s = fp8(min(G · (amax_b / 6), 448)), v = (x · G) / s, q = rne_e2m1(clip(v, ±6)); returns q · s
    (exact in float32 and in bf16: 2 + 4 significant bits); the 1/G factor is left to the caller's
    epilogue. Divisions are div_rn (a plain '/' compiles to an approximate division on the GPU),
    so q and s are bit-identical to the oracle's. Zero blocks (s = 0) give zeros; zeros are +0.
    """
    b_x3 = tl.reshape(b_x, (BM, BK // 16, 16))
    b_amax = tl.max(tl.abs(b_x3), axis=2)                                        # [BM, BK/16]
    b_s = _fp8_e4m3_rne(tl.minimum(G * tl.math.div_rn(b_amax, 6.0), 448.0))
    b_s3 = tl.broadcast_to(b_s[:, :, None], (BM, BK // 16, 16))
    b_v = tl.math.div_rn(b_x3 * G, tl.where(b_s3 > 0, b_s3, 1.0))
    b_v = tl.where(b_s3 > 0, tl.minimum(tl.maximum(b_v, -6.0), 6.0), 0.)
    b_m = tl.abs(b_v)
    # the A3 threshold table, ties to the even code: 0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4
    b_q = (0.5 * (b_m > 0.25).to(tl.float32) + 0.5 * (b_m >= 0.75).to(tl.float32)
           + 0.5 * (b_m > 1.25).to(tl.float32) + 0.5 * (b_m >= 1.75).to(tl.float32)
           + (b_m > 2.5).to(tl.float32) + (b_m >= 3.5).to(tl.float32) + 2.0 * (b_m > 5.0).to(tl.float32))
    b_q = tl.where((b_v < 0) & (b_q > 0), -b_q, b_q)
    return tl.reshape(b_q * b_s3, (BM, BK))


@triton.jit
def nvfp4_qdq_fwd_kernel(x, out, M, G, K: tl.constexpr, BM: tl.constexpr, BK: tl.constexpr):
    """out[m, k] = q · s of the activation rows (1/G applied by the host): the W4A4 prologue alone."""
    i_m, i_k = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64)
    o_m = i_m * BM + tl.arange(0, BM)
    o_k = i_k * BK + tl.arange(0, BK)
    m = (o_m < M)[:, None] & (o_k < K)[None, :]
    b_x = tl.load(x + o_m[:, None] * K + o_k[None, :], mask=m, other=0.).to(tl.float32)
    tl.store(out + o_m[:, None] * K + o_k[None, :], _nvfp4_qdq_tile(b_x, G, BM, BK), mask=m)


@triton.jit
def moe_gate_up_fwd_kernel(
    x, w, packed, scale, gscale, gin, sorted_ids, block_expert, h,
    P, limit,
    D: tl.constexpr, I: tl.constexpr, TOP_K: tl.constexpr,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, NVFP4: tl.constexpr, W4A4: tl.constexpr,
    DOT: tl.constexpr, PRECISION: tl.constexpr, SWIZZLED: tl.constexpr, SPLIT: tl.constexpr,
    PAIRS: tl.constexpr = False,
):
    """h[pair, n] = silu(min(x Wg[e]^T, L)) · clip(x Wu[e]^T, -L, L) for the BM pairs of one block;
    NVFP4: gscale [E, 2] = (gate, up) DECODE scales, each scaling its own accumulator. SPLIT (NVFP4
    only): even and odd columns as two half-dots per K step (_nvfp4_halves)."""
    i_b, i_n = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64)
    i_e = tl.load(block_expert + i_b).to(tl.int64)
    if i_e >= 0:
        o_m = i_b * BM + tl.arange(0, BM)
        b_pair = tl.load(sorted_ids + o_m).to(tl.int64)
        mask_m = b_pair < P
        b_tok = tl.where(mask_m, b_pair // TOP_K, 0)
        o_n = i_n * BN + tl.arange(0, BN)
        mask_n = o_n < I
        b_g = tl.zeros([BM, BN], dtype=tl.float32)
        b_u = tl.zeros([BM, BN], dtype=tl.float32)
        b_gin = 1.0
        if W4A4:
            b_gin = tl.load(gin + i_e).to(tl.float32)                        # ENCODE scale of x for expert e
        for i_k in range(tl.cdiv(D, BK)):
            if SPLIT:
                b_xe, b_xo = _a_halves(x + b_tok[:, None] * D, mask_m, i_k * BK, D, BM, BK, W4A4, b_gin, DOT)
                if PAIRS:
                    b_we, b_wo = _nvfp4_halves_x2(packed, scale, i_e, 0, o_n, mask_n, i_k * BK, 2 * I, D, BK, SWIZZLED)
                else:
                    b_we, b_wo = _nvfp4_halves(packed, scale, i_e, 0, o_n, mask_n, i_k * BK, 2 * I, D, BK, DOT,
                                               SWIZZLED)
                b_g = tl.dot(b_xe, tl.trans(b_we), b_g, input_precision=PRECISION)
                b_g = tl.dot(b_xo, tl.trans(b_wo), b_g, input_precision=PRECISION)
                if PAIRS:
                    b_we, b_wo = _nvfp4_halves_x2(packed, scale, i_e, I, o_n, mask_n, i_k * BK, 2 * I, D, BK, SWIZZLED)
                else:
                    b_we, b_wo = _nvfp4_halves(packed, scale, i_e, I, o_n, mask_n, i_k * BK, 2 * I, D, BK, DOT,
                                               SWIZZLED)
                b_u = tl.dot(b_xe, tl.trans(b_we), b_u, input_precision=PRECISION)
                b_u = tl.dot(b_xo, tl.trans(b_wo), b_u, input_precision=PRECISION)
            else:
                o_k = i_k * BK + tl.arange(0, BK)
                mask_k = o_k < D
                b_x = tl.load(x + b_tok[:, None] * D + o_k[None, :], mask=mask_m[:, None] & mask_k[None, :],
                              other=0.)
                if W4A4:
                    b_x = _nvfp4_qdq_tile(b_x.to(tl.float32), b_gin, BM, BK)
                b_x = b_x.to(DOT)
                if NVFP4:
                    b_wg = _nvfp4_tile(packed, scale, i_e, 0, o_n, mask_n, i_k * BK, 2 * I, D, BK, DOT, SWIZZLED)
                    b_wu = _nvfp4_tile(packed, scale, i_e, I, o_n, mask_n, i_k * BK, 2 * I, D, BK, DOT, SWIZZLED)
                else:
                    m = mask_n[:, None] & mask_k[None, :]
                    p_w = w + (i_e * (2 * I) + o_n)[:, None] * D + o_k[None, :]
                    b_wg = tl.load(p_w, mask=m, other=0.).to(DOT)
                    b_wu = tl.load(p_w + I * D, mask=m, other=0.).to(DOT)
                b_g = tl.dot(b_x, tl.trans(b_wg), b_g, input_precision=PRECISION)
                b_u = tl.dot(b_x, tl.trans(b_wu), b_u, input_precision=PRECISION)
        if NVFP4:
            # the halves' own scales: real checkpoints differ up to 10x (one value for both: vLLM #54974)
            b_gd_g = tl.load(gscale + 2 * i_e).to(tl.float32)
            b_gd_u = tl.load(gscale + 2 * i_e + 1).to(tl.float32)
            if W4A4:
                b_gd_g = tl.math.div_rn(b_gd_g, b_gin)                           # alpha = g_w / G_a (A6), per half
                b_gd_u = tl.math.div_rn(b_gd_u, b_gin)
            if SPLIT:
                b_gd_g = b_gd_g * (128.0 if PAIRS else 16384.0)                  # the halves' 2^-7 / 2^-14, exact
                b_gd_u = b_gd_u * (128.0 if PAIRS else 16384.0)
            b_g = b_g * b_gd_g
            b_u = b_u * b_gd_u
        b_g = tl.minimum(b_g, limit)                                             # gate: from above only
        b_u = tl.minimum(tl.maximum(b_u, -limit), limit)                        # up: both sides
        b_h = b_g * tl.sigmoid(b_g) * b_u
        tl.store(h + b_pair[:, None] * I + o_n[None, :], b_h.to(h.dtype.element_ty),
                 mask=mask_m[:, None] & mask_n[None, :])


@triton.jit
def moe_down_fwd_kernel(
    h, w, packed, scale, gscale, gin, sorted_ids, block_expert, weights, out,
    P,
    D: tl.constexpr, I: tl.constexpr,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, NVFP4: tl.constexpr, W4A4: tl.constexpr,
    DOT: tl.constexpr, PRECISION: tl.constexpr, SWIZZLED: tl.constexpr, SPLIT: tl.constexpr,
    PAIRS: tl.constexpr = False,
):
    """out[pair, n] = weight[pair] · (h[pair] Wdown[e]^T)[n] for the BM pairs of one block (float32);
    SPLIT as in moe_gate_up_fwd_kernel."""
    i_b, i_n = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64)
    i_e = tl.load(block_expert + i_b).to(tl.int64)
    if i_e >= 0:
        o_m = i_b * BM + tl.arange(0, BM)
        b_pair = tl.load(sorted_ids + o_m).to(tl.int64)
        mask_m = b_pair < P
        b_row = tl.where(mask_m, b_pair, 0)
        o_n = i_n * BN + tl.arange(0, BN)
        mask_n = o_n < D
        b_acc = tl.zeros([BM, BN], dtype=tl.float32)
        b_gin = 1.0
        if W4A4:
            b_gin = tl.load(gin + i_e).to(tl.float32)                        # ENCODE scale of h for expert e
        for i_k in range(tl.cdiv(I, BK)):
            if SPLIT:
                b_he, b_ho = _a_halves(h + b_row[:, None] * I, mask_m, i_k * BK, I, BM, BK, W4A4, b_gin, DOT)
                if PAIRS:
                    b_we, b_wo = _nvfp4_halves_x2(packed, scale, i_e, 0, o_n, mask_n, i_k * BK, D, I, BK, SWIZZLED)
                else:
                    b_we, b_wo = _nvfp4_halves(packed, scale, i_e, 0, o_n, mask_n, i_k * BK, D, I, BK, DOT, SWIZZLED)
                b_acc = tl.dot(b_he, tl.trans(b_we), b_acc, input_precision=PRECISION)
                b_acc = tl.dot(b_ho, tl.trans(b_wo), b_acc, input_precision=PRECISION)
            else:
                o_k = i_k * BK + tl.arange(0, BK)
                mask_k = o_k < I
                b_h = tl.load(h + b_row[:, None] * I + o_k[None, :], mask=mask_m[:, None] & mask_k[None, :],
                              other=0.)
                if W4A4:
                    b_h = _nvfp4_qdq_tile(b_h.to(tl.float32), b_gin, BM, BK)
                b_h = b_h.to(DOT)
                if NVFP4:
                    b_w = _nvfp4_tile(packed, scale, i_e, 0, o_n, mask_n, i_k * BK, D, I, BK, DOT, SWIZZLED)
                else:
                    b_w = tl.load(w + (i_e * D + o_n)[:, None] * I + o_k[None, :],
                                  mask=mask_n[:, None] & mask_k[None, :], other=0.).to(DOT)
                b_acc = tl.dot(b_h, tl.trans(b_w), b_acc, input_precision=PRECISION)
        b_wt = tl.load(weights + b_row, mask=mask_m, other=0.).to(tl.float32)
        if NVFP4:
            b_wt = b_wt * tl.load(gscale + i_e).to(tl.float32)
            if W4A4:
                b_wt = tl.math.div_rn(b_wt, b_gin)
            if SPLIT:
                b_wt = b_wt * (128.0 if PAIRS else 16384.0)                      # the halves' 2^-7 / 2^-14, exact
        tl.store(out + b_pair[:, None] * D + o_n[None, :], b_acc * b_wt[:, None],
                 mask=mask_m[:, None] & mask_n[None, :])


@triton.jit
def moe_align_fwd_kernel(
    ids, sorted_ids, block_expert, P, NB,
    E: tl.constexpr, BM: tl.constexpr, BE: tl.constexpr, BP: tl.constexpr, BS: tl.constexpr, IDX: tl.constexpr,
    FILL: tl.constexpr,
):
    """One program: the P (token, slot) pairs sorted by expert (stable), each expert's run padded to a
    multiple of BM (pad slots hold P), block_expert[b] the expert of block b (-1 for the spare blocks of
    the NB upper bound): impl.moe.align_torch's outputs, bit for bit, in one launch.

    Passes over one-hot [BP, BE] tiles: counts per expert; each pair's slot (its expert's start, plus
    pairs of that expert in earlier chunks, plus earlier pairs of the same expert in its chunk); the
    block experts ([BS, BE]). The pad slots: FILL writes P to every slot first and a barrier orders the
    pairs' stores after it (issue 14 step 13); else a last pass finds the slots in no expert's run
    ([BS, BE] tiles: the larger part of the kernel's work at decode), which then writes disjoint slots.
    """
    o_e = tl.arange(0, BE).to(IDX)
    mask_e = o_e < E
    if FILL:
        for s0 in range(0, NB * BM, BS):
            o_s = s0 + tl.arange(0, BS).to(IDX)
            tl.store(sorted_ids + o_s, tl.full([BS], 0, tl.int64) + P, mask=o_s < NB * BM)
        # a pair's store must land after the pad store to its slot, which another thread may have made
        tl.debug_barrier()
    counts = tl.zeros([BE], dtype=IDX)
    for p0 in range(0, P, BP):
        o_p = p0 + tl.arange(0, BP).to(IDX)
        b_e = tl.load(ids + o_p, mask=o_p < P, other=-1).to(IDX)
        counts += tl.sum((b_e[:, None] == o_e[None, :]).to(IDX), 0)
    padded = (counts + BM - 1) // BM * BM
    pend = tl.cumsum(padded, 0)
    pstart = pend - padded
    # pairs: slot = pstart[e] + (pairs of e in earlier chunks) + (earlier pairs of e in this chunk)
    seen = tl.zeros([BE], dtype=IDX)
    o_q = tl.arange(0, BP).to(IDX)
    for p0 in range(0, P, BP):
        o_p = p0 + o_q
        mask_p = o_p < P
        b_e = tl.load(ids + o_p, mask=mask_p, other=-1).to(IDX)
        b_hot = b_e[:, None] == o_e[None, :]                                       # [BP, BE]
        b_base = tl.sum(tl.where(b_hot, (pstart + seen)[None, :], 0), 1)
        b_before = (b_e[:, None] == b_e[None, :]) & (o_q[None, :] < o_q[:, None])   # [BP, BP]
        b_slot = b_base + tl.sum(b_before.to(IDX), 1)
        tl.store(sorted_ids + b_slot, o_p.to(tl.int64), mask=mask_p)
        seen += tl.sum(b_hot.to(IDX), 0)
    if not FILL:
        # pad slots: those in no expert's [pstart, pstart + count)
        for s0 in range(0, NB * BM, BS):
            o_s = s0 + tl.arange(0, BS).to(IDX)
            b_in = (o_s[:, None] >= pstart[None, :]) & (o_s[:, None] < (pstart + counts)[None, :]) & mask_e[None, :]
            b_real = tl.sum(b_in.to(IDX), 1) > 0
            tl.store(sorted_ids + o_s, tl.full([BS], 0, tl.int64) + P, mask=(o_s < NB * BM) & (b_real == 0))
    # block b's expert: how many experts end at or before block b (searchsorted right); E and up: spare
    for b0 in range(0, NB, BS):
        o_b = b0 + tl.arange(0, BS).to(IDX)
        b_x = tl.sum((((pend // BM)[None, :] <= o_b[:, None]) & mask_e[None, :]).to(IDX), 1)
        tl.store(block_expert + o_b, tl.where(b_x < E, b_x, -1).to(tl.int64), mask=o_b < NB)


@triton.jit
def moe_combine_fwd_kernel(out, y, N, D, TOP_K: tl.constexpr, BT: tl.constexpr, BD: tl.constexpr):
    """y[n] = Σ_slots out[n, slot] (float32 [N, k, D], summed in slot order: the deterministic sum of the
    slots' weighted expert outputs), stored in y's dtype; one program per (BT tokens, BD columns)."""
    i_t, i_d = tl.program_id(0).to(tl.int64), tl.program_id(1)
    o_t = i_t * BT + tl.arange(0, BT).to(tl.int64)
    o_d = i_d * BD + tl.arange(0, BD)
    mask = (o_t < N)[:, None] & (o_d < D)[None, :]
    b_y = tl.load(out + (o_t * TOP_K * D)[:, None] + o_d[None, :], mask=mask, other=0.)
    for s in tl.static_range(1, TOP_K):
        b_y += tl.load(out + ((o_t * TOP_K + s) * D)[:, None] + o_d[None, :], mask=mask, other=0.)
    tl.store(y + (o_t * D)[:, None] + o_d[None, :], b_y.to(y.dtype.element_ty), mask=mask)
