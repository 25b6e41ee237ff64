"""forward_packed (oracle/model.py, impl/model.py) against each document run alone (SERVING.md B4 P4,
ARCHITECTURE.md "PACKED").

A packed batch is a flat token stream cut by cu_seqlens into documents, each continuing its own
batch-1 HybridState (empty, or a prefix already prefilled): prefill chunks, 1-token decode rows
mid-batch and zero-length rows (a request scheduled with no tokens) in one forward. Bounds are the
model contracts of invariants/contracts.d/model.toml:

- oracle packed == oracle alone: model.oracle_packed.*[self_consistency] (logits and every state array)
- impl packed == impl alone: model.packed.*[self_consistency] (float32: the kda "packed" path's bound)
- impl packed vs oracle alone: model.packed.*[kernel_replacement], the torch backend packed as baseline
- a zero-length document's state comes back bitwise equal; no input state is mutated
- a NaN poisoned into one document's state stays there: every other document stays finite and equal
  to its run alone, and the poisoned one's logits are NaN (the poison did reach it)

The documents are packed in a drawn order, so "equal to alone" in any order is order irrelevance.
Prefix states are built by the oracle and handed to impl converted (HybridState.from_oracle), so
impl runs only the packed step and the alone steps (the Triton interpreter costs ~0.3 s per token).
"""
from __future__ import annotations

import dataclasses
import functools
import tempfile

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import impl.model as im
import oracle.model as om
from invariants.contracts import assert_contract
from invariants.profiles import default_profile
from impl.state import HybridState
from oracle.checkpoint import write_random
from oracle.types import DSACache, KDAState
from test_model import _geometry

# generated examples per property (the @example rows run on top): the interpreter's cost bounds ci
# (ci 3 until stop 41: CI's 15-minute budget; the @example rows carry the zero-length and 1-token shapes)
EXAMPLES = {"dev": 3, "ci": 2, "nightly": 60, "gpu": 20}.get(default_profile(), 3)
SETTINGS = settings(settings.default, max_examples=EXAMPLES, deadline=None)


@functools.lru_cache(maxsize=1)
def _models():
    d = write_random(tempfile.mkdtemp(prefix="glmgate-packed-"), _geometry(), seed=3)
    return om.load(d), im.load(d), im.load(d, backend="torch")


@dataclasses.dataclass(frozen=True)
class Doc:
    prefix: int          # tokens already in the document's state (0 = empty state)
    step: int            # tokens of this step (0 = a zero-length row)


@st.composite
def packed_docs(draw, max_docs: int = 4):
    """(documents, packing order, seed): at least one document has tokens this step."""
    docs = draw(st.lists(st.builds(Doc, st.integers(0, 5), st.integers(0, 3)), min_size=1, max_size=max_docs)
                .filter(lambda ds: any(d.step for d in ds)))
    order = draw(st.permutations(range(len(docs))))
    return tuple(docs), tuple(order), draw(st.integers(0, 2**16))


def _tokens(docs, seed):
    """(prefix ids, step ids) of every document."""
    rng = np.random.default_rng(seed)
    V = _geometry().vocab_size
    return [(rng.integers(0, V, d.prefix), rng.integers(0, V, d.step)) for d in docs]


def _prefix_states(toks):
    """The oracle state after each prefix (None for an empty one)."""
    o = _models()[0]
    return [None if len(p) == 0 else o.forward(p[None])[1] for p, _ in toks]


def _impl_states(states):
    return [None if s is None else HybridState.from_oracle(s) for s in states]


def _packed(model, toks, states, order):
    """forward_packed over the documents in `order`; returns per document (in document order)
    (logits [len, V], state)."""
    ids = np.concatenate([toks[i][1] for i in order]).astype(np.int64)
    cu = np.cumsum([0] + [len(toks[i][1]) for i in order])
    logits, new = model.forward_packed(ids, cu, [states[i] for i in order])
    out = [None] * len(order)
    for j, i in enumerate(order):
        out[i] = (logits[cu[j]:cu[j + 1]], new[j])
    return out


def _alone(model, toks, states):
    """Each document with tokens stepped alone through forward: (logits [len, V], state) or None."""
    out = []
    for (_, step), s in zip(toks, states):
        if len(step) == 0:
            out.append(None)
            continue
        logits, new = model.forward(step[None], state=s)
        out.append((logits[0], new))
    return out


def _arrays(state):
    return [(f"L{i}.{f}", a) for i, e in enumerate(state.layers) if e is not None
            for f, a in zip(e._fields, e) if a is not None]


