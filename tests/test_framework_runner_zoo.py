"""`glmgate zoo`'s serving mutants end to end (a pytest subprocess): a scenario that crashes is an ERROR,
never an escape. (The zoo's dtype reaching the scenarios: tests/test_framework_cli.py's zoo test.)"""
from __future__ import annotations

import pytest
import torch
from rich.table import Table

from gate import cli


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine where CUDA engines cannot load")
def test_a_serving_scenario_that_crashes_is_an_error_not_an_escape():
    """`--device cuda` on a machine without CUDA: the engines cannot load (torch raises an
    AssertionError of its own, which must not pass for a broken invariant)."""
    table = Table()
    for col in ("mutant", "status", "caught by", "why"):
        table.add_column(col)
    missed = cli._zoo_serving(["serving_fork_aliases_buffers"], table, cli._rich(), "cuda", "bfloat16")
    assert missed == ["serving_fork_aliases_buffers"]
    status, catcher, why = (list(c.cells)[0] for c in table.columns[1:])
    assert "ERROR" in status and catcher == "serving.state_machine (cuda, bfloat16)", (status, catcher)
    assert why.startswith("_scenario_fork CRASHED: ") and "(raised at " in why, why
