"""NVFP4 routed experts in HF safetensors checkpoints (NVFP4.md A5, SPEC §11): both layouts.

Round trips (write -> load) give codes, scales and global scales bit for bit and the exact
dequantization of oracle.nvfp4.quantize; the oracle on an NVFP4 checkpoint equals the oracle on a
plain checkpoint holding the dequantized experts; impl.model runs the W4A16 kernels on the checkpoint's
codes within the bound of tests/test_model.py; every defect raises CheckpointError naming the tensor.
Geometry: the 5-layer tiny cut of tests/test_model.py (3 sparse layers, 8 experts, D=32, I=16).
"""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file as load_numpy
from safetensors.numpy import save_file as save_numpy
from safetensors.torch import load_file, save_file

import impl.model as im
import oracle.model as om
from invariants.contracts import float32_tolerance, float64_tolerance
from oracle import checkpoint as ock
from oracle import nvfp4 as onv
from oracle.config import SPARSE
from tests.test_model import _check, _geometry

CT, MO = ock.NVFP4_LAYOUTS
P = "model.language_model.layers.2.mlp.experts."          # the first sparse layer's experts
SEED = 3
# a float32 scale on disk against its formula; the oracle's NVFP4 logits against the same math run as
# plain float64 experts (invariants/contracts.d/defaults.toml [float32] / [float64])
STORED_SCALE, SAME_MATH = float32_tolerance("stored_scale"), float64_tolerance("same_math")


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    """{"plain": dir, CT: dir, MO: dir}: one seed, so the same master weights."""
    g = _geometry()
    root = tmp_path_factory.mktemp("nvfp4")
    out = {"plain": ock.write_random(root / "plain", g, SEED)}
    for layout in ock.NVFP4_LAYOUTS:
        out[layout] = ock.write_random(root / layout, g, SEED, nvfp4=layout)
    return out


def _sparse(w):
    return [lw for lw in w.layers if w.geometry.mlp_layer_types[lw.index] == SPARSE]


def _expected(master, share: bool):
    """Per expert {proj: NVFP4Tensor} from the master weights with the writer's global-scale rule."""
    I = master.expert_dim
    out = []
    for e in range(master.num_experts):
        w = {"gate": master.gate_up_proj[e, :I], "up": master.gate_up_proj[e, I:], "down": master.down_proj[e]}
        amax = {p: np.abs(a.astype(np.float32)).max() for p, a in w.items()}
        if share:
            amax["gate"] = amax["up"] = max(amax["gate"], amax["up"])
        out.append({p: onv.quantize(a, None if not share else onv.global_scale_encode(amax[p]))
                    for p, a in w.items()})
    return out