# a cached array's field -> the model contracts' quantity
QUANTITY = {"recurrent": "kda_recurrent", "conv": "kda_conv", "latent": "dsa_latent", "index_rows": "index_rows",
            "pooled": "pooled_keys"}
ORACLE, IMPL = ("oracle_packed", "float64"), ("packed", "float32")


def _compare(tag, got, ref, who, base=None):
    """Logits and every state array under the model contracts of path who[0] in dtype who[1]:
    self_consistency, or kernel_replacement with `base` as the baseline when it is given."""
    (gl, gs), (rl, rs) = got, ref
    assert gs.seq_len == rs.seq_len, f"{tag}: seq_len {gs.seq_len} vs {rs.seq_len}"
    pairs = [("logits", gl, rl, None if base is None else base[0])]
    names = [n for n, _ in _arrays(rs)]
    assert [n for n, _ in _arrays(gs)] == names, f"{tag}: cached arrays differ"
    bs = None if base is None else dict(_arrays(base[1]))
    pairs += [(n, g, r, None if bs is None else bs[n]) for (n, g), (_, r) in zip(_arrays(gs), _arrays(rs))]
    path, dtype = who
    kind = "self_consistency" if base is None else "kernel_replacement"
    for name, g, r, b in pairs:
        q = "logits" if name == "logits" else QUANTITY[name.split(".", 1)[1]]
        assert_contract("model", path, q, kind, dtype, g, r, b, f"{tag} {name}")


def _check_passthrough(tag, docs, states, results):
    """A zero-length document's state comes back bitwise equal (an empty one stays empty)."""
    for i, d in enumerate(docs):
        if d.step:
            continue
        new = results[i][1]
        if states[i] is None:
            assert new.seq_len == 0 and all(e is None for e in new.layers), f"{tag} doc {i}: empty state filled"
        else:
            assert new.equal(states[i]), f"{tag} doc {i}: zero-length document's state changed"


# vllm#51039's leak test shape in small: a prefill, a 1-token decode row mid-batch, a zero-length row
@example(case=((Doc(0, 3), Doc(4, 1), Doc(3, 0), Doc(0, 2)), (0, 1, 2, 3), 0))
@example(case=((Doc(2, 0), Doc(5, 1), Doc(0, 0)), (2, 1, 0), 1))        # zero-length rows at both ends
@SETTINGS
@given(case=packed_docs())
def test_packed_step_equals_each_document_alone(case):
    docs, order, seed = case
    o, m, t = _models()
    toks = _tokens(docs, seed)
    ostates = _prefix_states(toks)
    istates, tstates = _impl_states(ostates), _impl_states(ostates)
    kept = [None if s is None else s.snapshot() for s in ostates + istates]

    op, oa = _packed(o, toks, ostates, order), _alone(o, toks, ostates)
    ip, ia = _packed(m, toks, istates, order), _alone(m, toks, istates)
    tp = _packed(t, toks, tstates, order)
    for i, d in enumerate(docs):
        if not d.step:
            continue
        _compare(f"oracle doc {i} packed vs alone", op[i], oa[i], ORACLE)
        _compare(f"impl doc {i} packed vs alone", ip[i], ia[i], IMPL)
        _compare(f"impl doc {i} packed vs oracle alone", ip[i], oa[i], IMPL, base=tp[i])
    _check_passthrough("oracle", docs, ostates, op)
    _check_passthrough("impl", docs, istates, ip)
    for s, k in zip(ostates + istates, kept):
        assert s is None or s.equal(k), "forward_packed mutated an input state"


def _last_kda_layer():
    # a NaN reaching a later KDA layer's gate is refused by the NaN policy (NOTES: a NaN g is never
    # data), so the poison sits in the last KDA layer's state and in the DSA caches after it
    return max(i for i, t in enumerate(_geometry().layer_types) if t == "linear_attention")


def _poison(state, xp_nan):
    """A copy of `state` with NaN in the last KDA layer's recurrent state and conv window and in
    the latent cache of every DSA layer after it."""
    s = state.snapshot()
    last = _last_kda_layer()
    for i, e in enumerate(s.layers):
        if i == last:
            s.layers[i] = KDAState(xp_nan(e.recurrent), xp_nan(e.conv))
        elif i > last and isinstance(e, DSACache):
            s.layers[i] = DSACache(xp_nan(e.latent), e.index_rows)
    return s


def _nan_like(a):
    out = a.copy() if isinstance(a, np.ndarray) else a.clone()
    out[..., 0] = float("nan")
    return out


