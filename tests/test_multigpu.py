"""`--gpus N` (gate/multigpu.py) without a GPU: the split of the checks over workers, the merge of their
JSON into the single run's report, a crashed worker, the usage errors, the forwarded options, and the
pinning of pytest-xdist workers to GPUs (conftest.py). One test runs `glmgate run` twice on three cheap
CPU checks, in process and split over two worker processes, and wants the same report (~15 s); the rest
take well under a second.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gate import cli, merge_gate, multigpu
from invariants.engine import CheckResult, results_json
from invariants.matrix import CHECKS

TIMINGS = {"seconds", "candidate_seconds", "shrink_seconds"}


@pytest.fixture(autouse=True)
def _failure_store(tmp_path, monkeypatch):
    """Failures these runs find go to a store of the test's own, never ./.glmgate-failures."""
    monkeypatch.setenv("GLMGATE_FAILURES", str(tmp_path / "failures"))


# ------------------------------------------------------------------------------------------ the partition

def _loads(parts, weight):
    return [sum(weight(c) for c in p) for p in parts]


def _holds(names, n, weight):
    parts = multigpu.partition(names, n, weight)
    assert parts == multigpu.partition(names, n, weight)                     # deterministic
    assert len(parts) == n
    assert sorted(c for p in parts for c in p) == sorted(names)              # every name exactly once
    for p in parts:                                                          # each in the given order
        assert p == [c for c in names if c in p]
    if names:
        loads = _loads(parts, weight)
        assert max(loads) - min(loads) <= max(weight(c) for c in names) + 1e-9, (parts, loads)
    return parts


@pytest.mark.parametrize("device", ["cuda", "cpu"])
@pytest.mark.parametrize("n", [1, 2, 3, 4, 8])
def test_the_matrix_split_is_deterministic_complete_and_balanced(device, n):
    names = [c.name for c in CHECKS] + ["model.reference"]
    parts = _holds(names, n, lambda c: multigpu.cost(c, device))
    if n == 2 and device == "cuda":
        # the heaviest check (serving.state_machine) goes first, to worker 0; the rest balance around it
        assert "serving.state_machine" in parts[0]


@settings(max_examples=200, deadline=None)
@given(weights=st.lists(st.floats(0, 500, allow_nan=False), max_size=40), n=st.integers(1, 9))
def test_any_weights_split_deterministic_complete_and_balanced(weights, n):
    names = [f"m.check{i}" for i in range(len(weights))]
    w = dict(zip(names, weights))
    _holds(names, n, w.__getitem__)


def test_a_name_twice_or_no_worker_is_refused():
    with pytest.raises(ValueError, match="twice"):
        multigpu.partition(["a.x", "a.x"], 2, lambda c: 1.0)
    with pytest.raises(ValueError):
        multigpu.partition(["a.x"], 0, lambda c: 1.0)


# ------------------------------------------------------------------------------------------ the merge

def _result(name, status="pass", **kw):
    base = dict(check=name, mechanism=name.split(".")[0], status=status, examples=7, worst_ratio=0.25,
                worst_line=f"{name}: rel_l2 1e-7 <= limit 1e-5", worst_case={"type": "CoreCase", "length": 3,
                                                                             "cuts": [1, 2]},
                shrunk_case=None, message="", repro=None, events={"split 2": 3, "varlen": 1}, seconds=1.5,
                margin={"p50": 0.1, "p99": 0.25, "max": 0.25}, flip_examples=1, ill_conditioned_examples=0,
                covered=("kda.chunked", "kda.recurrent"), judged_in=("kda.sublayer float32",),
                candidate_seconds=0.4)
    base.update(kw)
    return CheckResult(**base)


RESULTS = [
    _result("kda.chunked"),
    _result("kda.decode", "fail", margin={"p50": 0.2, "p99": math.inf, "max": math.inf}, worst_ratio=math.inf,
            shrunk_case={"type": "DecodeCase", "batch": 1}, message="kda.decode.output broke",
            repro="glmgate repro '{...}'", shrink_seconds=2.5, crashed=False),
    _result("mhc.write_back", "not covered", covered=(), message="8 examples held, but none ran"),
    _result("nvfp4.quantize", "error", margin={"p50": None, "p99": None, "max": None}, worst_ratio=-1.0, message="KeyError: 'x' (raised at invariants/nvfp4_checks.py:12 in run)"),
    _result("model.reference", "not run", message="transformers is missing", not_provided=("a.b",)),
]


