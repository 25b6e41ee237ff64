"""invariants/engine.py on fake checks (no kernels, seconds): margins, legal flips and ill-conditioned counts,
every way a check can end (pass / fail / error), reproducible profiles, and model.reference's
capability probe and its error path.

A fake check draws FakeCase(x) with x in 0..99; `evaluate` is replaced by a function of the case, so
each test states exactly which verdicts each example produces.
"""
from __future__ import annotations

import contextlib
import math
import sys
from typing import NamedTuple

import pytest
import torch
from hypothesis import settings
from hypothesis import strategies as st

from invariants import engine as runner
from invariants.profiles import DB_DIR
from impl import registry
from invariants.contracts import UndeclaredContract, load
from invariants.matrix import Check
from invariants.target import Target
from oracle.config import Geometry

TINY = Geometry.preset("tiny")
CAND = Target(registry.get("torch"), "cpu", torch.float32)
CONTRACT = next(c for c in load().values() if c.kind == "kernel_replacement")


class FakeCase(NamedTuple):
    x: int


class FakeVerdict:
    """What the runner reads of a verdict, with the fields Verdict is gaining (flips, ill_conditioned)."""

    contract, dtype, metrics, baseline_err = CONTRACT, "float32", None, None

    def __init__(self, ratio: float, flips: int = 0, ill_conditioned: bool = False):
        self.ratio, self.value, self.limit = ratio, ratio, 1.0
        self.flips, self.ill_conditioned = flips, ill_conditioned
        self.detail = f"fake error / limit {ratio}"

    @property
    def ok(self) -> bool:
        return self.ratio <= 1.0


class OldVerdict(FakeVerdict):
    """A verdict from before the flips / ill_conditioned fields existed."""

    def __getattribute__(self, name):
        if name in ("flips", "ill_conditioned"):
            raise AttributeError(name)
        return super().__getattribute__(name)


def fake_check(name="fake.check", cases=None) -> Check:
    return Check(name, "kda", FakeCase, cases or (lambda g: st.builds(FakeCase, st.integers(0, 99))), None, "a fake check")


def judged_by(monkeypatch, fn) -> list:
    """Replace the runner's evaluate with fn(x) -> verdicts; returns the list of x it was called with.
    The fake reaches the candidate (one call it refuses), so the check counts as covered."""
    seen = []

    def evaluate(check, case, cand, base, skipped=None, *judging):
        seen.append(case.x)
        with contextlib.suppress(Exception):
            cand.impl.kda.decode(None, None, None, None, None)
        return fn(case.x)
    monkeypatch.setattr(runner, "evaluate", evaluate)
    return seen


def run(check=None, profile="ci", n=30, seed=None):
    return runner.run_check(check or fake_check(), TINY, CAND, CAND, profile, max_examples=n, seed=seed)


# ------------------------------------------------------------------------------------------- margins

def test_percentile_is_nearest_rank_so_inf_survives():
    assert runner.percentile([0.2, math.inf, 0.5], 50) == 0.5
    assert runner.percentile([0.2, math.inf, 0.5], 99) == math.inf
    assert runner.percentile([0.7], 50) == runner.percentile([0.7], 99) == 0.7
    assert runner.percentile(list(range(1, 101)), 99) == 99


def test_margin_is_over_examples_of_each_examples_worst_verdict(monkeypatch):
    seen = judged_by(monkeypatch, lambda x: [FakeVerdict(x / 100), FakeVerdict(0.0)])
    r = run()
    assert r.status == "pass" and r.examples == len(seen) > 5, r
    per_example = [x / 100 for x in seen]
    m = r.margin
    assert m["max"] == max(per_example) == r.worst_ratio
    for q in ("p50", "p99"):     # nearest rank: the smallest value with >= q% of the examples at or below it
        frac = int(q[1:]) / 100
        assert sum(v <= m[q] for v in per_example) >= frac * len(seen) > sum(v < m[q] for v in per_example), (q, m)
    assert m["p50"] <= m["p99"] <= m["max"]


