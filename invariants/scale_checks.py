"""Full-geometry scale (issue 13, "full-geometry scale on the GPU"): the KDA chunked prefill at the sizes a
serving engine runs, where the float64 NumPy oracle and float64 host inputs no longer fit.

`kda.scale` draws its inputs ON THE TARGET'S DEVICE (a torch generator per sample, float64 there, cast into
the working dtype one sample at a time), runs the candidate's chunked prefill over the whole [B, T] batch
and then every sample alone: each sample of the batch must equal its run alone
(`per_sample`: bit for bit where the namespace claims chunked batch-invariant, BATCH_INVARIANT; the check
that sees a 32-bit offset wrap past 2^31 elements: the samples after the wrap read another sample's rows,
flash-linear-attention #1080). The first and last samples are also held to a float64 reference under the
kernel-replacement contract: the baseline's math (impl/baseline/kda.py, itself held to the NumPy oracle by
kda.chunked) run in float64 on the same device, the baseline in the working dtype setting the error scale.

On the CPU the strategy draws interpreter-sized rows (the same property, small); the sizes that matter are
the record's CUDA pins: H = 64, K = V = 128 at T = 16K and 64K (`gpu_examples`), and B = 5 rows of 64K
tokens, B*T*H*K = 2.7e9 > 2^31 (`nightly_examples`: ~60 GiB of device memory, replayed under the
explore / nightly profiles).
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import torch
from hypothesis import strategies as st

from impl.registry import claims_batch_invariance
from invariants.check import Check
from invariants.compare import Comparison
from invariants.labels import label
from invariants.target import Target
from strategies.sequences import sequence_lengths
from strategies.tensors import GATE_LOGITS, SEEDS

SCALE_FAMILIES = ("normal", "gate_low", "gate_high")
LOWER_BOUND = -5.0


class ScaleCase(NamedTuple):
    """B rows of T tokens of the KDA core, drawn on the device from `seed` (one generator per row)."""

    heads: int
    head_dim: int
    batch: int
    length: int
    family: str
    seed: int
    # the geometry's gate (None: softplus, unbounded decays); cases recorded before it was a field are -5
    lower_bound: Optional[float] = LOWER_BOUND


@st.composite
def scale_cases(draw, base=None, *, max_len: int = 160) -> ScaleCase:
    """Interpreter-sized rows (the CUDA pins carry the real sizes); of `base` only its gate is taken."""
    lower_bound = LOWER_BOUND if base is None else base.linear_lower_bound
    return ScaleCase(draw(st.sampled_from((1, 2, 3))), draw(st.sampled_from((16, 32))), draw(st.integers(1, 3)),
                     draw(sequence_lengths(max_len=max_len)), draw(st.sampled_from(SCALE_FAMILIES)), draw(SEEDS),
                     lower_bound)


def sample(case: ScaleCase, row: int, device, dtype=torch.float64) -> dict:
    """Row `row`'s q, k (L2-normalised, q scaled by K^-1/2), v, g (the case's gate, SPEC §6.4), beta: [1, T, ...],
    drawn in float64 on `device` from its own generator (a row is the same whatever the batch)."""
    T, H, K = case.length, case.heads, case.head_dim
    gen = torch.Generator(device=device).manual_seed(case.seed * 1_000_003 + row)
    n = lambda *shape: torch.randn(*shape, generator=gen, device=device, dtype=torch.float64)  # noqa: E731
    unit = lambda x: x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6)                      # noqa: E731
    # f and A_log as strategies.tensors draws them (the bounded draw here leaves out A_log: as recorded)
    shift, a_log = GATE_LOGITS.get(case.family, (0.0, 0.0))
    x = dict(q=unit(n(1, T, H, K)) * K ** -0.5, k=unit(n(1, T, H, K)), v=n(1, T, H, K),
             g=shift + n(1, T, H, K), beta=torch.sigmoid(n(1, T, H)))
    if case.lower_bound is None:
        x["g"] = -torch.nn.functional.softplus(x["g"]) * torch.exp(torch.tensor(a_log))
    else:
        x["g"] = case.lower_bound * torch.sigmoid(x["g"])
    return {name: a.to(torch.float32 if name == "g" else dtype) for name, a in x.items()}


def _batch(case: ScaleCase, t: Target) -> dict:
    """The whole batch in t's working dtype (g float32), filled one row at a time (float64 of one row only)."""
    out = None
    for b in range(case.batch):
        x = sample(case, b, t.device, t.dtype)
        if out is None:
            out = {name: a.new_empty((case.batch, *a.shape[1:])) for name, a in x.items()}
        for name, a in x.items():
            out[name][b] = a[0]
        del x
    return out


