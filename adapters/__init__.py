"""Adapters: third-party kernels and models presented as glmgate candidates, each module stating what it
covers (docs/adapters.md).

adapters.transformers_glm5: transformers 5.23's glm5_next modules (needs the `reference` extra)
adapters.fla_kda: flash-linear-attention's KDA kernels (CUDA; fla-core 0.6)
adapters.template: the file to copy for your own kernel
"""
