"""The candidate protocol's worked examples (examples/candidates/*.py, shown in docs/candidates.md) pass
the gate the document promises, and the document cannot drift from them or from the protocol.

Each example goes through `glmgate gate` in process, imported as a user's candidate is: by
`module:object` from the current directory (the examples folder). One cheap unit check (or two) per
example: the interpreter is slow, and the point is the wrapping, which any of its mechanism's checks
exercises. Asserted: the exit code, each check's status, and that its `covered` list names exactly
the candidate functions the example provides for that check.
"""
from __future__ import annotations

import ast
import inspect
import json
import pathlib
import re
import sys

import pytest

from gate import cli
from impl import registry
from pins import keep_pins

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "candidates"
DOC = ROOT / "docs" / "candidates.md"

# module -> (object, {check: (status, candidate functions it must have called)})
GATED = {
    "kda_fla_style": ("KDA", {"kda.chunked": ("pass", ["kda.chunked"])}),
    "dsa_split_rows": ("Candidate", {"dsa.index": ("pass", ["dsa.index_rows"])}),
    # section 13: only the optional index_paged; the contiguous indexer's check runs ours (NOT COVERED)
    "dsa_paged": ("Candidate", {"dsa.index_paged": ("pass", ["dsa.index_paged"]),
                                "dsa.index": ("not covered", [])}),
    "mla_head_first": ("Candidate", {"mla.absorbed": ("pass", ["mla.absorbed"])}),
    # section 15: a decode and the optional decode_graph (our persistent-buffer step over it)
    "kda_graph_step": ("Candidate", {"kda.graph_replay": ("pass", ["kda.decode_graph"])}),
    "mhc_mix_matrix": ("Candidate", {"mhc.write_back": ("pass", ["mhc.write_back"])}),
    "moe_gemm_only": ("Candidate", {"moe.forward": ("pass", ["moe.experts"])}),
    "nvfp4_vendor_layout": ("Candidate", {"nvfp4.quantize": ("pass", ["nvfp4.quantize"]),
                                          "nvfp4.dequantize": ("pass", ["nvfp4.dequantize",
                                                                        "nvfp4.dequantize_swizzled"])}),
    # the partial one: its decode runs; write_back is ours (NOT COVERED); it has no dsa at all (NOT RUN)
    "partial_two_mechanisms": ("Candidate", {"kda.decode": ("pass", ["kda.decode"]),
                                             "mhc.write_back": ("not covered", []),
                                             "dsa.index": ("not run", [])}),
}
# the planted bug of the document's section 11: module -> (object, the checks it runs, the one that
# must FAIL and the quantity that breaks there)
PLANTED = {"planted_bug_kda": ("KDA", ("kda.chunked", "kda.sublayer"), "kda.chunked", "boundary_states")}


@pytest.fixture
def from_examples(monkeypatch):
    """Run as a user would, from the folder holding the candidates, and leave sys.path as it was
    (the registry adds the current directory to it)."""
    monkeypatch.chdir(EXAMPLES)
    monkeypatch.setattr(sys, "path", list(sys.path))
    # an example's verdict holds on any case: kda.chunked keeps its packed pin (documents with an empty one, a
    # given state) and its head dim 32 one (two of the interpreter's K tiles) (tests/pins.py)
    keep_pins(monkeypatch, {"kda.chunked": [2, 3]})


def test_every_example_module_is_gated_here():
    """A new example without a row here would never be run."""
    assert sorted(p.stem for p in EXAMPLES.glob("*.py")) == sorted([*GATED, *PLANTED])


@pytest.mark.parametrize("module", sorted(GATED))
def test_example_passes_the_gate_and_its_functions_are_covered(module, from_examples, tmp_path):
    obj, expected = GATED[module]
    argv = ["gate", "--candidate", f"{module}:{obj}", "--examples", "1", "--json", str(tmp_path / "r.json")]
    for check in expected:
        argv += ["--check", check]
    rc = cli.main(argv)
    report = json.loads((tmp_path / "r.json").read_text())
    rows = {r["check"]: r for r in report["checks"]}
    assert rc == cli.EXIT_PASS, report
    assert sorted(rows) == sorted(expected), report
    for check, (status, covered) in expected.items():
        assert rows[check]["status"] == status, rows[check]
        assert sorted(rows[check]["candidate"]["covered"]) == covered, rows[check]
        if status == "pass":        # judged on examples, against a peer that ran the same ones
            assert rows[check]["candidate"]["examples"] >= 1 and rows[check]["peer"]["status"] == "pass"


def _own_bad_calls(impl):
    """(mechanism, BadCall row) of every row whose function the candidate itself provides."""
    from impl.compose import Composed
    from invariants.matrix import BAD_CALLS

    rows = []
    for mechanism, row in BAD_CALLS:
        ns, function = getattr(impl, mechanism), row.id.split("(")[0]
        own = ns.provided if isinstance(ns, Composed) else registry.FUNCTIONS[mechanism]
        if function in own:
            rows.append((mechanism, row))
    return rows


@pytest.mark.parametrize("module", sorted(GATED))
def test_example_refuses_the_bad_calls_of_its_functions(module, from_examples):
    """The document says each example passes the BAD_CALLS rows of its own functions (nothing in the
    gate holds a candidate to them, so this is the only place they are run on candidates)."""
    import torch

    from invariants.target import Target

    cand = Target(registry.get(f"{module}:{GATED[module][0]}"), "cpu", torch.float32)
    for mechanism, row in _own_bad_calls(cand.impl):
        with pytest.raises(ValueError, match=row.match):
            row.call(getattr(cand.impl, mechanism), cand)


