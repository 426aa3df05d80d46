"""``paddle.incubate.asp``: automatic n:m sparsity (ASP) of static programs.

Mirrors ``paddle/incubate/asp/__init__.py`` of Paddle 3.3.1: the mask
algorithms of :mod:`.utils`, the supported-layer table of
:mod:`.supported_layer_list` and the static workflow of :mod:`.asp`
(``decorate`` -> ``minimize`` -> startup -> ``prune_model`` -> train). The
dygraph path raises Unimplemented (see :mod:`.asp`).
"""
from refimpl.framework import namespace_getattr

from . import asp, supported_layer_list, utils  # noqa: F401
from .asp import ASPHelper, decorate, prune_model, reset_excluded_layers, set_excluded_layers  # noqa: F401
from .supported_layer_list import add_supported_layer
from .utils import (CheckMethod, MaskAlgo, calculate_density, check_mask_1d, check_mask_2d,  # noqa: F401
                    check_sparsity, create_mask, get_mask_1d, get_mask_2d_best, get_mask_2d_greedy)

__all__ = ["calculate_density", "decorate", "prune_model", "set_excluded_layers", "reset_excluded_layers",
           "add_supported_layer"]

__getattr__ = namespace_getattr(__name__)   # a paddle.incubate.asp name refimpl lacks: Unimplemented naming it