def _docs(workers, results, meta=None, interrupted_rows=()):
    """Each worker's JSON as it writes it: results_json of its own checks (in the single run's order)."""
    out = {}
    for w in workers:
        mine = [r for r in results if r.check in w.checks] + [r for r in interrupted_rows if r.check in w.checks]
        out[w.index] = json.loads(results_json(mine, dict(meta or {}, interrupted=bool(interrupted_rows))))
    return out


def _workers(tmp_path, parts):
    return [multigpu.Worker(k, str(k), part, [], str(tmp_path)) for k, part in enumerate(parts)]


@pytest.mark.parametrize("seed", range(4))
def test_merged_worker_json_is_the_single_run_json(tmp_path, seed):
    import random

    order = [r.check for r in RESULTS]
    shuffled = order[:]
    random.Random(seed).shuffle(shuffled)
    n = 1 + seed % 3
    parts = [sorted(shuffled[k::n], key=order.index) for k in range(n)]
    workers = _workers(tmp_path, parts)
    merged, stopped = multigpu.merge_run(workers, _docs(workers, RESULTS), order)
    meta = {"impl": "triton", "device": "cuda", "interrupted": False}
    assert not stopped
    assert results_json(merged, meta) == results_json(RESULTS, meta)       # field by field, order included
    assert [r.covered for r in merged] == [r.covered for r in RESULTS]     # tuples again, not lists
    assert cli._exit_code(merged, False) == cli._exit_code(RESULTS, False) == cli.EXIT_BROKEN


def test_merged_gate_rows_are_the_single_gate_verdict(tmp_path):
    rows = [merge_gate.GateRow(r.check, r.status, r, None if r.status != "pass" else r._replace(examples=3),
                               r.message) for r in RESULTS[:4]]
    order = [r.check for r in rows]
    workers = _workers(tmp_path, [[order[0], order[2]], [order[1], order[3]]])
    meta = {"candidate": "x:Y", "baseline": "triton", "device": "cuda", "dtype": "bfloat16", "profile": "gpu",
            "warmup_seconds": {"kda": 1.0}}
    docs = {}
    for w, warm in zip(workers, ({"kda": 2.5, "mhc": 0.5}, {"kda": 4.0})):
        mine = [r for r in rows if r.check in w.checks]
        docs[w.index] = json.loads(merge_gate.as_json(mine, dict(meta, warmup_seconds=warm)))
    merged, warm = multigpu.merge_gate(workers, docs, order, ["mhc", "kda"])
    assert warm == {"mhc": 0.5, "kda": 4.0} and list(warm) == ["mhc", "kda"]
    for render in (merge_gate.as_json, merge_gate.junit, merge_gate.markdown):
        assert render(merged, meta) == render(rows, meta)


def test_a_check_stopped_by_ctrl_c_is_left_to_the_caller(tmp_path):
    # the caller (cmd_run) adds the "not run" rows after the finished ones, as one process does
    stopped = cli._interrupted_rows(CHECKS[:1], False, [])
    assert stopped[0].message == multigpu.INTERRUPTED
    first = CHECKS[0].name
    workers = _workers(tmp_path, [[first], ["kda.decode"]])
    done = [_result("kda.decode")]
    docs = _docs(workers[1:], done)
    docs.update(_docs(workers[:1], [], interrupted_rows=stopped))
    merged, interrupted = multigpu.merge_run(workers, docs, [first, "kda.decode"])
    assert interrupted and [r.check for r in merged] == ["kda.decode"]


# ------------------------------------------------------------------------------------------ a worker that dies

DIES = ("import os, signal, sys; sys.stderr.write('RuntimeError: CUDA error: an illegal memory access was "
        "encountered\\n'); sys.stderr.flush(); os.kill(os.getpid(), signal.SIGSEGV)")
SILENT = "import sys; sys.exit(0)"


