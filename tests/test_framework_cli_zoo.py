"""`glmgate zoo` end to end, in process: every mutant, the serving ones included, runs its designated
check through the same engine (invariants/engine.py run_check), its check's pinned cases first; caught
with the (shrunk or pinned) scenario, ESCAPED otherwise; --list names each mutant's check and quantity."""
from __future__ import annotations

import subprocess

import pytest

from gate import cli
from impl import mutants
from impl.baseline.mhc import TorchMHC
from invariants import serving_checks as svc


@pytest.fixture
def no_subprocess(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError(f"the zoo started a subprocess: {a}")
    monkeypatch.setattr(subprocess, "run", refuse)
    monkeypatch.setattr(subprocess, "Popen", refuse)


def test_a_serving_mutant_is_caught_in_process_on_a_pinned_program_in_its_records_dtype(no_subprocess, capsys):
    # the record declares float32 (Check.dtype): a bf16 zoo still judges it under the float32 contract
    assert cli.main(["zoo", "--dtype", "bfloat16", "--mutant", "serving_fresh_slot_times_zero"]) == 0
    out = capsys.readouterr().out
    assert "serving_fresh_slot_times_zero: caught by serving.state_machine: " in out, out
    assert "serving.state_machine.state [kernel_replacement, float32]" in out, out
    # the pinned slot-reuse program fails first (svc.EXAMPLES order): the scenario reported, unshrunk
    assert svc.EXAMPLES[0] is svc.SLOT_REUSE and '"ServingCase"' in out and '"cancel"' in out, out


def test_a_matrix_mutant_is_caught_with_a_shrunk_scenario(no_subprocess, capsys):
    assert cli.main(["zoo", "--mutant", "mhc_pre_normalized"]) == 0
    out = capsys.readouterr().out
    assert "mhc_pre_normalized: caught by mhc.coefficients: " in out and '"type": "MHCCase"' in out, out


def test_a_mutant_that_breaks_nothing_escapes_with_exit_1(no_subprocess, capsys, monkeypatch):
    fake = {"mhc_nothing_wrong": mutants.Mutant("mhc_nothing_wrong", "mhc.write_back", "output",
                                                "the baseline itself", TorchMHC, TorchMHC)}
    monkeypatch.setattr(mutants.catalogue, "MUTANTS", fake)
    monkeypatch.setattr(mutants, "MUTANTS", fake)
    assert cli.main(["zoo", "--mutant", "mhc_nothing_wrong", "--examples", "2"]) == 1
    assert "mhc_nothing_wrong: ESCAPED every mhc check" in capsys.readouterr().out


def test_list_names_every_mutant_with_its_check_and_quantity(capsys):
    assert cli.main(["zoo", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(mutants.MUTANTS)
    for line, (name, m) in zip(lines, sorted(mutants.MUTANTS.items())):
        # a GPU-only mutant (Mutant.device) says so after its description
        tail = m.description + (" [GPU only]" if m.device else "")
        assert line.split()[:2] == [name, f"{m.check}.{m.quantity}"] and line.endswith(tail), line
