"""The whole float64 oracle against the published reference (SPEC §14): transformers 5.23
`Glm5NextForConditionalGeneration` (SDPA, eager experts, CPU, float64 parameters; its norms, mHC,
router, KDA and indexer scores run in float32 by design, SPEC §2).

The reference builds a tiny random model (SPEC §13 config, inert parameters randomized, optionally
boosted so the SwiGLU clamps fire and mHC mixes far from uniform), writes it with its own
`save_pretrained` (the on-disk names of SPEC §11, a file no one on this project wrote), and the oracle
loads that checkpoint. `scenarios()` yields (what, oracle logits, reference logits) for the paths that
`glmgate run` cross-checks; tests/test_reference_model.py uses the same builders.

Needs the `reference` extra: pip install -e '.[reference]'.
"""
from __future__ import annotations

import pathlib
import sys
import tempfile
from typing import Iterator, Optional

import numpy as np

from oracle import model as om
from oracle.config import Geometry

INSTALL = "pip install -e '.[reference]'"
VERSION = "5.23.0"
VISION = dict(depth=1, hidden_size=16, num_heads=2, intermediate_size=32, out_hidden_size=32,
              projection_intermediate_size=32, patch_size=14, spatial_merge_size=2, temporal_patch_size=2)
TINY = Geometry.preset("tiny")


def classes():
    """(Glm5NextConfig, Glm5NextForConditionalGeneration), with fla hidden (SPEC §14: its Triton
    kernels crash on a CPU-only machine; transformers then falls back to its torch KDA)."""
    sys.modules.setdefault("fla", None)
    from transformers import Glm5NextConfig, Glm5NextForConditionalGeneration
    from transformers.utils import logging
    # "falling back to its reference PyTorch implementation" and shard progress bars: expected here
    logging.set_verbosity_error()
    logging.disable_progress_bar()
    return Glm5NextConfig, Glm5NextForConditionalGeneration


def probe(config_cls) -> None:
    """Build the tiny text config with an "indexed_attention" layer, as build() will; raise when this
    transformers rejects it or maps it to something else (versions before 5.23 have no such type)."""
    cfg = config_cls(text_config=TINY.to_dict(), vision_config=VISION)
    text = getattr(cfg, "text_config", cfg)
    validate = getattr(text, "validate_layer_type", None)
    if validate is not None:
        validate()
    if "indexed_attention" not in list(getattr(text, "layer_types", None) or []):
        raise ValueError(f'the "indexed_attention" layers became {getattr(text, "layer_types", None)!r}')


def unavailable() -> Optional[str]:
    """None when the reference can run here, else why not and how to install it (never raises)."""
    try:
        import transformers
    except ImportError:
        return f"transformers is not installed; install the reference extra: {INSTALL}"
    version = getattr(transformers, "__version__", "(version unknown)")
    needs = f"needs transformers=={VERSION}: {INSTALL}"
    try:
        config_cls, _ = classes()
    except ImportError as e:
        return f"transformers {version} has no Glm5Next ({e}); the cross-check {needs}"
    try:
        probe(config_cls)
    except Exception as e:
        if "indexed_attention" in f"{e}":
            return (f'transformers {version} is installed, but its glm5_next has no "indexed_attention" layer '
                    f"type ({needs})")
        return (f"transformers {version} is installed, but its Glm5Next rejects the tiny config "
                f"({type(e).__name__}: {e}); the cross-check {needs}")
    return None


def randomize(model, rng, boosted: bool) -> None:
    """SPEC §13: make the parameters that init leaves inert non-trivial; `boosted` makes the SwiGLU
    clamps fire (gate/up x40) and mHC mixing far from uniform (fn x20)."""
    import torch

    named = dict(model.named_parameters())
    named.update(dict(model.named_buffers()))
    with torch.no_grad():
        for name, p in named.items():
            if "language_model" not in name or not p.is_floating_point():
                continue
            n = lambda s: torch.tensor(rng.normal(0.0, s, tuple(p.shape)), dtype=p.dtype)  # noqa: E731
            leaf = name.rsplit(".", 1)[-1]
            if name.endswith(("A_log", "_hc.base", "index_kpool_compress_gate", "index_kpool_compress_ape",
                              "e_score_correction_bias")):
                p.copy_(n(0.5))
            elif name.endswith("_hc.scale"):
                p.copy_(1.0 + n(0.5))
            elif name.endswith("k_norm.bias"):
                p.copy_(n(0.5))
            elif "norm" in name and leaf == "weight":
                p.copy_(1.0 + n(0.1))
            if boosted and (name.endswith(("mlp.gate_proj.weight", "mlp.up_proj.weight", "experts.gate_up_proj",
                                           "shared_experts.gate_proj.weight", "shared_experts.up_proj.weight"))):
                p.mul_(40.0)
            if boosted and name.endswith("_hc.fn"):
                p.mul_(20.0)