def test_a_worker_that_crashes_is_an_error_row_naming_it(tmp_path, capsys):
    ok = json.dumps(json.loads(results_json([_result("kda.chunked")], {"interrupted": False})))
    writes = f"import sys; open(sys.argv[1], 'w').write({ok!r})"
    workers = [multigpu.Worker(0, "3", ["kda.chunked"], [], str(tmp_path)),
               multigpu.Worker(1, "7", ["kda.decode", "mhc.write_back"], [sys.executable, "-c", DIES],
                               str(tmp_path)),
               multigpu.Worker(2, "9", ["nvfp4.quantize"], [sys.executable, "-c", SILENT], str(tmp_path))]
    workers[0].cmd = [sys.executable, "-c", writes, workers[0].json]
    t0 = time.time()
    assert not multigpu.run_workers(workers, cli._rich(), poll=0.05)
    assert time.time() - t0 < 10                                             # no hang
    assert all(w.proc.returncode is not None for w in workers)
    docs = {w.index: doc if doc is not None else why for w in workers for doc, why in [multigpu._report_of(w)]}
    order = ["kda.chunked", "kda.decode", "mhc.write_back", "nvfp4.quantize"]
    merged, stopped = multigpu.merge_run(workers, docs, order)
    assert not stopped and [r.check for r in merged] == order
    assert [r.status for r in merged] == ["pass", "error", "error", "error"]
    crash = merged[1].message
    assert crash.startswith("worker 1 (GPU 7) crashed (killed by signal SIGSEGV)"), crash
    assert "illegal memory access" in crash and workers[1].err in crash
    assert merged[2].message == crash
    assert merged[3].message.startswith("worker 2 (GPU 9) exited with code 0 before it reported its checks")
    assert cli._exit_code(merged, False) == cli.EXIT_CRASH


def test_a_worker_that_refuses_its_arguments_is_a_usage_error(tmp_path):
    w = multigpu.Worker(0, None, ["kda.chunked"], [sys.executable, "-c", "import sys; sys.stderr.write("
                        "'glmgate gate: error: --candidate: x.warmup raised\\n'); sys.exit(2)"], str(tmp_path))
    multigpu.run_workers([w], cli._rich(), poll=0.05)
    with pytest.raises(cli.UsageError, match=r"^--candidate: x.warmup raised$"):
        multigpu._report_of(w)


# ------------------------------------------------------------------------------------------ the flag

def _args(device="cuda", gpus="2", **kw):
    return argparse.Namespace(device=device, gpus=gpus, kernel_paths=kw.pop("kernel_paths", False), **kw)


def test_more_gpus_than_visible_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(multigpu, "gpu_ids", lambda: ["0"])
    monkeypatch.delenv(multigpu.SHARE_ENV, raising=False)
    with pytest.raises(cli.UsageError, match=r"--gpus 2: only 1 CUDA device visible to torch on this machine.*"
                                             r"use --gpus 1 or --gpus auto"):
        multigpu.workers(_args())
    assert multigpu.workers(_args(gpus="auto")) == 1 == multigpu.workers(_args(gpus=None))
    assert multigpu.workers(_args(gpus="1")) == 1
    monkeypatch.setenv(multigpu.SHARE_ENV, "1")                              # sharing one GPU: allowed
    assert multigpu.workers(_args()) == 2
    for bad, says in [(_args(gpus="0"), "expected a number of GPUs >= 1 or auto"),
                      (_args(gpus="two"), "expected a number of GPUs >= 1 or auto"),
                      (_args(device="cpu", gpus="auto"), "--device cpu uses no GPU"),
                      (_args(device="cuda:1"), "use --device cuda, not cuda:1"),
                      (_args(kernel_paths=True), "--kernel-paths .* --gpus 1")]:
        with pytest.raises(cli.UsageError, match=says):
            multigpu.workers(bad)
    assert multigpu.workers(_args(device="cpu", gpus="3")) == 3


@pytest.mark.parametrize("argv", [
    ["run", "--impl", "torch", "--examples", "3", "--seed", "-5", "--no-failures", "--require-reference",
     "--dtype", "float64", "--config", "cfg dir/config.json"],
    ["gate", "--candidate", "pkg.mod:Obj", "--baseline", "torch", "--regression-factor", "6", "--no-warmup",
     "--fixed-shapes", "--failures", "/tmp/store", "--geometry", "full"],
])
def test_a_worker_gets_every_option_of_the_parent(argv):
    parser = cli.build_parser()
    extra = ["--gpus", "2", "--check", "kda.chunked", "--mechanism", "kda", "--json", "x.json", "--profile", "ci"]
    args = parser.parse_args(argv + extra)
    fwd = multigpu.forwarded(args, args.gpus_parser)
    again = parser.parse_args([argv[0], *fwd])
    skipped = multigpu.SKIP | {"gpus_parser", "fn"}
    assert {k: v for k, v in vars(again).items() if k not in skipped} == \
           {k: v for k, v in vars(args).items() if k not in skipped}
    assert not any(a.startswith(("--gpus", "--check", "--json", "--mechanism", "--profile")) for a in fwd), fwd


