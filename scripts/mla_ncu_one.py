"""One launch each of the sparse MLA kernels at B = 128 on a 32K cache (no split), for Nsight Compute: the Triton
kernel (impl.candidates.mla_gather_chain, ours before issue 14 step 49), the producer kernel (ours since stop 52) and
step 50's (impl.candidates.mla_producer_overlap), after a warm-up launch of each (compiles).

    PYTHONPATH=. ncu --clock-control none --kernel-name regex:mla_sparse_absorbed --launch-skip 3 --launch-count 3 \\
        --section WarpStateStats --section SchedulerStats python3 scripts/mla_ncu_one.py
"""
import torch

from gate.bench_mla import DN, decode_inputs
from impl import mla as im
from impl.candidates import mla_gather_chain, mla_producer_overlap

_, latent, _, idx, lengths, q_abs = decode_inputs(128, 32768)
for _ in range(2):
    for ns in (mla_gather_chain.mla, im, mla_producer_overlap.mla):
        ns.sparse_absorbed(q_abs, latent, idx, lengths, DN ** -0.5)
torch.cuda.synchronize()
