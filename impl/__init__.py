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
