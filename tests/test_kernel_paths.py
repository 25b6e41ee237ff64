"""The kernel-path table (invariants/kernel_paths.py) and its recorder (impl/launches.py): the table covers
every kernel and every flag, and a run that misses a declared path is told so, naming it.

tests/test_matrix.py makes the claim itself (each check's ci examples reach the paths that name it); these
tests show that claim can fail: a new flag or kernel without an entry, a recorded run that stops short of
a path, a strategy that no longer draws what reaches it.
"""
from __future__ import annotations

import inspect
import json
import types

import numpy as np
import pytest
import torch
import triton.language as tl

from gate import cli
from impl import launches
from impl import mla as im
from impl.mutants.catalogue import edited_helper, kernel_edited
from invariants import kernel_paths as kp
from invariants.dsa_checks import index_cases
from invariants.engine import run_check
from invariants.matrix import BY_NAME
from invariants.target import Target
from impl import registry
from oracle.config import Geometry
from strategies import tensors as tz
from strategies.geometry import DSAGeometry

TINY = Geometry.preset("tiny")
G0 = DSAGeometry.from_geometry(TINY)


def test_the_table_covers_every_kernel_and_every_constexpr_flag():
    assert kp.unlisted(launches.kernels()) == []


def test_a_new_kernel_flag_without_a_path_is_named():
    """The intra kernel grown a HAS_BIAS flag (K is one of its sizes, IS_VARLEN read by a path of it), and a
    new kernel with no entry at all."""
    def kernel(x, K: tl.constexpr, HAS_BIAS: tl.constexpr, IS_VARLEN: tl.constexpr):
        pass
    found = kp.unlisted({**launches.kernels(), "kda_intra_chunked_fwd_kernel": types.SimpleNamespace(fn=kernel),
                         "new_fwd_kernel": types.SimpleNamespace(fn=kernel)})
    assert [f for f in found if f.startswith("kda_intra")] == [
        "kda_intra_chunked_fwd_kernel: constexpr HAS_BIAS is neither a size (KERNELS) nor read by one of its paths"]
    assert found[0] == "new_fwd_kernel: a kernel of impl/kernels/ with no entry in KERNELS"
    assert "new_fwd_kernel: no path declared" in found and len(found) == 6      # and each of its 3 constexprs


def test_every_path_names_existing_checks_or_says_why_not_on_the_cpu():
    seen = set()
    for p in kp.PATHS:
        assert (p.kernel, p.name) not in seen, f"{p.kernel}: path {p.name!r} declared twice"
        seen.add((p.kernel, p.name))
        assert bool(p.by) != bool(p.why), f"{p.kernel}: {p.name}: give the checks that reach it (by) or why none does"
        assert all(c in BY_NAME for c in p.by), f"{p.kernel}: {p.name}: {p.by} names a check the matrix lacks"


def _attend(W: int, valid: int, rows: int = 1):
    """impl.mla.absorbed over one query row per batch row selecting `valid` of W slots (the rest -1)."""
    rng = np.random.default_rng(3)
    w = tz.mla_weights(rng, G0).map(lambda a: torch.as_tensor(a, dtype=torch.float32))
    q = torch.as_tensor(rng.standard_normal((rows, 1, G0.heads, G0.nope_dim)), dtype=torch.float32)
    lat = torch.as_tensor(rng.standard_normal((rows, 64, G0.kv_rank)), dtype=torch.float32)
    idx = torch.full((rows, 1, W), -1, dtype=torch.int64)
    idx[..., :valid] = torch.as_tensor(rng.permutation(64)[:valid])
    return im.absorbed(w, q, lat, idx)[0]


def _names(paths) -> set:
    return {p.name for p in paths}


