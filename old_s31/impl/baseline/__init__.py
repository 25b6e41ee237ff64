"""Plain-torch baselines: the oracle's math run in the candidate's working dtype and device.

They are the "torch" implementation of impl/registry.py: the yardstick of every kernel_replacement
contract (err(candidate) <= k · err(baseline) + floor), and the base class of the planted bugs in
impl/mutants/. One module per mechanism, mirroring oracle/ by name.
"""
from impl.baseline import kda

__all__ = ["kda"]
