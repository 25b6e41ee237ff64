"""The failure store in the CLI (gate/failures_cmd.py): `run` records a shrunk case and replays it first
next time, `gate` replays the same recorded cases to the candidate and its peer, a stale entry stops a
run with exit 2 before any example, and `glmgate db list | export | import | clear | remove`.

Fake checks (tests/test_framework_runner.py) stand in for kernels, except where a real check's case type
matters (a stale kda.chunked entry, which stops the run before any kernel is called): seconds in all.
"""
from __future__ import annotations

import contextlib
import json

import pytest
from hypothesis import strategies as st

from gate import cli
from invariants import engine as runner
from invariants import matrix
from invariants.check import case_to_json
from invariants.failures import FailureStore
from test_framework_runner import FakeCase, FakeVerdict, fake_check


@pytest.fixture
def store(tmp_path, monkeypatch):
    """The default store of these runs: $GLMGATE_FAILURES, a directory of the test's own."""
    monkeypatch.setenv("GLMGATE_FAILURES", str(tmp_path / "failures"))
    return FailureStore(tmp_path / "failures")


@pytest.fixture
def fakes(monkeypatch):
    """fake.bad breaks its contract from x >= 5 (shrinks to 5), and so does fake.pinned, whose pinned
    example x = 8 fails first; fake.fixed passes every case but draws only 0..9, so a recorded x = 42 is
    reached by replay alone. `seen` holds (impl, x) per call."""
    checks = {"fake.bad": fake_check("fake.bad"),
              "fake.pinned": fake_check("fake.pinned")._replace(examples=(FakeCase(8),)),
              "fake.fixed": fake_check("fake.fixed", cases=lambda g: st.builds(FakeCase, st.integers(0, 9)))}
    seen = []

    def evaluate(check, case, cand, base, skipped=None, *judging):
        seen.append((cand.impl.name, case.x))
        with contextlib.suppress(Exception):     # reach the candidate: the check is covered
            cand.impl.kda.decode(None, None, None, None, None)
        return [FakeVerdict(3.0 if check.name != "fake.fixed" and case.x >= 5 else 0.5)]
    monkeypatch.setattr(matrix, "CHECKS", matrix.CHECKS + tuple(checks.values()))
    for name, c in checks.items():
        monkeypatch.setitem(matrix.BY_NAME, name, c)
    monkeypatch.setattr(runner, "evaluate", evaluate)
    return seen


def _run(check, *extra, json_path=None):
    argv = ["run", "--impl", "torch", "--examples", "6", "--profile", "ci", "--check", check, *extra]
    return cli.main(argv + (["--json", str(json_path)] if json_path else []))


def _fail(check="fake.bad", x=5):
    case = case_to_json(FakeCase(x))
    return runner.CheckResult(check, "kda", "fail", 1, 3.0, "", case, case, "fake error / limit 3",
                              f"glmgate repro '{json.dumps({'check': check, 'case': case})}'", {}, 0.0)


# ----------------------------------------------------------------------------------- run and gate

def test_run_records_the_shrunk_case_and_the_next_run_replays_it_first(fakes, store, tmp_path, capsys):
    assert _run("fake.bad") == cli.EXIT_BROKEN
    [entry] = store.entries()
    assert entry.case == {"type": "FakeCase", "x": 5} and (entry.check, entry.impl) == ("fake.bad", "torch")
    assert f"recorded the shrunk case in {entry.path}" in capsys.readouterr().out
    fakes.clear()
    assert _run("fake.bad", json_path=tmp_path / "r.json") == cli.EXIT_BROKEN
    out = capsys.readouterr().out
    assert f"replaying 1 recorded failure of fake.bad from {store.directory}" in out, out
    assert f"the shrunk case is already recorded in {entry.path}" in out, out
    row = json.loads((tmp_path / "r.json").read_text())["results"][0]
    assert fakes[0] == ("torch", 5) and row["examples"] == 1, (fakes, row)
    assert [e.path for e in store.entries()] == [entry.path]        # the same case: still one file


def test_no_failures_neither_replays_nor_records_and_failures_names_the_store(fakes, store, tmp_path, capsys):
    store.record(fake_check("fake.fixed"), _fail("fake.fixed", 42), "torch", "cpu", "float32")
    assert _run("fake.bad", "--no-failures") == cli.EXIT_BROKEN
    assert _run("fake.fixed", "--no-failures") == cli.EXIT_PASS
    assert ("torch", 42) not in fakes and [e.check for e in store.entries()] == ["fake.fixed"]
    other = tmp_path / "elsewhere"
    assert _run("fake.bad", "--failures", str(other)) == cli.EXIT_BROKEN
    assert [e.check for e in FailureStore(other).entries()] == ["fake.bad"]
    assert "recorded the shrunk case in " + str(other) in capsys.readouterr().out


def test_gate_replays_the_same_recorded_cases_to_the_candidate_and_the_peer(fakes, store, tmp_path, capsys):
    store.record(fake_check("fake.fixed"), _fail("fake.fixed", 42), "torch", "cpu", "float32")
    rc = cli.main(["gate", "--candidate", "torch", "--check", "fake.fixed", "--examples", "3",
                   "--json", str(tmp_path / "g.json")])
    assert rc == cli.EXIT_PASS, capsys.readouterr()
    out = capsys.readouterr().out
    assert out.count("replaying 1 recorded failure of fake.fixed") == 1, out
    assert [x for impl, x in fakes if impl == "torch"][0] == 42 and [x for impl, x in fakes if impl == "triton"][0] == 42
    # same examples: the peer met exactly the candidate's cases
    assert [x for impl, x in fakes if impl == "torch"] == [x for impl, x in fakes if impl == "triton"], fakes


