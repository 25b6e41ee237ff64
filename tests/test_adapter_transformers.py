"""The transformers adapter (adapters/transformers_glm5.py) judged through the candidate path, as a
user's kernel is: `glmgate gate --candidate adapters.transformers_glm5:Candidate` at float32 and at
float64 (where its declared precision islands set the judged dtype), every level it covers passing,
the rest NOT COVERED or NOT RUN exactly where the adapter leaves them out; and two realistic adapter
bugs, each caught on its own quantity: an index_topk taken from transformers' config class default,
and a KDA continuation that hands over the recurrent state but not the conv window.

Needs the `reference` extra (`pip install -e .[reference]`, which .ci/run installs).
"""
from __future__ import annotations

import json
import sys
import types

import pytest
import torch

sys.modules.setdefault("fla", None)
pytest.importorskip("transformers", reason="the transformers adapter needs `pip install -e .[reference]`")
from adapters import _hf  # noqa: E402
from adapters import _hf_cache as hc  # noqa: E402
from adapters.transformers_glm5 import KDA, MLA, Candidate, MoE  # noqa: E402
from gate import cli  # noqa: E402
from impl import registry  # noqa: E402
from invariants.engine import run_check  # noqa: E402
from invariants.matrix import BY_NAME  # noqa: E402
from invariants.target import Target  # noqa: E402
from oracle.config import Geometry  # noqa: E402
from oracle.types import KDAState  # noqa: E402

ADAPTER = "adapters.transformers_glm5:Candidate"
_DEFAULTS = _hf._config_class()()         # transformers' Glm5NextTextConfig class defaults
TINY = Geometry.preset("tiny")
# the mechanism checks, and what each must come to: the adapter's own functions pass; kda.recurrent and
# mhc.coefficients only reach functions it leaves out (not covered); it has no dsa namespace (not run)
MECHANISM_CHECKS = {"kda.sublayer": "pass", "kda.packed": "pass", "kda.recurrent": "not covered",
                    "mla.paths": "pass", "moe.route": "pass", "moe.forward": "pass",
                    "mhc.coefficients": "not covered", "dsa.index": "not run"}
COVERED = {"kda.sublayer": ["kda.sublayer"], "kda.packed": ["kda.sublayer"], "mla.paths": ["mla.sublayer"],
           "moe.route": ["moe.route"], "moe.forward": ["moe.forward", "moe.route"], "model.paths": ["model.forward"]}


@pytest.fixture(autouse=True)
def _failure_store(tmp_path, monkeypatch):
    """Failures these runs find go to a store of the test's own, never ./.glmgate-failures."""
    monkeypatch.setenv("GLMGATE_FAILURES", str(tmp_path / "failures"))


def _gate(tmp_path, candidate, dtype, checks, examples=1):
    argv = ["gate", "--candidate", candidate, "--dtype", dtype, "--examples", str(examples),
            "--json", str(tmp_path / "r.json")]
    for c in checks:
        argv += ["--check", c]
    rc = cli.main(argv)
    data = json.loads((tmp_path / "r.json").read_text())
    return rc, {c["check"]: c for c in data["checks"]}


def _assert_statuses(rows, expected):
    assert {k: r["status"] for k, r in rows.items()} == expected, {k: (r["status"], r["note"]) for k, r in rows.items()}
    for check, functions in COVERED.items():
        if check in rows:
            assert rows[check]["candidate"]["covered"] == functions, rows[check]["candidate"]


def test_every_mechanism_level_passes_in_float32_and_what_it_leaves_out_is_not_covered(tmp_path):
    rc, rows = _gate(tmp_path, ADAPTER, "float32", MECHANISM_CHECKS)
    assert rc == cli.EXIT_PASS
    _assert_statuses(rows, MECHANISM_CHECKS)
    # float32 is already the islands' dtype: no comparison was judged in another dtype than the run's
    assert all(not r["candidate"]["judged_in"] for r in rows.values() if r["status"] == "pass")


def test_every_mechanism_level_passes_in_float64_judged_in_its_declared_float32_islands(tmp_path, capsys):
    rc, rows = _gate(tmp_path, ADAPTER, "float64", MECHANISM_CHECKS)
    out = capsys.readouterr().out
    said = out.index("precision islands (declared PRECISION): kda.sublayer in float32")
    assert said < out.index("kda.sublayer: pass"), out           # said before any example runs
    assert rc == cli.EXIT_PASS
    _assert_statuses(rows, MECHANISM_CHECKS)
    for check, functions in COVERED.items():
        if check in rows:
            assert rows[check]["candidate"]["judged_in"] == [f"{f} float32" for f in functions], rows[check]
    # our Triton KDA core refuses float64: that failure is the fallback's, never the candidate's
    assert "our fallback alone failed" in rows["kda.recurrent"]["note"], rows["kda.recurrent"]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_whole_model_port_passes_the_model_paths(dtype):
    # the check's own pinned examples (prefill, split prefill, decodes, serialize + restore, left padding),
    # run as the gate runs them but without its peer: a second whole decoder per example costs more than
    # this test may (the gate's CLI path is exercised by the tests above)
    cand, base = (Target(registry.get(name), "cpu", getattr(torch, dtype)) for name in (ADAPTER, "torch"))
    r = run_check(BY_NAME["model.paths"], TINY, cand, base, "ci", max_examples=1)
    assert r.status == "pass" and r.covered == ("model.forward",), r
    assert r.examples >= len(BY_NAME["model.paths"].examples)
    assert r.judged_in == (("model.forward float32",) if dtype == "float64" else ()), r


