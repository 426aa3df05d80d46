"""Op definitions and NumPy kernels, all registered in ``registry.OPS``.

Importing this package registers every op. Modules are grouped by kind,
one Paddle op per function; ``control_flow_ops`` holds the ops that need the
executor (``conditional_block``, ``feed``, ``fetch``).
"""
from . import registry
from .registry import OPS, get_op_def, has_op, register_kernel, register_op
from . import (activation_ops, collective_ops, control_flow_ops, creation_ops, logic_ops, loss_ops,  # noqa: F401
               manipulation_ops, math_ops, nn_ops, optimizer_ops, ps_ops, reader_ops)
from . import (conv_ops, index_ops, norm_ops, pool_ops, reduce_loss_ops, reduce_ops,  # noqa: F401  (real models)
               shape_ops)
from . import linalg_ops, metric_ops  # noqa: F401  (real models: bmm, accuracy)
from . import strided_slice_ops  # noqa: F401  (real models: strided_slice)
from . import pad_ops  # noqa: F401
from . import conv_transpose_ops  # noqa: F401  (conv2d_transpose, conv3d, conv3d_transpose)
from . import group_norm_ops, prelu_ops, spectral_norm_ops  # noqa: F401  (group_norm, instance_norm, prelu, spectral_norm)
from . import py_func_ops  # noqa: F401  (py_func)
from . import print_ops  # noqa: F401  (print: paddle.static.Print)
from . import amp_ops  # noqa: F401  (check_finite_and_unscale, update_loss_scaling)
from . import lars_lamb_ops  # noqa: F401  (lars_momentum, lamb)
from . import dgc_ops  # noqa: F401  (dgc, dgc_momentum, dgc_clip_by_norm)
from . import model_parallel_ops  # noqa: F401  (c_identity, c_concat, c_split, c_embedding, mp_allreduce_sum, ...)
from . import partial_p2p_ops  # noqa: F401  (partial_send, partial_recv, partial_allgather)
from . import nop_ops  # noqa: F401  (nop)
