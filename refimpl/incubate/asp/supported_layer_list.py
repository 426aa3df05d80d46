"""The layers automatic sparsity prunes, each with its pruning function.

Mirrors ``paddle/incubate/asp/supported_layer_list.py`` of Paddle 3.3.1:
``supported_layers_and_prune_func_map`` maps a layer name (``fc``,
``linear``, ``conv2d`` at import, or whatever ``add_supported_layer`` adds:
a string, or a ``Layer`` / Layer class turned into its snake-case name) to a
function ``(weight, m, n, mask_algo, param_name) -> (pruned, mask)`` --
note ``m`` before ``n``, as in Paddle. ``_default_pruning`` is the one used
when none is given.

``_default_pruning`` prunes along the weight's *input* dimension (the rows of
``W`` in ``X @ W``), as cuSPARSELt wants the sparse operand: it masks
``W.T`` row-wise and transposes the mask back. A 2-D weight with fewer than
``m`` rows, or a 4-D conv filter with fewer than ``m`` input channels, is left
dense (with Paddle's warning). Differences: a mask that fails its own check
is a PreconditionNotMet naming the parameter (Paddle: AssertionError); a
``layer`` that is no string, Layer or Layer class is an InvalidArgument
(Paddle evaluates an ``assert`` on a non-empty string there, which passes,
and then fails on ``None``).
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Dict, Tuple

import numpy as np

from refimpl.core.errors import InvalidArgument, PreconditionNotMet

from . import utils

_logger = logging.getLogger(__name__)

PruneFunc = Callable[[np.ndarray, int, int, "utils.MaskAlgo", str], Tuple[np.ndarray, np.ndarray]]


def _default_pruning(weight_nparray: np.ndarray, m: int, n: int, func_name: utils.MaskAlgo,
                     param_name: str) -> Tuple[np.ndarray, np.ndarray]:
    """``weight_nparray`` pruned to ``n:m`` along its input dimension, and the mask (see the module docstring)."""
    shape = weight_nparray.shape
    too_narrow = {2: (0, "first"), 4: (1, "second")}.get(len(shape))
    if too_narrow is not None and shape[too_narrow[0]] < m:
        _logger.warning("%s is not pruned because the %s dimension of %s is smaller than %s",
                        param_name, too_narrow[1], shape, m)
        return weight_nparray.copy(), np.ones_like(weight_nparray)
    mask = utils.create_mask(weight_nparray.T, func_name=func_name, n=n, m=m).T
    pruned = np.multiply(weight_nparray, mask)
    check = utils.CheckMethod.get_checking_method(func_name)
    if not utils.check_sparsity(pruned.T, func_name=check, n=n, m=m):
        raise PreconditionNotMet(f"ASP: pruning the weight matrix of {param_name} to {n}:{m} failed the "
                                 f"{check.name} check")
    return pruned, mask


_supported_layers_and_prune_func_map_lock = threading.Lock()
supported_layers_and_prune_func_map: Dict[str, PruneFunc] = {}


def _layer_name(layer: Any) -> str:
    if isinstance(layer, str):
        return layer
    from refimpl.nn.layer.layers import Layer, _camel_to_snake
    if isinstance(layer, Layer):
        return _camel_to_snake(type(layer).__name__)
    if isinstance(layer, type) and issubclass(layer, Layer):
        return _camel_to_snake(layer.__name__)
    raise InvalidArgument(f"add_supported_layer: layer must be a name, a Layer or a Layer class, "
                          f"got {type(layer).__name__}")


def add_supported_layer(layer: Any, pruning_func: PruneFunc = None) -> None:
    """Let ASP prune the parameters of ``layer`` (a name, a Layer or a Layer class) with ``pruning_func``
    (``_default_pruning`` when None)."""
    name = _layer_name(layer)
    with _supported_layers_and_prune_func_map_lock:
        supported_layers_and_prune_func_map[name] = pruning_func or _default_pruning


for _name in ("fc", "linear", "conv2d"):
    add_supported_layer(_name)

__all__ = ["add_supported_layer", "supported_layers_and_prune_func_map"]
