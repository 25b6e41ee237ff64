"""`glmgate run` / `glmgate zoo` reporting on fake checks (seconds): the margin / flips / ill-conditioned
columns and JSON fields, error rows that never lose a run, Ctrl-C, profile and argument validation.
"""
from __future__ import annotations

import contextlib
import io
import json
import sys

import pytest
from hypothesis import strategies as st
from rich.console import Console

from gate import cli
from invariants import engine as runner
from invariants import matrix
from test_framework_runner import FakeCase, FakeVerdict, fake_check


@pytest.fixture(autouse=True)
def _failure_store(tmp_path, monkeypatch):
    """Failures these runs find go to a store of the test's own, never ./.glmgate-failures."""
    monkeypatch.setenv("GLMGATE_FAILURES", str(tmp_path / "failures"))


@pytest.fixture
def fakes(monkeypatch):
    """Registers fake.boom (its strategy raises), fake.ok (passes; a legal flip every 4th example,
    ill-conditioned every 7th), fake.stop (Ctrl-C), fake.bad (breaks its contract from x >= 5),
    fake.crash (the candidate raises from x >= 5) and fake.idle (passes without calling the candidate)
    as matrix checks, run in that order. Every fake but fake.idle calls one candidate function (a call
    it refuses: all a fake needs is to have reached the candidate)."""
    checks = {      # in run order
        "fake.boom": fake_check("fake.boom", cases=lambda g: st.builds(FakeCase, st.integers(0, 99).map(
            lambda x: {}["missing key"]))),
        "fake.ok": fake_check("fake.ok"),
        "fake.stop": fake_check("fake.stop"),
        "fake.bad": fake_check("fake.bad"),
        "fake.crash": fake_check("fake.crash"),
        "fake.idle": fake_check("fake.idle"),
    }

    def evaluate(check, case, cand, base, skipped=None, *judging):
        if check.name != "fake.idle":
            with contextlib.suppress(Exception):
                cand.impl.kda.decode(None, None, None, None, None)
        if check.name == "fake.crash" and case.x >= 5:
            raise RuntimeError("the candidate fell over")
        if check.name == "fake.stop":
            raise KeyboardInterrupt
        if check.name == "fake.bad":
            return [FakeVerdict(3.0 if case.x >= 5 else 0.5)]
        return [FakeVerdict(0.5, flips=case.x % 4 == 0, ill_conditioned=case.x % 7 == 0)]
    monkeypatch.setattr(matrix, "CHECKS", matrix.CHECKS + tuple(checks.values()))
    for name, c in checks.items():
        monkeypatch.setitem(matrix.BY_NAME, name, c)
    monkeypatch.setattr(runner, "evaluate", evaluate)
    return checks


def _run(*argv, json_path=None):
    args = ["run", "--impl", "torch", "--examples", "6", "--profile", "ci"]
    for name in argv:
        args += ["--check", name]
    if json_path:
        args += ["--json", str(json_path)]
    return cli.main(args)


def test_an_erroring_check_is_an_error_row_and_the_run_goes_on(fakes, tmp_path, capsys):
    out = tmp_path / "r.json"
    assert _run("fake.boom", "fake.ok", json_path=out) == cli.EXIT_CRASH
    text = capsys.readouterr().out
    data = json.loads(out.read_text())
    rows = {r["check"]: r for r in data["results"]}
    assert rows["fake.boom"]["status"] == "error" and rows["fake.ok"]["status"] == "pass", rows
    assert "KeyError: 'missing key' (raised at tests/test_framework_cli_run.py:" in rows["fake.boom"]["message"]
    assert "fake.boom ERROR" in text and "KeyError: 'missing key'" in text, text
    assert "2 checks: 1 passed, 0 failed, 1 errors, 0 not covered, 0 not run;" in text, text


