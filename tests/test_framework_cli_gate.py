"""`glmgate gate`: one merge verdict per candidate, in process (gate/merge_gate.py).

Candidates are small classes in this file wrapping our own Triton `chunked` (loaded by name as
`test_framework_cli_gate:<Class>`): unchanged (pass; the checks its chunked never reaches are NOT
COVERED), with a tail bug (FAIL with a repro line), a noisy one inside its contract (REGRESSION against
the Triton peer), one that raises (exit 3). The JUnit XML must parse with one testcase per check.
"""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest
import torch

import impl.kda as ik
from gate import cli, merge_gate
# a chunked without boundary states that declares it (NOT_PROVIDED): gated by name from this module
from test_compose import NoBoundaries  # noqa: F401
from pins import keep_pins


@pytest.fixture(autouse=True)
def _failure_store(tmp_path, monkeypatch):
    """Failures these runs find go to a store of the test's own, never ./.glmgate-failures; the gate's
    verdicts below hold on any case, so kda.chunked and kda.sublayer keep one pin each (tests/pins.py)."""
    monkeypatch.setenv("GLMGATE_FAILURES", str(tmp_path / "failures"))
    keep_pins(monkeypatch, {"kda.chunked": [3], "kda.sublayer": [1]})


class Same:
    @staticmethod
    def chunked(*args, **kwargs):
        return ik.chunked(*args, **kwargs)


