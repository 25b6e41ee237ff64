"""The pytest plugin (glmgate/pytest_plugin.py) and the public API (glmgate/__init__.py).

The plugin is exercised as a user meets it: `python -m pytest --glmgate-candidate mod:Obj` in a fresh
directory outside the repository (no conftest, no test file), the plugin found through its pytest11
entry point (registered by `pip install -e .`), this checkout's code on PYTHONPATH. Without the option
it must be inert: loaded, yet nothing of torch or the matrix imported. The API: assert_within_contract
on real oracle / baseline results, and the example user test file, run as written.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import pathlib
import subprocess
import sys
import textwrap
import types
import xml.etree.ElementTree as ET

import numpy as np
import pytest
import torch

import glmgate
import impl.kda as ik
from glmgate import _matrix_items as mi
from invariants import kda_checks
from invariants.check import case_to_json
from oracle import kda as okda

ROOT = pathlib.Path(__file__).resolve().parent.parent

CANDIDATES = textwrap.dedent('''
    import impl.kda as ik

    class Good:
        """Our Triton chunked prefill, unchanged: provides kda.chunked only."""
        class kda:
            chunked = staticmethod(ik.chunked)

    class LastTokenZeroed:
        """A planted bug: the last token's output is zeroed."""
        class kda:
            @staticmethod
            def chunked(*args, **kwargs):
                o, s, b = ik.chunked(*args, **kwargs)
                o = o.clone()
                o[:, -1] = 0
                return o, s, b