def test_a_failing_check_counts_its_first_failure_but_not_the_shrinking_after_it(monkeypatch):
    judged_by(monkeypatch, lambda x: [FakeVerdict(2.0 if x >= 40 else 0.1, flips=1)])
    r = run()
    assert r.status == "fail" and r.shrunk_case == {"type": "FakeCase", "x": 40}, r
    assert r.margin["max"] == 2.0 and r.margin["p50"] == 0.1, r.margin
    # shrinking replays many failing variants; each counted would put p50 at 2.0 and inflate the flips
    assert r.flip_examples < r.examples, (r.flip_examples, r.examples)


def test_shrinking_stops_at_its_time_budget_and_says_so(monkeypatch):
    seen = judged_by(monkeypatch, lambda x: [FakeVerdict(2.0 if x >= 40 else 0.1)])
    r = runner.run_check(fake_check(), TINY, CAND, CAND, "ci", max_examples=30, shrink_seconds=0.0)
    first = next(x for x in seen if x >= 40)
    # nothing is judged after the first failure: the budget is spent, and that failure is the one reported
    assert seen[-1] == first and r.status == "fail" and r.shrunk_case == {"type": "FakeCase", "x": first}, (seen, r)
    assert r.shrink_stopped and "shrinking stopped at its 0 s budget" in r.message, r.message
    unbounded = run()
    assert unbounded.shrunk_case == {"type": "FakeCase", "x": 40} and not unbounded.shrink_stopped
    assert 0.0 < unbounded.shrink_seconds < unbounded.seconds and "shrinking stopped" not in unbounded.message


def test_flips_and_ill_conditioning_count_examples_not_verdicts(monkeypatch):
    seen = judged_by(monkeypatch, lambda x: [FakeVerdict(0.5, flips=3 * (x % 3 == 0), ill_conditioned=x % 5 == 0),
                                             FakeVerdict(0.1, flips=2 * (x % 3 == 0), ill_conditioned=x % 5 == 0)])
    r = run()
    assert r.flip_examples == sum(x % 3 == 0 for x in seen) > 0
    assert r.ill_conditioned_examples == sum(x % 5 == 0 for x in seen) > 0


def test_verdicts_without_the_new_fields_count_no_flips(monkeypatch):
    judged_by(monkeypatch, lambda x: [OldVerdict(0.5)])
    r = run(n=5)
    assert r.status == "pass" and (r.flip_examples, r.ill_conditioned_examples) == (0, 0)


def test_the_json_carries_margin_flip_and_ill_conditioned_fields(monkeypatch):
    import json
    judged_by(monkeypatch, lambda x: [FakeVerdict(0.25, flips=1)])
    r = run(n=4)
    data = json.loads(runner.results_json([r], {}))
    row = data["results"][0]
    assert row["margin"] == {"p50": 0.25, "p99": 0.25, "max": 0.25}
    assert row["flip_examples"] == r.examples and row["ill_conditioned_examples"] == 0
    assert data["summary"] == {"checks": 1, "passed": 1, "failed": 0, "errors": 0, "not_covered": 0, "not_run": 0,
                               "flip_examples": r.examples, "ill_conditioned_examples": 0}


# ------------------------------------------------------------------------------------------- statuses

def _raise(exc):
    def f(*a, **k):
        raise exc
    return f


def _flaky():
    calls = []

    def f(x):
        calls.append(x)
        return [FakeVerdict(2.0 if len(calls) == 1 else 0.1)]    # fails once, never again
    return f


ERRORS = {
    "strategy raises ImportError": (fake_check(cases=_raise(ImportError("No module named 'fla'"))), None,
                                    "ImportError: No module named 'fla'"),
    "undeclared contract": (fake_check(), _raise(UndeclaredContract("no contract declared for kda.x.y")),
                            "UndeclaredContract: no contract declared for kda.x.y"),
    "unsatisfiable strategy": (fake_check(cases=lambda g: st.builds(FakeCase, st.integers().filter(lambda x: False))),
                               None, "Unsatisfiable"),
    "flaky failure": (fake_check(), "flaky", "Flaky"),
}