@example(case=((Doc(3, 2), Doc(4, 1), Doc(3, 0), Doc(2, 2)), (0, 1, 2, 3), 0), victim=1)
@SETTINGS
@given(case=packed_docs(), victim=st.integers(0, 3))
def test_nan_in_one_document_stays_there(case, victim):
    docs, order, seed = case
    victim %= len(docs)
    docs = tuple(dataclasses.replace(d, prefix=max(d.prefix, 1), step=max(d.step, 1)) if i == victim else d
                 for i, d in enumerate(docs))
    o, m, _ = _models()
    toks = _tokens(docs, seed)
    ostates = _prefix_states(toks)
    ostates[victim] = _poison(ostates[victim], _nan_like)
    istates = _impl_states(ostates)
    for model, states, who in ((o, ostates, ORACLE), (m, istates, IMPL)):
        packed, alone = _packed(model, toks, states, order), _alone(model, toks, states)
        assert np.isnan(np.asarray(packed[victim][0], dtype=np.float64) if isinstance(packed[victim][0], np.ndarray)
                        else packed[victim][0].double().numpy()).all(), "the poison never reached its document"
        for i, d in enumerate(docs):
            if i == victim:
                continue
            if d.step:
                for name, a in [("logits", packed[i][0])] + _arrays(packed[i][1]):
                    a = a if isinstance(a, np.ndarray) else a.double().numpy()
                    assert np.isfinite(a).all(), f"NaN of document {victim} leaked into document {i} {name}"
                _compare(f"doc {i} next to a poisoned doc", packed[i], alone[i], who)
        _check_passthrough("poisoned batch", docs, states, packed)


def _one_and_two():
    o = _models()[0]
    return o.forward(np.array([[1, 2]]))[1], o.forward(np.array([[1, 2], [3, 4]]))[1]


BAD_CALLS = [
    ("forward_packed([1, 2, 3], cu=[0, 2, 1, 3])", [1, 2, 3], [0, 2, 1, 3], lambda: [None] * 3, "negative length"),
    ("forward_packed([1, 2, 3], cu=[0, 2])", [1, 2, 3], [0, 2], lambda: [None], "from 0 to the 3"),
    ("forward_packed([1, 2, 3], cu=[1, 3])", [1, 2, 3], [1, 3], lambda: [None], "from 0 to the 3"),
    ("forward_packed([1, 2, 3], cu=[0, 3], 2 states)", [1, 2, 3], [0, 3], lambda: [None] * 2, "2 states for 1"),
    ("forward_packed([], cu=[0, 0])", [], [0, 0], lambda: [_one_and_two()[0]], "T = 0"),
    ("forward_packed([1, 99], cu=[0, 2])", [1, 99], [0, 2], lambda: [None], "vocab_size"),
    ("forward_packed([1, 2], cu=[0, 1, 2], batch-2 state)", [1, 2], [0, 1, 2], lambda: list(_one_and_two()),
     r"states\[1\]: .*batch 2"),
]


@pytest.mark.parametrize("backend", ["oracle", "impl"])
@pytest.mark.parametrize("ids,cu,states,match", [b[1:] for b in BAD_CALLS], ids=[b[0] for b in BAD_CALLS])
def test_forward_packed_refuses_bad_batches(backend, ids, cu, states, match):
    model = _models()[0 if backend == "oracle" else 1]
    with pytest.raises(ValueError, match=match):
        model.forward_packed(np.asarray(ids, dtype=np.int64), cu, states())


def test_packed_forward_runs_the_nvfp4_kernels_of_an_nvfp4_checkpoint(monkeypatch, tmp_path):
    """The packed path dispatches the feed-forward as decoder_layer does: an NVFP4 checkpoint's MoE
    layers reach impl.moe.forward WITH their codes (W4A16), not the dequantized copy (numerically the
    two agree to rounding, so only the dispatch itself can tell them apart)."""
    import impl.moe as imoe
    model = im.load(write_random(tmp_path / "nv", _geometry(), seed=4, nvfp4="compressed-tensors"))
    seen = []
    real = imoe.forward

    def spy(w, x, nvfp4=None, w4a4=False):
        seen.append(nvfp4 is not None)
        return real(w, x, nvfp4=nvfp4, w4a4=w4a4)
    monkeypatch.setattr(imoe, "forward", spy)
    model.forward_packed(np.asarray([1, 2, 3, 4]), np.asarray([0, 3, 4]), [None, None])
    assert seen and all(seen), f"MoE calls with NVFP4 codes: {seen}"
