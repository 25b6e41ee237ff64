"""NOT a worked example to copy: kda_fla_style with a planted bug, the failure docs/candidates.md
section 11 reads. The states at the START of the chunks are handed over as the boundary states (the
state at the END of every full chunk): the conversion `end_states` is forgotten.

    glmgate gate --candidate planted_bug_kda:KDA --check kda.chunked --check kda.sublayer    (exit 1)
"""
from __future__ import annotations

import kda_fla_style as fla


class KDA:
    @staticmethod
    def chunked(q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
        hf = [a.transpose(1, 2) for a in (q, k, v, g, beta)]
        o, final, h = fla.head_first_chunk_kda(*hf, 1.0, state, cu_seqlens)
        P = q.shape[1] // fla.CHUNK
        return o.transpose(1, 2), final, h.transpose(1, 2)[:, :P].float()      # the bug: starts, not ends
