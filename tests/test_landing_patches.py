"""The landing patches of scripts/patches/ apply to the committed tree, alone and in the orders a device script
applies them: a GPU verdict that passes must be able to land. Checked against HEAD through a scratch index
(`git apply --cached`), so neither the working tree nor the real index is touched."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATCHES = os.path.join(ROOT, "scripts", "patches")
# (what the device applies first, then what it applies on top). Since stop 64 (step 59 landed): b1's patch alone
ORDERS = [("step45b",)]

pytestmark = pytest.mark.skipif(
    shutil.which("git") is None or not os.path.isdir(os.path.join(ROOT, ".git")),
    reason="needs git and a git checkout of this repository (the patches apply to its committed tree)")


def _git(args, env):
    return subprocess.run(["git", *args], cwd=ROOT, env=env, capture_output=True, text=True)


@pytest.mark.parametrize("order", ORDERS, ids=["+".join(o) for o in ORDERS])
def test_the_patches_apply_in_the_device_scripts_order(order, tmp_path):
    env = dict(os.environ, GIT_INDEX_FILE=str(tmp_path / "index"))
    r = _git(["read-tree", "HEAD"], env)
    assert r.returncode == 0, r.stderr
    for name in order:
        r = _git(["apply", "--cached", os.path.join(PATCHES, f"{name}.patch")], env)
        assert r.returncode == 0, f"{name}.patch does not apply after {order[:order.index(name)]}: {r.stderr}"


def test_every_patch_is_in_an_order():
    names = {f[:-len(".patch")] for f in os.listdir(PATCHES) if f.endswith(".patch")}
    assert names == {n for o in ORDERS for n in o}, "a patch the device script never applies, or one gone"
