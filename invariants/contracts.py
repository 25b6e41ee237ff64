"""Declared numerical contracts (invariants/contracts.d/) and their evaluation.

The contracts live in one file per mechanism, `contracts.d/<mechanism>.toml` (its `[[contract]]`
entries only, each of that mechanism), beside `contracts.d/defaults.toml` (the kinds and metrics in its
header comment, `[defaults]`, `[caps]` and the named tolerances `[float64]`, `[float32]`); every file is
loaded and validated together. A comparison with no declared contract is refused (UndeclaredContract):
nothing is measured against a bound nobody wrote down.
"""
from __future__ import annotations

import functools
import pathlib
from typing import NamedTuple, Optional

import tomllib

from invariants.compare import METRICS, Metrics, bitwise_equal, check_axes, first_difference, metrics
from invariants.labels import label

# a directory, not `contracts/`: that would sit beside this module under the same name
CONTRACTS_DIR = pathlib.Path(__file__).with_name("contracts.d")
# the directory's file of tables ([defaults], [caps], [float64], [float32]); it holds no contract
DEFAULTS_FILE = "defaults.toml"
KINDS = ("kernel_replacement", "self_consistency", "exact", "bench_gate", "selection", "routing", "reference",
         "quantization_gate", "kernel_unit", "baseline_unit", "persisted")
# kinds whose limit is a fixed bound[dtype] (no baseline scales it)
BOUND_KINDS = ("self_consistency", "bench_gate", "reference", "kernel_unit", "baseline_unit", "persisted")
# the named tolerances of identities a test holds in one precision ([float64], [float32] of defaults.toml):
# no implementation is measured against them, only the same math computed twice
TOLERANCE_TABLES = ("float64", "float32")
# kinds judging a discrete decision tie-aware: `eps` per dtype is the score distance within which two
# choices are interchangeable (a legal flip); anything further apart is a failure
DECISION_KINDS = ("selection", "routing")
# a quantization_gate bounds four numbers per dtype (invariants/quant_gate.py): KLs from above, top-1 from below
GATE_FIELDS = ("mean_kl", "p99_kl", "max_kl", "top1")


class UndeclaredContract(LookupError):
    """A comparison was asked for that invariants/contracts.d/ does not declare."""


def declared_in(mechanism: Optional[str] = None, table: Optional[str] = None) -> str:
    """Where a declaration belongs: "invariants/contracts.d/kda.toml" (a contract of `mechanism`),
    "invariants/contracts.d/defaults.toml [float64]" (`table`), the directory with neither."""
    where = f"{CONTRACTS_DIR.parent.name}/{CONTRACTS_DIR.name}/"
    if table is not None:
        return f"{where}{DEFAULTS_FILE} [{table}]"
    return f"{where}{mechanism}.toml" if mechanism else where


