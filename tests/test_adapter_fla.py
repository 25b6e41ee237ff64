"""The flash-linear-attention adapter (adapters/fla_kda.py) on the CPU, over a stand-in for fla.

fla's kernels need CUDA (the adapter is gated on the H200: NOTES.md "Issue 12: the fla adapter"). Here
`chunk_kda` / `fused_recurrent_kda` are replaced by stand-ins built on our float32 torch baseline that
keep fla's documented conventions: q multiplied by `scale`, the state at the START of every chunk (a
trailing partial chunk included), [B, NT, H, K, V] (B = 1 and every document's chunks in
order with cu_seqlens), a zero-length document contributing no chunk. Then the adapter's own code (the
scale, the state rebuild, the varlen bookkeeping) runs through the gate like a user's adapter, and a
copy that takes fla's chunk-START states as our chunk-END states fails on exactly boundary_states.
"""
from __future__ import annotations

import json
import sys
import types

import pytest
import torch

import adapters.fla_kda as fla_kda
from gate import cli
from impl.baseline.kda import kda as baseline
from pins import keep_pins

CHUNK = 64


def _documents(B, T, cu):
    if cu is None:
        return [(b, 0, T) for b in range(B)]
    c = [int(x) for x in cu.tolist()]
    return [(0, s, e) for s, e in zip(c, c[1:])]


def chunk_kda(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
              use_qk_l2norm_in_kernel=False, return_intermediate_states=False, cu_seqlens=None, **kw):
    """fla's chunk_kda conventions over our baseline, one chunk at a time (to see each chunk's start)."""
    assert not use_qk_l2norm_in_kernel and return_intermediate_states and output_final_state
    q = q * (q.shape[-1] ** -0.5 if scale is None else scale)
    B, T, H, K = q.shape
    o = torch.zeros(B, T, H, v.shape[-1], dtype=q.dtype)
    finals, starts = [], [[] for _ in range(B)]
    for i, (b, s, e) in enumerate(_documents(B, T, cu_seqlens)):
        M = torch.zeros(1, H, K, v.shape[-1]) if initial_state is None else initial_state[i:i + 1].float()
        for c0 in range(s, e, CHUNK):
            c = slice(c0, min(c0 + CHUNK, e))
            starts[b].append(M[0])
            o[b:b + 1, c], M, _ = baseline.chunked(q[b:b + 1, c], k[b:b + 1, c], v[b:b + 1, c], g[b:b + 1, c],
                                                   beta[b:b + 1, c], M, CHUNK, boundary_states=False)
        finals.append(M[0])
    NT = max(len(r) for r in starts)
    h = torch.stack([torch.stack(r) if r else torch.zeros(NT, H, K, v.shape[-1]) for r in starts])
    # fla keeps h in bfloat16; here in k's dtype (float32 on the CPU) so that the adapter's bookkeeping is
    # judged at float32, where an off-by-one chunk is far outside the contract. fla's bfloat16 rounding
    # of the states is judged on the GPU at --dtype bfloat16 (NOTES.md)
    return o, torch.stack(finals), h.to(k.dtype)


def fused_recurrent_kda(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
                        use_qk_l2norm_in_kernel=False, cu_seqlens=None, **kw):
    assert not use_qk_l2norm_in_kernel and output_final_state
    q = q * (q.shape[-1] ** -0.5 if scale is None else scale)
    return baseline.recurrent(q, k, v, g, beta, initial_state, cu_seqlens)


@pytest.fixture
def stand_in(monkeypatch, tmp_path):
    monkeypatch.setattr(fla_kda, "_fla", lambda: (chunk_kda, fused_recurrent_kda))
    monkeypatch.setattr(fla_kda, "_on_gpu", lambda q: None)
    monkeypatch.setenv("GLMGATE_FAILURES", str(tmp_path / "failures"))
    # the conventions an adapter converts (layouts, scale, states, packing) are in kda.chunked's packed pin (documents
    # with an empty one, a given state) and its head dim 32 one; the drawn examples add the rest (tests/pins.py)
    keep_pins(monkeypatch, {"kda.chunked": [2, 3]})


class StartsAsEnds(fla_kda.KDA):
    """The adapter bug: fla's chunk-START states handed over as our chunk-END states."""

    @staticmethod
    def chunked(q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
        o, final, ends = fla_kda.KDA.chunked(q, k, v, g, beta, state, chunk, cu_seqlens, boundary_states)
        if ends is None or not ends.numel():
            return o, final, ends
        starts = torch.cat([torch.zeros_like(ends.flatten(0, -4)[:1]), ends.flatten(0, -4)[:-1]])
        return o, final, starts.reshape(ends.shape)


def _gate(tmp_path, candidate, *checks):
    argv = ["gate", "--candidate", candidate, "--examples", "4", "--json", str(tmp_path / "r.json")]
    for c in checks:
        argv += ["--check", c]
    rc = cli.main(argv)
    return rc, {c["check"]: c for c in json.loads((tmp_path / "r.json").read_text())["checks"]}


def test_the_adapter_over_fla_conventions_passes_its_checks(stand_in, tmp_path):
    rc, rows = _gate(tmp_path, "adapters.fla_kda:Candidate", "kda.recurrent", "kda.chunked", "kda.packed")
    assert rc == 0, rows
    assert {c: r["status"] for c, r in rows.items()} == {"kda.recurrent": "pass", "kda.chunked": "pass",
                                                         "kda.packed": "pass"}


def test_start_states_taken_for_end_states_fail_on_boundary_states(stand_in, tmp_path, monkeypatch):
    mod = types.ModuleType("fla_starts_as_ends")
    mod.Candidate = types.SimpleNamespace(kda=StartsAsEnds)
    monkeypatch.setitem(sys.modules, "fla_starts_as_ends", mod)
    rc, rows = _gate(tmp_path, "fla_starts_as_ends:Candidate", "kda.chunked")
    assert rc == 1 and rows["kda.chunked"]["status"] == "fail"
    assert "boundary_states" in rows["kda.chunked"]["note"]


def test_end_states_of_documents_with_empty_and_partial_chunks():
    """end_states on hand-made start states: chunk j ends where chunk j + 1 starts, a full last chunk
    ends at the final state, a partial one and an empty document give none."""
    H, K = 1, 2
    lengths = [130, 0, 64, 5]                        # chunks in the list: 3, 0, 1, 1
    starts = torch.arange(5, dtype=torch.float32).reshape(1, 5, 1, 1, 1).expand(1, 5, H, K, K)
    final = 100 + torch.arange(4, dtype=torch.float32).reshape(4, 1, 1, 1).expand(4, H, K, K)
    ends = fla_kda.end_states(starts, final, lengths)
    assert [float(e[0, 0, 0]) for e in ends] == [1.0, 2.0, 102.0]


def test_on_the_cpu_it_says_fla_needs_cuda():
    q = torch.zeros(1, 3, 1, 8)
    with pytest.raises(ValueError, match="CUDA only.*--device cuda"):
        fla_kda.KDA.chunked(q, q, q, q, q[..., 0])