# ----------------------------------------------------------------------------- planted adapter bugs


class TopkFromDefault(MLA):
    """Builds the attention's config without the indexer's top-k, so transformers' class default (2048
    tokens) applies: every visible pool is selected."""

    SIZES = staticmethod(lambda w, iw: {**_hf.mla_sizes(w, iw), "index_topk": _DEFAULTS.index_topk})


class GroupsFromDefault(MoE):
    """Builds the router's config without the expert groups, so transformers' class defaults apply
    (n_group = topk_group = 1): no group is ever dropped."""

    SIZES = staticmethod(lambda w: {**_hf.moe_sizes(w), "n_group": _DEFAULTS.n_group,
                                    "topk_group": _DEFAULTS.topk_group})


class ConvWindowDropped(KDA):
    """Hands transformers the recurrent state of a continuation but leaves the conv window at zeros."""

    @staticmethod
    def _seed(cache, state):
        if state is not None:
            hc.seed_kda(cache, _hf.KDA_LAYER, KDAState(state.recurrent, torch.zeros_like(state.conv)))


class WithTopkFromDefault(Candidate):
    mla = TopkFromDefault


class WithGroupsFromDefault(Candidate):
    moe = GroupsFromDefault


class WithConvWindowDropped(Candidate):
    kda = ConvWindowDropped


def test_a_topk_taken_from_the_config_class_default_is_refused_by_the_selection_width(tmp_path):
    # the bug shows only where the default differs from the size the checks draw (tiny: 8 tokens)
    assert _DEFAULTS.index_topk != _hf.SCHEDULE.to_dict()["index_topk"]
    rc, rows = _gate(tmp_path, "test_adapter_transformers:WithTopkFromDefault", "float32", ["mla.paths"])
    row = rows["mla.paths"]
    # 2048 + P_k - 1 slots per query: not a selection of this geometry, refused where it is judged
    assert rc == cli.EXIT_CRASH and row["status"] == "fail" and row["candidate"]["crashed"], row
    assert "indices: width 2051, expected topk + P_k - 1 = 11" in row["note"], row["note"]


def test_expert_groups_taken_from_the_config_class_defaults_fail_on_the_expert_choice(tmp_path):
    assert (_DEFAULTS.n_group, _DEFAULTS.topk_group) != (_hf.SCHEDULE.n_group, _hf.SCHEDULE.topk_group)
    rc, rows = _gate(tmp_path, "test_adapter_transformers:WithGroupsFromDefault", "float32", ["moe.route"])
    row = rows["moe.route"]
    assert rc == cli.EXIT_BROKEN and row["status"] == "fail" and not row["candidate"]["crashed"], row
    assert "moe.route.expert_ids" in row["note"], row["note"]


def test_a_continuation_without_its_conv_window_fails_on_the_continued_output(tmp_path):
    rc, rows = _gate(tmp_path, "test_adapter_transformers:WithConvWindowDropped", "float32", ["kda.paths"])
    row = rows["kda.paths"]
    assert rc == cli.EXIT_BROKEN and row["status"] == "fail" and not row["candidate"]["crashed"], row
    # the first call of a stream has no window to drop: only the paths that continue a state fail
    assert any(f"kda.{p}.output" in row["note"] for p in ("continuation", "token_decode", "chunked_prefill")), row["note"]


# ----------------------------------------------------------------------------- declarations refused


@pytest.mark.parametrize("precision, match", [({"chunked": "float32"}, "does not provide"),
                                               ({"sublayer": "float16"}, "expected one of"),
                                               (("sublayer", "float32"), "must be a dict")],
                         ids=["a function it does not provide", "not a coarser dtype", "not a dict"])
def test_a_malformed_precision_declaration_is_refused_when_the_candidate_loads(precision, match, monkeypatch):
    mod = types.ModuleType("bad_precision_candidate")
    mod.Candidate = type("Candidate", (), {"kda": type("K", (KDA,), {"PRECISION": precision})})
    monkeypatch.setitem(sys.modules, "bad_precision_candidate", mod)
    with pytest.raises(ValueError, match=match):
        registry.get("bad_precision_candidate:Candidate")
