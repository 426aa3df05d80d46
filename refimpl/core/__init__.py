"""Runtime values: scopes, tensors, places, dtypes and errors (Paddle's ``core``)."""
from . import errors
from .dtypes import convert_dtype, to_numpy_dtype, to_vartype, VARTYPE
from .errors import (EnforceNotMet, EOFException, InvalidArgument, NotFound, PreconditionNotMet,
                     Unimplemented, AlreadyExists, OutOfRange, Unavailable)
from .place import CPUPlace, CUDAPlace, Place
from .scope import Scope, ScopeVar, global_scope, scope_guard
from .tensor import DenseTensor

LoDTensor = DenseTensor
