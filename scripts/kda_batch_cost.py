"""What KDA chunked's batch invariance costs on the GPU (issue 13 item 2). GPU only.

For H = 8 and 64 heads of K = V = 128, T = 4096 and 16384 tokens and B = 1..8 rows (bf16), it prints
the state pass's configuration (BV, segments) under the per-row rule that impl/kda.py uses
(`_state_config` of one row) and under the rule before it (programs counted over all B rows: the same
function over H·B heads); whether every row of the batch equals, bit for bit, that row run alone
(output and final state) under each rule; and the median time of the whole chunked call under each
rule (triton.testing.do_bench, warm-up outside the timing), with their ratio. Where both rules pick
the same configuration the ratio is ~1 and nothing was traded.
"""
from __future__ import annotations

import torch
import triton
from triton.testing import do_bench

import impl.kda as ik

K = V = 128


def inputs(B: int, T: int, H: int, dev):
    """bf16 q, k, v and float32 gates near 0 (the state carries across the segments), beta in (0, 1)."""
    g = torch.Generator(device=dev).manual_seed(B * 1000 + T + H)
    q = torch.nn.functional.normalize(torch.randn(B, T, H, K, device=dev, generator=g), dim=-1) * K ** -0.5
    k = torch.nn.functional.normalize(torch.randn(B, T, H, K, device=dev, generator=g), dim=-1)
    v = torch.randn(B, T, H, V, device=dev, generator=g)
    gate = -0.05 * torch.rand(B, T, H, K, device=dev, generator=g)
    beta = torch.rand(B, T, H, device=dev, generator=g)
    return [a.to(torch.bfloat16) for a in (q, k, v)] + [gate, beta.to(torch.bfloat16)]


def rule(dev, H: int, B: int, T: int, per_row: bool):
    """(BV, NSEG) of the state pass: one row's configuration, or the old one counting all B rows."""
    bv, nseg, _ = ik._state_config(dev, H if per_row else H * B, triton.cdiv(T, ik.CHUNK), K, V)
    return bv, nseg


def run(x, state, bv: int, nseg: int):
    return ik._chunked(*x, state, boundary_states=False, bv=bv, nseg=nseg)[:2]


def rows_equal(x, state, cfg_of) -> int:
    """How many of the B rows equal, output and final state bit for bit, the row run alone (each call
    under the configuration cfg_of(B) picks for its own batch size)."""
    B = x[0].shape[0]
    o, s = run(x, state, *cfg_of(B))
    same = 0
    for b in range(B):
        o1, s1 = run([a[b:b + 1] for a in x], state[b:b + 1], *cfg_of(1))
        same += bool(torch.equal(o[b:b + 1], o1) and torch.equal(s[b:b + 1], s1))
    return same


def main() -> None:
    dev = torch.device("cuda")
    print(f"{'H':>3} {'T':>6} {'B':>2} {'per-row BV,seg':>14} {'old BV,seg':>11} {'rows=alone per-row':>18} "
          f"{'old':>4} {'per-row ms':>10} {'old ms':>8} {'ratio':>6}", flush=True)
    for H in (8, 64):
        for T in (4096, 16384):
            for B in range(1, 9):
                x = inputs(B, T, H, dev)
                state = torch.randn(B, H, K, V, device=dev) * 0.1
                new, old = rule(dev, H, B, T, True), rule(dev, H, B, T, False)
                eq_new = rows_equal(x, state, lambda b: rule(dev, H, b, T, True))
                eq_old = rows_equal(x, state, lambda b: rule(dev, H, b, T, False))
                t_new = do_bench(lambda: run(x, state, *new), warmup=25, rep=100)
                t_old = t_new if old == new else do_bench(lambda: run(x, state, *old), warmup=25, rep=100)
                print(f"{H:>3} {T:>6} {B:>2} {str(new):>14} {str(old):>11} {f'{eq_new}/{B}':>18} "
                      f"{f'{eq_old}/{B}':>4} {t_new:>10.3f} {t_old:>8.3f} {t_new / t_old:>6.2f}", flush=True)
                del x, state
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