def test_the_table_and_json_show_margins_flips_and_ill_conditioned_examples(fakes, tmp_path, capsys):
    out = tmp_path / "r.json"
    assert _run("fake.ok", json_path=out) == 0
    text = capsys.readouterr().out
    row = json.loads(out.read_text())["results"][0]
    assert row["margin"] == {"p50": 0.5, "p99": 0.5, "max": 0.5}
    assert row["flip_examples"] >= 1 and row["ill_conditioned_examples"] >= 1, row    # x = 0 is always drawn
    for header in ("error/limit p50", "p99", "max", "flips", "ill-cond."):
        assert header in text, header
    assert row["covered"] == ["kda.decode"], row
    assert (f"1 checks: 1 passed, 0 failed, 0 errors, 0 not covered, 0 not run; {row['flip_examples']} examples with a legal "
            f"decision flip, {row['ill_conditioned_examples']} ill-conditioned examples") in text, text


def test_error_rows_are_red_and_a_max_over_the_limit_is_red():
    base = dict(worst_ratio=-1.0, worst_line="", worst_case=None, shrunk_case=None, repro=None, events={},
                seconds=0.0, examples=3, mechanism="kda", message="")
    rows = [runner.CheckResult(check="fake.boom", status="error", **base),
            runner.CheckResult(check="fake.bad", status="fail", margin={"p50": 0.5, "p99": 3.0, "max": 3.0}, **base)]
    buf = io.StringIO()
    Console(file=buf, force_terminal=True, color_system="standard", width=200).print(cli._table(rows, "t"))
    rendered = buf.getvalue()
    assert "\x1b[1;31mERROR" in rendered and "\x1b[1;31m3\x1b[0m" in rendered, repr(rendered)


def test_exit_codes_tell_a_verdict_a_crash_and_a_usage_error_apart(fakes, capsys):
    assert _run("fake.ok") == cli.EXIT_PASS == 0
    assert _run("fake.bad") == cli.EXIT_BROKEN == 1
    assert _run("fake.boom") == cli.EXIT_CRASH == 3          # the check reached no verdict
    assert _run("fake.crash") == cli.EXIT_CRASH              # the candidate raised
    assert _run("fake.crash", "fake.bad") == cli.EXIT_BROKEN  # a broken contract outranks a crash
    assert _run("fake.idle") == cli.EXIT_PASS
    assert _run("fake.nope") == cli.EXIT_USAGE == 2
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:                      # argparse's own errors: 2 as well
        cli.main(["run", "--examples", "many"])
    assert e.value.code == cli.EXIT_USAGE


def test_a_check_that_never_called_the_candidate_is_not_covered_never_pass(fakes, tmp_path, capsys):
    out = tmp_path / "r.json"
    assert _run("fake.idle", "fake.ok", json_path=out) == 0
    rows = {r["check"]: r for r in json.loads(out.read_text())["results"]}
    assert rows["fake.idle"]["status"] == "not covered" and rows["fake.idle"]["covered"] == [], rows
    assert "no function of torch ran" in rows["fake.idle"]["message"]
    assert rows["fake.ok"]["status"] == "pass" and rows["fake.ok"]["covered"] == ["kda.decode"]
    text = capsys.readouterr().out
    assert "fake.idle NOT COVERED" in text and "2 checks: 1 passed, 0 failed, 0 errors, 1 not covered" in text


