"""One decoder layer's decode step reads nothing back to the host while it is captured (issue 14 step 2).

A CUDA-graph capture of impl.model.decoder_layer failed for every layer kind on the H200
(cudaErrorStreamCaptureInvalidated: a host sync inside). Without a GPU, the proof is the recorder
(impl/host_sync.py): every call that would read a CUDA value back to the host is recorded with its line.
Under impl.graph.simulated_capture (the capture path: `capturing()` True) a decode step of every layer
kind of the tiny geometry records NONE: B = 1 and 3 (one row left-padded), NVFP4 and bf16-form experts,
DSA caches longer than index_topk (the sparse selection, with a pool eager compaction drops). And the
capture path computes the SAME bits as the eager path: the layer's output and new cache are equal
(torch.equal), the selection's indices too. The eager path still validates (it is what the warm-up of a
captured step runs), tested by the mechanisms' own tests.
"""
from __future__ import annotations

import functools

import pytest
import torch

from gate import bench_layer as bl
from impl.graph import capturing, simulated_capture
from impl.host_sync import format_syncs, record_host_syncs
from impl.model import decoder_layer
from oracle.config import Geometry

G = Geometry.preset("tiny")
KINDS = bl._kinds(G)          # kda+dense, dsa-full+dense, kda+sparse, dsa-full+sparse, dsa-shared+sparse
T_CTX = 17                    # > index_topk = 8 tokens = 2 pools of 4: the selection is sparse; 18 at decode
# every kind; the MoE kinds with NVFP4 experts and bf16-form experts (dsa-full+dense: attention as dsa-full+sparse)
CASES = [(k, nv) for k in sorted(KINDS) if k != "dsa-full+dense" for nv in ((True, False) if k.endswith("sparse") else (True,))]


@functools.lru_cache(maxsize=None)
def _layers(kind, nvfp4):
    i = KINDS[kind]
    lw = bl.random_layer(G, i, "cpu", torch.float32, nvfp4=nvfp4)
    full = bl.random_layer(G, i - 1, "cpu", torch.float32, nvfp4=False) if lw.indexer_type == "shared" else None
    return lw, full


def _dsa_cache(lw, B, mask, gen, rows: bool):
    from impl import dsa
    from oracle.types import DSACache
    latent = torch.randn(B, T_CTX, G.kv_lora_rank, generator=gen)
    a = torch.randn(B, T_CTX, G.hidden_size, generator=gen)
    return DSACache(latent, dsa.index_rows(lw.indexer, a, mask) if rows else None)


def _context(lw, full, B, seed):
    """A T_CTX-token cache of the layer (random, as a prefill leaves it: no prefill run, for speed; one
    row of three left-padded) and one decode token per row; the full layer's selection for a shared one."""
    from oracle.types import KDAState
    gen = torch.Generator().manual_seed(seed)
    mask = torch.ones(B, T_CTX, dtype=torch.bool)
    if B > 1:
        mask[1, :3] = False                        # a left-padded row: its pools start later
    if lw.attention == "linear_attention":
        H, K = lw.kda.num_heads, lw.kda.head_dim
        cache = KDAState(0.1 * torch.randn(B, H, K, K, generator=gen),
                         torch.randn(B, 3 * H * K, lw.kda.conv_width, generator=gen))
    else:
        cache = _dsa_cache(lw, B, mask, gen, rows=lw.indexer_type == "full")
    x1 = torch.randn(B, 1, G.hc_mult, G.hidden_size, generator=gen)
    m1 = torch.ones(B, 1, dtype=torch.bool)
    prev = None
    if full is not None:
        prev, _ = bl.handoff(full, G, x1, m1, _dsa_cache(full, B, mask, gen, rows=True))
    return x1, m1, cache, prev


def _equal(a, b, what):
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b), what
    elif a is None:
        assert b is None, what
    else:
        for n, (x, y) in enumerate(zip(a, b)):
            _equal(x, y, f"{what}[{n}]")


