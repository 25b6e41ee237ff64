"""`glmgate bench`: the `--` separator the help text documents reaches no benchmark as an option, and a
benchmark asked for on a machine without CUDA says so and exits 2 (nothing is timed on the CPU)."""
from __future__ import annotations

import pytest
import torch

from gate import cli


@pytest.mark.parametrize("mechanism", ["mhc", "moe"])
def test_options_after_the_separator_reach_the_benchmark(mechanism, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["bench", "--mechanism", mechanism, "--", "--help"])
    assert e.value.code == 0
    assert f"glmgate bench --mechanism {mechanism}" in capsys.readouterr().out


@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-CUDA message: only on a machine without CUDA")
def test_the_mhc_benchmark_without_cuda_says_so(capsys):
    assert cli.main(["bench", "--mechanism", "mhc", "--", "--tokens", "1"]) == 2
    assert "no CUDA device" in capsys.readouterr().err
