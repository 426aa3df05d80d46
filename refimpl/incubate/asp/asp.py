"""Automatic sparsity (ASP) for static programs: masks created by ``minimize``, filled by ``prune_model``.

Mirrors ``paddle/incubate/asp/asp.py`` of Paddle 3.3.1, static graph:

- ``decorate(optimizer)`` returns an ``OptimizerWithSparsityGuarantee``
  whose ``minimize`` is ``ASPHelper._minimize``: the optimizer's own
  ``minimize``, then, for each updated parameter ASP supports (see
  :meth:`ASPHelper._is_supported_layer`), a mask parameter
  ``<param>.asp_mask`` of the parameter's shape and dtype (``stop_gradient``,
  not trainable; startup fills it with 1.0), and last one
  ``elementwise_mul(X=param, Y=mask) -> param`` (``axis=-1``, op role
  Optimize) per mask, appended after the optimizer ops.
- ``prune_model(program or layer, n, m, mask_algo, with_mask)`` reads each
  supported parameter from the global scope, computes its mask with NumPy
  (``supported_layer_list``'s pruning function), writes the pruned
  parameter back and, ``with_mask``, the mask into ``<param>.asp_mask``;
  it returns ``{param name: mask}`` of every pruning so far of the program.
- ``set_excluded_layers`` / ``reset_excluded_layers`` keep, per program,
  names whose parameters ASP leaves alone (a substring match, as Paddle).

Dygraph is out of scope: where Paddle takes its eager path (``decorate``,
``prune_model`` of a Layer, ``step``, ``state_dict``, ``set_state_dict``
after ``paddle.disable_static()``) refimpl raises Unimplemented naming it;
the dygraph-only methods raise PreconditionNotMet in static mode (Paddle's
``dygraph_only`` assertion). Other differences: a bad ``mask_algo`` or
``n``/``m`` is an InvalidArgument, a parameter or mask missing from the
scope a PreconditionNotMet (Paddle: assertions); the per-program records are
held weakly (a program no longer used is forgotten); the place argument of
``prune_model_by_program`` is accepted and unused (the tensors keep theirs).
"""
from __future__ import annotations

import copy
import weakref
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from refimpl.core.errors import InvalidArgument, PreconditionNotMet, Unimplemented
from refimpl.framework.op_role import OP_ROLE_ATTR, OpRole

from .supported_layer_list import _default_pruning, supported_layers_and_prune_func_map
from .utils import MaskAlgo, _check_n_m

_MASK_ALGOS = {"mask_1d": MaskAlgo.MASK_1D, "mask_2d_greedy": MaskAlgo.MASK_2D_GREEDY,
               "mask_2d_best": MaskAlgo.MASK_2D_BEST}


def _dygraph_requested() -> bool:
    """True after ``paddle.disable_static()``: where Paddle would take ASP's eager path."""
    import refimpl.framework as fw
    return fw._dygraph_requested


def _no_dygraph(api: str) -> None:
    if _dygraph_requested():
        raise Unimplemented(f"{api} in dynamic graph mode (paddle.disable_static() was called) is not "
                            f"implemented by refimpl: ASP is static-graph only here; call paddle.enable_static()")


def set_excluded_layers(param_names: List[str], main_program: Any = None) -> None:
    """Leave alone every parameter of ``main_program`` whose name contains one of ``param_names``."""
    if main_program is None:
        from refimpl.framework.program import default_main_program
        main_program = default_main_program()
    ASPHelper.set_excluded_layers(param_names=param_names, main_program=main_program)


def reset_excluded_layers(main_program: Any = None) -> None:
    """Forget the excluded layers of ``main_program`` (of every program when None)."""
    ASPHelper.reset_excluded_layers(main_program=main_program)


def decorate(optimizer: Any) -> "OptimizerWithSparsityGuarantee":
    """``optimizer`` wrapped so that ``minimize`` adds ASP's masks and masking ops (see the module docstring)."""
    return ASPHelper.decorate(optimizer)


