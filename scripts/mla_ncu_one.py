"""One launch each of the sparse MLA kernels at B = 128 on a 32K cache (no split), for Nsight Compute: the Triton
kernel (impl.candidates.mla_gather_chain, ours before issue 14 step 49) and the producer kernel (ours since stop 52),
after a warm-up launch of each (compiles). Profile with --kernel-name regex:mla_sparse_absorbed --launch-skip 2.

    PYTHONPATH=. ncu --clock-control none --kernel-name regex:mla_sparse_absorbed --launch-skip 2 --launch-count 2 \\
        --section WarpStateStats --section SchedulerStats python3 scripts/mla_ncu_one.py
"""
import torch

from gate.bench_mla import DN, decode_inputs
from impl import mla as im
from impl.candidates import mla_gather_chain

_, latent, _, idx, lengths, q_abs = decode_inputs(128, 32768)
for _ in range(2):
    mla_gather_chain.mla.sparse_absorbed(q_abs, latent, idx, lengths, DN ** -0.5)
    im.sparse_absorbed(q_abs, latent, idx, lengths, DN ** -0.5)
torch.cuda.synchronize()
