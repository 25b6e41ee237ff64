"""Launches for Nsight Compute (scripts/gpu_stop45.sh's ncu part): `mla` the sparse absorbed MLA decode kernel at
B = 32 (gate.bench_mla's decode shape: H = 64, r_kv 512, 2051 selected rows of a 32K cache), `decode` ours' KDA
decode step and fla's fused_recurrent_kda at B = 64, H = 64, K = V = 128 (scripts/kda_decode_probe.py's inputs).
Each launch runs twice (profile the second: `--launch-skip 1 --launch-count 1` with a kernel regex).

    PYTHONPATH=. python3 scripts/ncu_stop45.py mla|decode
"""
import sys

import torch


def mla(B=32, T=32768):
    from gate.bench_mla import DN, decode_inputs
    from impl import mla as im
    _, latent, _, idx, lengths, q_abs = decode_inputs(B, T)
    for _ in range(2):
        im.sparse_absorbed(q_abs, latent, idx, lengths, DN ** -0.5)
    torch.cuda.synchronize()


def decode(B=64, H=64):
    from gate.bench_kda import K, _decode_setup
    from impl import kda as ik
    w, z, f, b, state = _decode_setup(B, H)
    for _ in range(2):
        ik.decode(w, z, f, b, state, inplace=True)
    from fla.ops.kda import fused_recurrent_kda
    gen = torch.Generator(device="cuda").manual_seed(1)
    qf = torch.nn.functional.normalize(torch.randn(B, 1, H, K, device="cuda", generator=gen), dim=-1)
    kf = torch.nn.functional.normalize(torch.randn(B, 1, H, K, device="cuda", generator=gen), dim=-1)
    qf, kf = (qf * K ** -0.5).bfloat16(), kf.bfloat16()
    vf = torch.randn(B, 1, H, K, device="cuda", generator=gen).bfloat16()
    gf = -torch.rand(B, 1, H, K, device="cuda", generator=gen)
    bf = torch.rand(B, 1, H, device="cuda", generator=gen)
    hf = state.recurrent.clone()
    for _ in range(2):
        fused_recurrent_kda(qf, kf, vf, gf, bf, scale=1.0, initial_state=hf, output_final_state=True)
    torch.cuda.synchronize()


if __name__ == "__main__":
    {"mla": mla, "decode": decode}[sys.argv[1]]()
