"""Your own property test of your own kernel, held to glmgate's declared contracts.

What this file shows (copy it next to your kernel and replace `my_chunked`):

* Hypothesis draws STRUCTURE with glmgate's strategies (sequence lengths biased to the chunk
  boundaries 63/64/65, how a prefill is cut into calls, packed documents, a seed), never tensor
  elements: a failure shrinks to something like `length=65, splits=(64, 1)`, and every tensor is
  rebuilt from `numpy.random.default_rng(seed)`, so the shrunk case is the whole reproduction.
* Three results per case: the float64 NumPy oracle (the truth), the plain-torch baseline (the same math
  in the same dtype: `glmgate.implementation("torch")`) and your kernel.
* `glmgate.assert_within_contract` judges your kernel against the oracle under the contract declared
  for it (kda.chunked.output: at most 4 x the baseline's error + a floor); when it breaks, the message
  names the quantity, both errors, the limit, the worst element and why the bound is what it is.

Run it (on a machine without a GPU Triton runs in its CPU interpreter, in float32):

    pytest examples/pytest/test_my_kernel.py

`pytest --glmgate-candidate mykernels:KDA` runs glmgate's whole matrix on your kernel as well; see
docs/pytest.md.
"""
from __future__ import annotations

import os

import numpy as np
import torch

if not torch.cuda.is_available():
    # Triton reads this when a kernel is defined: it must be set before any kernel module is imported
    os.environ.setdefault("TRITON_INTERPRET", "1")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import glmgate  # noqa: E402
from oracle import kda as oracle_kda  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# the CPU interpreter computes only float32 correctly; on a GPU the contracts' bf16 floors apply
DTYPE = "bfloat16" if DEVICE == "cuda" else "float32"
HEADS, HEAD_DIM = 2, 8          # tiny shapes: the interpreter runs every kernel instruction in Python
# few examples: the interpreter is slow; on a GPU raise them (or use --hypothesis-profile)
FEW = settings(max_examples=4, deadline=None)


def my_chunked(q, k, v, g, beta, state=None, cu_seqlens=None):
    """Stand-in for YOUR kernel (here: glmgate's own Triton chunked prefill, unchanged). Same signature
    and layout as oracle.kda.chunked: q, k [B,T,H,K] (L2-normalised, q scaled), v [B,T,H,V],
    g [B,T,H,K] float32 log-decay, beta [B,T,H], state [B or N,H,K,V] float32 -> (o, final state)."""
    import impl.kda
    o, final, _ = impl.kda.chunked(q, k, v, g, beta, state, cu_seqlens=cu_seqlens, boundary_states=False)
    return o, final


def baseline_chunked(q, k, v, g, beta, state=None, cu_seqlens=None):
    """The plain-torch baseline the kernel_replacement contracts are relative to."""
    o, final, _ = glmgate.implementation("torch").kda.chunked(q, k, v, g, beta, state, cu_seqlens=cu_seqlens,
                                                              boundary_states=False)
    return o, final


def inputs(seed: int, batch: int, length: int, with_state: bool, family: str = "normal"):
    """float64 q, k, v, g, beta and an initial state (or None), all from one seed."""
    rng = np.random.default_rng(seed)
    x = glmgate.core_tensors(rng, HEADS, HEAD_DIM, batch, length, family)
    state = glmgate.initial_state(rng, batch, HEADS, HEAD_DIM) if with_state else None
    return x, state


def on_device(x, state):
    """The float64 arrays as a kernel takes them: the working dtype, g and the state in float32."""
    dt = getattr(torch, DTYPE)
    t = {n: torch.as_tensor(x[n], dtype=dt, device=DEVICE) for n in ("q", "k", "v", "beta")}
    t["g"] = torch.as_tensor(x["g"], dtype=torch.float32, device=DEVICE)
    s = None if state is None else torch.as_tensor(state, dtype=torch.float32, device=DEVICE)
    return t, s


def call(fn, t, s, cu_seqlens=None):
    return fn(t["q"], t["k"], t["v"], t["g"], t["beta"], s, cu_seqlens=cu_seqlens)


