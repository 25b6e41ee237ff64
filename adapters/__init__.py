"""Adapters: third-party implementations presented as glmgate candidates (docs/adapters.md).

adapters.transformers_glm5: transformers 5.23's glm5_next modules (needs the `reference` extra);
adapters/template.py (to come) is the starting point for writing your own.
"""