class Contract(NamedTuple):
    mechanism: str
    path: str
    quantity: str
    kind: str
    metric: str
    k: float
    floor: dict
    bound: dict
    reason: str
    gate: dict = {}           # quantization_gate: {field: {dtype: bound}} for GATE_FIELDS, and "tie_eps"
    cap: dict = {}            # kernel_replacement: {dtype: the most baseline error a limit may take in}

    def tie_eps(self, dtype: str) -> float:
        """quantization_gate: the logit gap within which two top-1 choices are a legal flip."""
        t = self.gate.get("tie_eps", 0.0)
        if not isinstance(t, dict):
            return float(t)
        if dtype not in t:
            raise UndeclaredContract(f"contract {self.key}: no tie_eps declared for dtype {dtype!r} "
                                     f"(declared: {sorted(t)}) in {declared_in(self.mechanism)}")
        return float(t[dtype])

    def capped(self, dtype: str, baseline_err: float) -> bool:
        """True when the baseline's error exceeds its cap: an ill-conditioned example, whose limit
        takes the cap instead (a baseline that went astray must not loosen the bound)."""
        return self.kind == "kernel_replacement" and baseline_err > self._cap(dtype)

    def _cap(self, dtype: str) -> float:
        if dtype not in self.cap:
            raise UndeclaredContract(f"contract {self.key}: no baseline cap declared for dtype {dtype!r} "
                                     f"(declared: {sorted(self.cap)}) in {declared_in(table='caps')} "
                                     f"(or the contract's own `cap` in {declared_in(self.mechanism)})")
        return float(self.cap[dtype])

    def gate_bounds(self, dtype: str) -> dict:
        """{mean_kl, p99_kl, max_kl, top1} for this dtype (quantization_gate only)."""
        missing = [f for f in GATE_FIELDS if dtype not in self.gate.get(f, {})]
        if missing:
            raise UndeclaredContract(f"contract {self.key}: no {missing} declared for dtype {dtype!r} "
                                     f"in {declared_in(self.mechanism)}")
        return {f: float(self.gate[f][dtype]) for f in GATE_FIELDS}

    def limit(self, dtype: str, baseline_err: Optional[float] = None, held_err: Optional[float] = None) -> float:
        """The bound for this dtype (kernel_replacement: k · min(baseline error, cap) + floor).

        held_err: exact arithmetic's error on the inputs as the dtype holds them. The cap never takes the
        limit below k · held_err: that error is the example's own conditioning (no implementation in this
        dtype can beat it), not a baseline gone astray, which is what the cap is for."""
        table = self.floor if self.kind == "kernel_replacement" else self.bound
        if dtype not in table:
            raise UndeclaredContract(
                f"contract {self.key}: no {'floor' if self.kind == 'kernel_replacement' else 'bound'} "
                f"declared for dtype {dtype!r} (declared: {sorted(table)}) in {declared_in(self.mechanism)}")
        if self.kind == "kernel_replacement":
            if baseline_err is None:
                raise ValueError(f"contract {self.key}: kernel_replacement needs the baseline's error")
            return self.k * max(min(baseline_err, self._cap(dtype)), held_err or 0.0) + table[dtype]
        if self.kind == "self_consistency":
            # two paths of one implementation differ by their roundings: no closer than exact arithmetic
            # differs from itself when only the inputs are rounded (Comparison.conditioning)
            return max(table[dtype], held_err or 0.0)
        return table[dtype]

    @property
    def key(self) -> str:
        return f"{self.mechanism}.{self.path}.{self.quantity}[{self.kind}]"


def _as_list(v):
    return v if isinstance(v, list) else [v]


def load(path: Optional[str] = None) -> dict:
    """{(mechanism, path, quantity, kind): Contract} from invariants/contracts.d/ (or `path`: a directory
    of such files, or one file holding everything), validated."""
    return _parse(path)[0]


@functools.lru_cache(maxsize=None)
def _parse(path: Optional[str] = None) -> tuple:
    """(contracts, {table: {name: tolerance}}): every file validated at once, so a malformed tolerance
    table is refused as early as a malformed contract.

    `path` (default CONTRACTS_DIR): a directory, whose `*.toml` files are read in sorted order and merged,
    or a single file. In a directory each table (`[defaults]`, `[caps]`, `[float64]`, ...) is declared by
    one file only, `defaults.toml` holds no contract, and every contract of `<mechanism>.toml` is of that
    mechanism; a contract key declared twice is refused, in one file or across files.
    """
    root = pathlib.Path(path) if path else CONTRACTS_DIR
    is_dir = root.is_dir()
    files = sorted(root.glob("*.toml")) if is_dir else [root]
    if not files:
        raise ValueError(f"{root}: no *.toml contracts file in the directory")
    tables: dict = {}
    origin: dict = {}      # table -> the file that declares it
    entries = []           # (file, index in that file, entry)
    files_contracts = []   # (file, its stem, its entries)
    for f in files:
        name = f"{root.name}/{f.name}" if is_dir else f.name
        with open(f, "rb") as fh:
            data = tomllib.load(fh)
        for key, value in data.items():
            if key == "contract":
                continue
            if key in origin:
                raise ValueError(f"{name}: [{key}] is already declared in {origin[key]}; "
                                 f"each table is declared in one file only")
            tables[key], origin[key] = value, name
        contracts = data.get("contract", [])
        if not isinstance(contracts, list):
            raise ValueError(f"{name}: contracts are [[contract]] entries (an array of tables), "
                             f"not a [contract] table")
        entries += [(name, i, e) for i, e in enumerate(contracts)]
        files_contracts.append((name, f.stem, contracts))
    tolerances = {t: _load_tolerances(origin.get(t, root.name), t, tables.get(t, {}))
                  for t in TOLERANCE_TABLES}
    table = _load_contracts(entries, tables, origin)
    if is_dir:
        # after the entries are validated (every one has a mechanism) and a key declared in two files is
        # refused naming both
        for name, stem, contracts in files_contracts:
            _check_file_mechanism(name, stem, contracts)
    return table, tolerances


