"""Issue 14 step 51's landing form: the producer kernel with blocks of 64 entries from 16 query rows on
(impl.mla.PRODUCER_BW64_ROWS = 16), blocks of 32 below (docs/optimization_log.md "Step 51").

Why 16: stop 53 (H100, impl.candidates.mla_producer_bw64, blocks of 64 at every row count) measured the blocks of
64 at 1.02-1.22x those of 32 from B = 16 on and 0.975x at B = 8, where 16 splits of 129 entries leave each split's
last block of 64 nearly empty. The threshold sits above mla.batch's range (at most 6 query rows), so a row's bits
there do not change; from 7 to 15 rows this candidate launches what ours launches. Landed in stop 54 (H100, by the
rule written before its call: gate at seeds 93 and 94, the GPU tests, five producer mutants caught; the decode
1.005 / 1.013 / 1.038 / 1.088 / 1.152 / 1.170x the blocks of 32 at B = 8-256): ours since.
"""
from __future__ import annotations

import types

from impl.candidates.mla_heads64 import module_copy

# the form of its step: the q_abs copy and the float32 unsplit output (issue 14 steps 54, 55) pinned as before them
mla = module_copy(f"{__name__}.mla", PRODUCER=True, PRODUCER_BW64_ROWS=16, PRODUCER_AHEAD=False,
                  Q_STRIDES=False, OUT_UV=False)
Candidate = types.SimpleNamespace(mla=mla)
