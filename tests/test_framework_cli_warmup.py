"""`glmgate gate`'s warm-up hook and --fixed-shapes (gate/warmup.py), in process.

The candidates wrap our Triton `chunked` and note what they see: the shapes their `warmup` received and
the (heads, head dim) of every chunked call. The warm-up must come before the first example with every
shape the checks draw, its time reported apart; --fixed-shapes must keep every drawn call at the base
geometry; a warmup that raises stops the gate with a usage error naming it.
"""
from __future__ import annotations

import json

import pytest

import impl.kda as ik
from gate import cli
from oracle.config import Geometry
from invariants.matrix import BY_NAME
from pins import keep_pins
from strategies import geometry as sg

SEEN = {"warmup": [], "calls": []}


@pytest.fixture(autouse=True)
def _fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("GLMGATE_FAILURES", str(tmp_path / "failures"))
    # one pin, of a shape other than the base geometry's (the --fixed-shapes test needs one; tests/pins.py)
    keep_pins(monkeypatch, {"kda.chunked": [3]})
    SEEN["warmup"].clear()
    SEEN["calls"].clear()


class Noting:
    @staticmethod
    def chunked(q, *args, **kwargs):
        SEEN["calls"].append(("chunked", q.shape[2], q.shape[3]))
        return ik.chunked(q, *args, **kwargs)

    @staticmethod
    def warmup(shapes):
        SEEN["warmup"].append((len(SEEN["calls"]), list(shapes)))


class BrokenWarmup(Noting):
    @staticmethod
    def warmup(shapes):
        raise RuntimeError("no such GPU architecture")


def _gate(tmp_path, candidate, *extra):
    argv = ["gate", "--candidate", f"test_framework_cli_warmup:{candidate}", "--check", "kda.chunked",
            "--examples", "3", "--json", str(tmp_path / "r.json"), "--markdown", str(tmp_path / "pr.md"), *extra]
    return cli.main(argv)


def test_the_warmup_gets_every_drawn_shape_once_before_any_example(tmp_path):
    assert _gate(tmp_path, "Noting") == 0
    assert len(SEEN["warmup"]) == 1
    calls_before, shapes = SEEN["warmup"][0]
    assert calls_before == 0
    want = {(g.heads, g.head_dim) for g in sg.kda_variations(Geometry.preset("tiny"), vary=True)}
    assert {(s["heads"], s["head_dim"]) for s in shapes} == want
    assert {s["varlen"] for s in shapes} == {False, True}
    assert all(s["device"] == "cpu" for s in shapes)
    # every call the examples made is of a warmed shape
    assert SEEN["calls"] and {(h, k) for _, h, k in SEEN["calls"]} <= want
    meta = json.loads((tmp_path / "r.json").read_text())["meta"]
    assert set(meta["warmup_seconds"]) == {"kda"}
    assert "warm-up outside the examples: kda " in (tmp_path / "pr.md").read_text()


def test_no_warmup_does_not_call_it(tmp_path):
    assert _gate(tmp_path, "Noting", "--no-warmup") == 0
    assert SEEN["warmup"] == [] and SEEN["calls"]


def test_fixed_shapes_draw_only_the_base_geometry_and_are_restored_after(tmp_path):
    tiny = Geometry.preset("tiny")
    assert _gate(tmp_path, "Noting", "--fixed-shapes") == 0
    base = (tiny.linear_num_heads, tiny.linear_head_dim)
    # the drawn examples keep to the base shape; the pinned ones run as written (and are warmed)
    pinned = {(c.heads, c.head_dim) for c in BY_NAME["kda.chunked"].examples}
    assert pinned - {base}, "kda.chunked pins no other shape: this test shows nothing about the pins"
    assert {(h, k) for _, h, k in SEEN["calls"]} == {base} | pinned
    assert {(s["heads"], s["head_dim"]) for s in SEEN["warmup"][0][1]} == {base} | pinned
    assert sg.VARY_SHAPES is True
    assert "fixed shapes (the base geometry's dimensions only)" in (tmp_path / "pr.md").read_text()


def test_a_warmup_that_raises_is_a_usage_error_naming_it(tmp_path, capsys):
    assert _gate(tmp_path, "BrokenWarmup") == 2
    err = capsys.readouterr().err
    assert "kda.warmup raised RuntimeError: no such GPU architecture" in err and "--no-warmup" in err
    assert SEEN["calls"] == []