@pytest.mark.parametrize("what", sorted(ERRORS))
def test_a_check_that_cannot_reach_a_verdict_is_an_error_with_its_exception_and_where(what, monkeypatch):
    check, fn, expected = ERRORS[what]
    if fn is not None:
        judged_by(monkeypatch, _flaky() if fn == "flaky" else fn)
    r = run(check)
    assert r.status == "error", f"{what}: status {r.status}: {r.message}"
    assert expected in r.message and "(raised at " in r.message, r.message
    assert r.shrunk_case is None and r.repro is None


def test_the_error_names_the_innermost_frame_of_the_raise(monkeypatch):
    r = run(fake_check(cases=_raise(ImportError("gone"))))
    assert "(raised at tests/test_framework_runner.py:" in r.message and "in f)" in r.message, r.message


def test_a_candidate_that_raises_is_a_failure_not_an_error(monkeypatch):
    judged_by(monkeypatch, lambda x: 1 / 0 if x >= 3 else [FakeVerdict(0.1)])
    r = run()
    assert r.status == "fail" and "ZeroDivisionError" in r.message and r.repro.startswith("glmgate repro '"), r


@pytest.mark.parametrize("exc", [torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 4.00 GiB"),
                                 RuntimeError("Triton Error [CUDA]: out of memory")])
def test_a_device_out_of_memory_is_an_error_not_the_candidates_failure(exc, monkeypatch):
    """Stop 42: three kda.scale runs side by side on one card ran out of memory, and the check read FAIL (the
    candidate raised) in one process and ERROR in another. It is no verdict either way: an error, not shrunk,
    saying so, with the case's repro line to run it alone. A candidate's other exceptions stay failures."""
    judged_by(monkeypatch, _raise(exc))
    r = run(n=3)
    assert r.status == "error" and "the device ran out of memory in this case: no verdict" in r.message, r
    assert "glmgate repro '" in r.message and "out of memory" in r.message.split("The error:")[1], r.message
    assert r.shrunk_case is None and r.repro is None


