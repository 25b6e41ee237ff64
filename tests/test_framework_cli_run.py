"""`glmgate run` / `glmgate zoo` reporting on fake checks (seconds): the margin / flips / ill-conditioned
columns and JSON fields, error rows that never lose a run, Ctrl-C, profile and argument validation.
"""
from __future__ import annotations

import io
import json

import pytest
from hypothesis import strategies as st
from rich.console import Console

from gate import cli
from invariants import engine as runner
from invariants import matrix
from test_framework_runner import FakeCase, FakeVerdict, fake_check


@pytest.fixture
def fakes(monkeypatch):
    """Registers fake.boom (its strategy raises), fake.ok (passes; a legal flip every 4th example,
    ill-conditioned every 7th), fake.stop (Ctrl-C) and fake.bad (breaks its contract from x >= 5) as
    matrix checks, run in that order."""
    checks = {      # in run order
        "fake.boom": fake_check("fake.boom", cases=lambda g: st.builds(FakeCase, st.integers(0, 99).map(
            lambda x: {}["missing key"]))),
        "fake.ok": fake_check("fake.ok"),
        "fake.stop": fake_check("fake.stop"),
        "fake.bad": fake_check("fake.bad"),
    }

    def evaluate(check, case, cand, base):
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
    assert _run("fake.boom", "fake.ok", json_path=out) == 1
    text = capsys.readouterr().out
    data = json.loads(out.read_text())
    rows = {r["check"]: r for r in data["results"]}
    assert rows["fake.boom"]["status"] == "error" and rows["fake.ok"]["status"] == "pass", rows
    assert "KeyError: 'missing key' (raised at tests/test_framework_cli_run.py:" in rows["fake.boom"]["message"]
    assert "fake.boom ERROR" in text and "KeyError: 'missing key'" in text, text
    assert "2 checks: 1 passed, 0 failed, 1 errors, 0 not run;" in text, text


def test_the_table_and_json_show_margins_flips_and_ill_conditioned_examples(fakes, tmp_path, capsys):
    out = tmp_path / "r.json"
    assert _run("fake.ok", json_path=out) == 0
    text = capsys.readouterr().out
    row = json.loads(out.read_text())["results"][0]
    assert row["margin"] == {"p50": 0.5, "p99": 0.5, "max": 0.5}
    assert row["flip_examples"] >= 1 and row["ill_conditioned_examples"] >= 1, row    # x = 0 is always drawn
    for header in ("error/limit p50", "p99", "max", "flips", "ill-cond."):
        assert header in text, header
    assert (f"1 checks: 1 passed, 0 failed, 0 errors, 0 not run; {row['flip_examples']} examples with a legal "
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


def test_exit_codes(fakes):
    assert _run("fake.ok") == 0
    assert _run("fake.bad") == 1
    assert _run("fake.boom") == 1


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
def test_bad_profile_or_examples_exit_with_a_message(argv, match):
    with pytest.raises(SystemExit, match=match):
        cli.main(argv)


def test_an_unknown_profile_in_the_environment_is_named(monkeypatch):
    monkeypatch.setenv("GLMGATE_PROFILE", "turbo")
    with pytest.raises(SystemExit, match=r"\$GLMGATE_PROFILE: unknown profile 'turbo'"):
        cli.main(["run", "--check", "kda.decode"])


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
