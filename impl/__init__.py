"""torch + Triton implementation of every mechanism, mirroring oracle/ by module and function name.

Importing `impl` on a machine without a CUDA device selects the Triton interpreter
(TRITON_INTERPRET=1) unless the variable is already set: it must be set before triton is imported,
and the interpreter is how CI (CPU only) runs the kernels.
"""
import os

import torch

if "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"


def interpreted() -> bool:
    """True when Triton kernels run in the CPU interpreter (float32 operands only, see NOTES.md)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def operand_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a tl.dot operand of `dtype` is given in: float32 under the interpreter (its bf16 tl.dot is
    wrong) and for dtypes tl.dot does not take on the GPU (float64); else its own."""
    if dtype != torch.float32 and (interpreted() or dtype not in (torch.bfloat16, torch.float16)):
        return torch.float32
    return dtype


def kernel_operand(a: torch.Tensor) -> torch.Tensor:
    """Contiguous tl.dot operand in `operand_dtype`."""
    return a.to(operand_dtype(a.dtype)).contiguous()


def num_sms(device) -> int:
    """Streaming multiprocessors of a CUDA device (4 stands in for a CPU under the interpreter)."""
    if device.type != "cuda":
        return 4
    return torch.cuda.get_device_properties(device).multi_processor_count
