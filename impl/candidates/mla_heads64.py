"""Issue 14 step 40's candidate: the sparse absorbed MLA kernel with 64 heads a program from 16 query rows on,
entry blocks of 32, 3 pipeline stages, and selection splits for about one program an SM
(docs/optimization_log.md "Step 40"). Ours since stop 46 (impl.mla._launch_config, _splits: the same launch),
kept so its gate can be replayed; the launch before it is config dict(bh=32, bw=64, num_stages=2) with 2 splits
below 128 rows (scripts/mla_step40_probe.py times both).

Why: with 32 heads a program (ours), each selected latent row is gathered by both head blocks of a row; with
64 it is gathered once, and the [64, BW] x [BW, 512] dots fill Hopper's warp-group MMA. The stop-45 probe (H100,
r_kv 512, 2051 selected rows) measured 1.35x at B = 32 and 1.575x at B = 128.

The namespace is impl.mla itself, loaded a second time as its own module (`module_copy`) with ROWS_64 set, so
every MLA entry point (absorbed, absorbed_paged, attend, absorbed_graph and the sublayer composing them)
launches the candidate's way while ours is untouched. Its gate ran (stop 46) with `_launch_config` and `_splits`
written out in this file; they gave the launch ours' functions give at ROWS_64 = 16 (they read ROWS_64 from
their own module, so setting it in the copy is enough):

    python3 -m gate.cli gate --device cuda --candidate impl.candidates.mla_heads64:Candidate --baseline triton \\
        --check mla.absorbed --check mla.paths --check mla.causal --check mla.absorbed_paged --check mla.batch

Below 16 query rows, and on the interpreter, the launch is ours' (the CPU runs the same programs as ours).
ROWS_64 is a literal, so the candidate stays at 16 rows if ours moves its threshold (step 41).
Not the same bits as ours on a GPU: the entry blocks of 32 change the online softmax's rescale points and the
dots' accumulation order; held to contracts.d/mla.toml's bounds like ours (mla claims no batch invariance).
"""
from __future__ import annotations

import importlib.util
import sys
import types

from impl import mla as _ours

ROWS_64 = 16   # query rows (B·S) from which a program takes 64 heads (step 40; a literal: ours may move)


def module_copy(name: str, **replace):
    """impl.mla executed again as module `name` (its own globals: its functions call each other, not ours),
    then the globals in `replace` set; registered in sys.modules before it runs, as impl.mla reads its own
    module object (_SELF) while it executes."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, _ours.__file__)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    for k, v in replace.items():
        setattr(mod, k, v)
    return mod


mla = module_copy(f"{__name__}.mla", ROWS_64=ROWS_64)
Candidate = types.SimpleNamespace(mla=mla)