def _check_file_mechanism(name: str, stem: str, contracts: list) -> None:
    """In a directory: defaults.toml declares no contract, `<mechanism>.toml` only contracts of
    `mechanism`."""
    if stem == pathlib.Path(DEFAULTS_FILE).stem:
        if contracts:
            raise ValueError(f"{name}: declares {len(contracts)} [[contract]] entries; {DEFAULTS_FILE} holds "
                             f"only tables, a contract goes in <mechanism>.toml")
        return
    for i, e in enumerate(contracts):
        if e["mechanism"] != stem:
            raise ValueError(f"{name}: contract #{i}: mechanism {e['mechanism']!r} in the file of mechanism "
                             f"{stem!r}; it belongs in {e['mechanism']}.toml")


def _load_contracts(entries: list, tables: dict, origin: dict) -> dict:
    default_metric = tables.get("defaults", {}).get("metric", "rel_l2")
    caps = _load_caps(origin.get("caps", ""), tables.get("caps", {}))
    table = {}
    where = {}             # contract key -> the file that declares it
    for name, i, e in entries:
        for field in ("mechanism", "path", "quantity", "kind", "reason"):
            if field not in e:
                raise ValueError(f"{name}: contract #{i} has no {field!r}")
        if e["kind"] not in KINDS:
            raise ValueError(f"{name}: contract #{i}: kind {e['kind']!r} not in {KINDS}")
        if e["kind"] == "kernel_replacement" and ("k" not in e or "floor" not in e):
            raise ValueError(f"{name}: contract #{i}: kernel_replacement needs k and floor")
        if e.get("metric", default_metric) not in METRICS:
            raise ValueError(f"{name}: contract #{i}: metric {e.get('metric')!r} not in {METRICS}")
        if e["kind"] in BOUND_KINDS and "bound" not in e:
            raise ValueError(f"{name}: contract #{i}: {e['kind']} needs bound")
        if e["kind"] in DECISION_KINDS and "eps" not in e:
            raise ValueError(f"{name}: contract #{i}: {e['kind']} needs eps (the score tie tolerance)")
        if e["kind"] == "quantization_gate":
            _check_gate(name, i, e)
        for p in _as_list(e["path"]):
            for q in _as_list(e["quantity"]):
                key = (e["mechanism"], p, q, e["kind"])
                if key in table:
                    also = "the same file" if where[key] == name else where[key]
                    raise ValueError(f"{name}: contract #{i}: contract {key} declared twice (also in {also})")
                where[key] = name
                table[key] = Contract(e["mechanism"], p, q, e["kind"], e.get("metric", default_metric),
                                      float(e.get("k", 0.0)), dict(e.get("floor", {})),
                                      dict(e.get("bound", e.get("eps", {}))), e["reason"],
                                      {f: (dict(e[f]) if isinstance(e[f], dict) else float(e[f]))
                                       for f in (*GATE_FIELDS, "tie_eps") if f in e},
                                      dict(e.get("cap", caps.get(e["kind"], {}))))
    return table


def _load_tolerances(name: str, table: str, entries: dict) -> dict:
    """[float64] / [float32]: {name: tolerance}, each a finite number > 0 (0 would be `exact`; a
    negative one could never hold)."""
    if not isinstance(entries, dict):
        raise ValueError(f"{name}: [{table}] must be a table of named tolerances, got {entries!r}")
    for k, v in entries.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < float("inf"):
            raise ValueError(f"{name}: [{table}] {k} = {v!r}: a tolerance must be a finite number > 0")
    return {k: float(v) for k, v in entries.items()}


def _tolerance(table: str, name: str) -> float:
    declared = _parse()[1][table]
    if name not in declared:
        raise UndeclaredContract(f"no {table} tolerance {name!r} declared in {declared_in(table=table)}; "
                                 f"declared: {', '.join(sorted(declared)) or 'nothing'}")
    return declared[name]


def float64_tolerance(name: str) -> float:
    """The named tolerance of a float64 identity (two orderings of the same float64 math) from [float64]."""
    return _tolerance("float64", name)


def float32_tolerance(name: str) -> float:
    """The named tolerance of a float32 identity of the oracle's own float32 math (NVFP4 scales) from [float32]."""
    return _tolerance("float32", name)


def tolerances(table: str = "float64") -> dict:
    """Every name declared in [table]: {name: tolerance}."""
    return dict(_parse()[1][table])


