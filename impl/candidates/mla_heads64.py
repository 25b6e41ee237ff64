"""Issue 14 step 40's candidate: the sparse absorbed MLA kernel with 64 heads a program from 16 query rows on,
entry blocks of 32, 3 pipeline stages, and selection splits for about one program an SM
(docs/optimization_log.md "Step 40"). Ours since stop 46 (impl.mla._launch_config, _splits: the same launch),
kept so its gate can be replayed; the launch before it is config dict(bh=32, bw=64, num_stages=2) with 2 splits
below 128 rows (scripts/mla_step40_probe.py times both).

Why: with 32 heads a program (ours), each selected latent row is gathered by both head blocks of a row; with
64 it is gathered once, and the [64, BW] x [BW, 512] dots fill Hopper's warp-group MMA. The stop-45 probe (H100,
r_kv 512, 2051 selected rows) measured 1.35x at B = 32 and 1.575x at B = 128.

The namespace is impl.mla itself, loaded a second time as its own module with two functions replaced
(`_launch_config`, `_splits`), so every MLA entry point (absorbed, absorbed_paged, attend, absorbed_graph and
the sublayer composing them) launches the candidate's way while ours is untouched:

    python3 -m gate.cli gate --device cuda --candidate impl.candidates.mla_heads64:Candidate --baseline triton \\
        --check mla.absorbed --check mla.paths --check mla.causal --check mla.absorbed_paged --check mla.batch

Below 16 query rows the launch ours had then; on the interpreter, ours' (the CPU runs the same programs as ours).
Self-contained (ROWS_64 a literal, the launch below it written out), so it stays step 40's launch if ours moves.
Not the same bits as ours on a GPU: the entry blocks of 32 change the online softmax's rescale points and the
dots' accumulation order; held to contracts.d/mla.toml's bounds like ours (mla claims no batch invariance).
"""
from __future__ import annotations

import importlib.util
import sys
import types

from impl import interpreted, num_sms
from impl import mla as _ours

ROWS_64 = 16   # query rows (B·S) from which a program takes 64 heads (step 40; a literal: ours may move)


def _launch_config(rows: int, BR: int) -> dict:
    """64 heads a program, entry blocks of 32, 3 stages from ROWS_64 query rows on (the stop-45 probe's
    best at r_kv 512: blocks of 16 or 64 and 2 or 4 stages were slower); below that the launch ours had then
    (16 heads, blocks of 64, 2 stages); the interpreter's, ours'."""
    if interpreted():
        return _ours._launch_config(rows, BR)
    warps = 4 if BR <= 128 else 8
    if rows < ROWS_64:
        return dict(bh=16, bw=64, num_warps=warps, num_stages=2)
    return dict(bh=64, bw=32, num_warps=warps, num_stages=3)


def _splits(device, rows: int, programs: int, W: int, BW: int) -> int:
    """From ROWS_64 query rows on, as many splits as keep the programs within one wave of the SMs (B = 32,
    one head block: 4 splits on 132 SMs; B >= 67: none), each split at least 2 blocks of BW entries; below
    that the rule ours had then (four waves); the interpreter's, ours'."""
    if interpreted() or device.type != "cuda":
        return _ours._splits(device, rows, programs, W, BW)
    if rows >= ROWS_64:
        return max(1, min(num_sms(device) // programs, W // (2 * BW)))
    return max(1, min(-(-4 * num_sms(device) // programs), W // (2 * BW)))


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


mla = module_copy(f"{__name__}.mla", _launch_config=_launch_config, _splits=_splits)
Candidate = types.SimpleNamespace(mla=mla)
