"""scripts/whole_model_estimate.py: the estimate counts every layer of the full geometry once, by its
kind, at that kind's measured replay time, and refuses a replay file that lacks a kind the model has."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from oracle.config import Geometry

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "whole_model_estimate.py")


def _run(replay, out):
    return subprocess.run([sys.executable, SCRIPT, "--replay", str(replay), "--json", str(out)],
                          capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT})


def test_every_layer_is_counted_once_at_its_kinds_time(tmp_path):
    replay = tmp_path / "replay.json"
    times = {"kda+dense": 100.0, "kda+sparse": 200.0, "dsa-full+sparse": 400.0}
    replay.write_text(json.dumps({k: {"replay_us": v} for k, v in times.items()}))
    r = _run(replay, tmp_path / "est.json")
    assert r.returncode == 0, r.stderr
    est = json.loads((tmp_path / "est.json").read_text())
    assert est["estimate"] is True and "ESTIMATE" in r.stdout
    assert sum(row["layers"] for row in est["rows"]) == Geometry.preset("full").num_hidden_layers
    layers_us = sum(row["layers"] * times[row["kind"]] for row in est["rows"])
    assert abs(est["token_us"] - (layers_us + est["ends_us_floor_not_measured"])) < 1e-6


def test_a_replay_without_a_kind_of_the_model_is_refused(tmp_path):
    replay = tmp_path / "replay.json"
    replay.write_text(json.dumps({"kda+dense": {"replay_us": 1.0}}))
    r = _run(replay, tmp_path / "est.json")
    assert r.returncode == 2 and "no measured replay for layer kind" in r.stderr