def _load_caps(name: str, caps: dict) -> dict:
    """[caps]: {kind: {dtype: cap}} for the baseline-relative kinds (kernel_replacement), each with a
    reason; every dtype a kernel_replacement floor declares must have a cap (checked on use)."""
    out = {}
    for kind, table in caps.items():
        if kind == "reason":
            continue
        if kind != "kernel_replacement":
            raise ValueError(f"{name}: [caps] {kind!r}: only kernel_replacement limits scale with a baseline")
        if not isinstance(table, dict) or not all(isinstance(v, (int, float)) and v > 0 for v in table.values()):
            raise ValueError(f"{name}: [caps] {kind} must be a table {{dtype = cap > 0}}, got {table!r}")
        out[kind] = dict(table)
    if out and "reason" not in caps:
        raise ValueError(f"{name}: [caps] needs a reason")
    return out


def _check_gate(name: str, i: int, e: dict) -> None:
    """A quantization_gate needs the four GATE_FIELDS as {dtype: value} tables over the same dtypes,
    KL bounds >= 0 and top-1 in [0, 1]; tie_eps (logit units, default 0) is optional."""
    missing = [f for f in GATE_FIELDS if f not in e]
    if missing:
        raise ValueError(f"{name}: contract #{i}: quantization_gate needs {list(GATE_FIELDS)}, missing {missing}")
    dtypes = None
    for f in GATE_FIELDS:
        t = e[f]
        if not isinstance(t, dict) or not t:
            raise ValueError(f"{name}: contract #{i}: {f} must be a table {{dtype = bound}}, got {t!r}")
        if dtypes is not None and set(t) != dtypes:
            raise ValueError(f"{name}: contract #{i}: {f} declares dtypes {sorted(t)}, expected {sorted(dtypes)}")
        dtypes = set(t)
        for d, v in t.items():
            ok = 0.0 <= v <= 1.0 if f == "top1" else v >= 0.0
            if not isinstance(v, (int, float)) or not ok:
                raise ValueError(f"{name}: contract #{i}: {f}[{d}] = {v!r} out of range "
                                 f"({'[0, 1]' if f == 'top1' else '>= 0'})")
    t = e.get("tie_eps", 0.0)
    if any(float(v) < 0 for v in (t.values() if isinstance(t, dict) else [t])):
        raise ValueError(f"{name}: contract #{i}: tie_eps must be >= 0")


def lookup(mechanism: str, path: str, quantity: str, kind: str = "kernel_replacement") -> Contract:
    table = load()
    key = (mechanism, path, quantity, kind)
    if key not in table:
        near = sorted(f"{m}.{p}.{q}[{k}]" for (m, p, q, k) in table if m == mechanism)
        raise UndeclaredContract(
            f"no contract declared for {mechanism}.{path}.{quantity}[{kind}] in "
            f"{declared_in(mechanism)}; declared for {mechanism!r}: {', '.join(near) or 'nothing'}")
    return table[key]


def bench_bound(mechanism: str, path: str, quantity: str, dtype: str) -> float:
    """The rel-L2 bound a benchmark must meet before it may time a kernel."""
    return lookup(mechanism, path, quantity, "bench_gate").limit(dtype)


class Verdict(NamedTuple):
    contract: Contract
    dtype: str
    value: float              # the gated metric (inf on a non-finite mismatch)
    limit: float
    metrics: Optional[Metrics]
    baseline_err: Optional[float]
    detail: str = ""
    flips: int = 0                # legal decision differences (ties within eps) seen in this comparison
    ill_conditioned: bool = False  # the baseline's error exceeded its cap: the limit took the cap
    axes: tuple = ()              # names of the compared arrays' dimensions (Comparison.axes), for messages
    held_err: Optional[float] = None  # the held reference's error (exact arithmetic on the held values)

    @property
    def ok(self) -> bool:
        return self.value <= self.limit

    @property
    def ratio(self) -> float:
        """value / limit: > 1 is a broken contract (Hypothesis targets this)."""
        if self.limit <= 0:
            return 0.0 if self.value <= 0 else float("inf")
        return self.value / self.limit