def build(directory, boosted: bool = False):
    """SPEC §13/§14: (reference model float64 SDPA, oracle Model loaded from its save_pretrained, dir).

    boosted: gate/up x40, hc fn x20 and 3 Sinkhorn iterations (the row/column order observable).
    """
    import torch

    config_cls, model_cls = classes()
    torch.manual_seed(11 if boosted else 7)
    text = TINY.to_dict()
    if boosted:
        text["hc_sinkhorn_iters"] = 3
    cfg = config_cls(text_config=text, vision_config=VISION)
    ref = model_cls._from_config(cfg, dtype=torch.float64, attn_implementation="sdpa",
                                 experts_implementation="eager").eval()
    randomize(ref, np.random.default_rng(3 if boosted else 2), boosted)
    out = pathlib.Path(directory)
    ref.save_pretrained(out)
    return ref, om.load(out), out


def reference_logits(ref, ids, mask=None, cache=None):
    """(logits float64 NumPy [B, S, V], the DynamicCache) of one reference forward with a cache."""
    import torch

    kw = {} if mask is None else {"attention_mask": torch.tensor(mask, dtype=torch.long)}
    with torch.no_grad():
        out = ref(input_ids=torch.tensor(ids), past_key_values=cache, use_cache=True, **kw)
    return out.logits.numpy(), out.past_key_values


def ids_for(seed: int, shape):
    """Token ids avoiding the pad id 0."""
    return np.random.default_rng(seed).integers(1, TINY.vocab_size, shape)


def _forward(ref, model, ids):
    return model.forward(ids)[0], reference_logits(ref, ids)[0]


def _decode(ref, model, ids, prefix: int):
    """Prefill `prefix` tokens, then one token per call, on both sides (DynamicCache / HybridState)."""
    want, cache = reference_logits(ref, ids[:, :prefix])
    got, state = model.forward(ids[:, :prefix])
    wants, gots = [want], [got]
    for t in range(prefix, ids.shape[1]):
        w, cache = reference_logits(ref, ids[:, t:t + 1], cache=cache)
        g, state = model.forward(ids[:, t:t + 1], state=state)
        wants.append(w)
        gots.append(g)
    return np.concatenate(gots, 1), np.concatenate(wants, 1)


def _continuation(ref, model, ids, prefix: int):
    r1, cache = reference_logits(ref, ids[:, :prefix])
    r2, _ = reference_logits(ref, ids[:, prefix:], cache=cache)
    o1, state = model.forward(ids[:, :prefix])
    o2, _ = model.forward(ids[:, prefix:], state=state)
    return np.concatenate([o1, o2], 1), np.concatenate([r1, r2], 1)


def _padded(ref, model, steps: int = 2):
    """A left-padded batch (rows padded 0, 3, 6) then `steps` decode steps, every logit compared."""
    ids = ids_for(13, (3, 23))
    mask = np.ones(ids.shape, dtype=np.int64)
    for row, pad in ((1, 3), (2, 6)):
        mask[row, :pad] = 0
        ids[row, :pad] = TINY.pad_token_id
    want, cache = reference_logits(ref, ids, mask)
    got, state = model.forward(ids, attention_mask=mask)
    gots, wants = [got], [want]
    nxt = ids_for(14, (3, steps))
    for t in range(steps):
        mask = np.concatenate([mask, np.ones((3, 1), dtype=np.int64)], axis=1)
        w, cache = reference_logits(ref, nxt[:, t:t + 1], mask, cache)
        g, state = model.forward(nxt[:, t:t + 1], attention_mask=mask, state=state)
        gots.append(g)
        wants.append(w)
    return np.concatenate(gots, 1), np.concatenate(wants, 1)


def scenarios(workdir=None) -> Iterator[tuple[str, np.ndarray, np.ndarray]]:
    """SPEC §14: (what, oracle logits, reference logits) per path: one forward at S = 23 (real top-k)
    and 70 (two KDA chunks), prefill + decodes, prefill + continuation, a left-padded batch + decodes;
    plain and boosted weights."""
    with tempfile.TemporaryDirectory(prefix="glmgate-reference-") as tmp:
        root = pathlib.Path(workdir or tmp)
        plain = build(root / "plain")[:2]
        yield ("plain: one forward B=2 S=23", *_forward(*plain, ids_for(23, (2, 23))))
        yield ("plain: prefill 13 + 5 one-token decodes", *_decode(*plain, ids_for(5, (2, 18)), 13))
        yield ("plain: left-padded batch (pads 0/3/6) + 2 decodes", *_padded(*plain))
        boosted = build(root / "boosted", boosted=True)[:2]
        yield ("boosted: one forward B=2 S=70", *_forward(*boosted, ids_for(70, (2, 70))))
        yield ("boosted: prefill 9 + 14-token continuation", *_continuation(*boosted, ids_for(9, (2, 23)), 9))