def prune_model(model: Any, n: int = 2, m: int = 4, mask_algo: str = "mask_1d",
                with_mask: bool = True) -> Dict[str, np.ndarray]:
    """Prune the supported parameters of ``model`` (a Program, or a Layer built in one) to ``n:m``.

    ``mask_algo`` is ``'mask_1d'``, ``'mask_2d_greedy'`` or ``'mask_2d_best'``. Run the startup
    program first; ``with_mask`` needs ``decorate(...).minimize`` too (the mask variables)."""
    if mask_algo not in _MASK_ALGOS:
        raise InvalidArgument(f"prune_model: mask_algo should be one of {list(_MASK_ALGOS)}, got {mask_algo!r}")
    _check_n_m("prune_model", n, m)
    from refimpl.framework.program import Program
    from refimpl.nn.layer.layers import Layer
    if isinstance(model, Layer):
        prune = ASPHelper.prune_model_by_layer
    elif isinstance(model, Program):
        prune = ASPHelper.prune_model_by_program
    else:
        raise InvalidArgument(f"prune_model: model should be paddle.nn.Layer or paddle.static.Program, "
                              f"but got {type(model).__name__}")
    return prune(None, model, n=n, m=m, mask_algo=_MASK_ALGOS[mask_algo], with_mask=with_mask)


class ProgramASPInfo:
    """What ASP keeps for one program: mask variables and masks by parameter name, and excluded layers."""

    def __init__(self) -> None:
        self.__mask_vars: Dict[str, Any] = {}
        self.__masks: Dict[str, np.ndarray] = {}
        self.__excluded_layers: List[str] = []

    def update_mask_vars(self, param_name: str, var: Any) -> None:
        self.__mask_vars[param_name] = var

    def update_masks(self, param_name: str, var: np.ndarray) -> None:
        self.__masks[param_name] = var

    def update_excluded_layers(self, param_names: List[str]) -> None:
        self.__excluded_layers.extend(copy.deepcopy(list(param_names)))

    def reset_excluded_layers(self) -> None:
        self.__excluded_layers = []

    @property
    def mask_vars(self) -> Dict[str, Any]:
        return self.__mask_vars

    @property
    def masks(self) -> Dict[str, np.ndarray]:
        return self.__masks

    @property
    def excluded_layers(self) -> List[str]:
        return self.__excluded_layers


def _scope_tensor(name: str, what: str) -> Any:
    from refimpl.core.scope import global_scope
    var = global_scope().find_var(name)
    if var is None:
        raise PreconditionNotMet(f"prune_model: {what} {name!r} is not in the global scope; call "
                                 f"paddle.incubate.asp.decorate(optimizer).minimize(loss) and run the startup "
                                 f"program (exe.run(startup_program)) first")
    return var.get_tensor()