''')


def _entry_point_registered() -> bool:
    return any(e.name == "glmgate" and e.value == "glmgate.pytest_plugin"
               for e in importlib.metadata.entry_points(group="pytest11"))


def _pytest(cwd: pathlib.Path, *args: str) -> subprocess.CompletedProcess:
    """pytest in `cwd` as a user runs it: plugins autoloaded, this checkout's code first on the path."""
    if not _entry_point_registered():
        pytest.fail("the glmgate pytest11 entry point is not registered in this environment: install the "
                    f"checkout (pip install --no-deps -e {ROOT}) so pytest can find glmgate.pytest_plugin")
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "PYTEST_ADDOPTS", "PYTEST_PLUGINS", "TRITON_INTERPRET")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    env["GLMGATE_FAILURES"] = str(cwd / "failures")
    return subprocess.run([sys.executable, "-m", "pytest", *args, "-p", "no:cacheprovider"], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture
def fresh(tmp_path):
    """An empty directory outside the repository holding only the user's candidates module."""
    assert not tmp_path.is_relative_to(ROOT)
    (tmp_path / "mykernels.py").write_text(CANDIDATES)
    return tmp_path


# ------------------------------------------------------------------ the plugin, end to end


def test_an_unchanged_kernel_passes_and_the_checks_it_cannot_reach_are_skipped_saying_why(fresh):
    r = _pytest(fresh, "--glmgate-candidate", "mykernels:Good", "--glmgate-check", "kda.chunked",
                "--glmgate-check", "kda.decode", "--glmgate-check", "mhc.coefficients",
                "--glmgate-examples", "2", "-q", "-rs")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "1 passed, 2 skipped" in out, out
    # decode is drawn and held, but never calls the candidate's chunked: nothing of it was tested
    assert "SKIPPED [1] glmgate::kda.decode: not covered:" in out, out
    assert "SKIPPED [1] glmgate::mhc.coefficients: not run: 'mykernels:Good' provides no mhc namespace" in out, out
    # what came from where, said before any item ran (under -q too)
    assert "kda: the candidate provides chunked; kda.recurrent from triton" in out.split("glmgate::")[0], out


def test_a_planted_bug_fails_with_the_repro_line_and_one_junit_failure(fresh):
    r = _pytest(fresh, "--glmgate-candidate", "mykernels:LastTokenZeroed", "--glmgate-check", "kda.chunked",
                "--glmgate-examples", "2", "-q", "--junitxml", "r.xml")
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert "1 failed" in out and "kda.chunked broke a contract" in out, out
    assert "glmgate repro '" in out and '"check":"kda.chunked"' in out, out
    assert "kda.chunked.output [kernel_replacement, float32]" in out, out
    assert "_matrix_items.py" not in out, "the failure shows the plugin's own traceback:\n" + out
    cases = list(ET.parse(fresh / "r.xml").getroot().iter("testcase"))
    assert [(c.get("classname"), c.get("name")) for c in cases] == [("glmgate", "kda.chunked")]
    failure = cases[0].find("failure")
    assert failure is not None and "glmgate repro '" in failure.text, ET.tostring(cases[0], "unicode")


def test_a_candidate_that_cannot_be_imported_is_a_one_line_usage_error(fresh):
    r = _pytest(fresh, "--glmgate-candidate", "mykernels:Nope")
    assert r.returncode == pytest.ExitCode.USAGE_ERROR, r.stdout + r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("ERROR:")]
    assert errors == [errors[0]] and "--glmgate-candidate" in errors[0] and "has no attribute 'Nope'" in errors[0] \
        and "Good" in errors[0], r.stderr


def test_without_the_option_the_plugin_is_loaded_but_inert(tmp_path):
    (tmp_path / "test_plain.py").write_text(textwrap.dedent('''
        import sys

        def test_nothing_heavy_was_imported(request):
            assert request.config.pluginmanager.has_plugin("glmgate")         # loaded by its entry point
            heavy = [m for m in ("torch", "triton", "invariants", "impl", "glmgate._matrix_items")
                     if m in sys.modules]
            assert heavy == []
            assert request.config.pluginmanager.get_plugin("glmgate-matrix") is None
    '''))
    r = _pytest(tmp_path, "-q")
    assert r.returncode == 0 and "1 passed" in r.stdout, r.stdout + r.stderr
    assert "glmgate:" not in r.stdout, r.stdout


# ------------------------------------------------------------------ options, in process


class _Config:
    """The options resolve() reads, as pytest's Config.getoption serves them."""

    DEFAULTS = dict(glmgate_candidate="test_framework_plugin:Only", glmgate_device="cpu", glmgate_dtype=None,
                    glmgate_mechanism=None, glmgate_check=None, glmgate_profile=None, glmgate_examples=None,
                    glmgate_baseline="torch", glmgate_failures=None, glmgate_no_failures=True)

    def __init__(self, **options):
        self.options = {**self.DEFAULTS, **options}

    def getoption(self, name):
        return self.options[name]


class Only:
    """A candidate providing kda.chunked only (our kernel)."""

    class kda:
        chunked = staticmethod(ik.chunked)


@pytest.mark.parametrize("options, says", [
    (dict(glmgate_check=["kda.nope"]), "--glmgate-check: unknown check(s) kda.nope; known: kda.recurrent"),
    (dict(glmgate_mechanism="kda,zzz"), "--glmgate-mechanism: unknown mechanism(s) ['zzz']"),
    (dict(glmgate_profile="fast"), "--glmgate-profile: unknown profile 'fast'; known profiles: dev, ci"),
    (dict(glmgate_examples=0), "--glmgate-examples: expected a count >= 1, got 0"),
    (dict(glmgate_device="tpu"), "--glmgate-device: expected cpu or cuda[:N], got 'tpu'"),
    (dict(glmgate_dtype="float16"), "--glmgate-dtype: expected one of bfloat16, float32, float64"),
    (dict(glmgate_candidate="no_such_module:X"), "--glmgate-candidate: candidate 'no_such_module:X': no module"),
    (dict(glmgate_baseline="nope"), "--glmgate-baseline: unknown implementation 'nope'"),
], ids=["check", "mechanism", "profile", "examples", "device", "dtype", "candidate", "baseline"])
def test_bad_options_are_one_line_usage_errors(options, says):
    with pytest.raises(pytest.UsageError) as e:
        mi.resolve(_Config(**options))
    assert str(e.value).startswith(says) and "\n" not in str(e.value), str(e.value)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is visible")
def test_cuda_without_a_gpu_is_refused():
    with pytest.raises(pytest.UsageError, match="--glmgate-device: cuda: no CUDA device is visible"):
        mi.resolve(_Config(glmgate_device="cuda"))


def test_the_selection_keeps_matrix_order_and_the_unprovided_checks_as_not_run_rows():
    s = mi.resolve(_Config(glmgate_mechanism="kda,mhc", glmgate_check=["mhc.write_back", "kda.decode", "kda.chunked"]))
    assert [c.name for c in s.checks] == ["kda.chunked", "kda.decode"]
    assert [(r.check, r.status) for r in s.unprovided] == [("mhc.write_back", "not run")]
    assert s.profile == "ci" and s.cand.dtype_name == "float32" and s.base.impl.name == "torch"


# ------------------------------------------------------------------ the failure store (invariants/failures.py)


RECORDED = kda_checks.CoreCase(1, 8, 1, 3, None, False, "normal", 7)     # a failure found by an earlier run


class _Store:
    """FailureStore's interface: cases(check) -> tuple of cases, record(...) -> path or None."""

    def __init__(self, directory):
        self.directory, self.recorded = directory, []

    def cases(self, check):
        if check.name == "kda.decode":
            raise ValueError("db/kda.decode/0a1b.json: the case no longer parses as a DecodeCase")
        return (RECORDED,)

    def record(self, check, result, impl_name, device, dtype):
        self.recorded.append((check.name, result.status, impl_name, device, dtype))
        return f"{self.directory}/{check.name}/0a1b.json"


@pytest.fixture
def store_module(monkeypatch):
    """A failure store module in place (whether or not this checkout has one), and an engine that replays."""
    from invariants import engine

    fake = types.ModuleType("invariants.failures")
    fake.FailureStore, fake.default_directory = _Store, lambda: "/tmp/the-default"
    monkeypatch.setitem(sys.modules, "invariants.failures", fake)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: object() if name == "invariants.failures" else real(name, *a))
    calls = []

    def run_check(check, geometry, cand, base, profile, max_examples=None, replay=()):
        calls.append(replay)
        status, shrunk = outcome[0]
        return engine.CheckResult(check.name, check.mechanism, status, 1, 0.5, "", None, shrunk, "broke",
                                  None, {}, 0.0)
    outcome = [("pass", None)]
    monkeypatch.setattr(engine, "run_check", run_check)
    return calls, outcome


def test_the_store_replays_its_cases_first_and_records_a_new_failure_only(store_module):
    calls, outcome = store_module
    assert mi._store(_Config(glmgate_no_failures=False), []).directory == "/tmp/the-default"
    assert mi._store(_Config(glmgate_no_failures=True), []) is None
    setup = mi.resolve(_Config(glmgate_check=["kda.chunked"], glmgate_no_failures=False, glmgate_failures="db"))
    assert setup.replays == {"kda.chunked": (RECORDED,)}
    assert "glmgate: failure store db: 1 recorded failing case replayed first" in "\n".join(setup.lines)
    check = setup.checks[0]
    new = case_to_json(RECORDED._replace(seed=8))
    for result, kept in ((("pass", None), None),
                         (("fail", case_to_json(check.examples[0])), "a pinned example of the check"),
                         (("fail", case_to_json(RECORDED)), "already recorded in db/kda.chunked/0a1b.json"),
                         (("fail", new), "recorded in db/kda.chunked/0a1b.json: replayed first on the next run")):
        outcome[0] = result
        r, note, _ = mi.run(check, setup)
        assert calls[-1] == (RECORDED,)                     # replayed on every run, before the pinned examples
        assert note == kept or note.startswith(kept), note
    assert setup.store.recorded == [("kda.chunked", "fail", "test_framework_plugin:Only", "cpu", "float32")] * 2


def test_a_stored_case_that_cannot_be_replayed_stops_the_run_before_any_example(store_module):
    with pytest.raises(pytest.UsageError, match=r"(?s)failure store db holds cases that cannot be replayed.*"
                                                r"db/kda.decode/0a1b.json: the case no longer parses"):
        mi.resolve(_Config(glmgate_check=["kda.decode"], glmgate_no_failures=False, glmgate_failures="db"))


def test_without_a_store_module_nothing_is_replayed_and_a_given_directory_is_said_ignored(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "invariants.failures" else real(name, *a))
    lines = []
    assert mi._store(_Config(glmgate_failures="db", glmgate_no_failures=False), lines) is None
    assert lines == ["glmgate: --glmgate-failures db ignored: this glmgate has no failure store"]
    setup = mi.resolve(_Config(glmgate_check=["kda.chunked"], glmgate_no_failures=False))
    assert setup.store is None and setup.replays == {}


# ------------------------------------------------------------------ the public API


def _chunked_results(length=70, seed=0):
    """(oracle float64, the float32 torch baseline) output and final state of one case."""
    x = glmgate.core_tensors(np.random.default_rng(seed), 2, 8, 1, length, "normal")
    ref = okda.chunked(x["q"], x["k"], x["v"], x["g"], x["beta"])
    t = glmgate.Target(glmgate.implementation("torch"), "cpu", torch.float32)
    args = [t.tensor(x[n]) for n in ("q", "k", "v")] + [t.tensor(x["g"], f32=True), t.tensor(x["beta"])]
    return ref, t.impl.kda.chunked(*args)


def test_assert_within_contract_passes_a_correct_result_and_names_the_broken_quantity():
    (ref_o, ref_s, _), (base_o, base_s, _) = _chunked_results()
    v = glmgate.assert_within_contract("kda", "chunked", "output", base_o.clone(), ref_o, baseline=base_o)
    assert v.ok and v.limit == pytest.approx(4.0 * v.baseline_err + 1e-5)
    glmgate.assert_within_contract("kda", "chunked", "final_state", base_s, ref_s, baseline=base_s)
    broken = base_s.clone()
    broken[0, 1] = 0                                      # one head's state lost
    with pytest.raises(AssertionError) as e:
        glmgate.assert_within_contract("kda", "chunked", "final_state", broken, ref_s, baseline=base_s)
    text = str(e.value)
    for part in ("kda.chunked.final_state [kernel_replacement, float32]: rel_l2", "> limit", "baseline",
                 "worst at (0, 1,", "kda.toml", "WY/UT chunk form"):
        assert part in text, text
    shown = e.traceback.filter(e)                         # what pytest prints: __tracebackhide__ honoured
    assert shown[-1].frame.code.name.startswith("test_assert_within_contract_passes")


def test_an_undeclared_contract_is_refused_listing_what_is_declared():
    (ref_o, _, _), (base_o, _, _) = _chunked_results(length=5)
    with pytest.raises(glmgate.UndeclaredContract, match=r"no contract declared for kda\.chunked\.outptu"
                       r"\[kernel_replacement\].*kda\.chunked\.output\[kernel_replacement\]"):
        glmgate.assert_within_contract("kda", "chunked", "outptu", base_o, ref_o, baseline=base_o)
    with pytest.raises(glmgate.UndeclaredContract, match="mechanism 'kdaa'; declared mechanisms: dsa, kda"):
        glmgate.contract("kdaa", "chunked", "output")
    with pytest.raises(TypeError, match="pass baseline="):
        glmgate.assert_within_contract("kda", "chunked", "output", base_o, ref_o)
    assert glmgate.contract("kda", "chunked", "output").k == 4.0


def test_the_example_user_test_file_passes_as_written():
    spec = importlib.util.spec_from_file_location("glmgate_example_test_my_kernel",
                                                  ROOT / "examples" / "pytest" / "test_my_kernel.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    tests = [getattr(module, n) for n in dir(module) if n.startswith("test_")]
    assert len(tests) == 3
    for test in tests:
        test()          # each a Hypothesis test: its drawn examples run here
