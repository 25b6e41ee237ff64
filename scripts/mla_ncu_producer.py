"""One launch each of the producer kernels at B = 128 on a 32K cache (no split), for Nsight Compute's stall reasons:
step 49's (impl.candidates.mla_producer: blocks of 32, 3 stages) and step 51's (impl.candidates.mla_producer_bw64:
blocks of 64, 2 stages), after a warm-up launch of each (compiles). The producer and consumer warps share one
kernel, so the stall reasons are read per instruction (the source page) as well as summed over the kernel.

    PYTHONPATH=. ncu --clock-control none --kernel-name regex:mla_sparse_absorbed_ws --launch-skip 2 --launch-count 2 \\
        --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio python3 scripts/mla_ncu_producer.py
"""
import torch

from gate.bench_mla import DN, decode_inputs
from impl.candidates import mla_producer, mla_producer_bw64

_, latent, _, idx, lengths, q_abs = decode_inputs(128, 32768)
for _ in range(2):
    for ns in (mla_producer.mla, mla_producer_bw64.mla):
        ns.sparse_absorbed(q_abs, latent, idx, lengths, DN ** -0.5)
torch.cuda.synchronize()
