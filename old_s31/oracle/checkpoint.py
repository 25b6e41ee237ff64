"""HF safetensors checkpoint <-> float64 oracle containers (SPEC §11): the public face of

* oracle/checkpoint_names.py  the name table (on-disk and module names, shapes), derived from the
                              containers' field declarations (oracle/types.py, oracle/fields.py)
* oracle/checkpoint_read.py   safetensors -> float64 Weights, errors naming file and tensor, NVFP4 layouts
* oracle/checkpoint_write.py  write_random (`checkpoint make-tiny`), quantize_checkpoint (NVFP4.md A5)

Both the on-disk names and the module names of SPEC §11 are accepted:

* `self_attn.{f_a_proj,f_b_proj,dt_bias,A_log}`      -> `self_attn.forget_gate.*`
* `hc_attn_{fn,base,scale}` / `hc_ffn_*`              -> `attn_hc.*` / `ffn_hc.*`
* `mlp.experts.{e}.{gate,up}_proj.weight`             -> `mlp.experts.gate_up_proj` [E, 2I, D] (gate rows first)
* `mlp.experts.{e}.down_proj.weight`                  -> `mlp.experts.down_proj` [E, D, I]
* `self_attn.{q,k,v}_conv1d.weight`                   -> `self_attn.conv1d.weight` (concatenated q, k, v)
"""
from oracle.checkpoint_names import NVFP4_LAYOUTS, expected_shapes
from oracle.checkpoint_names import layer as _layer  # noqa: F401  (gate/bench_layer builds layers from it)
from oracle.checkpoint_read import (INDEX_FILE, SINGLE_FILE, CheckpointError, from_named, load, nvfp4_layout,
                                    read_named, tensor_map)
from oracle.checkpoint_write import quantize_checkpoint, write_random
from oracle.types import LayerWeights, Weights

__all__ = ["CheckpointError", "LayerWeights", "Weights", "load", "read_named", "from_named", "expected_shapes",
           "SINGLE_FILE", "INDEX_FILE", "NVFP4_LAYOUTS", "nvfp4_layout", "quantize_checkpoint",
           "write_random", "tensor_map"]
