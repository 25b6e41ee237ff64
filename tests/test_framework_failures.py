"""The failure store (invariants/failures.py) and the engine's replay of it (run_check(replay=...)).

The central property on real kernels: a failure found once (by a run whose draws reached it) is
recorded, and a later run under the derandomized `ci` profile, whose own draws never reach it, replays
it first and fails on its first example. The mutant is kda_state_leak_across_cu_seqlens (each packed
document starts from the previous one's final state); kda.chunked runs without its pinned rows, which
would catch that mutant themselves, and with one drawn example, the minimal case (one unpacked
sequence: nothing to leak). The rest runs on fake checks or on the store alone: milliseconds.
"""
from __future__ import annotations

import json

import pytest
import torch
from hypothesis import strategies as st

from impl import registry
from invariants import engine as runner
from invariants.check import case_to_json
from invariants.failures import (FailureStore, FailureStoreError, StaleFailure, case_hash,
                                 default_directory)
from invariants.kda_checks import CoreCase
from invariants.matrix import BY_NAME
from invariants.target import Target
from oracle.config import Geometry
from test_framework_runner import FakeCase, FakeVerdict, fake_check, judged_by

TINY = Geometry.preset("tiny")
MUTANT = "mutant:kda_state_leak_across_cu_seqlens"
LEAKS = CoreCase(2, 8, 1, 5, (2, 3), False, "normal", 0)       # two packed documents: the second leaks
CHUNKED = BY_NAME["kda.chunked"]


def _targets(impl=MUTANT):
    return Target(registry.get(impl), "cpu", torch.float32), Target(registry.get("torch"), "cpu", torch.float32)


def _result(check="fake.check", x=5, message="fake error / limit 3", mechanism="kda"):
    """A failed CheckResult with a shrunk FakeCase(x), as run_check returns one."""
    case = case_to_json(FakeCase(x))
    repro = f"glmgate repro '{json.dumps({'check': check, 'case': case})}'"
    return runner.CheckResult(check, mechanism, "fail", 1, 3.0, message, case, case, message, repro, {}, 0.0)


@pytest.fixture
def store(tmp_path):
    return FailureStore(tmp_path / "failures")


# ------------------------------------------------------------------------- replay on real kernels

def test_a_recorded_failure_is_replayed_first_under_ci_where_its_own_draws_never_reach_it(store):
    check = CHUNKED._replace(examples=())
    cand, base = _targets()
    # found: a run whose draws reach the leaking case (a nightly random run, another machine's CI)
    found = runner.run_check(check._replace(cases=lambda g: st.just(LEAKS)), TINY, cand, base, "ci", max_examples=1)
    assert found.status == "fail" and found.shrunk_case == case_to_json(LEAKS), found
    path = store.record(check, found, MUTANT, "cpu", "float32")
    assert path == store.directory / "kda.chunked" / f"{case_hash('kda.chunked', case_to_json(LEAKS))}.json"

    # the ci profile's own draw (the minimal case: one unpacked sequence) does not catch the mutant ...
    plain = runner.run_check(check, TINY, cand, base, "ci", max_examples=1)
    assert plain.status == "pass", plain
    # ... but replaying the store first does, on its first example
    replayed = runner.run_check(check, TINY, cand, base, "ci", max_examples=1, replay=store.cases(check))
    assert (replayed.status, replayed.examples) == ("fail", 1), replayed
    assert replayed.shrunk_case == case_to_json(LEAKS) and "kda.chunked.output" in replayed.message


def test_replayed_cases_run_before_the_pinned_examples(store):
    cand, base = _targets()
    # kda.chunked's own pinned rows catch this mutant too: the failure reported is the replayed case's
    r = runner.run_check(CHUNKED, TINY, cand, base, "ci", max_examples=1, replay=(LEAKS,))
    assert (r.status, r.examples, r.shrunk_case) == ("fail", 1, case_to_json(LEAKS)), r
    without = runner.run_check(CHUNKED, TINY, cand, base, "ci", max_examples=1)
    assert without.shrunk_case != case_to_json(LEAKS) and without.shrunk_case is not None


# ------------------------------------------------------------------------------ replay, engine rules