def test_gate_records_the_candidates_shrunk_case(fakes, store, capsys):
    assert cli.main(["gate", "--candidate", "torch", "--check", "fake.bad", "--examples", "6"]) == cli.EXIT_BROKEN
    assert [(e.check, e.impl, e.case["x"]) for e in store.entries()] == [("fake.bad", "torch", 5)]


def test_a_failing_pinned_example_is_not_recorded(fakes, store, capsys):
    """Every run replays a record's pinned examples already: the store would only hold a copy."""
    assert _run("fake.pinned") == cli.EXIT_BROKEN
    assert "the failing case is a pinned example of fake.pinned: not recorded" in capsys.readouterr().out
    assert store.entries() == []


def test_a_stale_entry_stops_the_run_with_exit_2_before_any_example(store, capsys):
    """kda.chunked's CoreCase has no field `x`: the entry no longer parses. The run names the file and
    the command that removes it, and runs nothing; removed, the store is empty again."""
    stale = store.record(matrix.BY_NAME["kda.chunked"], _fail("kda.chunked"), "triton", "cpu", "float32")
    assert cli.main(["run", "--check", "kda.chunked", "--examples", "1"]) == cli.EXIT_USAGE
    err = capsys.readouterr()
    assert f"glmgate run: error: {stale}: the case recorded on " in err.err and len(err.err.splitlines()) == 1 and "no longer parses as a kda.chunked case" in err.err
    assert f"`glmgate db remove {stale}`" in err.err and "kda.chunked: " not in err.out    # nothing ran
    assert cli.main(["gate", "--candidate", "torch", "--check", "kda.chunked"]) == cli.EXIT_USAGE
    assert cli.main(["db", "remove", str(stale)]) == 0 and store.entries() == []
    capsys.readouterr()
    for name in ("kda.chunked", "kda.recurrent"):
        store.record(matrix.BY_NAME[name], _fail(name), "triton", "cpu", "float32")
    assert cli.main(["run", "--mechanism", "kda"]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert "error: 2 checks have recorded failures that cannot be replayed:" in err and len(err.splitlines()) == 3


# ------------------------------------------------------------------------------------------- db

def test_db_list_prints_one_line_per_entry(store, capsys):
    assert cli.main(["db", "list"]) == 0
    assert f"no recorded failures in {store.directory}" in capsys.readouterr().out
    a = store.record(fake_check("fake.bad"), _fail("fake.bad", 5), "mutant:m", "cuda", "bfloat16")
    b = store.record(fake_check("fake.other"), _fail("fake.other", 6), "torch", "cpu", "float32")
    assert cli.main(["db", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["check", "impl", "device", "dtype", "recorded", "file"] and len(lines) == 3
    recorded = {e.path: e.recorded for e in store.entries()}
    assert lines[1].split() == ["fake.bad", "mutant:m", "cuda", "bfloat16", recorded[a], str(a)]
    assert lines[2].split() == ["fake.other", "torch", "cpu", "float32", recorded[b], str(b)]
    assert cli.main(["db", "list", "--check", "fake.other"]) == 0 and len(capsys.readouterr().out.splitlines()) == 2


def test_db_export_import_round_trip_into_another_store(store, tmp_path, capsys):
    for x in (5, 6):
        store.record(fake_check("fake.bad"), _fail("fake.bad", x), "torch", "cpu", "float32")
    out, other = tmp_path / "failures-export.json", tmp_path / "restored"
    assert cli.main(["db", "export", str(out)]) == 0
    assert f"exported 2 recorded failures from {store.directory} to {out}" in capsys.readouterr().out
    assert cli.main(["db", "import", str(out), "--failures", str(other)]) == 0
    assert "imported 2 recorded failures" in capsys.readouterr().out
    assert cli.main(["db", "import", str(out), "--failures", str(other)]) == 0
    text = capsys.readouterr().out
    assert "imported 0 recorded failures" in text and "(2 already recorded)" in text, text
    assert [e.case for e in FailureStore(other).entries()] == [e.case for e in store.entries()]


def test_db_clear_all_or_one_check(store, capsys):
    for check in ("fake.bad", "fake.bad", "fake.other"):
        store.record(fake_check(check), _fail(check, len(store.entries())), "torch", "cpu", "float32")
    assert cli.main(["db", "clear", "--check", "fake.bad"]) == 0
    assert "removed 2 recorded failures of fake.bad" in capsys.readouterr().out
    assert [e.check for e in store.entries()] == ["fake.other"]
    assert cli.main(["db", "clear"]) == 0 and store.entries() == []


@pytest.mark.parametrize("argv,match", [
    (["db", "import", "{tmp}/missing.json"], "missing.json: no such file"),
    (["db", "import", "{tmp}/bad.json"], "bad.json: not a glmgate failure export"),
    (["db", "export", "{tmp}"], "is a directory; name the export file"),
    (["db", "clear", "--check", "../etc"], "'../etc' is not a check name"),
    (["db", "remove", "{tmp}/bad.json"], "bad.json: not a recorded failure of the store"),
    (["db", "list"], "unreadable failure record"),
])
def test_db_input_errors_exit_2_with_one_line_naming_the_problem(store, tmp_path, argv, match, capsys):
    (tmp_path / "bad.json").write_text('{"entries": 3}')
    if argv == ["db", "list"]:
        (store.directory / "fake.bad").mkdir(parents=True)
        (store.directory / "fake.bad" / "0123.json").write_text("{")
    assert cli.main([a.format(tmp=tmp_path) for a in argv]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("glmgate db: error: ") and match in err and len(err.strip().splitlines()) == 1, err


def test_db_without_an_action_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["db"])
    assert e.value.code == cli.EXIT_USAGE
