"""Input mutation and out-of-bounds writes (issue 13 item 10): the harness copies every tensor a protocol
function is handed and compares it after the call; an argument declared in place (impl.registry.IN_PLACE)
is handed over inside NaN sentinel margins instead; our wrappers check their own outputs' margins under
GLMGATE_CANARY=1 (impl/canary.py)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

import impl  # noqa: F401  (the interpreter on a CPU-only machine, before triton runs a kernel)
from impl import canary, registry
from invariants import integrity
from invariants.coverage import Recorder, recording
from invariants.engine import run_one
from invariants.matrix import BY_NAME
from invariants.target import Target
from oracle.types import KDAState, Routing
from strategies import tensors as tz


def _routing():
    return Routing(torch.zeros(4, 2, dtype=torch.int64), torch.full((4, 2), 0.5), None, None, None)


def test_every_tensor_inside_the_containers_is_found_by_its_argument_path():
    w = Target(registry.get("torch"), "cpu", torch.float32).weights(
        tz.kda_weights(np.random.default_rng(0), 2, 8, 32, 4, "normal", None))
    paths = dict(integrity.tensors({"w": w, "r": _routing(), "xs": [torch.ones(1)]}, "args"))
    assert "args['w'].q_proj" in paths and "args['r'].weights" in paths and "args['xs'][0]" in paths
    assert paths["args['w'].q_proj"] is w.q_proj


def test_a_call_writing_its_input_is_reported_with_the_path_and_the_elements():
    def experts(w, x, routing):
        routing.weights[0, 1] = 1.0
        return x

    rec = Recorder()
    integrity.guarded_call("moe.experts", experts, (None, torch.ones(3), _routing()), {}, rec)
    (v,), = [rec.violations]
    assert v.quantity == "inputs_unchanged"
    assert v.message == "moe.experts wrote its input routing.weights: 1 of 8 elements changed, first at (0, 1)"


def test_a_nan_input_left_alone_is_not_a_write():
    x = torch.tensor([float("nan"), 1.0])
    rec = Recorder()
    integrity.guarded_call("moe.route", lambda w, x: x * 2, (None, x), {}, rec)
    assert rec.violations == [] and rec.guarded == {("moe.route", "inputs_unchanged")}


def _decode_writing(past: int):
    """A decode that writes its state in place, then `past` elements after the recurrent buffer's end."""
    def decode(w, z, f, b, state, inplace=False):
        state.recurrent.add_(1.0)
        n = state.recurrent.numel()
        if past:
            torch.as_strided(state.recurrent, (n + past,), (1,))[n:] = 0.0
        return z, state
    return decode


def test_a_declared_in_place_state_may_be_written_and_comes_back_as_the_callers_buffers():
    st = KDAState(torch.zeros(2, 3), torch.zeros(2, 4))
    rec = Recorder()
    o, got = integrity.guarded_call("kda.decode", _decode_writing(0), (None, torch.ones(2), None, None, st),
                                    {"inplace": True}, rec)
    assert rec.violations == []
    assert ("kda.decode", "in_bounds") in rec.guarded
    assert got.recurrent is st.recurrent and bool((st.recurrent == 1.0).all())


def test_a_write_past_the_in_place_state_is_caught_by_its_margin():
    st = KDAState(torch.zeros(2, 3), torch.zeros(2, 4))
    rec = Recorder()
    integrity.guarded_call("kda.decode", _decode_writing(1), (None, torch.ones(2), None, None, st),
                           {"inplace": True}, rec)
    (v,), = [rec.violations]
    assert (v.function, v.quantity) == ("kda.decode", "in_bounds")
    assert "1 element(s) written past the end of its (2, 3) buffer, first at flat offset 6" in v.message


def test_the_same_state_without_inplace_must_not_be_written():
    st = KDAState(torch.zeros(2, 3), torch.zeros(2, 4))
    rec = Recorder()
    integrity.guarded_call("kda.decode", _decode_writing(0), (None, torch.ones(2), None, None, st), {}, rec)
    (v,), = [rec.violations]
    assert v.message.startswith("kda.decode wrote its input state.recurrent: 6 of 6 elements changed")