def test_a_replayed_case_equal_to_a_pinned_one_runs_once_and_counts_like_one(monkeypatch):
    seen = judged_by(monkeypatch, lambda x: [FakeVerdict(0.1)])
    check = fake_check()._replace(examples=(FakeCase(5),))
    r = runner.run_check(check, TINY, _targets("torch")[0], _targets("torch")[0], "ci", max_examples=3,
                         replay=(FakeCase(7), FakeCase(5)))
    assert r.status == "pass" and seen[:2] == [7, 5] and seen.count(5) == 1 + seen[2:].count(5), seen
    assert r.examples == len(seen)


def test_a_replayed_case_of_another_type_is_an_error_never_the_candidates_failure(monkeypatch):
    judged_by(monkeypatch, lambda x: [FakeVerdict(0.1)])
    r = runner.run_check(fake_check(), TINY, _targets("torch")[0], _targets("torch")[0], "ci", max_examples=2,
                         replay=(LEAKS,))
    assert r.status == "error" and "a replayed case of type CoreCase, the check's cases are FakeCase" in r.message


# -------------------------------------------------------------------------------------- the store

def test_the_default_directory_is_the_environment_else_the_current_directory(monkeypatch, tmp_path):
    monkeypatch.setenv("GLMGATE_FAILURES", str(tmp_path / "ci-cache"))
    assert default_directory() == tmp_path / "ci-cache"
    monkeypatch.delenv("GLMGATE_FAILURES")
    monkeypatch.chdir(tmp_path)
    assert default_directory() == tmp_path / ".glmgate-failures"


def test_a_store_that_does_not_exist_yet_is_empty_and_created_by_the_first_record(store):
    assert store.entries() == [] and store.cases(fake_check()) == () and not store.directory.exists()
    assert store.record(fake_check(), _result()._replace(shrunk_case=None), "torch", "cpu", "float32") is None
    assert not store.directory.exists()
    assert store.record(fake_check(), _result(), "torch", "cpu", "float32").is_file()


def test_a_record_is_one_plain_json_file_named_by_a_hash_of_check_and_case(store):
    path = store.record(fake_check(), _result(x=5), "mutant:x", "cuda", "bfloat16")
    data = json.loads(path.read_text())
    assert path.parent == store.directory / "fake.check" and path.name == case_hash("fake.check", {"x": 5, "type": "FakeCase"}) + ".json"
    assert {k: data[k] for k in ("check", "case", "impl", "device", "dtype", "message")} == {
        "check": "fake.check", "case": {"type": "FakeCase", "x": 5}, "impl": "mutant:x", "device": "cuda",
        "dtype": "bfloat16", "message": "fake error / limit 3"}
    assert data["repro"].startswith("glmgate repro '") and data["recorded"].endswith("Z") and "glmgate_version" in data


def test_recording_the_same_case_twice_keeps_one_file_and_its_first_record(store):
    first = store.record(fake_check(), _result(x=5), "torch", "cpu", "float32")
    again = store.record(fake_check(), _result(x=5, message="found again"), "triton", "cuda", "bfloat16")
    assert first == again and len(store.entries()) == 1 and store.entries()[0].impl == "torch"
    store.record(fake_check(), _result(x=6), "torch", "cpu", "float32")
    store.record(fake_check("fake.other"), _result("fake.other", x=5), "torch", "cpu", "float32")
    assert len(store.entries()) == 3 and store.cases(fake_check()) == (FakeCase(5), FakeCase(6))


def test_cases_are_oldest_first_by_their_record_date_not_their_file_name(store):
    paths = [store.record(fake_check(), _result(x=x), "torch", "cpu", "float32") for x in (1, 2, 3)]
    for path, date in zip(paths, ("2031-01-01T00:00:00.000000Z", "2029-01-01T00:00:00.000000Z",
                                  "2030-01-01T00:00:00.000000Z")):
        data = json.loads(path.read_text())
        path.write_text(json.dumps({**data, "recorded": date}))
    assert store.cases(fake_check()) == (FakeCase(2), FakeCase(3), FakeCase(1))


def test_export_then_import_into_an_empty_store_gives_the_same_entries_and_import_is_idempotent(store, tmp_path):
    for x in (1, 2):
        store.record(fake_check(), _result(x=x), "torch", "cpu", "float32")
    store.record(fake_check("fake.other"), _result("fake.other", x=9), "mutant:y", "cuda", "bfloat16")
    assert store.export(tmp_path / "failures.json") == 3
    other = FailureStore(tmp_path / "restored")
    assert other.import_(tmp_path / "failures.json") == (3, 0)
    same = lambda s: [e._replace(path=e.path.relative_to(s.directory)) for e in s.entries()]  # noqa: E731
    assert same(other) == same(store)
    assert other.import_(tmp_path / "failures.json") == (0, 3) and same(other) == same(store)
    # merging into a store that holds some of them already adds only the others
    store.clear("fake.other")
    assert store.import_(tmp_path / "failures.json") == (1, 2) and same(store) == same(other)


