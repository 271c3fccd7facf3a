"""ato_core: the framework-neutral half of ato.

``ato_core.ops.<family>``: one folder per op family with its Triton kernels, launch plans
(checks, grids, settings), reference math, test cases and one declaration per op
(ato_core.op.Op). Shared by every family: ``launch`` (the plan format), ``checks``,
``interpreter``, ``target``, ``triton_helpers``, ``testing``. Imports triton and numpy only;
never torch or jax at import time.
"""

__version__ = "0.1.0"
