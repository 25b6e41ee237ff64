"""The correctness matrix as one table of small records (STYLE 2): name, cases, run.

`evaluate` turns a record's comparisons into contract verdicts; the runner (invariants/engine.py) and the
tests (tests/test_kda.py) both go through it, so the CLI and pytest assert the same thing.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

from invariants import dsa_checks as dc
from invariants import kda_checks as kc
from invariants import mhc_checks as hc
from invariants import model_checks as mdc
from invariants import moe_checks as mc
from invariants import paths
from invariants import serving_checks as svc
from invariants.contracts import DECISION_KINDS, Verdict, judge, judge_decision, lookup
from invariants.target import Target
from strategies import cases as sc


class Check(NamedTuple):
    name: str                 # "<mechanism>.<what>": also the pytest test name's stem
    mechanism: str
    cases: Callable           # geometry -> SearchStrategy of one case type
    run: Callable             # (case, cand Target, base Target) -> list[Comparison]
    doc: str


CHECKS = (
    Check("kda.recurrent", "kda", sc.core_cases, kc.run_recurrent,
          "token loop vs oracle: output and final state (varlen, initial state)"),
    Check("kda.chunked", "kda", sc.core_cases, kc.run_chunked,
          "chunk-64 kernel vs oracle: output, final state, EVERY boundary state"),
    Check("kda.decode", "kda", sc.decode_cases, kc.run_decode,
          "fused decode step: conv window, SiLU, L2, gate, delta step, output"),
    Check("kda.sublayer", "kda", sc.sublayer_cases, kc.run_sublayer,
          "projections..o_proj with left padding and an incoming state"),
    Check("kda.paths", "kda", sc.sublayer_cases, paths.run_paths,
          "prefix/chunk/continuation invariant: split prefill, token decode, serialize+restore"),
    Check("kda.packed", "kda", sc.packed_cases, paths.run_packed,
          "cu_seqlens packing == each document alone; a NaN stays in its document"),
    Check("kda.rerun", "kda", lambda g: sc.sublayer_cases(g, padded=False), kc.run_rerun,
          "run-twice determinism of prefill and decode"),
    Check("dsa.index", "dsa", sc.index_cases, dc.run_index,
          "indexer rows, pool scores and the tie-aware selection at pool-boundary lengths"),
    Check("mla.absorbed", "mla", sc.absorbed_cases, dc.run_absorbed,
          "sparse absorbed attention over a selection vs the oracle (baseline: expanded form); wide "
          "selections (topk 256) that a GPU splits across programs"),
    Check("mla.paths", "mla", sc.mla_cases, dc.run_mla_paths,
          "full + shared DSA layers over split calls: outputs, latent cache, indexer rows"),
    Check("mhc.coefficients", "mhc", sc.mhc_cases, hc.run_coefficients,
          "pre, post, Sinkhorn comb (1, 3, 20 iterations) and the collapse"),
    Check("mhc.write_back", "mhc", sc.mhc_cases, hc.run_write_back,
          "X_new = post x y + C^T X with the candidate's own coefficients"),
    Check("moe.route", "moe", sc.moe_cases, mc.run_route,
          "expert ids tie-aware (groups and experts), weights from the raw sigmoid per expert"),
    Check("moe.forward", "moe", sc.moe_cases, mc.run_forward,
          "routed experts + shared expert with the clamps firing"),
    Check("nvfp4.quantize", "nvfp4", sc.nvfp4_cases, mc.run_quantize,
          "codes, block scales and global scale bit-exact (ties to even, zero blocks, fp8 subnormals)"),
    Check("nvfp4.dequantize", "nvfp4", sc.nvfp4_cases, mc.run_dequantize,
          "dequantization bit-exact, from linear and from 128x4-swizzled scales"),
    Check("nvfp4.gate", "nvfp4", sc.quant_gate_cases, mc.run_gate,
          "MoE layer + fixed vocab projection, W4A16 and W4A4: KL / top-1 vs oracle NVFP4 and vs unquantized"),
    Check("model.paths", "model", mdc.model_cases, mdc.run_model_paths,
          "whole decoder: split prefill, token decode, serialize+restore, left-padded rows vs the oracle's one "
          "prefill: logits and every state array; the oracle's own paths agree"),
    Check("serving.state_machine", "serving", svc.serving_cases, svc.run_state_machine,
          "a drawn program of serving operations (admit, chunked prefill, packed steps, speculate and roll "
          "back, fork, cancel, reorder) on oracle, candidate and baseline engines, compared after every "
          "operation: every state array, the cached logits, the history, a cold rerun"),
)

BY_NAME = {c.name: c for c in CHECKS}


def checks_for(mechanisms) -> list[Check]:
    known = sorted({c.mechanism for c in CHECKS})
    bad = [m for m in mechanisms if m not in known]
    if bad:
        raise ValueError(f"unknown mechanism(s) {bad}: this build checks {known}")
    return [c for c in CHECKS if c.mechanism in mechanisms]


def evaluate(check: Check, case, cand: Target, base: Target) -> list[Verdict]:
    """Run one case and judge every comparison under its declared contract."""
    out = []
    for cmp in check.run(case, cand, base):
        contract = lookup(check.mechanism, cmp.path, cmp.quantity, cmp.kind)
        if cmp.kind in DECISION_KINDS:
            out.append(judge_decision(contract, cand.dtype_name, cmp.candidate, cmp.reference, cmp.where))
        else:
            v = judge(contract, cand.dtype_name, cmp.candidate, cmp.reference, cmp.baseline, cmp.baseline_reference,
                      cmp.held_reference)
            out.append(v._replace(detail=f"{cmp.where}: {v.detail}" if cmp.where and v.detail else
                                  (cmp.where or v.detail)))
    return out
