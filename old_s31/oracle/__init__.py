"""float64 NumPy oracle of the GLM-5.3-Flash decoder (SPEC.md): one module per mechanism, no torch."""