@pytest.mark.parametrize("kind,nvfp4", CASES, ids=lambda v: str(v))
def test_decode_step_reads_nothing_back_when_captured(kind, nvfp4):
    lw, full = _layers(kind, nvfp4)
    for B in (1, 3):
        x1, m1, cache, prev = _context(lw, full, B, seed=10 * B + KINDS[kind])
        with record_host_syncs() as eager_syncs:
            want = decoder_layer(lw, G, x1, m1, cache, prev)
        with simulated_capture(), record_host_syncs() as syncs:
            assert capturing()
            got = decoder_layer(lw, G, x1, m1, cache, prev)
        assert not syncs, f"{kind} nvfp4={nvfp4} B={B}: host syncs while captured:\n{format_syncs(syncs)}"
        # the capture path is the eager path's bits: output, cache, selected tokens
        _equal(got[0], want[0], f"{kind} B={B}: output")
        _equal(got[1], want[1], f"{kind} B={B}: cache")
        if want[2] is not None:
            assert torch.equal(got[2].indices, want[2].indices), f"{kind} B={B}: selection indices"
            assert (want[2].indices >= 0).sum(-1).max() > 0
        if kind.startswith("dsa-full"):
            # the eager step validates on the host (the recorder sees it): the capture path is a real change
            assert eager_syncs, f"{kind}: the eager step no longer validates anything"


def test_sparse_selection_is_taken_and_a_pool_dropped():
    """The DSA cases above select sparsely (more pools than topk) and eager compaction drops a pool
    that the capture path keeps (scores of the capture path are [B, S, n_p])."""
    lw, _ = _layers("dsa-full+sparse", False)
    x1, m1, cache, _ = _context(lw, None, 3, seed=1)
    _, _, sel = decoder_layer(lw, G, x1, m1, cache, None)
    with simulated_capture():
        _, _, sel_c = decoder_layer(lw, G, x1, m1, cache, None)
    n_p = -(-(T_CTX + 1) // G.index_kpool)
    assert sel.scores.shape[-1] < n_p == sel_c.scores.shape[-1]
    assert sel.k_sel == lw.indexer.topk_pools < sel.scores.shape[-1]
    assert torch.equal(sel.indices, sel_c.indices)


def test_recorder_records_each_kind_of_sync_and_restores_torch():
    x = torch.arange(6.0)
    before = {n: torch.Tensor.__dict__.get(n) for n in ("__bool__", "__getitem__", "item", "to")}
    with record_host_syncs() as s:
        int(x[0]), float(x.sum()), x.tolist(), x[x > 2], torch.nonzero(x), x.to("cpu")
        bool(x.any()), x.item() if x.numel() == 1 else x[1].item()
        y = x.clone()
        y[y > 3] = 0
        torch.tensor([1, 2]), torch.where(x > 1)
        x + 1, x.to(x.device), x[torch.arange(2)], x[1:3]          # none of these syncs
    whats = [r.what for r in s]
    assert len(s) == 11, format_syncs(s)
    assert {"int(tensor)", "float(tensor)", "Tensor.tolist()", "boolean-mask indexing x[mask]", "torch.nonzero",
            'Tensor.to(cpu)', "Tensor.__bool__ (a tensor in a Python condition)", "Tensor.item()",
            "boolean-mask assignment x[mask] = v", "torch.where(cond) (one argument)"} <= set(whats)
    assert all(r.where.startswith("tests/test_host_sync.py:") for r in s), format_syncs(s)
    assert {n: torch.Tensor.__dict__.get(n) for n in before} == before


def test_recorder_ignores_the_triton_interpreter():
    """A kernel launched under the interpreter copies its operands to NumPy inside triton: no record."""
    from impl import moe
    lw, _ = _layers("kda+sparse", True)
    a = torch.randn(2, 1, G.hidden_size)
    with record_host_syncs() as s:
        moe.route(lw.mlp, a)
    assert not s, format_syncs(s)
