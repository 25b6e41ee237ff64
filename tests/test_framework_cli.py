"""The CLI end to end, in process: run, a failure's report and its repro line, contracts, errors,
`glmgate run --mechanism model` and its reference cross-check, checkpoint make-tiny / inspect.

The only test files that import the CLI are this one and tests/test_framework_cli_{run,zoo,gate,db}.py: every
other test calls the engine (invariants/engine.py) or the library underneath.
"""
from __future__ import annotations

import json
import re

import pytest

from gate import cli
from invariants import reference
from oracle import checkpoint as ock
from oracle.types import NVFP4Tensor


@pytest.fixture(autouse=True)
def _failure_store(tmp_path, monkeypatch):
    """Failures these runs find go to a store of the test's own, never ./.glmgate-failures."""
    monkeypatch.setenv("GLMGATE_FAILURES", str(tmp_path / "failures"))


def test_run_passes_on_the_baseline_and_writes_json(tmp_path, capsys):
    out = tmp_path / "r.json"
    rc = cli.main(["run", "--impl", "torch", "--examples", "2", "--check", "kda.chunked",
                   "--json", str(out)])
    assert rc == 0
    data = json.loads(out.read_text())
    assert data["results"][0]["check"] == "kda.chunked" and data["results"][0]["status"] == "pass"
    assert "error/limit p50" in capsys.readouterr().out
    assert data["results"][0]["margin"]["max"] <= 1.0, data["results"][0]["margin"]


def test_a_broken_contract_exits_1_and_prints_a_repro_line_that_reproduces_it(capsys):
    rc = cli.main(["run", "--impl", "mutant:kda_tail_chunk_dropped", "--examples", "10",
                   "--check", "kda.chunked", "--profile", "ci"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "shrunk scenario" in out and "broke a contract" in out
    line = next(l for l in out.splitlines() if l.strip().startswith("glmgate repro '"))
    payload = line.strip()[len("glmgate repro '"):-1]
    assert json.loads(payload)["check"] == "kda.chunked"
    assert cli.main(["repro", payload]) == 1
    assert "FAIL kda.chunked.output" in capsys.readouterr().out
    assert cli.main(["repro", payload, "--impl", "torch"]) == 0


def test_contracts_prints_the_table(capsys):
    assert cli.main(["contracts"]) == 0
    assert "kernel_replacement" in capsys.readouterr().out


@pytest.mark.parametrize("argv, match", [
    (["run", "--mechanism", "nope"], "unknown mechanism"),
    (["run", "--impl", "nope"], "unknown implementation"),
    (["run", "--check", "kda.nope"], "unknown"),
    (["run", "--geometry", "huge"], "huge"),
    (["run", "--device", "tpu"], "cpu or cuda"),
    (["repro", "{not json"], "not JSON"),
    (["repro", '{"check": "kda.nope", "case": {}}'], "unknown check"),
    (["zoo", "--mutant", "nope"], "unknown mutant"),
], ids=["run --mechanism nope", "run --impl nope", "run --check kda.nope", "run --geometry huge",
        "run --device tpu", "repro (not JSON)", "repro (unknown check)", "zoo --mutant nope"])
def test_bad_arguments_exit_2_with_a_message_naming_the_problem(argv, match, capsys):
    assert cli.main(argv) == cli.EXIT_USAGE == 2
    err = capsys.readouterr().err
    assert re.search(match, err) and err.startswith(f"glmgate {argv[0]}: error: "), err


def test_checkpoint_make_tiny_then_inspect_locates_every_layer_and_its_state(tmp_path, capsys):
    assert cli.main(["checkpoint", "make-tiny", str(tmp_path / "ck"), "--seed", "3"]) == 0
    assert cli.main(["checkpoint", "inspect", str(tmp_path / "ck"), "--tensors"]) == 0
    out = capsys.readouterr().out
    assert "layer   4  DSA(shared)" in out and "recurrent [B,2,8,8] f32" in out
    assert "model.language_model.layers.0.hc_attn_fn" in out


def test_checkpoint_inspect_of_a_broken_directory_names_the_problem(tmp_path, capsys):
    assert cli.main(["checkpoint", "inspect", str(tmp_path)]) == cli.EXIT_USAGE
    assert "config.json" in capsys.readouterr().err


def test_run_mechanism_model_reports_both_checks_and_a_mutant_repro(tmp_path, capsys):
    out = tmp_path / "r.json"
    rc = cli.main(["run", "--impl", "torch", "--mechanism", "model", "--examples", "3", "--json", str(out)])
    text = capsys.readouterr().out
    assert rc == 0, text
    got = {r["check"]: r["status"] for r in json.loads(out.read_text())["results"]}
    expect = "pass" if reference.unavailable() is None else "not run"
    assert got == {"model.paths": "pass", "model.causal": "pass", "model.sharded": "pass", "model.reference": expect}
    rc = cli.main(["run", "--impl", "mutant:model_restore_drops_conv_window", "--check", "model.paths",
                   "--examples", "20", "--profile", "ci"])
    text = capsys.readouterr().out
    assert rc == 1 and "model.continuation" in text
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("glmgate repro '"))
    assert cli.main(["repro", line.strip()[len("glmgate repro '"):-1]]) == 1


def test_without_transformers_the_cross_check_says_not_run_and_how_to_install(monkeypatch, capsys):
    monkeypatch.setattr(reference, "unavailable", lambda: "transformers is not installed; install the "
                                                          f"reference extra: {reference.INSTALL}")
    assert cli.main(["run", "--check", "model.reference"]) == 0
    text = capsys.readouterr().out
    assert "NOT RUN" in text and "pip install -e '.[reference]'" in text and "--require-reference" in text
    assert cli.main(["run", "--check", "model.reference", "--require-reference"]) == 1


def test_checkpoint_make_tiny_nvfp4_then_inspect_names_the_layout(tmp_path, capsys):
    d = tmp_path / "ck"
    assert cli.main(["checkpoint", "make-tiny", str(d), "--nvfp4", "modelopt", "--seed", "1"]) == 0
    assert cli.main(["checkpoint", "inspect", str(d)]) == 0
    out = capsys.readouterr().out
    assert "NVFP4 (modelopt layout)" in out and "MoE+NVFP4" in out
    assert "layers.2.mlp.experts.0.gate_proj.weight_scale_2" in out and "F8_E4M3  [16, 2]" in out
    assert ock.nvfp4_layout(d) == "modelopt" and (d / "hf_quant_config.json").is_file()
    assert isinstance(ock.load(d).layers[2].mlp.nvfp4.down, NVFP4Tensor)