def test_the_bad_call_rows_reach_the_examples(from_examples):
    """Most examples' functions have rows: an edit of the row ids that silently matched none of them
    would turn the test above into a no-op."""
    counts = {m: len(_own_bad_calls(registry.get(f"{m}:{obj}"))) for m, (obj, _) in GATED.items()}
    assert sum(n > 0 for n in counts.values()) >= 5, counts


@pytest.mark.parametrize("module", sorted(PLANTED))
def test_the_planted_bug_fails_where_the_document_says(module, from_examples, tmp_path):
    """Section 11 reads this failure: a broken contract (not a crash, exit 1) on the one quantity,
    with a repro line naming the candidate; the check its bug cannot reach still passes."""
    obj, checks, failing, quantity = PLANTED[module]
    argv = ["gate", "--candidate", f"{module}:{obj}", "--examples", "1", "--json", str(tmp_path / "r.json")]
    for check in checks:
        argv += ["--check", check]
    rc = cli.main(argv)
    rows = {r["check"]: r for r in json.loads((tmp_path / "r.json").read_text())["checks"]}
    assert rc == cli.EXIT_BROKEN, rows
    bad = rows[failing]
    assert bad["status"] == "fail" and not bad["candidate"]["crashed"], bad
    assert f"{failing}.{quantity} [kernel_replacement" in bad["note"], bad["note"]
    assert f'"impl":"{module}:{obj}"' in bad["candidate"]["repro"], bad["candidate"]["repro"]
    assert all(rows[c]["status"] == "pass" for c in checks if c != failing), rows


# ----------------------------------------------------------------------------- the document


def _blocks(lang: str) -> list[tuple[int, str]]:
    """(line number, text) of every fenced ```<lang> block of the document."""
    out, lines, i = [], DOC.read_text().splitlines(), 0
    while i < len(lines):
        if lines[i].strip() == f"```{lang}":
            start, i = i + 1, i + 1
            while lines[i].strip() != "```":
                i += 1
            out.append((start + 1, "\n".join(lines[start:i])))
        i += 1
    return out


# a block whose first line is this comment is an excerpt: consecutive lines of that example file
EXCERPT = re.compile(r"^# (examples/candidates/\w+\.py)\s*$")


def test_every_python_block_compiles():
    blocks = _blocks("python")
    assert len(blocks) >= len(GATED), "the examples are shown in ```python blocks"
    for line, text in blocks:
        compile(text, f"{DOC.name}:{line}", "exec")


def test_excerpts_are_verbatim_and_every_example_is_shown():
    shown = set()
    for line, text in _blocks("python"):
        first, _, body = text.partition("\n")
        m = EXCERPT.match(first)
        if not m:
            continue
        source = (ROOT / m.group(1)).read_text()
        assert body.strip() and body in source, f"{DOC.name}:{line}: not a verbatim excerpt of {m.group(1)}"
        shown.add(pathlib.Path(m.group(1)).stem)
    every = set(GATED) | set(PLANTED)
    assert shown == every, f"examples never shown in the document: {sorted(every - shown)}"


def _defines_a_namespace(text: str) -> bool:
    tree = ast.parse(text)
    return any(isinstance(n, (ast.ClassDef, ast.FunctionDef)) for n in ast.walk(tree))


def test_code_that_defines_a_candidate_is_an_excerpt_or_says_why_not():
    """A candidate written only in the document is code nothing runs: it must be an excerpt of an
    example, or say in its first line that it is a sketch (a feature the examples cannot show)."""
    for line, text in _blocks("python"):
        first = text.partition("\n")[0]
        if _defines_a_namespace(text):
            assert EXCERPT.match(first) or first.startswith("# sketch:"), f"{DOC.name}:{line}: {first!r}"


def test_the_documented_commands_name_candidates_that_load(from_examples):
    names = set(re.findall(r"--candidate ([\w.]+:\w+)", DOC.read_text()))
    examples = {m: spec[0] for m, spec in [*GATED.items(), *PLANTED.items()]}
    ours = {n for n in names if n.split(":")[0] in examples}
    assert ours >= {f"{m}:{obj}" for m, obj in examples.items()}, sorted(names)
    for name in ours:
        impl = registry.get(name)
        assert impl.name == name


def _plain(fn) -> str:
    """`name(a, b=1, *, c=None)`: the signature as the document writes it, without annotations."""
    sig = inspect.signature(fn)
    params = [p.replace(annotation=inspect.Parameter.empty) for p in sig.parameters.values()]
    return fn.__name__ + str(sig.replace(parameters=params, return_annotation=inspect.Signature.empty))


@pytest.mark.parametrize("mechanism", registry.MECHANISMS)
def test_the_document_gives_every_protocol_signature(mechanism):
    """The protocol is impl/<mechanism>.py's signatures (the optional ones too): each, exactly, in the document."""
    import importlib
    ns = importlib.import_module(f"impl.{mechanism}")
    doc = DOC.read_text()
    functions = registry.FUNCTIONS[mechanism] + registry.OPTIONAL_FUNCTIONS.get(mechanism, ())
    missing = [_plain(getattr(ns, f)) for f in functions if _plain(getattr(ns, f)) not in doc]
    assert not missing, f"docs/candidates.md lacks these signatures of impl/{mechanism}.py: {missing}"


def test_the_document_names_every_check():
    from invariants.matrix import CHECKS
    doc = DOC.read_text()
    assert not [c.name for c in CHECKS if f"`{c.name}`" not in doc]