class ASPHelper:
    """ASP's workings (Paddle's ``ASPHelper``): which parameters qualify, their masks and the masking ops."""

    MASK_APPENDDED_NAME = "asp_mask"   # sic, Paddle's spelling
    PADDLE_WEIGHT_SUFFIX = "w_"

    __asp_info: "weakref.WeakKeyDictionary[Any, ProgramASPInfo]" = weakref.WeakKeyDictionary()

    @classmethod
    def set_excluded_layers(cls, param_names: List[str], main_program: Any) -> None:
        cls._get_program_asp_info(main_program).update_excluded_layers(param_names)

    @classmethod
    def reset_excluded_layers(cls, main_program: Any = None) -> None:
        if main_program is None:
            for info in list(cls.__asp_info.values()):
                info.reset_excluded_layers()
        else:
            cls._get_program_asp_info(main_program).reset_excluded_layers()

    @staticmethod
    def decorate(optimizer: Any) -> "OptimizerWithSparsityGuarantee":
        _no_dygraph("paddle.incubate.asp.decorate")
        return OptimizerWithSparsityGuarantee(optimizer)

    @classmethod
    def prune_model_by_program(cls, place: Any, main_program: Any = None, n: int = 2, m: int = 4,
                               mask_algo: MaskAlgo = MaskAlgo.MASK_1D, with_mask: bool = True) -> Dict[str, np.ndarray]:
        """Prune every supported parameter of ``main_program`` in the global scope (``place`` is unused)."""
        if main_program is None:
            from refimpl.framework.program import default_main_program
            main_program = default_main_program()
        info = cls._get_program_asp_info(main_program)
        for param in main_program.global_block().all_parameters():
            if not cls._is_supported_layer(main_program, param.name):
                continue
            weight_tensor = _scope_tensor(param.name, "parameter")
            weight = np.array(weight_tensor)
            pruned, mask = cls._get_prune_func_by_name(param.name)(weight, m, n, mask_algo, param.name)
            weight_tensor.set(np.asarray(pruned).astype(weight.dtype))
            if with_mask:
                mask_tensor = _scope_tensor(cls._get_mask_name(param.name), "the ASP mask")
                mask = np.asarray(mask).astype(np.array(mask_tensor).dtype)
                mask_tensor.set(mask)
            info.update_masks(param.name, mask)
        return info.masks.copy()

    @classmethod
    def prune_model_by_layer(cls, place: Any, layer: Any, n: int = 2, m: int = 4,
                             mask_algo: MaskAlgo = MaskAlgo.MASK_1D, with_mask: bool = True) -> Dict[str, np.ndarray]:
        """Static mode: prune the program ``layer``'s parameters were created in."""
        _no_dygraph("paddle.incubate.asp.prune_model of a paddle.nn.Layer")
        program = None
        for param in layer.parameters():
            program = param.block.program
        if program is None:
            raise InvalidArgument(f"prune_model: cannot get the static Program of {type(layer).__name__}: "
                                  f"it has no parameters")
        return cls.prune_model_by_program(place, program, n=n, m=m, mask_algo=mask_algo, with_mask=with_mask)

    @staticmethod
    def _get_mask_name(param_name: str) -> str:
        return param_name + "." + ASPHelper.MASK_APPENDDED_NAME

    @staticmethod
    def _get_not_ASP_relevant_vars(main_program: Any) -> List[Any]:
        """The parameters of ``main_program`` that are not ASP masks."""
        return [p for p in main_program.global_block().all_parameters()
                if ASPHelper.MASK_APPENDDED_NAME not in p.name.split(".")]

    @classmethod
    def _get_program_asp_info(cls, main_program: Any) -> ProgramASPInfo:
        info = cls.__asp_info.get(main_program)
        if info is None:
            info = cls.__asp_info[main_program] = ProgramASPInfo()
        return info

    @classmethod
    def _is_supported_layer(cls, main_program: Any, param_name: str) -> bool:
        """Whether ASP prunes ``param_name``: not a mask, not excluded, and either a name added with
        ``add_supported_layer`` or a weight (``<layer>_<k>.w_<i>``) of a supported layer."""
        parts = param_name.split(".")
        if ASPHelper.MASK_APPENDDED_NAME in parts:
            return False
        if any(layer in param_name for layer in cls._get_program_asp_info(main_program).excluded_layers):
            return False
        if param_name in supported_layers_and_prune_func_map:
            return True
        if len(parts) == 1:
            return False
        prefix, kind = parts[0], parts[1]
        if ASPHelper.PADDLE_WEIGHT_SUFFIX not in kind:
            return False
        # prefix[:rfind('_')]: 'fc_0' -> 'fc'; without '_' Paddle's slice drops the last character
        return prefix in supported_layers_and_prune_func_map or \
            prefix[:prefix.rfind("_")] in supported_layers_and_prune_func_map

    @classmethod
    def _get_prune_func_by_name(cls, param_name: str) -> Any:
        """The pruning function for ``param_name``: by full name, then layer-instance name, then layer name."""
        prefix = param_name.split(".")[0]
        table = supported_layers_and_prune_func_map
        return table.get(param_name) or table.get(prefix) or table.get(prefix[:prefix.rfind("_")], _default_pruning)

    @classmethod
    def _minimize(cls, optimizer: Any, loss: Any, main_program: Any = None, startup_program: Any = None,
                  parameter_list: Optional[Sequence[Any]] = None,
                  no_grad_set: Optional[Any] = None) -> Tuple[List[Any], List[Tuple[Any, Any]]]:
        """``optimizer.minimize``, then the masks of the updated supported parameters and their masking ops."""
        if main_program is None:
            main_program = loss.block.program
        if startup_program is None:
            from refimpl.framework.program import default_startup_program
            startup_program = default_startup_program()
        optimize_ops, params_grads = optimizer.minimize(loss, startup_program, parameter_list,
                                                        no_grad_set=no_grad_set)
        params = [p for p, _ in params_grads]
        cls._create_mask_variables(main_program, startup_program, params)
        cls._insert_sparse_mask_ops(main_program, params)
        return optimize_ops, params_grads

    @classmethod
    def _step(cls, optimizer: Any) -> None:
        _dygraph_only("OptimizerWithSparsityGuarantee.step")

    @classmethod
    def _create_mask_variables(cls, main_program: Any, startup_program: Any, params: Sequence[Any]) -> None:
        """A ``<param>.asp_mask`` parameter (initialized to 1.0 in startup) per supported parameter."""
        from refimpl.framework.program import program_guard
        from refimpl.nn.initializer import Constant
        from refimpl.static.input import create_parameter
        info = cls._get_program_asp_info(main_program)
        with program_guard(main_program, startup_program):
            for param in params:
                if cls._is_supported_layer(main_program, param.name) and param.name not in info.mask_vars:
                    mask = create_parameter(name=cls._get_mask_name(param.name), shape=param.shape,
                                            dtype=param.dtype, default_initializer=Constant(value=1.0))
                    mask.stop_gradient = True
                    mask.trainable = False
                    info.update_mask_vars(param.name, mask)

    @classmethod
    def _insert_sparse_mask_ops(cls, main_program: Any, params: Sequence[Any]) -> None:
        """``param = param * mask`` at the end of the global block, for each parameter with a mask."""
        block = main_program.global_block()
        mask_vars = cls._get_program_asp_info(main_program).mask_vars
        for param in params:
            if param.name in mask_vars:
                block.append_op(type="elementwise_mul", inputs={"X": param, "Y": mask_vars[param.name]},
                                outputs={"Out": param}, attrs={"axis": -1, OP_ROLE_ATTR: int(OpRole.Optimize)})


