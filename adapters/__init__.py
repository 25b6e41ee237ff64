"""Adapters: third-party kernels and models presented as glmgate candidates, each module stating what it
covers (docs/adapters.md). `template.py` is the one to copy for your own kernel."""
