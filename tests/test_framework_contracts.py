"""The contracts layer itself: undeclared comparisons are refused, verdicts mean what they say."""
from __future__ import annotations

import pathlib
import re
import tomllib

import numpy as np
import pytest

from invariants import contracts as ct
from invariants.compare import metrics


def test_an_undeclared_comparison_is_refused_with_the_declared_alternatives():
    with pytest.raises(ct.UndeclaredContract, match=r"kda\.chunked\.logits.*declared for 'kda'"):
        ct.lookup("kda", "chunked", "logits")


def test_an_undeclared_dtype_is_refused():
    c = ct.lookup("kda", "chunked", "output")
    with pytest.raises(ct.UndeclaredContract, match="float16"):
        c.limit("float16", 1e-7)


def test_kernel_replacement_bound_is_k_times_baseline_plus_floor():
    c = ct.lookup("kda", "chunked", "output")
    ref = np.linspace(1, 2, 100)
    base = ref * (1 + 1e-6)
    v = ct.judge(c, "float32", ref * (1 + 2e-6), ref, base)
    assert v.limit == pytest.approx(c.k * 1e-6 + c.floor["float32"], rel=1e-6)
    assert v.ok
    assert not ct.judge(c, "float32", ref * 1.01, ref, base).ok


def test_a_nan_where_the_oracle_is_finite_breaks_every_contract():
    c = ct.lookup("kda", "chunked", "output")
    ref = np.ones(8)
    cand = ref.copy()
    cand[3] = np.nan
    v = ct.judge(c, "float32", cand, ref, ref)
    assert not v.ok and v.value == float("inf") and v.metrics.worst_index == (3,)


def test_a_nan_the_oracle_also_has_is_not_an_error():
    c = ct.lookup("kda", "packed", "output")
    ref = np.array([1.0, np.nan, 2.0])
    assert ct.judge(c, "float32", ref.copy(), ref, ref).ok


def test_a_broken_baseline_is_reported_as_such_not_blamed_on_the_candidate():
    c = ct.lookup("kda", "chunked", "output")
    with pytest.raises(ValueError, match="baseline itself"):
        ct.judge(c, "float32", np.ones(3), np.ones(3), np.array([1.0, np.nan, 1.0]))


def test_exact_contract_is_bitwise():
    c = ct.lookup("kda", "chunked", "rerun", "exact")
    a = np.array([1.0, 2.0])
    assert ct.judge(c, "float32", a, a.copy()).ok
    assert not ct.judge(c, "float32", a, a + np.array([0.0, 4.4e-16])).ok


def test_bench_bound_comes_from_the_table():
    assert ct.bench_bound("kda", "chunked", "output", "bfloat16") > 0
    with pytest.raises(ct.UndeclaredContract):
        ct.bench_bound("kda", "sublayer", "output", "bfloat16")


def test_metrics_report_the_worst_element():
    m = metrics(np.array([[1.0, 2.0], [3.0, 4.5]]), np.array([[1.0, 2.0], [3.0, 4.0]]))
    assert m.worst_index == (1, 1) and m.worst_candidate == 4.5 and m.worst_reference == 4.0
    assert m.rel_l2 == pytest.approx(0.5 / np.sqrt(30))


@pytest.mark.parametrize("text, match", [
    ('[[contract]]\nmechanism="kda"\npath="x"\nquantity="y"\nkind="nope"\nreason="r"', "kind"),
    ('[[contract]]\nmechanism="kda"\npath="x"\nquantity="y"\nkind="kernel_replacement"\nreason="r"', "k and floor"),
    ('[[contract]]\nmechanism="kda"\npath="x"\nkind="exact"\nreason="r"', "quantity"),
    ('[[contract]]\nmechanism="kda"\npath="x"\nquantity="y"\nkind="exact"\nreason="r"\n'
     '[[contract]]\nmechanism="kda"\npath="x"\nquantity="y"\nkind="exact"\nreason="r"', "twice"),
    ('[[contract]]\nmechanism="kda"\npath="x"\nquantity="y"\nkind="kernel_unit"\nreason="r"', "needs bound"),
], ids=["unknown kind", "kernel_replacement without k", "missing quantity", "declared twice",
        "kernel_unit without bound"])
