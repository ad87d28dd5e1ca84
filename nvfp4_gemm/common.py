"""Shared ground of every module: the CuTe DSL's imports (stand-ins where it is not installed,
so that the torch paths still import), the harness's type names, the package's constants and
environment switches, and the one-warning-per-reason helper."""

from __future__ import annotations

import warnings
from typing import Any


class _MissingDsl:
    """Stands in for the CuTe DSL's modules when nvidia-cutlass-dsl is not installed, so
    that this file still imports and the exact torch path still runs. Decorators return
    the function unchanged; any other use yields another stand-in (kernels never run)."""

    def __getattr__(self, name):
        return self

    def __getitem__(self, item):
        return self

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]
        return self


try:
    import cutlass
    import cutlass.cute as cute
    import cutlass.pipeline as pipeline
    import cutlass.utils as utils
    import cutlass.utils.blackwell_helpers as sm100_utils
    import cutlass.utils.blockscaled_layout as blockscaled_utils
    import cutlass.utils.hopper_helpers as sm90_utils
    from cutlass._mlir.dialects import llvm
    from cutlass.cute.nvgpu import cpasync, tcgen05
    from cutlass.cute.runtime import make_ptr
    from cutlass.cutlass_dsl import Float32, Int32, Int64, Uint32, dsl_user_op

    try:  # DSL >= 4.8 moved these helpers; 4.5.x has them under cutlass.utils only.
        from cutlass.memory import SmemAllocator
        from cutlass.tensor_utils import LayoutEnum, TensorMapManager, TensorMapUpdateMode
    except ImportError:
        from cutlass.utils import LayoutEnum, SmemAllocator, TensorMapManager, TensorMapUpdateMode

    _DSL_IMPORT_ERROR = None
except ImportError as e:  # the exact torch path still works
    _DSL_IMPORT_ERROR = e
    cutlass = cute = pipeline = utils = sm100_utils = blockscaled_utils = _MissingDsl()
    sm90_utils = llvm = cpasync = tcgen05 = make_ptr = _MissingDsl()
    Float32 = Int32 = Int64 = Uint32 = dsl_user_op = _MissingDsl()
    LayoutEnum = SmemAllocator = TensorMapManager = TensorMapUpdateMode = _MissingDsl()

try:
    from task import input_t, output_t
except ImportError:  # used outside the leaderboard harness
    input_t = output_t = Any

SF_VEC_SIZE = 16  # one E4M3 scale per 16 consecutive K values
PATH_ENV = "NVFP4_GEMM_PATH"
SELF_CHECK_ENV = "NVFP4_GEMM_SELF_CHECK"
PATHS = ("auto", "sm100", "sm90", "torch")


def ceil_div(a: int, b: int) -> int:
    return (a + b - 1) // b


_warned: set[str] = set()


def warn_once(reason: str) -> None:
    """One RuntimeWarning per distinct reason for the life of the process."""
    if reason not in _warned:
        _warned.add(reason)
        warnings.warn(f"nvfp4 grouped GEMM: {reason}", RuntimeWarning, stacklevel=3)
