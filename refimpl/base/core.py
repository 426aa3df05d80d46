"""``paddle.base.core``: the runtime names static scripts touch.

Mirrors the part of Paddle's pybind module (``paddle/fluid/pybind/``) that
static scripts use: the places, ``Scope``, ``DenseTensor`` (``LoDTensor``),
``EOFException``, ``VarDesc.VarType``, ``op_proto_and_checker_maker``,
``is_compiled_with_cuda`` and ``_get_eager_deletion_vars``, as re-exports of
``refimpl.core``, ``refimpl.framework.op_role`` and ``refimpl.executor``.

Differences: a dtype is its Paddle name in refimpl (``"float32"``) and a
variable type its name (``"DENSE_TENSOR"``), so ``VarDesc.VarType.FP32`` is
``"float32"`` and compares equal to ``var.dtype`` as in Paddle; ``int()`` of it
is no enum value (use ``refimpl.core.dtypes.to_vartype``).
"""
from typing import Any, Iterable, List

from refimpl.core.dtypes import VARTYPE
from refimpl.core.errors import EOFException
from refimpl.core.place import CPUPlace, CUDAPlace, Place
from refimpl.core.scope import Scope, global_scope, scope_guard
from refimpl.core.tensor import DenseTensor
from refimpl.core.random import default_cpu_generator  # noqa: F401  (paddle.base.core.default_cpu_generator)
from refimpl.executor.backend import get_backend
from refimpl.executor.gc_plan import eager_deletion_vars
from refimpl.framework import Program, namespace_getattr
from refimpl.framework.op_role import OP_DEVICE_ATTR, OP_NAMESCOPE_ATTR, OP_ROLE_ATTR, OP_ROLE_VAR_ATTR, OpRole

LoDTensor = DenseTensor

# Paddle's short enum names (paddle/phi/common/data_type.h, framework.proto) for refimpl's dtype names.
_DTYPE_MEMBERS = {"BOOL": "bool", "INT16": "int16", "INT32": "int32", "INT64": "int64", "FP16": "float16",
                  "FP32": "float32", "FP64": "float64", "UINT8": "uint8", "INT8": "int8", "BF16": "bfloat16",
                  "COMPLEX64": "complex64", "COMPLEX128": "complex128"}
assert set(_DTYPE_MEMBERS.values()) == set(VARTYPE)
_TYPE_MEMBERS = {"DENSE_TENSOR": "DENSE_TENSOR", "LOD_TENSOR": "DENSE_TENSOR", "SELECTED_ROWS": "SELECTED_ROWS",
                 "DENSE_TENSOR_ARRAY": "DENSE_TENSOR_ARRAY", "LOD_TENSOR_ARRAY": "DENSE_TENSOR_ARRAY",
                 "STEP_SCOPES": "STEP_SCOPES", "FEED_MINIBATCH": "FEED_MINIBATCH", "FETCH_LIST": "FETCH_LIST",
                 "READER": "READER", "RAW": "RAW"}


class VarDesc:
    """Paddle's ``core.VarDesc``: here only the ``VarType`` enum, as the names refimpl uses."""

    VarType = type("VarType", (), {"__doc__": "dtype and variable-type names (``VarType.FP32 == 'float32'``).",
                                   **_DTYPE_MEMBERS, **_TYPE_MEMBERS})


class op_proto_and_checker_maker:
    """Paddle's ``core.op_proto_and_checker_maker``: ``OpRole`` and the names of the attrs every op has.

    Differences: the roles are plain ints (Paddle's are enum members that only ``int()`` turns into numbers).
    """

    OpRole = OpRole

    @staticmethod
    def kOpRoleAttrName() -> str:
        return OP_ROLE_ATTR

    @staticmethod
    def kOpRoleVarAttrName() -> str:
        return OP_ROLE_VAR_ATTR

    @staticmethod
    def kOpDeviceAttrName() -> str:
        return OP_DEVICE_ATTR

    @staticmethod
    def kOpNameScopeAttrName() -> str:
        return OP_NAMESCOPE_ATTR

    @staticmethod
    def kOpCreationCallstackAttrName() -> str:
        return "op_callstack"

    @staticmethod
    def kOpWithQuantAttrName() -> str:
        return "with_quant_attr"


def is_compiled_with_cuda() -> bool:
    """Paddle's ``core.is_compiled_with_cuda()``: here, whether refimpl's default backend is "cuda".

    refimpl is one build; its CUDA kernels are chosen with ``set_backend("cuda")``
    (or ``REFIMPL_BACKEND=cuda``). Otherwise it answers as Paddle's CPU wheel, False.
    """
    return get_backend() == "cuda"


def _get_eager_deletion_vars(program: Any, skip_vars: Iterable[str] = ()) -> List[List[List[str]]]:
    """Paddle's ``core._get_eager_deletion_vars(program.desc, skip_vars)``: per block, per op, what is freed.

    Takes the Program (or its ``desc`` where that leads back to it, ``desc._program``).
    """
    program = getattr(program, "_program", program)
    if not isinstance(program, Program):
        from refimpl.core.errors import InvalidArgument
        raise InvalidArgument(f"core._get_eager_deletion_vars: expected a Program (or program.desc), "
                              f"got {type(program).__name__}")
    return eager_deletion_vars(program, list(skip_vars))


__all__ = ["CPUPlace", "CUDAPlace", "Place", "Scope", "global_scope", "scope_guard", "DenseTensor", "LoDTensor",
           "EOFException", "VarDesc", "op_proto_and_checker_maker", "is_compiled_with_cuda",
           "_get_eager_deletion_vars", "default_cpu_generator"]

__getattr__ = namespace_getattr(__name__)
