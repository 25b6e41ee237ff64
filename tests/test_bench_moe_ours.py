"""`glmgate bench --mechanism moe` heads each N's summary with ours: the NVFP4 tile form impl.moe takes there by
default, on a GPU (the split tiles while a block has <= 16 rows: decode; the interleaved tiles at prefill). Stop 64
found the summary timing the interleaved tiles at decode, a form ours never runs there (1.51x where ours was 1.97x)."""
from __future__ import annotations

import pytest

import gate.bench_moe as bench
import impl
from impl import moe as imoe


@pytest.fixture
def on_a_gpu(monkeypatch):
    """impl.moe's tile choice as on a GPU (under the interpreter every launch takes the small test tiles)."""
    monkeypatch.setattr(impl, "interpreted", lambda: False)
    monkeypatch.setattr(imoe, "NVFP4_SPLIT", None)


@pytest.mark.parametrize("N, path", [(1, "nvfp4_split"), (8, "nvfp4_split"), (32, "nvfp4_split"),
                                     (128, "nvfp4_split"), (4096, "nvfp4")])
def test_the_summary_times_the_form_ours_takes(on_a_gpu, N, path):
    assert bench.ours_path(N) == path