def test_the_version_is_printed(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.startswith("glmgate ")


def test_a_check_whose_namespace_the_candidate_lacks_is_not_run_and_said_once(monkeypatch, tmp_path, capsys):
    """A KDA-only candidate (a module beside the caller: no PYTHONPATH) runs the kda checks only."""
    (tmp_path / "kdaonly.py").write_text("import impl.kda as _k\n\n\nclass KDA:\n"
                                         "    recurrent, chunked = staticmethod(_k.recurrent), staticmethod(_k.chunked)\n"
                                         "    decode, sublayer = staticmethod(_k.decode), staticmethod(_k.sublayer)\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    out = tmp_path / "r.json"
    assert cli.main(["run", "--impl", "kdaonly:KDA", "--check", "kda.decode", "--check", "mla.absorbed",
                     "--check", "nvfp4.gate", "--examples", "1", "--json", str(out)]) == 0
    rows = {r["check"]: r for r in json.loads(out.read_text())["results"]}
    assert rows["kda.decode"]["status"] == "pass" and rows["kda.decode"]["covered"] == ["kda.decode"], rows
    assert rows["mla.absorbed"]["status"] == "not run" and "no mla namespace" in rows["mla.absorbed"]["message"]
    assert rows["nvfp4.gate"]["status"] == "not run" and "no nvfp4, moe namespace" in rows["nvfp4.gate"]["message"]
    assert "not run: 2 checks need namespaces 'kdaonly:KDA' does not provide" in capsys.readouterr().out


def test_json_on_stdout_stays_json_when_a_check_fails_or_errors(fakes, capsys):
    assert cli.main(["run", "--impl", "torch", "--examples", "6", "--profile", "ci", "--check", "fake.bad",
                     "--check", "fake.boom", "--json", "-"]) == 1
    captured = capsys.readouterr()
    data = json.loads(captured.out)          # Hypothesis's own report and the table went to stderr
    assert [(r["check"], r["status"]) for r in data["results"]] == [("fake.boom", "error"), ("fake.bad", "fail")]
    assert data["summary"]["failed"] == 1 and data["summary"]["errors"] == 1
    assert "fake.bad broke a contract" in captured.err


def test_ctrl_c_writes_what_finished_and_exits_130(fakes, tmp_path, capsys):
    out = tmp_path / "r.json"
    assert _run("fake.ok", "fake.stop", "fake.bad", json_path=out) == 130
    data = json.loads(out.read_text())
    assert data["meta"]["interrupted"] is True
    assert [(r["check"], r["status"]) for r in data["results"]] == [
        ("fake.ok", "pass"), ("fake.stop", "not run"), ("fake.bad", "not run")], data["results"]
    assert "interrupted (Ctrl-C)" in data["results"][1]["message"]
    assert "interrupted" in capsys.readouterr().out


@pytest.mark.parametrize("argv, match", [
    (["run", "--profile", "fast"], "unknown profile 'fast'; known profiles: dev, ci, gpu, explore, nightly"),
    (["run", "--examples", "0"], "--examples: expected a count >= 1, got 0"),
    (["zoo", "--profile", "nope", "--mutant", "serving_fork_aliases_buffers"], "unknown profile 'nope'"),
    (["zoo", "--examples", "-2"], "--examples: expected a count >= 1"),
], ids=["run --profile fast", "run --examples 0", "zoo --profile nope", "zoo --examples -2"])
def test_bad_profile_or_examples_exit_2_with_a_message(argv, match, capsys):
    assert cli.main(argv) == cli.EXIT_USAGE
    assert match in capsys.readouterr().err


def test_an_unknown_profile_in_the_environment_is_named(monkeypatch, capsys):
    monkeypatch.setenv("GLMGATE_PROFILE", "turbo")
    assert cli.main(["run", "--check", "kda.decode"]) == cli.EXIT_USAGE
    assert "$GLMGATE_PROFILE: unknown profile 'turbo'" in capsys.readouterr().err


@pytest.mark.parametrize("profile, noted", [("gpu", True), ("ci", True), ("dev", False), ("explore", False)])
def test_a_seed_under_a_derandomized_profile_is_noted(profile, noted, fakes, capsys):
    assert cli.main(["run", "--impl", "torch", "--examples", "2", "--profile", profile, "--seed", "7",
                     "--check", "fake.ok"]) == 0
    err = capsys.readouterr().err
    line = f"--seed 7 replaces the {profile} profile's fixed draws"
    assert (line in err and "--profile explore" in err) == noted, err


def test_reference_not_run_prints_the_probe_reason_without_a_traceback(monkeypatch, capsys):
    from invariants import reference
    why = 'transformers 5.17.0 is installed, but its glm5_next has no "indexed_attention" layer type'
    monkeypatch.setattr(reference, "unavailable", lambda: why)
    assert cli.main(["run", "--check", "model.reference"]) == 0
    out = capsys.readouterr().out
    assert "model.reference NOT RUN" in out and why in out and "Traceback" not in out, out
    assert cli.main(["run", "--check", "model.reference", "--require-reference"]) == 1