def _chunked(t: Target, x: dict):
    """t's chunked prefill from a zero state: (o, final state); boundary states not asked for where the
    namespace lets a caller skip them (64K tokens of them are 4 GiB a row)."""
    fn = t.impl.kda.chunked
    import inspect
    try:
        skip = "boundary_states" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        skip = False
    opt = {"boundary_states": False} if skip else {}
    with t.poisoned():
        o, s, _ = fn(x["q"], x["k"], x["v"], x["g"], x["beta"], None, 64, **opt)
    return o, s


def run_scale(case: ScaleCase, cand: Target, base: Target):
    """Every row of the batch vs itself alone (per_sample); the first and last rows vs a float64 reference."""
    label(f"B*T*H*K past 2^31: {case.batch * case.length * case.heads * case.head_dim >= 2 ** 31}")
    if case.length > 64:
        label("crossed chunk boundary")
    o, s = _chunked(cand, _batch(case, cand))
    # bit for bit where the namespace claims chunked batch-invariant (BATCH_INVARIANT), else within rounding
    kind = "exact" if claims_batch_invariance(cand.impl.kda, "chunked") else "self_consistency"
    res = []
    for b in range(case.batch):
        ob, sb = _chunked(cand, {n: a for n, a in sample(case, b, cand.device, cand.dtype).items()})
        res += [Comparison("scale", "per_sample", o[b:b + 1], ob, kind=kind, where=f"row {b}"),
                Comparison("scale", "per_sample", s[b:b + 1], sb, kind=kind, where=f"row {b}")]
        del ob, sb
    f64 = base.in_dtype("float64")
    for b in sorted({0, case.batch - 1}):
        ref_o, ref_s = _chunked(f64, sample(case, b, base.device, torch.float64))
        base_o, base_s = _chunked(base, sample(case, b, base.device, base.dtype))
        res += [Comparison("scale", "output", o[b:b + 1], ref_o, base_o, where=f"row {b}"),
                Comparison("scale", "final_state", s[b:b + 1], ref_s, base_s, where=f"row {b}")]
        del ref_o, ref_s, base_o, base_s
    return res


KDA_FULL = dict(heads=64, head_dim=128)

CHECKS = (
    Check("kda.scale", "kda", ScaleCase, scale_cases, run_scale,
          "full-geometry scale: every row of a [B, T] chunked prefill equals itself alone, the first and last "
          "rows within contract of a float64 reference (CUDA pins: H=64, K=128, T=16K/64K; B*T*H*K past 2^31)",
          # the softplus pins: strong decays (~ -16 a token) through the intra kernel's exact pairs pass at
          # every size, whatever the geometry's own gate
          examples=(ScaleCase(2, 16, 3, 130, "normal", 0), ScaleCase(2, 16, 2, 130, "gate_low", 1, None)),
          gpu_examples=(ScaleCase(**KDA_FULL, batch=1, length=16384, family="normal", seed=0),
                        ScaleCase(**KDA_FULL, batch=2, length=65536, family="gate_low", seed=1),
                        ScaleCase(**KDA_FULL, batch=1, length=16384, family="gate_low", seed=3, lower_bound=None)),
          nightly_examples=(ScaleCase(**KDA_FULL, batch=5, length=65536, family="normal", seed=2),),
          cpu_examples=2),
)
