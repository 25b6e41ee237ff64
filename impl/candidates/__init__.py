"""Variants of our own kernels packaged as candidates (`glmgate gate --candidate impl.candidates.<mod>:Candidate
--baseline triton`): an optimization step is gated against the path it would replace before it is timed
(docs/optimization_log.md)."""