def judge(contract: Contract, dtype: str, candidate, reference, baseline=None, baseline_reference=None,
          held_reference=None, axes: tuple = (), conditioning=None) -> Verdict:
    """Evaluate one comparison under its contract (see the kinds in contracts.d/defaults.toml).

    baseline_reference: what the baseline's error is measured against when it differs from the
    candidate's reference (the oracle re-run with the BASELINE's discrete decisions); default reference.
    held_reference: the oracle on the inputs as the working dtype holds them; the baseline's error is
    taken as at least its distance to `reference` (the error exact arithmetic makes from those inputs).
    axes: a name per dimension of `reference` (compare.Comparison.axes): the first differing or the worst
    element is named in those terms.
    conditioning: (held, exact) oracle outputs for a self_consistency comparison (compare.Comparison.conditioning):
    their distance is a floor under the bound, reported as the held reference's error.
    """
    check_axes(axes, tuple(getattr(reference, "shape", ())), contract.key)
    if contract.kind == "exact":
        same = bitwise_equal(candidate, reference)
        where = " on rerun" if contract.quantity == "rerun" else ""
        detail = "" if same else f"NOT bitwise equal{where}: {first_difference(candidate, reference, axes)}"
        return Verdict(contract, dtype, 0.0 if same else float("inf"), 0.0, None, None, detail, axes=axes)
    if contract.kind == "quantization_gate":
        return judge_gate(contract, dtype, candidate, reference)
    cs, rs = tuple(getattr(candidate, "shape", ())), tuple(getattr(reference, "shape", ()))
    if cs != rs:
        # a different shape (e.g. another number of kept pools) is a broken contract, not a crash
        return Verdict(contract, dtype, float("inf"), 0.0, None, None, f"shape {cs} vs oracle {rs}")
    m = metrics(candidate, reference)
    base = held = None
    if contract.kind == "kernel_replacement":
        if baseline is None:
            raise ValueError(f"{contract.key}: a kernel_replacement comparison needs a baseline")
        bm = metrics(baseline, reference if baseline_reference is None else baseline_reference)
        base = bm.get(contract.metric)
        if base == float("inf"):
            raise ValueError(f"{contract.key}: the baseline itself has a non-finite mismatch "
                             f"at {bm.worst_index}: the baseline is broken, not the candidate")
        if held_reference is not None:
            held = metrics(held_reference, reference).get(contract.metric)
            if held > base:
                label("baseline closer than exact arithmetic on the rounded inputs: the latter sets the limit")
                base = held
    if contract.kind == "self_consistency":
        held = None if conditioning is None else metrics(conditioning[0], conditioning[1]).get(contract.metric)
        ill = held is not None and held > contract.limit(dtype)
        if ill:
            label("ill-conditioned inputs: exact arithmetic on the rounded inputs errs above the self-consistency bound")
        return Verdict(contract, dtype, m.get(contract.metric), contract.limit(dtype, held_err=held), m, None,
                       ill_conditioned=ill, axes=axes, held_err=held)
    ill = base is not None and contract.capped(dtype, base)
    if ill:
        label("ill-conditioned: baseline error above its cap")
    if held is not None and contract.capped(dtype, held):
        label("ill-conditioned inputs: exact arithmetic on the rounded inputs errs above the cap")
    return Verdict(contract, dtype, m.get(contract.metric), contract.limit(dtype, base, held), m, base,
                   ill_conditioned=ill, axes=axes, held_err=held)


def judge_gate(contract: Contract, dtype: str, candidate, reference) -> Verdict:
    """Logits under a `quantization_gate`: value = the worst of mean/p99/max KL over their bounds and
    (1 - top1) over (1 - its bound); limit 1 (so `ratio` is that worst fraction of the budget)."""
    from invariants.quant_gate import gate_metrics

    b = contract.gate_bounds(dtype)
    m = gate_metrics(reference, candidate, contract.tie_eps(dtype))
    if m.ties:
        label("legal top-1 flip (reference top-2 gap within tie_eps)")

    def frac(v, bound):
        return v / bound if bound > 0 else (0.0 if v <= 0 else float("inf"))
    value = max(frac(m.mean_kl, b["mean_kl"]), frac(m.p99_kl, b["p99_kl"]), frac(m.max_kl, b["max_kl"]),
                frac(1.0 - m.top1, 1.0 - b["top1"]))
    detail = (f"{m.line()} (bounds: mean {b['mean_kl']:g}, p99 {b['p99_kl']:g}, max {b['max_kl']:g}, "
              f"top-1 >= {100 * b['top1']:g}% tie-aware within {contract.tie_eps(dtype):g} logits; "
              f"{m.ties} legal flips); worst fraction of the budget {value:.3g}")
    return Verdict(contract, dtype, value, 1.0, None, None, detail, flips=m.ties)


