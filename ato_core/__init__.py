"""ato_core: the framework-neutral half of ato.

Triton kernels (``ato_core.kernels``), per-op argument checks and launch plans
(``ato_core.<op family>``), and the reference math (``ato_core.reference``). Imports
triton and numpy only; never torch or jax at import time.
"""

__version__ = "0.1.0"
