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
    from gate.bench_kda import _decode_setup, fla_decode_launch
    from impl import kda as ik
    w, z, f, b, state = _decode_setup(B, H)
    for _ in range(2):
        ik.decode(w, z, f, b, state, inplace=True)
    fla = fla_decode_launch(B, H, state)
    for _ in range(2):
        fla()
    torch.cuda.synchronize()


if __name__ == "__main__":
    {"mla": mla, "decode": decode}[sys.argv[1]]()