def judge_decision(contract: Contract, dtype: str, candidate, reference, where: str = "") -> Verdict:
    """A discrete decision under a `selection` or `routing` contract, tie-aware within eps[dtype].

    selection: `reference` is (oracle Selection, token_pool [B, T]), see compare.compare_selection;
    routing: `reference` is a compare.RoutingReference, see compare.compare_experts. A difference is
    legal only where the oracle's own scores tie within eps (counted as flips), else a failure.
    """
    from invariants.compare import compare_experts, compare_selection

    eps = contract.limit(dtype)
    if contract.kind == "selection":
        sel, tpool = reference
        r = compare_selection(candidate, sel.indices, sel.scores, sel.candidate, sel.k_sel, tpool, eps,
                              getattr(sel, "scale", None))
        unit, what = "query rows", "selection"
    else:
        r = compare_experts(candidate, reference, eps)
        unit, what = "tokens", "expert choice"
    if r.tie_rows:
        label(f"legal {what} flip (oracle scores tied within eps)")
    at = f"{where}: " if where else ""
    detail = (f"{at}{r.rows} {unit}, {r.tie_rows} legal flips within eps {eps:g}" if r.ok
              else f"{at}{_decision_row(contract.kind, r.first_bad)}: {r.reason}")
    return Verdict(contract, dtype, 0.0 if r.ok else float("inf"), 0.0, None, None, detail, flips=r.tie_rows)


def _decision_row(kind: str, first_bad) -> str:
    """The row a decision first differs in: "query 5 (batch 1)" (selection: (b, s)), "token 3" (routing)."""
    from invariants.compare import name_index

    if first_bad is None:
        return "query" if kind == "selection" else "token"
    return name_index(first_bad, ("batch", "query") if kind == "selection" else ("token",))


def judge_selection(contract: Contract, dtype: str, candidate, reference) -> Verdict:
    """A selection under a `selection` contract (judge_decision)."""
    return judge_decision(contract, dtype, candidate, reference)


def assert_contract(mechanism: str, path: str, quantity: str, kind: str, dtype: str, candidate, reference,
                    baseline=None, what: str = "") -> Verdict:
    """A hand-written test's comparison judged under its declared contract (lookup + judge, as
    matrix.evaluate does); AssertionError names the contract, what was compared, the metric against
    its limit and the worst element."""
    c = lookup(mechanism, path, quantity, kind)
    v = judge(c, dtype, candidate, reference, baseline)
    if not v.ok:
        m = v.metrics
        at = "" if m is None else (f"; worst at {m.worst_index}: candidate {m.worst_candidate:.9g} vs "
                                   f"reference {m.worst_reference:.9g}")
        base = "" if v.baseline_err is None else f" (baseline {v.baseline_err:.3g})"
        raise AssertionError(f"{c.key} [{dtype}]{' ' + what if what else ''}: {c.metric} {v.value:.3g} > "
                             f"limit {v.limit:.3g}{base}{at}{' ' + v.detail if v.detail else ''}")
    return v


def assert_reference(mechanism: str, what: str, oracle_value, reference_value, dtype: str = "float64",
                     quantity: str = "output") -> None:
    """The oracle against the published reference under the `reference` contract; AssertionError names
    the mechanism, what was compared, the metric, the bound and the worst element."""
    c = lookup(mechanism, "reference", quantity, "reference")
    m = metrics(oracle_value, reference_value)
    value, bound = m.get(c.metric), c.limit(dtype)
    if not value <= bound:
        raise AssertionError(
            f"{mechanism} reference cross-check, {what}: {c.metric} {value:.3g} > {bound:g}; worst at "
            f"{m.worst_index}: reference {m.worst_reference:.9g} vs oracle {m.worst_candidate:.9g}")


def judge_comparison(contract: Contract, dtype: str, cmp) -> Verdict:
    """One invariants.compare.Comparison under its contract: a discrete decision tie-aware
    (judge_decision), anything else by its metric (judge), its `where` leading the detail."""
    if cmp.kind in DECISION_KINDS:
        return judge_decision(contract, dtype, cmp.candidate, cmp.reference, cmp.where)
    v = judge(contract, dtype, cmp.candidate, cmp.reference, cmp.baseline, cmp.baseline_reference,
              cmp.held_reference, cmp.axes, cmp.conditioning)
    return v._replace(detail=f"{cmp.where}: {v.detail}" if cmp.where and v.detail else (cmp.where or v.detail))