def oracle_on_held(t, s, cu_seqlens=None):
    """The oracle on the inputs exactly as the kernel received them (rounded to the working dtype): the
    error exact arithmetic makes from those is the least any kernel can expect, so the contract's limit
    never drops below it (bf16: an ill-conditioned case must not fail the kernel)."""
    f64 = {n: a.double().cpu().numpy() for n, a in t.items()}
    state = None if s is None else s.double().cpu().numpy()
    o, final, _ = oracle_kda.chunked(f64["q"], f64["k"], f64["v"], f64["g"], f64["beta"], state,
                                     cu_seqlens=cu_seqlens)
    return o, final


@FEW
@given(length=glmgate.sequence_lengths(max_len=80), batch=st.integers(1, 2), with_state=st.booleans(),
       family=glmgate.families(), seed=glmgate.SEEDS)
def test_my_chunked_is_within_the_kernel_replacement_contract(length, batch, with_state, family, seed):
    x, state = inputs(seed, batch, length, with_state, family)
    ref_o, ref_s, _ = oracle_kda.chunked(x["q"], x["k"], x["v"], x["g"], x["beta"], state)
    t, s = on_device(x, state)
    mine, base, held = call(my_chunked, t, s), call(baseline_chunked, t, s), oracle_on_held(t, s)
    for i, (quantity, want) in enumerate((("output", ref_o), ("final_state", ref_s))):
        glmgate.assert_within_contract("kda", "chunked", quantity, mine[i], want, baseline=base[i],
                                       held_reference=held[i], dtype=DTYPE)


@st.composite
def split_prefills(draw):
    """(length, how the prefill is cut into calls, seed): part lengths summing to length."""
    length = draw(glmgate.sequence_lengths(min_len=2, max_len=80))
    return length, draw(glmgate.chunk_splits(length, max_parts=3)), draw(glmgate.SEEDS)


@FEW
@given(split_prefills())
def test_my_chunked_cut_into_calls_matches_one_call(case):
    """The prefix/chunk/continuation invariant: a prefill cut into calls, each continuing from the
    previous call's state, gives what one call gives (only rounding order may differ)."""
    length, splits, seed = case
    x, _ = inputs(seed, 1, length, with_state=False)
    t, _ = on_device(x, None)
    whole_o, whole_s = call(my_chunked, t, None)
    outs, s, at = [], None, 0
    for n in splits:
        part = {name: a[:, at:at + n] for name, a in t.items()}
        o, s = call(my_chunked, part, s)
        outs.append(o)
        at += n
    glmgate.assert_within_contract("kda", "chunked_prefill", "output_vs_prefill", torch.cat(outs, 1), whole_o,
                                   kind="self_consistency", dtype=DTYPE)
    glmgate.assert_within_contract("kda", "chunked_prefill", "state_vs_prefill", s, whole_s,
                                   kind="self_consistency", dtype=DTYPE)


@FEW
@given(docs=glmgate.packed_lengths(max_docs=3, max_len=40), seed=glmgate.SEEDS)
def test_my_chunked_packed_documents_are_within_contract(docs, seed):
    """Packed documents (cu_seqlens, zero-length ones included) against the oracle run the same way."""
    x, _ = inputs(seed, 1, sum(docs), with_state=False)
    cu = glmgate.cu_seqlens(docs)
    ref_o, ref_s, _ = oracle_kda.chunked(x["q"], x["k"], x["v"], x["g"], x["beta"], cu_seqlens=cu)
    t, _ = on_device(x, None)
    cu_t = torch.tensor(cu, dtype=torch.int32, device=DEVICE)
    mine, base = call(my_chunked, t, None, cu_t), call(baseline_chunked, t, None, cu_t)
    glmgate.assert_within_contract("kda", "chunked", "output", mine[0], ref_o, baseline=base[0], dtype=DTYPE)
    glmgate.assert_within_contract("kda", "chunked", "final_state", mine[1], ref_s, baseline=base[1], dtype=DTYPE)