# ------------------------------------------------------------------------------------------ pytest-xdist

def test_each_xdist_worker_gets_its_gpu():
    assert [multigpu.xdist_gpu(f"gw{k}", 2) for k in range(4)] == [0, 1, 0, 1]
    assert [multigpu.xdist_gpu(f"gw{k}", 4) for k in range(4)] == [0, 1, 2, 3]
    assert [multigpu.xdist_gpu(f"gw{k}", 3) for k in range(4)] == [0, 1, 2, 0]
    assert [multigpu.xdist_gpu(f"gw{k}", 1) for k in range(4)] == [0, 0, 0, 0]
    assert multigpu.xdist_gpu("gw1", 0) is None and multigpu.xdist_gpu("master", 2) is None


def test_pinning_sets_cuda_visible_devices_only_under_xdist_with_a_gpu():
    on = {multigpu.PIN_ENV: "1"}
    for k, want in enumerate(["0", "1", "0", "1"]):
        env = dict(on, PYTEST_XDIST_WORKER=f"gw{k}")
        assert multigpu.pin_xdist_worker(env, count=2) == want and env["CUDA_VISIBLE_DEVICES"] == want
    env = dict(on, PYTEST_XDIST_WORKER="gw3", CUDA_VISIBLE_DEVICES="4,5")  # picks among the visible ones
    assert multigpu.pin_xdist_worker(env, count=8) == "5" and env["CUDA_VISIBLE_DEVICES"] == "5"
    for env in ({"PYTEST_XDIST_WORKER": "gw1"},                           # not asked for
                dict(on),                                                  # not under xdist
                dict(on, PYTEST_XDIST_WORKER="gw1")):                      # no GPU (a CPU-only machine)
        before = dict(env)
        assert multigpu.pin_xdist_worker(env, count=0) is None and env == before
    env = dict(on, PYTEST_XDIST_WORKER="gw1", CUDA_VISIBLE_DEVICES="")    # every GPU hidden already
    assert multigpu.pin_xdist_worker(env, count=2) is None and env["CUDA_VISIBLE_DEVICES"] == ""


# ------------------------------------------------------------------------------------------ end to end

E2E = ["nvfp4.quantize", "nvfp4.dequantize", "nvfp4.rerun"]     # the cheapest; estimated 2, 2, 10 s


def _cli_run(tmp_path, capsys, name, *extra):
    out = tmp_path / f"{name}.json"
    argv = ["run", "--profile", "ci", "--examples", "1", *[f"--check={c}" for c in E2E], "--json", str(out), *extra]
    code = cli.main(argv)
    text = capsys.readouterr().out
    return code, json.loads(out.read_text()), text


def test_run_split_over_two_workers_reports_what_one_process_reports(tmp_path, capsys):
    parts = multigpu.partition(E2E, 2, lambda c: multigpu.cost(c, "cpu"))
    assert parts == [["nvfp4.rerun"], ["nvfp4.quantize", "nvfp4.dequantize"]]     # the merge must reorder
    code1, one, text1 = _cli_run(tmp_path, capsys, "one")
    code2, two, text2 = _cli_run(tmp_path, capsys, "two", "--gpus", "2")
    assert code1 == code2 == cli.EXIT_PASS
    assert one["meta"] == two["meta"] and one["summary"] == two["summary"]
    assert [r["check"] for r in two["results"]] == [r["check"] for r in one["results"]] == E2E
    for a, b in zip(one["results"], two["results"]):
        assert {k: v for k, v in a.items() if k not in TIMINGS} == {k: v for k, v in b.items() if k not in TIMINGS}
    summary = [ln for ln in text1.splitlines() if ln.startswith("3 checks: ")]
    assert summary and summary == [ln for ln in text2.splitlines() if ln.startswith("3 checks: ")]
    assert "worker 0 (no GPU): nvfp4.rerun (estimated 10 s)" in text2, text2
    assert "checks done" in text2 and "3/3 checks done" in text2, text2