def test_our_decode_check_calls_the_kernel_in_place_and_judges_both_quantities():
    check = BY_NAME["kda.decode"]
    rec = Recorder()
    cand = Target(recording(registry.get("triton"), rec), "cpu", torch.float32)
    base = Target(registry.get("torch"), "cpu", torch.float32)
    verdicts = run_one(check, check.examples[0], cand, base)
    judged = {f"{v.contract.path}.{v.contract.quantity}": v.ok for v in verdicts}
    assert judged["decode.inputs_unchanged"] and judged["decode.in_bounds"], judged


@triton.jit
def _copy_off_by_one(src, dst, n, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.store(dst + i, tl.load(src + i, mask=i < n, other=0.0), mask=i <= n)   # the bug: <= n


@triton.jit
def _copy(src, dst, n, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.store(dst + i, tl.load(src + i, mask=i < n, other=0.0), mask=i < n)


@pytest.mark.parametrize("kernel, caught", [(_copy_off_by_one, True), (_copy, False)])
def test_under_glmgate_canary_a_kernel_storing_past_its_output_is_caught(kernel, caught, monkeypatch):
    monkeypatch.setenv(canary.ENV, "1")
    src = torch.arange(5, dtype=torch.float32)
    dst = canary.empty(5, dtype=torch.float32, device="cpu")
    kernel[(1,)](src, dst, 5, BLOCK=8)
    if caught:
        with pytest.raises(RuntimeError, match=r"copy wrote outside its output dst: 1 element\(s\) written past "
                                               r"the end of its \(5,\) buffer, first at flat offset 5"):
            canary.verify("copy", dst=dst)
    else:
        canary.verify("copy", dst=dst)
        assert torch.equal(dst, src)


def test_without_glmgate_canary_outputs_are_plain_allocations(monkeypatch):
    monkeypatch.delenv(canary.ENV, raising=False)
    t = canary.empty(3, dtype=torch.float32, device="cpu")
    assert t.untyped_storage().nbytes() == 12 and not hasattr(t, "_glmgate_canary")


@pytest.mark.parametrize("check", ["kda.decode", "moe.route"])
def test_our_wrappers_pass_their_checks_with_their_margins_verified(check, monkeypatch):
    monkeypatch.setenv(canary.ENV, "1")
    c = BY_NAME[check]
    cand = Target(registry.get("triton"), "cpu", torch.float32)
    base = Target(registry.get("torch"), "cpu", torch.float32)
    assert all(v.ok for v in run_one(c, c.examples[0], cand, base))


def test_a_tensor_too_large_to_copy_is_compared_by_checksum(monkeypatch):
    monkeypatch.setattr(integrity, "COPY_LIMIT", 4)
    x = torch.arange(10, dtype=torch.float32)
    snap = integrity.snapshot(x)
    assert isinstance(snap, integrity.Checksum) and integrity.changed(snap, x) is None
    x[[2, 7]] = x[[7, 2]]          # the same values, two of them swapped: the sum alone would not see it
    assert "checksum changed" in integrity.changed(snap, x)


def test_a_single_case_run_without_the_engine_is_guarded_too():
    # `glmgate repro` calls run_one on a bare target: the mutant's input write must still break the case
    from invariants.report import ContractBroken
    c = BY_NAME["moe.forward"]
    cand = Target(registry.get("mutant:moe_forward_output_in_input"), "cpu", torch.float32)
    with pytest.raises(ContractBroken) as e:
        run_one(c, c.examples[0], cand, Target(registry.get("torch"), "cpu", torch.float32))
    broken = [v.detail for v in e.value.verdicts if not v.ok and v.contract.quantity == "inputs_unchanged"]
    assert broken and broken[0].startswith("moe.forward wrote its input x:")
