"""One structured failure report: which contract broke, by how much, where, and how to reproduce it."""
from __future__ import annotations

import json
from typing import Optional

from invariants.compare import name_index
from invariants.contracts import Verdict


def repro_line(check: str, case_json: dict, impl: str, device: str, dtype: str) -> str:
    payload = {"check": check, "impl": impl, "device": device, "dtype": dtype, "case": case_json}
    return "glmgate repro '" + json.dumps(payload, separators=(",", ":")) + "'"


def describe(v: Verdict) -> str:
    """One line per verdict: contract, value vs limit, the other metrics, the worst element."""
    c = v.contract
    head = f"{c.mechanism}.{c.path}.{c.quantity} [{c.kind}, {v.dtype}]"
    if c.kind == "selection":
        return f"{head}: {'selection matches (tie-aware, eps ' + format(c.bound.get(v.dtype, 0), 'g') + ')' if v.ok else 'SELECTION DIFFERS'}; {v.detail}"
    if v.metrics is None and v.detail:
        return f"{head}: {v.detail}"
    if v.metrics is None:
        where = " on rerun" if c.quantity == "rerun" else ""
        return f"{head}: {'bitwise equal' if v.ok else 'NOT bitwise equal' + where}"
    m = v.metrics
    if v.detail:
        head += f" {v.detail}"
    base = f", baseline {v.baseline_err:.3g}" if v.baseline_err is not None else ""
    if v.ill_conditioned and c.kind == "self_consistency":
        base += (f" (ILL-CONDITIONED: the limit took the held reference's error {v.held_err:.3g}, above the bound "
                 f"{c.bound.get(v.dtype, float('nan')):g}: exact arithmetic on the inputs as the dtype holds them "
                 f"differs that much from itself on the exact inputs)")
    elif v.ill_conditioned:
        cap = c.cap.get(v.dtype, float("nan"))
        if v.held_err is not None and v.held_err > cap:
            base += (f" (ILL-CONDITIONED: above its cap {cap:g}; the limit took the held reference's error "
                     f"{v.held_err:.3g} instead: exact arithmetic on the values as the dtype holds them)")
        else:
            base += f" (ILL-CONDITIONED: above its cap {cap:g}, which the limit took instead)"
    if m.nonfinite_mismatch:
        detail = (f"{m.nonfinite_mismatch} entries non-finite in one side only; first at "
                  f"{name_index(m.worst_index, v.axes)}: candidate {m.worst_candidate!r}, reference {m.worst_reference!r}")
    else:
        detail = (f"max_abs_scaled {m.max_abs_scaled:.3g}, cosine {m.cosine:.9f}, worst at "
                  f"{name_index(m.worst_index, v.axes)}: candidate {m.worst_candidate:.6g} vs reference {m.worst_reference:.6g}")
    return f"{head}: {c.metric} {v.value:.3g} {'<=' if v.ok else '>'} limit {v.limit:.3g}{base}; {detail}"


class ContractBroken(AssertionError):
    """Raised inside a property when any verdict fails; carries the case for repro and shrinking."""

    def __init__(self, check: str, case, verdicts: list, repro: Optional[str] = None):
        self.check, self.case, self.verdicts, self.repro = check, case, verdicts, repro
        broken = [describe(v) for v in verdicts if not v.ok]
        msg = f"{check}: {len(broken)} contract(s) broken for case {case!r}\n  " + "\n  ".join(broken)
        if repro:
            msg += "\n" + repro
        super().__init__(msg)