@pytest.mark.parametrize("layout", ["file", "directory"])
def test_a_malformed_contracts_file_is_refused(tmp_path, text, match, layout):
    """One file loaded alone, or kda.toml in a directory: refused, naming the file and the entry."""
    if layout == "file":
        f, name = tmp_path / "c.toml", "c.toml"
    else:
        (tmp_path / "contracts.d").mkdir()
        f, name = tmp_path / "contracts.d" / "kda.toml", "contracts.d/kda.toml"
    f.write_text(text)
    with pytest.raises(ValueError, match=match) as e:
        ct.load(str(f if layout == "file" else f.parent))
    assert str(e.value).startswith(f"{name}: contract #")


# ----------------------------------------------------------------------------- contracts.d: a file per mechanism

def _contract(mechanism: str, quantity: str = "y") -> str:
    return (f'[[contract]]\nmechanism = "{mechanism}"\npath = "x"\nquantity = "{quantity}"\n'
            f'kind = "kernel_replacement"\nk = 2.0\nfloor = {{ float32 = 1e-5 }}\nreason = "r"\n')


def _directory(tmp_path, files: dict) -> str:
    d = tmp_path / "contracts.d"
    d.mkdir()
    for name, text in files.items():
        (d / name).write_text(text)
    return str(d)


DEFAULTS = ('[defaults]\nmetric = "rel_l2"\n[caps]\nkernel_replacement = { float32 = 1e-3 }\nreason = "r"\n'
            '[float64]\nsame_math = 1e-12\n')


def test_a_directory_is_loaded_as_one_table_of_all_its_files(tmp_path):
    d = _directory(tmp_path, {"defaults.toml": DEFAULTS, "kda.toml": _contract("kda"),
                              "dsa.toml": _contract("dsa") + "\n" + _contract("dsa", "z")})
    table = ct.load(d)
    assert set(table) == {("kda", "x", "y", "kernel_replacement"), ("dsa", "x", "y", "kernel_replacement"),
                          ("dsa", "x", "z", "kernel_replacement")}
    # defaults.toml's [caps] reaches the contracts of the other files
    assert all(c.cap == {"float32": 1e-3} for c in table.values())
    assert ct._parse(d)[1]["float64"] == {"same_math": 1e-12}


def test_a_contract_in_another_mechanisms_file_is_refused_naming_the_file(tmp_path):
    d = _directory(tmp_path, {"defaults.toml": DEFAULTS,
                              "dsa.toml": _contract("dsa") + "\n" + _contract("kda")})
    with pytest.raises(ValueError, match=r"contracts\.d/dsa\.toml: contract #1: mechanism 'kda'.*kda\.toml"):
        ct.load(d)


def test_a_contract_in_defaults_toml_is_refused(tmp_path):
    d = _directory(tmp_path, {"defaults.toml": DEFAULTS + _contract("kda")})
    with pytest.raises(ValueError, match=r"contracts\.d/defaults\.toml: declares 1 \[\[contract\]\]"):
        ct.load(d)


def test_a_table_declared_in_two_files_is_refused(tmp_path):
    d = _directory(tmp_path, {"defaults.toml": DEFAULTS,
                              "kda.toml": "[float64]\nsame_math = 1e-12\n" + _contract("kda")})
    with pytest.raises(ValueError, match=r"contracts\.d/kda\.toml: \[float64\] is already declared in "
                                         r"contracts\.d/defaults\.toml"):
        ct.load(d)


def test_the_same_contract_in_two_files_is_refused_naming_both(tmp_path):
    d = _directory(tmp_path, {"defaults.toml": DEFAULTS,
                              "kda.toml": _contract("dsa") + "\n" + _contract("kda")})
    (pathlib.Path(d) / "dsa.toml").write_text(_contract("dsa"))
    with pytest.raises(ValueError, match=r"contracts\.d/kda\.toml: contract #0: contract \('dsa', 'x', 'y', "
                                         r"'kernel_replacement'\) declared twice "
                                         r"\(also in contracts\.d/dsa\.toml\)"):
        ct.load(d)


def test_the_declared_contracts_load_one_file_per_mechanism():
    """The real directory: defaults.toml holds the tables and no contract, every other file only the
    contracts of its mechanism (load() refuses anything else), each file under the 600-line rule."""
    files = sorted(ct.CONTRACTS_DIR.glob("*.toml"))
    assert ct.CONTRACTS_DIR.name == "contracts.d" and (ct.CONTRACTS_DIR / ct.DEFAULTS_FILE) in files
    table = ct.load()
    seen = 0
    for f in files:
        with open(f, "rb") as fh:
            data = tomllib.load(fh)
        entries = data.get("contract", [])
        if f.name == ct.DEFAULTS_FILE:
            assert not entries and {"defaults", "caps", *ct.TOLERANCE_TABLES} <= set(data)
        else:
            assert entries and all(e["mechanism"] == f.stem for e in entries), f.name
            assert set(data) == {"contract"}, f"{f.name} declares tables: {set(data) - {'contract'}}"
        seen += len(entries)
        assert len(f.read_text().splitlines()) < 600, f.name
    assert {m for m, *_ in table} == {f.stem for f in files} - {"defaults"}
    assert seen and len(table) >= seen