def _dygraph_only(api: str) -> None:
    _no_dygraph(api)
    raise PreconditionNotMet(f"{api} is only supported in dynamic graph mode, which refimpl does not implement "
                             f"(Paddle asks for paddle.disable_static() here)")


class OptimizerWithSparsityGuarantee:
    """An optimizer whose ``minimize`` keeps ASP's masks applied (``ASPHelper._minimize``); every other
    attribute is the wrapped optimizer's."""

    def __init__(self, optimizer: Any) -> None:
        self._optimizer = optimizer

    def __getattr__(self, item: str) -> Any:
        if item == "_optimizer":   # not set yet (copy / pickle): no recursion
            raise AttributeError(item)
        return getattr(self._optimizer, item)

    def minimize(self, loss: Any, startup_program: Any = None, parameter_list: Optional[Sequence[Any]] = None,
                 no_grad_set: Optional[Any] = None) -> Tuple[List[Any], List[Tuple[Any, Any]]]:
        return ASPHelper._minimize(self._optimizer, loss, startup_program=startup_program,
                                   parameter_list=parameter_list, no_grad_set=no_grad_set)

    def step(self) -> None:
        _dygraph_only("OptimizerWithSparsityGuarantee.step")

    def state_dict(self) -> Dict[str, Any]:
        _dygraph_only("OptimizerWithSparsityGuarantee.state_dict")
        return {}

    def set_state_dict(self, state_dict: Dict[str, Any]) -> None:
        _dygraph_only("OptimizerWithSparsityGuarantee.set_state_dict")


__all__ = ["ASPHelper", "OptimizerWithSparsityGuarantee", "ProgramASPInfo", "decorate", "prune_model",
           "reset_excluded_layers", "set_excluded_layers"]