def test_keyboard_interrupt_is_not_swallowed(monkeypatch):
    judged_by(monkeypatch, _raise(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        run(n=3)


# ------------------------------------------------------------------------------------------- profiles

def test_gpu_and_ci_are_derandomized_explore_and_nightly_keep_a_database():
    gpu, explore = settings.get_profile("gpu"), settings.get_profile("explore")
    assert (gpu.derandomize, gpu.database, gpu.max_examples) == (True, None, 40)
    assert settings.get_profile("ci").derandomize and settings.get_profile("ci").database is None
    assert (explore.derandomize, explore.max_examples) == (False, 150)
    for p in (explore, settings.get_profile("nightly")):
        assert str(p.database.path) == str(DB_DIR), p.database


def test_the_gpu_profile_draws_the_same_examples_every_run(monkeypatch):
    first = judged_by(monkeypatch, lambda x: [FakeVerdict(0.1)])
    run(profile="gpu", n=15)
    second = judged_by(monkeypatch, lambda x: [FakeVerdict(0.1)])
    run(profile="gpu", n=15)
    assert first == second and len(set(first)) > 3, (first, second)


def test_derandomized_draws_are_a_function_of_the_check_name(monkeypatch):
    """Not of the runner's source text (Hypothesis's own derandomization hashes it): each check its own
    fixed stream, the one `--seed derandomized_seed(name)` gives."""
    draws = {}
    for key, name, seed in (("a", "fake.a", None), ("b", "fake.b", None),
                            ("a by seed", "fake.a", runner.derandomized_seed("fake.a"))):
        draws[key] = judged_by(monkeypatch, lambda x: [FakeVerdict(0.1)])
        run(fake_check(name), profile="ci", n=15, seed=seed)
    assert draws["a"] == draws["a by seed"] != draws["b"], draws


def test_a_seed_replaces_a_derandomized_profiles_draws_reproducibly(monkeypatch):
    """What the CLI's --seed note says: Hypothesis lets @seed override derandomize (6.155)."""
    draws = {}
    for key, seed in (("none", None), ("seed 1", 1), ("seed 1 again", 1)):
        draws[key] = judged_by(monkeypatch, lambda x: [FakeVerdict(0.1)])
        run(profile="gpu", n=15, seed=seed)
    assert draws["seed 1"] == draws["seed 1 again"] != draws["none"], draws


# ------------------------------------------------------------------------------------------- model.reference

class RejectingConfig:
    """transformers 5.17's Glm5NextConfig, as far as the probe sees it."""

    def __init__(self, text_config, vision_config):
        raise ValueError(f"The `layer_types` entries must be in ['full_attention', 'linear_attention'] "
                         f"but got {text_config['layer_types']}")


class RemappingConfig:
    """A Glm5NextConfig that silently maps the layer type to another one."""

    def __init__(self, text_config, vision_config):
        self.text_config = type("T", (), {"layer_types": ["linear_attention", "full_attention"]})()


class OtherwiseRejectingConfig:
    def __init__(self, text_config, vision_config):
        raise TypeError("unexpected keyword argument 'index_kpool'")


def _installed(monkeypatch, version, config_cls):
    import transformers

    from invariants import reference
    monkeypatch.setattr(transformers, "__version__", version, raising=False)
    monkeypatch.setattr(reference, "classes", lambda: (config_cls, object))
    return reference


@pytest.mark.parametrize("config_cls", [RejectingConfig, RemappingConfig], ids=["rejects", "remaps"])
def test_reference_is_unavailable_when_glm5_next_lacks_indexed_attention(config_cls, monkeypatch):
    pytest.importorskip("transformers")
    reference = _installed(monkeypatch, "5.17.0", config_cls)
    assert reference.unavailable() == ('transformers 5.17.0 is installed, but its glm5_next has no '
                                       '"indexed_attention" layer type (needs transformers==5.23.0: '
                                       "pip install -e '.[reference]')")


def test_reference_is_unavailable_when_glm5_next_rejects_the_config_otherwise(monkeypatch):
    pytest.importorskip("transformers")
    reason = _installed(monkeypatch, "5.20.1", OtherwiseRejectingConfig).unavailable()
    assert reason.startswith("transformers 5.20.1 is installed, but its Glm5Next rejects the tiny config "
                             "(TypeError: unexpected keyword argument 'index_kpool')"), reason
    assert "transformers==5.23.0" in reason


def test_reference_is_unavailable_without_transformers_or_without_glm5_next(monkeypatch):
    from invariants import reference
    monkeypatch.setitem(sys.modules, "transformers", None)
    assert "transformers is not installed" in reference.unavailable()
    monkeypatch.undo()
    pytest.importorskip("transformers")
    monkeypatch.setattr(reference, "classes", _raise(ImportError("cannot import name 'Glm5NextConfig'")))
    assert "has no Glm5Next (cannot import name 'Glm5NextConfig')" in reference.unavailable()


def test_the_probe_accepts_the_installed_transformers():
    """CI installs the reference extra (transformers 5.23): the probe must not turn it away."""
    pytest.importorskip("transformers")
    sys.modules.setdefault("fla", None)
    from transformers import Glm5NextConfig

    from invariants import reference
    reference.probe(Glm5NextConfig)


def test_run_reference_is_not_run_with_the_probe_reason(monkeypatch):
    pytest.importorskip("transformers")
    _installed(monkeypatch, "5.17.0", RejectingConfig)
    r = runner.run_reference()
    assert r.status == "not run" and "5.17.0" in r.message and '"indexed_attention"' in r.message, r


def test_run_reference_reports_a_crash_midway_as_an_error_keeping_what_ran(monkeypatch):
    import numpy as np

    from invariants import reference

    def scenarios():
        yield "plain: one forward", np.ones(4), np.ones(4)
        raise RuntimeError("save_pretrained failed")
    monkeypatch.setattr(reference, "unavailable", lambda: None)
    monkeypatch.setattr(reference, "scenarios", scenarios)
    r = runner.run_reference()
    assert r.status == "error" and r.examples == 1 and r.margin["max"] == 0.0, r
    assert "RuntimeError: save_pretrained failed (raised at tests/test_framework_runner.py:" in r.message


def test_run_reference_reports_a_probe_that_raises_as_an_error(monkeypatch):
    from invariants import reference
    monkeypatch.setattr(reference, "unavailable", _raise(OSError("disk full")))
    r = runner.run_reference()
    assert r.status == "error" and "OSError: disk full" in r.message, r