def _same_bits(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.tobytes() == b.tobytes()


def _assert_round_trip(loaded, master, share: bool):
    for lq, lp in zip(_sparse(loaded), _sparse(master)):
        nv, want = lq.mlp.nvfp4, _expected(lp.mlp, share)
        assert nv is not None
        I = lp.mlp.expert_dim
        for e, exp in enumerate(want):
            for proj, t in exp.items():
                got = getattr(nv, proj)
                assert _same_bits(got.packed[e], t.packed), (lq.index, e, proj)
                assert _same_bits(got.block_scale[e], t.block_scale), (lq.index, e, proj)
                assert got.global_decode.dtype == np.float32 and got.global_decode[e] == t.global_decode
            deq = {p: onv.dequantize(t) for p, t in exp.items()}          # exact, float64
            assert np.array_equal(lq.mlp.gate_up_proj[e, :I], deq["gate"])
            assert np.array_equal(lq.mlp.gate_up_proj[e, I:], deq["up"])
            assert np.array_equal(lq.mlp.down_proj[e], deq["down"])


@pytest.mark.parametrize("layout", ock.NVFP4_LAYOUTS)
def test_round_trip_per_tensor_scales(ckpts, layout):
    """write_random(nvfp4=layout): gate, up and down each with its own global scale (as published
    checkpoints have them); the fused gate_up keeps both, [E, 2] = (gate's, up's)."""
    assert ock.nvfp4_layout(ckpts[layout]) == layout and ock.nvfp4_layout(ckpts["plain"]) is None
    loaded, master = ock.load(ckpts[layout]), ock.load(ckpts["plain"])
    _assert_round_trip(loaded, master, share=False)
    for lw in _sparse(loaded):
        nv = lw.mlp.nvfp4
        assert nv.layout == layout and nv.gate.input_global_scale is None
        gu = nv.gate_up()
        assert gu.packed.shape == (8, 32, 16) and gu.global_decode.shape == (8, 2)
        assert np.array_equal(gu.global_decode[:, 0], nv.gate.global_decode)
        assert np.array_equal(gu.global_decode[:, 1], nv.up.global_decode)
        assert (nv.gate.global_decode != nv.up.global_decode).any()          # the writer's default: unequal
    config = json.loads((ckpts[layout] / "config.json").read_text())["quantization_config"]
    assert config["quant_method"] == layout
    # the global scale's direction on disk, independently of the reader (NVFP4.md A2)
    raw = load_file(ckpts[layout] / "model.safetensors")
    amax = np.abs(master.layers[2].mlp.down_proj[5].astype(np.float32)).max()
    if layout == CT:
        assert raw[P + "5.down_proj.weight_global_scale"].shape == (1,)
        assert float(raw[P + "5.down_proj.weight_global_scale"]) == pytest.approx(2688 / amax, rel=STORED_SCALE)
    else:
        assert raw[P + "5.down_proj.weight_scale_2"].shape == ()
        assert float(raw[P + "5.down_proj.weight_scale_2"]) == pytest.approx(amax / 2688, rel=STORED_SCALE)


@pytest.mark.parametrize("layout", ock.NVFP4_LAYOUTS)
def test_round_trip_per_tensor_scale_and_input_scales(ckpts, tmp_path, layout):
    """quantize_checkpoint with one global scale per tensor equals dequantize(quantize(w)) exactly; the
    W4A4 activation scales come back in the ENCODE direction whatever the layout stores."""
    d = ock.quantize_checkpoint(ckpts["plain"], tmp_path / "q", layout, share_gate_up_scale=False, input_amax=3.0)
    loaded, master = ock.load(d), ock.load(ckpts["plain"])
    _assert_round_trip(loaded, master, share=False)
    want = onv.flip_global_scale(onv.global_scale_decode(3.0))
    for lw in _sparse(loaded):
        for proj in ("gate", "up", "down"):
            g_in = getattr(lw.mlp.nvfp4, proj).input_global_scale
            assert g_in.dtype == np.float32 and g_in.shape == (8,) and (g_in == want).all()
        gu = lw.mlp.nvfp4.gate_up()
        assert (gu.input_global_scale == want).all() and gu.global_decode.shape == (8, 2)
        # one input scale per expert for the fused GEMM (it quantizes x once): unequal ones are refused
        up = lw.mlp.nvfp4.up._replace(input_global_scale=lw.mlp.nvfp4.up.input_global_scale * np.float32(2))
        with pytest.raises(ValueError, match="input_global_scale: gate and up differ; a fused gate_up GEMM"):
            lw.mlp.nvfp4._replace(up=up).gate_up()


@pytest.mark.parametrize("layout", ock.NVFP4_LAYOUTS)
def test_round_trip_shared_gate_up_scale(ckpts, tmp_path, layout):
    """quantize_checkpoint(share_gate_up_scale=True): gate and up share max(amax) per expert."""
    d = ock.quantize_checkpoint(ckpts["plain"], tmp_path / "q", layout, share_gate_up_scale=True)
    loaded, master = ock.load(d), ock.load(ckpts["plain"])
    _assert_round_trip(loaded, master, share=True)
    for lw in _sparse(loaded):
        g = lw.mlp.nvfp4.gate_up().global_decode
        assert g.shape == (8, 2) and np.array_equal(g[:, 0], g[:, 1])


def test_layouts_hold_the_same_data(ckpts):
    a, b = ock.load(ckpts[CT]), ock.load(ckpts[MO])
    for la, lb in zip(_sparse(a), _sparse(b)):
        for proj in ("gate", "up", "down"):
            ta, tb = getattr(la.mlp.nvfp4, proj), getattr(lb.mlp.nvfp4, proj)
            assert all(_same_bits(x, y) for x, y in zip(ta[:3], tb[:3]))


def test_oracle_logits_equal_a_plain_checkpoint_of_the_dequantized_experts(ckpts, tmp_path):
    """The oracle runs NVFP4 math unchanged: the NVFP4 checkpoint's logits == those of a float64
    checkpoint whose per-expert weights are the dequantized values."""
    q = ock.load(ckpts[CT])
    d = tmp_path / "deq"
    shutil.copytree(ckpts["plain"], d)
    tensors = load_numpy(d / "model.safetensors")
    for lw in _sparse(q):
        I = lw.mlp.expert_dim
        for e in range(lw.mlp.num_experts):
            m = f"model.language_model.layers.{lw.index}.mlp.experts.{e}."
            tensors[m + "gate_proj.weight"] = lw.mlp.gate_up_proj[e, :I]
            tensors[m + "up_proj.weight"] = lw.mlp.gate_up_proj[e, I:]
            tensors[m + "down_proj.weight"] = lw.mlp.down_proj[e]
    save_numpy(tensors, str(d / "model.safetensors"), metadata={"format": "pt"})
    ids = np.random.default_rng(1).integers(0, q.geometry.vocab_size, (2, 23))
    got, _ = om.load(ckpts[CT]).forward(ids)
    ref, _ = om.load(d).forward(ids)
    plain, _ = om.load(ckpts["plain"]).forward(ids)
    assert np.abs(got - ref).max() <= SAME_MATH * np.abs(ref).max()
    assert np.abs(got - plain).max() > 1e-3 * np.abs(plain).max()       # the quantization is visible


def test_impl_runs_the_nvfp4_kernels(ckpts):
    """impl.model.load on an NVFP4 checkpoint: NVFP4Experts holding the checkpoint's bits, logits under
    model.forward.logits[kernel_replacement], the torch backend (dequantized experts) as its baseline
    (tests/test_model.py)."""
    d = ckpts[MO]
    o, m, t = om.load(d), im.load(d), im.load(d, backend="torch")
    q = ock.load(d)
    for lw, lq in zip(_sparse(m.weights), _sparse(q)):
        nv, gu = lw.mlp.nvfp4, lq.mlp.nvfp4.gate_up()
        assert nv.gate_up.packed.dtype == torch.uint8 and nv.gate_up.block_scale.dtype == torch.float8_e4m3fn
        assert np.array_equal(nv.gate_up.packed.numpy(), gu.packed)
        assert np.array_equal(nv.gate_up.block_scale.view(torch.uint8).numpy(), gu.block_scale.view(np.uint8))
        assert np.array_equal(nv.down.global_decode.numpy(), lq.mlp.nvfp4.down.global_decode)
        assert np.array_equal(nv.gate_up.global_decode.numpy(), gu.global_decode)      # [E, 2]: both halves
    assert all(lw.mlp.nvfp4 is None for lw in _sparse(t.weights))
    ids = np.random.default_rng(13).integers(0, o.geometry.vocab_size, (1, 13))
    ref, _ = o.forward(ids)
    got, _ = m.forward(ids)
    base, _ = t.forward(ids)
    _check("nvfp4 logits S=13", got, base, ref)


def test_a_renamed_implementation_keeps_the_w4a16_path(ckpts):
    """The MoE path follows what the implementation's moe.forward takes, not its name: a candidate built
    on ours (here ours renamed) runs the W4A16 kernels, bit for bit ours; the torch baseline, whose
    forward takes no codes, runs the dequantization. (A name test sent every candidate down the
    dequantized path, so a replay's peer timed another MoE.)"""
    from impl import registry
    m = im.load(ckpts[MO])
    lw = _sparse(m.weights)[0]
    renamed = registry.get("triton")._replace(name="a-candidate")
    assert im.TorchDecoder(renamed)._moe_options(lw)["nvfp4"] is lw.mlp.nvfp4
    assert im.TorchDecoder("torch")._moe_options(lw) == {}
    ids = np.random.default_rng(5).integers(0, m.weights.geometry.vocab_size, (1, 7))
    ours, _ = m.forward(ids)
    theirs, _ = im.Model(m.weights, renamed).forward(ids)
    assert torch.equal(ours, theirs)


# ----------------------------------------------------------------------------- defects


def _edit(src, dst, edit):
    """Copy checkpoint `src` to `dst`, apply edit(tensors) (torch tensors: fp8 survives), return the file."""
    shutil.copytree(src, dst)
    file = dst / "model.safetensors"
    tensors = load_file(file)
    edit(tensors)
    save_file(tensors, file, metadata={"format": "pt"})
    return file


def _raises(file, tensor, match):
    with pytest.raises(ock.CheckpointError, match=match) as e:
        ock.load(file.parent)
    assert str(file.parent) in str(e.value) and tensor in str(e.value), str(e.value)
    assert e.value.tensor == tensor
    return e.value


def _fp8(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32).to(torch.float8_e4m3fn)


def _nan_fp8(shape) -> torch.Tensor:
    return torch.full(shape, 0x7F, dtype=torch.uint8).view(torch.float8_e4m3fn)


# (layout, tensor edited, edit, message)
DEFECTS = [
    ("missing-weight-scale", CT, P + "1.up_proj.weight_scale", lambda t, k: t.pop(k), "missing tensor"),
    ("missing-global-scale", MO, P + "0.down_proj.weight_scale_2", lambda t, k: t.pop(k), "missing tensor"),
    ("scale-wrong-shape", MO, P + "2.gate_proj.weight_scale",
     lambda t, k: t.__setitem__(k, _fp8(np.ones((16, 3)))), r"shape \[16, 3\].*\[16, 2\]"),
    ("packed-width-not-k-over-2", CT, P + "3.down_proj.weight_packed",     # K=30: not a multiple of 16
     lambda t, k: t.__setitem__(k, torch.zeros(32, 15, dtype=torch.uint8)), r"shape \[32, 15\].*\[32, 8\]"),
    ("nan-block-scale", CT, P + "4.gate_proj.weight_scale",
     lambda t, k: t.__setitem__(k, _nan_fp8((16, 2))), "NaN"),
    ("nan-global-scale", MO, P + "5.up_proj.weight_scale_2",
     lambda t, k: t.__setitem__(k, torch.tensor(float("nan"))), "finite"),
    ("inf-global-scale", CT, P + "5.up_proj.weight_global_scale",
     lambda t, k: t.__setitem__(k, torch.tensor([float("inf")])), "finite"),
    ("zero-global-scale-ct", CT, P + "6.down_proj.weight_global_scale",
     lambda t, k: t.__setitem__(k, torch.zeros(1)), "0.0"),
    ("zero-global-scale-modelopt", MO, P + "7.gate_proj.weight_scale_2",
     lambda t, k: t.__setitem__(k, torch.zeros(())), "0.0"),
    ("fp32-scale-dtype", CT, P + "0.gate_proj.weight_scale",
     lambda t, k: t.__setitem__(k, t[k].float()), "dtype F32, expected F8_E4M3"),
]


@pytest.mark.parametrize("case,layout,key,edit,match", DEFECTS, ids=[d[0] for d in DEFECTS])
def test_defect_names_file_and_tensor(ckpts, tmp_path, case, layout, key, edit, match):
    file = _edit(ckpts[layout], tmp_path / "ck", lambda t: edit(t, key))
    _raises(file, key, match)


def test_mixed_layouts_are_refused(ckpts, tmp_path):
    """Expert 3's down_proj in ModelOpt form inside a compressed-tensors checkpoint."""
    m = P + "3.down_proj."

    def to_modelopt(t):
        t[m + "weight"] = t.pop(m + "weight_packed")
        t[m + "weight_scale_2"] = 1.0 / t.pop(m + "weight_global_scale").reshape(())
    file = _edit(ckpts[CT], tmp_path / "ck", to_modelopt)
    _raises(file, m + "weight_scale_2", "mixes NVFP4 layouts")


def test_config_disagreeing_with_the_keys_is_refused(ckpts, tmp_path):
    d = tmp_path / "ck"
    shutil.copytree(ckpts[CT], d)
    config = json.loads((ckpts[MO] / "config.json").read_text())
    (d / "config.json").write_text(json.dumps(config))
    with pytest.raises(ock.CheckpointError, match="declares modelopt") as e:
        ock.load(d)
    assert "weight_global_scale" in e.value.tensor or "weight_packed" in e.value.tensor


def test_an_unquantized_expert_in_an_nvfp4_checkpoint_is_refused(ckpts, tmp_path):
    m = P + "4.up_proj."

    def plain(t):
        for leaf in ("weight_packed", "weight_scale", "weight_global_scale"):
            t.pop(m + leaf)
        t[m + "weight"] = torch.zeros(16, 32, dtype=torch.bfloat16)
    file = _edit(ckpts[CT], tmp_path / "ck", plain)
    _raises(file, m + "weight", "mixes NVFP4 and plain experts")
    file = _edit(ckpts[MO], tmp_path / "ck2", lambda t: t.__setitem__(m + "weight", torch.zeros(16, 32)))
    _raises(file, m + "weight", "mixes NVFP4 and plain experts")


def test_nvfp4_outside_routed_experts_is_refused(ckpts, tmp_path):
    key = "model.language_model.layers.2.mlp.shared_experts.gate_proj.weight_packed"
    file = _edit(ckpts[CT], tmp_path / "ck", lambda t: t.__setitem__(key, torch.zeros(16, 16, dtype=torch.uint8)))
    _raises(file, key, "only routed experts")


def test_input_scales_all_or_none(ckpts, tmp_path):
    key = P + "2.gate_proj.input_global_scale"
    file = _edit(ckpts[CT], tmp_path / "ck", lambda t: t.__setitem__(key, torch.tensor([100.0])))
    _raises(file, P + "0.gate_proj.input_global_scale", "missing tensor")


def test_quantize_checkpoint_refuses_a_quantized_source(ckpts, tmp_path):
    with pytest.raises(ock.CheckpointError, match="already NVFP4"):
        ock.quantize_checkpoint(ckpts[CT], tmp_path / "q", MO)
    with pytest.raises(ValueError, match="layout"):
        ock.quantize_checkpoint(ckpts["plain"], tmp_path / "q", "gguf")


def test_quantize_keeps_shards_and_splits_stacked_experts(ckpts, tmp_path):
    """A sharded source with the experts stored stacked (module names, SPEC §11) quantizes to the same
    NVFP4 data as the single-file on-disk source; shard names and the index are kept."""
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(ckpts["plain"] / "config.json", src / "config.json")
    tensors = load_numpy(ckpts["plain"] / "model.safetensors")
    for i in (2, 3, 4):
        m = f"model.language_model.layers.{i}.mlp.experts."
        gu = [np.concatenate([tensors.pop(f"{m}{e}.gate_proj.weight"), tensors.pop(f"{m}{e}.up_proj.weight")])
              for e in range(8)]
        tensors[m + "gate_up_proj"] = np.stack(gu)
        tensors[m + "down_proj"] = np.stack([tensors.pop(f"{m}{e}.down_proj.weight") for e in range(8)])
    keys = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": keys[::2], "model-00002-of-00002.safetensors": keys[1::2]}
    for name, ks in shards.items():
        save_numpy({k: tensors[k] for k in ks}, str(src / name), metadata={"format": "pt"})
    (src / ock.INDEX_FILE).write_text(json.dumps({"weight_map": {k: n for n, ks in shards.items() for k in ks}}))
    d = ock.quantize_checkpoint(src, tmp_path / "q", CT)
    assert sorted(p.name for p in d.glob("*.safetensors")) == sorted(shards)
    a, b = ock.load(d), ock.load(ckpts[CT])
    for la, lb in zip(_sparse(a), _sparse(b)):
        assert np.array_equal(la.mlp.gate_up_proj, lb.mlp.gate_up_proj)
        assert all(_same_bits(x, y) for x, y in zip(la.mlp.nvfp4.down[:3], lb.mlp.nvfp4.down[:3]))
