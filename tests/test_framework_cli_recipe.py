"""The CI recipe (examples/ci/glmgate.yml, docs/ci.md) cannot drift from the CLI: every `glmgate`
command it runs parses with the real argument parser, and every `--glmgate-*` pytest option it names
is one the plugin registers."""
from __future__ import annotations

import pathlib
import re
import shlex

import pytest

from gate import cli

ROOT = pathlib.Path(__file__).resolve().parent.parent
RECIPES = [ROOT / "examples" / "ci" / "glmgate.yml", ROOT / "docs" / "ci.md"]


def _commands(text: str, program: str) -> list[list[str]]:
    """Every command line starting with `program` (after `run:` or indentation), shell-split, the
    workflow's $CANDIDATE filled in."""
    out = []
    for line in text.splitlines():
        m = re.match(rf"\s*(?:- )?(?:run: )?({program} .*)$", line)
        if m:
            out.append(shlex.split(m.group(1).replace('"$CANDIDATE"', "pkg.mod:Candidate")))
    return out


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.name)
def test_every_glmgate_command_of_the_recipe_parses(path):
    commands = _commands(path.read_text(), "glmgate")
    assert commands, f"{path} runs no glmgate command"
    parser = cli.build_parser()
    for argv in commands:
        args = parser.parse_args(argv[1:])          # SystemExit(2) on an unknown flag: the test fails
        assert args.cmd in ("gate", "run"), argv


def test_the_workflow_gates_both_devices_and_keeps_every_report():
    text = RECIPES[0].read_text()
    gates = [a for a in _commands(text, "glmgate") if a[1] == "gate"]
    assert sorted(a[a.index("--device") + 1] for a in gates) == ["cpu", "cuda"]
    uploads = re.findall(r"^ {12}(\S+)$", text, re.M)      # the artifacts' path lists
    cached = re.findall(r"^ {10}path: (\S+)$", text, re.M)
    for a in gates:
        assert a[a.index("--failures") + 1] in cached and a[a.index("--failures") + 1] in uploads, a
        assert a[a.index("--junit") + 1] in uploads and a[a.index("--markdown") + 1] in uploads, a
    # the reports are published also when the gate failed
    assert text.count("if: always()") == 2 * len(gates)


def test_every_pytest_option_the_recipe_names_is_registered_by_the_plugin():
    from glmgate import pytest_plugin

    class Group:
        def __init__(self):
            self.names = set()

        def addoption(self, *names, **kwargs):
            self.names.update(names)

    class Parser:
        def __init__(self):
            self.group = Group()

        def getgroup(self, *args, **kwargs):
            return self.group

        def addini(self, *args, **kwargs):
            pass

    p = Parser()
    pytest_plugin.pytest_addoption(p)
    named = {o for path in RECIPES for o in re.findall(r"--glmgate-[a-z-]+", path.read_text())}
    assert named and named <= p.group.names, named - p.group.names
