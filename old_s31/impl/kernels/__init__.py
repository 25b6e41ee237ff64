"""Triton kernels, one module per mechanism (host wrappers live in impl/<mechanism>.py).

Under the interpreter (CPU), importing the kernels installs impl.interpreter's patch cache: the same
interpreted arithmetic without re-patching triton.language on every nested @triton.jit call.
"""
from impl import interpreted

if interpreted():
    from impl.interpreter import install

    install()