def test_a_recorded_run_that_misses_a_path_is_told_which():
    """One narrow selection (11 slots, one block, no split) misses the split and second-block paths that
    mla.absorbed declares; a 64-slot selection over 40 tokens then reaches them: split in two, the second
    split's 8 entries in one block, the first's 32 in two."""
    with kp.recording() as cov:
        _attend(11, 9)
    missed = _names(kp.missing(cov, "mla.absorbed"))
    assert {"selection splits (flash-decoding)", "valid entries in a second block of a split (online-softmax "
            "rescale)", "an empty split merged (weight 0)"} <= missed
    assert "the whole selection in one program" not in missed
    with kp.recording() as cov:
        _attend(64, 40)
    reached = {p.name for p in kp.PATHS if cov.reached(p)}
    assert {"selection splits (flash-decoding)", "two splits merged",
            "valid entries in a second block of a split (online-softmax rescale)"} <= reached
    assert "an empty split (log-sum-exp -inf)" not in reached
    assert cov.launches == {"mla_sparse_absorbed_fwd_kernel": 1, "mla_merge_kernel": 1}


def test_a_strategy_that_stops_reaching_a_path_fails_the_path_assertion():
    """mla.absorbed without its wide draws (topk 256 over up to ~300 tokens): its ci examples no longer
    reach the paths the table credits them with, as tests/test_matrix.py would then say."""
    narrow = BY_NAME["mla.absorbed"]._replace(cases=index_cases, examples=())
    with kp.recording() as cov:
        r = run_check(narrow, TINY, Target(registry.get("triton"), "cpu", torch.float32),
                      Target(registry.get("torch"), "cpu", torch.float32), "ci", max_examples=2)
    assert r.status == "pass"
    assert "three or more splits merged" in _names(kp.missing(cov, "mla.absorbed"))


def test_the_recorder_sees_nothing_outside_its_block_and_watchers_nest():
    seen = []
    with launches.watching(lambda n, a: seen.append(n)):
        with kp.recording() as cov:
            _attend(11, 9)
    _attend(11, 9)
    assert seen == ["mla_sparse_absorbed_fwd_kernel"] and cov.launches["mla_sparse_absorbed_fwd_kernel"] == 1


def test_a_kernel_edit_is_planted_for_the_block_only_and_refused_when_its_text_moved():
    ref = _attend(64, 40)
    with kernel_edited(im, "mla_merge_kernel", "    if ONE_ROUND:\n", "    NS = NS - 1\n    if ONE_ROUND:\n"):
        assert not torch.equal(_attend(64, 40), ref)
    assert torch.equal(_attend(64, 40), ref)
    with pytest.raises(ValueError, match="occurs 0 times in its source, expected once"):
        with kernel_edited(im, "mla_merge_kernel", "for j in range(0, NSPLITS):", "pass"):
            pass



def test_an_edited_helper_gets_its_own_name():
    """A GPU compile names a called helper by module and name: a planted copy named like the original, in a kernel
    that also calls the original, would be compiled once for both calls (stop 42: the FTZ mutant escaped on the
    GPU that way). The copy is renamed; the original keeps its name."""
    from impl.kernels import kda as kk
    planted = edited_helper(kk._exp, "[x * 1.4426950408889634]", "[x]")
    assert (planted.fn.__name__, kk._exp.fn.__name__) == ("_exp_planted", "_exp")
    src = inspect.getsource(planted.fn)
    assert "def _exp_planted(" in src and "[x]" in src and "1.4426950408889634" not in src

def test_glmgate_run_kernel_paths_prints_the_paths_and_writes_them_to_the_json(tmp_path, capsys):
    out = tmp_path / "r.json"
    code = cli.main(["run", "--check", "mla.absorbed", "--examples", "1", "--kernel-paths", "--no-failures",
                     "--json", str(out)])
    text = capsys.readouterr().out
    assert code == 0
    assert "kernel paths of the kernels this run launched" in text and "kernel paths: " in text
    assert "not launched: kda_intra_chunked_fwd_kernel" in text
    assert "not reached, though a check that declares it ran" in text      # one example reaches few paths
    meta = json.loads(out.read_text())["meta"]["kernel_paths"]
    assert meta["declared"] == len(kp.PATHS) and meta["launches"]["mla_sparse_absorbed_fwd_kernel"] >= 3
    assert any(m.startswith("mla_merge_kernel: ") for m in meta["missed"])
