"""The template adapter (adapters/template.py) a user copies: as shipped it passes the gate on what it
provides, is "not covered" on what it leaves to glmgate, and the commonest slip when filling it in
(applying the 1/sqrt(K) scale that q already carries) fails kda.chunked on its output."""
from __future__ import annotations

import json
import sys
import types

import pytest

import adapters.template as template
from gate import cli
from pins import keep_pins


@pytest.fixture(autouse=True)
def _store(tmp_path, monkeypatch):
    monkeypatch.setenv("GLMGATE_FAILURES", str(tmp_path / "failures"))
    # the template's verdicts hold on any case: kda.chunked keeps its packed pin (documents with an empty one, a
    # given state) and its head dim 32 one (two of the interpreter's K tiles) (tests/pins.py)
    keep_pins(monkeypatch, {"kda.chunked": [2, 3]})


def _gate(tmp_path, candidate, *checks):
    argv = ["gate", "--candidate", candidate, "--examples", "3", "--json", str(tmp_path / "r.json")]
    for c in checks:
        argv += ["--check", c]
    rc = cli.main(argv)
    return rc, {c["check"]: c["status"] for c in json.loads((tmp_path / "r.json").read_text())["checks"]}


def test_the_template_as_shipped_passes_and_says_what_it_leaves_out(tmp_path):
    rc, rows = _gate(tmp_path, "adapters.template:Candidate", "kda.chunked", "kda.decode", "moe.forward",
                     "moe.route")
    assert rc == 0
    assert rows == {"kda.chunked": "pass", "kda.decode": "not covered", "moe.forward": "pass",
                    "moe.route": "not covered"}


class ScaledTwice(template.KDA):
    @staticmethod
    def chunked(q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
        return template.KDA.chunked(q * q.shape[-1] ** -0.5, k, v, g, beta, state, chunk, cu_seqlens,
                                    boundary_states)


def test_a_template_filled_in_with_the_scale_applied_twice_fails(tmp_path, monkeypatch):
    mod = types.ModuleType("template_scaled_twice")
    mod.Candidate = types.SimpleNamespace(kda=ScaledTwice)
    monkeypatch.setitem(sys.modules, "template_scaled_twice", mod)
    rc, rows = _gate(tmp_path, "template_scaled_twice:Candidate", "kda.chunked")
    assert rc == 1 and rows == {"kda.chunked": "fail"}