def test_import_refuses_a_missing_or_malformed_export_and_changes_nothing(store, tmp_path):
    with pytest.raises(FailureStoreError, match="no such file"):
        store.import_(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    for text, match in (("{", "not a glmgate failure export"), ('{"entries": []}', "not a glmgate failure export"),
                        ('{"glmgate_failures": 1, "entries": [{"check": "fake.check"}]}', "entry 0: not a failure record"),
                        ('{"glmgate_failures": 1, "entries": [' + json.dumps({
                            "check": "../../etc", "case": {"type": "FakeCase", "x": 1}, "impl": "t", "device": "cpu",
                            "dtype": "float32", "message": "", "recorded": "x"}) + "]}", "is not a check name")):
        bad.write_text(text)
        with pytest.raises(FailureStoreError, match=match):
            store.import_(bad)
    assert not store.directory.exists()


def test_clear_and_remove(store):
    a = store.record(fake_check(), _result(x=1), "torch", "cpu", "float32")
    store.record(fake_check(), _result(x=2), "torch", "cpu", "float32")
    store.record(fake_check("fake.other"), _result("fake.other"), "torch", "cpu", "float32")
    assert store.remove(a) == a and not a.exists() and len(store.entries()) == 2
    with pytest.raises(FailureStoreError, match="not a recorded failure of the store"):
        store.remove(a)
    assert store.clear(fake_check("fake.other")) == 1 and not (store.directory / "fake.other").exists()
    assert store.clear() == 1 and store.entries() == []


# ----------------------------------------------------------------------- stale and malformed entries

def test_a_case_that_no_longer_parses_for_its_check_is_never_skipped(store):
    """The case type changed since the failure was recorded (here: CoreCase lost `seed`'s field name):
    cases() raises, naming every such file and how to remove it; the CLI turns that into exit 2."""
    good = store.record(CHUNKED, _result("kda.chunked")._replace(shrunk_case=case_to_json(LEAKS)), "triton", "cpu",
                        "float32")
    stale = store.record(CHUNKED, _result("kda.chunked")._replace(shrunk_case={**case_to_json(LEAKS), "seed": None,
                                                                              "salt": 3}), "triton", "cpu", "float32")
    stale_data = json.loads(stale.read_text())
    del stale_data["case"]["seed"]
    stale.write_text(json.dumps(stale_data))
    with pytest.raises(StaleFailure) as e:
        store.cases(CHUNKED)
    assert e.value.paths == [stale] and e.value.check == "kda.chunked"
    assert f"{stale}: the case recorded on " in str(e.value) and "no longer parses as a kda.chunked case" in str(e.value)
    assert "unexpected ['salt']" in str(e.value) and f"`glmgate db remove {stale}`" in str(e.value)
    store.remove(stale)
    assert store.cases(CHUNKED) == (LEAKS,) and good.exists()


@pytest.mark.parametrize("text,match", [
    ("{not json", "unreadable failure record"),
    ('["a list"]', "not a failure record"),
    ('{"check": "fake.check", "case": {"type": "FakeCase", "x": 1}}', "missing or mistyped impl, device, dtype"),
    ('{"format": 7, "check": "fake.check"}', "record format 7"),
])
def test_a_malformed_file_names_itself_and_how_to_remove_it(store, text, match):
    path = store.directory / "fake.check" / "0123.json"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    for read in (store.entries, lambda: store.cases(fake_check())):
        with pytest.raises(FailureStoreError, match=match) as e:
            read()
        assert str(e.value).startswith(f"{path}: ") and f"glmgate db remove {path}" in str(e.value)


def test_a_record_in_another_checks_directory_is_malformed(store):
    path = store.record(fake_check(), _result(), "torch", "cpu", "float32")
    moved = store.directory / "fake.other" / path.name
    moved.parent.mkdir()
    path.rename(moved)
    with pytest.raises(FailureStoreError, match="records check 'fake.check' but lies in directory 'fake.other'"):
        store.entries()