class TailDropped:
    @staticmethod
    def chunked(q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
        o, s, b = ik.chunked(q, k, v, g, beta, state, chunk, cu_seqlens, boundary_states)
        o = o.clone()
        o[:, -1] = 0
        return o, s, b


class Noisy:
    """Inside the kda.chunked contract (k = 10 x the baseline's error + floor) but far worse than our
    kernel: noise of about twice the float32 baseline's typical error on the output."""

    @staticmethod
    def chunked(*args, **kwargs):
        o, s, b = ik.chunked(*args, **kwargs)
        gen = torch.Generator().manual_seed(0)
        return o + 2e-6 * o.abs().mean() * torch.randn(o.shape, generator=gen), s, b


class Slow:
    """Our chunked, a second late on every call (an autotuner, a compile per shape)."""

    @staticmethod
    def chunked(*args, **kwargs):
        import time
        time.sleep(1.0)
        return ik.chunked(*args, **kwargs)


class Raises:
    @staticmethod
    def chunked(*args, **kwargs):
        raise RuntimeError("out of shared memory")


def _gate(tmp_path, candidate, *checks, examples=3):
    argv = ["gate", "--candidate", f"test_framework_cli_gate:{candidate}", "--examples", str(examples),
            "--junit", str(tmp_path / "r.xml"), "--markdown", str(tmp_path / "pr.md"),
            "--json", str(tmp_path / "r.json")]
    for c in checks:
        argv += ["--check", c]
    rc = cli.main(argv)
    return rc, json.loads((tmp_path / "r.json").read_text()), ET.parse(tmp_path / "r.xml").getroot()


def test_an_unchanged_kernel_passes_and_what_it_never_reached_is_not_covered(tmp_path):
    rc, data, xml = _gate(tmp_path, "Same", "kda.chunked", "kda.sublayer", "kda.decode")
    assert rc == cli.EXIT_PASS, data
    status = {c["check"]: c["status"] for c in data["checks"]}
    assert status == {"kda.chunked": "pass", "kda.sublayer": "pass", "kda.decode": "not covered"}, status
    assert data["summary"].startswith("3 checks: 2 passed, 0 failed, 0 regressions, 1 not covered")
    cases = {c.get("name"): c for c in xml.iter("testcase")}
    assert set(cases) == {"kda.chunked", "kda.sublayer", "kda.decode"} and xml.get("tests") == "3"
    assert cases["kda.decode"].find("skipped") is not None and cases["kda.chunked"].find("failure") is None
    assert "### glmgate gate: passed" in (tmp_path / "pr.md").read_text()


def test_a_broken_kernel_fails_with_a_repro_in_the_junit_failure_and_exit_1(tmp_path):
    rc, data, xml = _gate(tmp_path, "TailDropped", "kda.chunked", "kda.sublayer")
    assert rc == cli.EXIT_BROKEN
    failures = [c.find("failure") for c in xml.iter("testcase")]
    assert all(f is not None for f in failures) and xml.get("failures") == "2"
    assert all("glmgate repro '" in f.text for f in failures)
    md = (tmp_path / "pr.md").read_text()
    assert "BLOCKED" in md and "| kda.sublayer | FAIL |" in md


def test_a_kernel_inside_its_contract_but_far_worse_than_the_peer_is_a_regression(tmp_path):
    rc, data, xml = _gate(tmp_path, "Noisy", "kda.chunked", examples=4)
    row = data["checks"][0]
    assert row["candidate"]["status"] == "pass", row          # inside the contract ...
    assert row["status"] == "regression" and rc == cli.EXIT_BROKEN, row   # ... but a regression
    assert row["candidate"]["margin"]["p50"] > merge_gate.REGRESSION_FACTOR * row["peer"]["margin"]["p50"]
    failure = next(xml.iter("testcase")).find("failure")
    assert failure.get("type") == "regression"
    # what regressed, and a line that re-runs the candidate's worst example
    assert "the candidate's worst: kda.chunked." in row["note"], row["note"]
    assert "glmgate repro '" in failure.text and '"impl":"test_framework_cli_gate:Noisy"' in failure.text


def test_a_declared_missing_output_is_said_before_the_examples_and_not_covered_in_every_output(tmp_path, capsys):
    rc, data, xml = _gate(tmp_path, "NoBoundaries", "kda.chunked", examples=2)
    out = capsys.readouterr().out
    said = out.index("not provided (declared NOT_PROVIDED): kda.chunked.boundary_states")
    assert said < out.index("kda.chunked: pass"), out       # before any example runs
    row = data["checks"][0]
    assert rc == cli.EXIT_PASS and row["status"] == "pass", row
    assert row["candidate"]["not_provided"] == ["kda.chunked.boundary_states"]
    assert "not covered (not provided): kda.chunked.boundary_states" in row["note"]
    assert "kda.chunked.boundary_states" in next(xml.iter("testcase")).find("system-out").text
    assert "not covered (not provided)" in (tmp_path / "pr.md").read_text()


def test_the_time_a_candidate_spends_per_example_is_in_the_report(tmp_path, capsys):
    rc, data, _ = _gate(tmp_path, "Slow", "kda.chunked", examples=1)
    row = data["checks"][0]
    assert rc == cli.EXIT_PASS and row["status"] == "pass", row
    per = {side: row[side]["candidate_seconds"] / row[side]["examples"] for side in ("candidate", "peer")}
    # a lower bound by construction (one call per example sleeps a second); the peer is timed the same way
    assert per["candidate"] >= 1.0 and 0 < per["peer"], per
    assert "candidate s/example" in capsys.readouterr().out


def test_a_kernel_that_raises_exits_3(tmp_path):
    rc, data, _ = _gate(tmp_path, "Raises", "kda.chunked")
    assert rc == cli.EXIT_CRASH and data["checks"][0]["status"] == "fail"
    assert data["checks"][0]["candidate"]["crashed"] is True


def test_gate_refuses_a_random_profile_without_a_seed_and_a_factor_of_one(capsys):
    assert cli.main(["gate", "--candidate", "triton", "--profile", "dev"]) == cli.EXIT_USAGE
    assert "same examples" in capsys.readouterr().err
    assert cli.main(["gate", "--candidate", "triton", "--regression-factor", "1"]) == cli.EXIT_USAGE
    assert "expected a factor > 1" in capsys.readouterr().err


def test_a_peer_without_a_checks_optional_functions_is_not_run_and_the_candidates_verdict_stands(tmp_path):
    """dsa.pooled calls the optional pooled-cache functions: a peer without them (the re-pooling indexer)
    is not run there (ours never stands in), so no regression is computed and the row says why."""
    rc = cli.main(["gate", "--candidate", "triton", "--baseline", "impl.candidates.dsa_repool:Candidate",
                   "--check", "dsa.pooled", "--examples", "1", "--json", str(tmp_path / "r.json")])
    data = json.loads((tmp_path / "r.json").read_text())
    assert rc == cli.EXIT_PASS, data
    (row,) = data["checks"]
    assert row["status"] == "pass" and row["peer"]["status"] == "not run", row
    assert "does not provide the optional dsa.pooled_rows, dsa.index_pooled" in row["peer"]["message"], row