def test_an_undeclared_comparison_names_the_file_it_belongs_in():
    with pytest.raises(ct.UndeclaredContract, match=r"invariants/contracts\.d/kda\.toml"):
        ct.lookup("kda", "chunked", "logits")
    with pytest.raises(ct.UndeclaredContract, match=r"invariants/contracts\.d/defaults\.toml \[float64\]"):
        ct.float64_tolerance("tight")
    with pytest.raises(ct.UndeclaredContract, match=r"invariants/contracts\.d/mhc\.toml"):
        ct.lookup("mhc", "reduce", "output", "kernel_unit").limit("bfloat16")


# ----------------------------------------------------------------------------- named float64 / float32 tolerances

TESTS = pathlib.Path(__file__).parent
ACCESSOR = {"float64": "float64_tolerance", "float32": "float32_tolerance"}


@pytest.mark.parametrize("table", ct.TOLERANCE_TABLES)
def test_every_declared_tolerance_is_read_by_some_test(table):
    """A name no test reads is a bound nobody holds: drop it or use it."""
    text = "\n".join(p.read_text() for p in TESTS.glob("test_*.py") if p.name != pathlib.Path(__file__).name)
    declared = ct.tolerances(table)
    assert declared, f"[{table}] declares nothing"
    unused = [n for n in declared if not re.search(rf"{ACCESSOR[table]}\(\s*[\"']{n}[\"']\s*\)", text)]
    assert not unused, f"[{table}] declares {unused}, which no test reads"


def test_a_tolerance_is_read_by_name_and_an_undeclared_name_is_refused():
    assert ct.float64_tolerance("same_math") == 1e-12
    assert ct.float32_tolerance("reordered_product") == 2.0 ** -22
    with pytest.raises(ct.UndeclaredContract, match=r"no float64 tolerance 'tight'.*declared: .*same_math"):
        ct.float64_tolerance("tight")
    with pytest.raises(ct.UndeclaredContract, match="float32"):
        ct.float32_tolerance("same_math")


@pytest.mark.parametrize("entry, match", [
    ("same_math = -1e-12", "finite number > 0"),
    ("same_math = 0.0", "finite number > 0"),
    ('same_math = "1e-12"', "finite number > 0"),
    ("same_math = true", "finite number > 0"),
    ("same_math = inf", "finite number > 0"),
    ("same_math = [1e-12]", "finite number > 0"),
], ids=["negative", "zero", "string", "bool", "inf", "array"])
@pytest.mark.parametrize("table", ct.TOLERANCE_TABLES)
def test_a_malformed_tolerance_is_refused_when_the_file_loads(tmp_path, table, entry, match):
    f = tmp_path / "c.toml"
    f.write_text(f"[{table}]\n{entry}\n")
    with pytest.raises(ValueError, match=rf"\[{table}\] same_math"):
        ct.load(str(f))


def test_a_unit_contract_judges_in_its_own_metric():
    """baseline_unit / kernel_unit: a fixed bound, no baseline; max_rel is np.allclose's rtol with atol 0."""
    c = ct.lookup("mhc", "coefficients_at_eps", "pre", "kernel_unit")
    ref = np.array([1e-6, 1.0, 0.0])
    assert ct.judge(c, "float32", ref * (1 + 0.5e-4), ref).ok
    assert not ct.judge(c, "float32", ref + np.array([1e-9, 0, 0]), ref).ok     # 1e-3 relative on a tiny entry
    assert not ct.judge(c, "float32", ref + np.array([0, 0, 1e-30]), ref).ok    # an exact 0 must stay 0
    with pytest.raises(AssertionError, match=r"mhc\.coefficients_at_eps\.pre\[kernel_unit\].*max_rel"):
        ct.assert_contract("mhc", "coefficients_at_eps", "pre", "kernel_unit", "float32", ref * 1.1, ref)


def test_an_unknown_metric_is_refused_when_the_file_loads(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('[[contract]]\nmechanism="kda"\npath="x"\nquantity="y"\nkind="kernel_unit"\nmetric="max_l3"\n'
                 'bound={float32=1e-5}\nreason="r"')
    with pytest.raises(ValueError, match="metric 'max_l3'"):
        ct.load(str(f))
