"""``paddle.nn.Layer`` in static mode: parameters and sublayers, called to build ops.

Mirrors ``python/paddle/nn/layer/layers.py`` of Paddle 3.3.1 as it behaves under
``paddle.enable_static()``:

- A layer's full name is ``unique_name.generate`` of its class name in snake case
  (``CausalSelfAttention`` -> ``causal_self_attention_0``, ``ReLU`` -> ``re_lu_0``,
  ``BatchNorm2D`` -> ``batch_norm2d_0``) or of ``name_scope`` when given.
- ``create_parameter`` names parameters after the full name (``linear_0.w_0``,
  ``linear_0.b_0``) and writes them into the current main and startup programs
  (the startup copy gets the initializer op), through :class:`LayerHelper`.
- Assigning a Parameter or a Layer to an attribute registers it, in assignment
  order; ``named_parameters`` / ``state_dict`` use the structured names
  (``blocks.0.attn.q.weight``).
- Calling a layer runs the pre-hooks, ``forward`` and the post-hooks: ``forward``
  appends ops to the current main program.
- ``state_dict()`` maps structured names to the Parameter variables (and the
  persistable buffers); ``set_state_dict`` writes NumPy values into the
  variables of the global scope, as Paddle's static branch does.

Differences: no dygraph, no ``to_static``; buffers are static Variables;
``set_state_dict`` raises ``NotFound`` (Paddle: an AttributeError) when the
startup program has not been run into the global scope.
"""
from __future__ import annotations

import re
from collections import OrderedDict
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from refimpl.core.dtypes import convert_dtype
from refimpl.core.errors import InvalidArgument, NotFound
from refimpl.framework import check_static_mode, unique_name
from refimpl.framework.dtype_default import get_default_dtype
from refimpl.framework.variable import Parameter, Variable
from refimpl.static.layer_helper import LayerHelper

__all__ = ["Layer"]

_FIRST_CAP = re.compile("(.)([A-Z][a-z]+)")
_ALL_CAP = re.compile("([a-z])([A-Z])")
# Paddle's _scope_dist2single: tensor-parallel layers take the names of the single-device ones
_DIST_TO_SINGLE = {"row_parallel_linear": "linear", "column_parallel_linear": "linear",
                   "vocab_parallel_embedding": "embedding"}


def _camel_to_snake(name: str) -> str:
    return _ALL_CAP.sub(r"\1_\2", _FIRST_CAP.sub(r"\1_\2", name)).lower()


_convert_camel_to_snake = _camel_to_snake  # Paddle's name (paddle/nn/layer/layers.py)


def _add_indent(text: str, indent: int) -> str:
    lines = text.split("\n")
    return lines[0] if len(lines) == 1 else "\n".join([lines[0]] + [" " * indent + s for s in lines[1:]])


class HookRemoveHelper:
    """What ``register_forward_*_hook`` returns: ``remove()`` takes the hook out again."""

    _next_id = 0

    def __init__(self, hooks: Dict[int, Callable]) -> None:
        self._hooks = hooks
        self._id = HookRemoveHelper._next_id
        HookRemoveHelper._next_id += 1

    def remove(self) -> None:
        self._hooks.pop(self._id, None)


class Layer:
    """The base of every layer: see the module docstring."""

    training: bool

    def __init__(self, name_scope: Optional[str] = None, dtype: Any = "float32") -> None:
        if name_scope is None:
            name_scope = _camel_to_snake(type(self).__name__)
            name_scope = _DIST_TO_SINGLE.get(name_scope, name_scope)
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_full_name", unique_name.generate(name_scope))
        object.__setattr__(self, "_dtype", convert_dtype(dtype) if dtype is not None else None)
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistable_buffer_names_set", set())
        object.__setattr__(self, "_sub_layers", OrderedDict())
        object.__setattr__(self, "_forward_pre_hooks", OrderedDict())
        object.__setattr__(self, "_forward_post_hooks", OrderedDict())

    # ---- names and modes ---------------------------------------------------------------
    def full_name(self) -> str:
        return self._full_name

    def train(self, mode: bool = True) -> "Layer":
        if not isinstance(mode, bool):
            raise InvalidArgument(f"{type(self).__name__}.train: mode must be a bool, got {mode!r}")
        self.training = mode
        for layer in self.sublayers():
            layer.training = mode
        return self

    def eval(self) -> "Layer":
        return self.train(False)

    # ---- parameters, buffers, sublayers ---------------------------------------------------
    def create_parameter(self, shape: Sequence[int], attr: Any = None, dtype: Any = None, is_bias: bool = False,
                         default_initializer: Any = None) -> Optional[Parameter]:
        """A parameter named ``{full_name}.w_k`` / ``.b_k`` in the current main and startup programs.

        No ``dtype`` (None or ""): the default dtype (``paddle.get_default_dtype()``), as Paddle's
        ``LayerHelperBase.create_parameter`` falls back on it -- not the layer's own ``_dtype``.
        """
        helper = LayerHelper(self._full_name, name=self._full_name)
        no_dtype = dtype is None or (isinstance(dtype, str) and not dtype)
        dtype = get_default_dtype() if no_dtype else convert_dtype(dtype)
        return helper.create_parameter(attr, list(shape), dtype, is_bias=is_bias,
                                       default_initializer=default_initializer)

    def add_parameter(self, name: str, parameter: Optional[Parameter]) -> Optional[Parameter]:
        if "." in name or not name:
            raise InvalidArgument(f"{type(self).__name__}.add_parameter: bad name {name!r}")
        if parameter is not None and not isinstance(parameter, Parameter):
            raise InvalidArgument(f"{type(self).__name__}.add_parameter({name!r}): expected a Parameter, "
                                  f"got {type(parameter).__name__}")
        if hasattr(self, name) and name not in self._parameters:
            raise InvalidArgument(f"{type(self).__name__}.add_parameter: attribute {name!r} already exists")
        self._parameters[name] = parameter
        return parameter

    def add_sublayer(self, name: str, sublayer: Optional["Layer"]) -> Optional["Layer"]:
        if sublayer is not None and not isinstance(sublayer, Layer):
            raise InvalidArgument(f"{type(self).__name__}.add_sublayer({name!r}): expected a Layer, "
                                  f"got {type(sublayer).__name__}")
        self._sub_layers[str(name)] = sublayer
        return sublayer

    def register_buffer(self, name: str, tensor: Optional[Variable], persistable: bool = True) -> None:
        if not isinstance(name, str) or not name or "." in name:
            raise InvalidArgument(f"{type(self).__name__}.register_buffer: bad name {name!r}")
        if tensor is not None and not isinstance(tensor, Variable):
            raise InvalidArgument(f"{type(self).__name__}.register_buffer({name!r}): expected a Variable, "
                                  f"got {type(tensor).__name__}")
        self._buffers[name] = tensor
        if persistable:
            self._non_persistable_buffer_names_set.discard(name)
        else:
            self._non_persistable_buffer_names_set.add(name)

    def parameters(self, include_sublayers: bool = True) -> List[Parameter]:
        return [p for _, p in self.named_parameters(include_sublayers=include_sublayers)]

    def named_parameters(self, prefix: str = "", include_sublayers: bool = True) -> Iterator[Tuple[str, Parameter]]:
        """(structured name, parameter), each parameter once, in registration order."""
        seen = set()
        layers = self.named_sublayers(prefix=prefix, include_self=True) if include_sublayers else [(prefix, self)]
        for layer_prefix, layer in layers:
            for key, p in layer._parameters.items():
                if p is None or id(p) in seen:
                    continue
                seen.add(id(p))
                yield (layer_prefix + "." if layer_prefix else "") + key, p

    def buffers(self, include_sublayers: bool = True) -> List[Variable]:
        return [b for _, b in self.named_buffers(include_sublayers=include_sublayers)]

    def named_buffers(self, prefix: str = "", include_sublayers: bool = True) -> Iterator[Tuple[str, Variable]]:
        seen = set()
        layers = self.named_sublayers(prefix=prefix, include_self=True) if include_sublayers else [(prefix, self)]
        for layer_prefix, layer in layers:
            for key, b in layer._buffers.items():
                if b is None or id(b) in seen:
                    continue
                seen.add(id(b))
                yield (layer_prefix + "." if layer_prefix else "") + key, b

    def children(self) -> Iterator["Layer"]:
        for _, layer in self.named_children():
            yield layer

    def named_children(self) -> Iterator[Tuple[str, "Layer"]]:
        seen = set()
        for name, layer in self._sub_layers.items():
            if layer is not None and id(layer) not in seen:
                seen.add(id(layer))
                yield name, layer

    def sublayers(self, include_self: bool = False) -> List["Layer"]:
        return [layer for _, layer in self.named_sublayers(include_self=include_self)]

    def named_sublayers(self, prefix: str = "", include_self: bool = False,
                        layers_set: Optional[set] = None) -> Iterator[Tuple[str, "Layer"]]:
        """Depth first, pre-order; each layer once (the first path that reaches it)."""
        if layers_set is None:
            layers_set = set()
        if include_self and id(self) not in layers_set:
            layers_set.add(id(self))
            yield prefix, self
        for key, layer in self._sub_layers.items():
            if layer is None:
                continue
            sub_prefix = prefix + ("." if prefix else "") + key
            yield from layer.named_sublayers(prefix=sub_prefix, include_self=True, layers_set=layers_set)

    def apply(self, fn: Callable[["Layer"], None]) -> "Layer":
        for layer in self.children():
            layer.apply(fn)
        fn(self)
        return self

    # ---- state dict ------------------------------------------------------------------------
    def state_dict(self, destination: Optional[Dict[str, Variable]] = None, include_sublayers: bool = True,
                   structured_name_prefix: str = "", use_hook: bool = True) -> "OrderedDict[str, Variable]":
        """Structured name -> Parameter (and persistable buffer) variables; a shared one under every name."""
        if destination is None:
            destination = OrderedDict()
        for name, p in self._parameters.items():
            if p is not None:
                destination[structured_name_prefix + name] = p
        for name, b in self._buffers.items():
            if b is not None and name not in self._non_persistable_buffer_names_set:
                destination[structured_name_prefix + name] = b
        if include_sublayers:
            for name, layer in self._sub_layers.items():
                if layer is not None:
                    layer.state_dict(destination, True, structured_name_prefix + name + ".")
        return destination

    def set_state_dict(self, state_dict: Dict[str, Any], use_structured_name: bool = True
                       ) -> Tuple[List[str], List[str]]:
        """Write the arrays of ``state_dict`` into the global scope; return (missing_keys, unexpected_keys).

        A key that is missing or whose value has the wrong shape is skipped with a warning, as in Paddle.
        """
        import warnings
        from refimpl.core.scope import global_scope
        missing, matched, pairs = [], set(), []
        for key, var in self.state_dict().items():
            key = key if use_structured_name else var.name
            value = state_dict.get(key)
            if value is None:
                missing.append(key)
                warnings.warn(f"Skip loading for {key}. {key} is not found in the provided dict.")
                continue
            shape = list(np.shape(value))
            if shape != list(var.shape):
                missing.append(key)
                warnings.warn(f"Skip loading for {key}. {key} receives a shape {shape}, "
                              f"but the expected shape is {list(var.shape)}.")
                continue
            matched.add(key)
            pairs.append((var, value))
        unexpected = [k for k in state_dict if k not in matched]
        scope = global_scope()
        for var, value in pairs:
            holder = scope.find_var(var.name)
            if holder is None:
                raise NotFound(f"{type(self).__name__}.set_state_dict: variable {var.name!r} is not in the "
                               f"global scope (run the startup program first)")
            holder.get_tensor().set(np.asarray(value, dtype=var.dtype))
        return missing, unexpected

    load_dict = set_state_dict
    set_dict = set_state_dict

    # ---- calling --------------------------------------------------------------------------------
    def register_forward_pre_hook(self, hook: Callable) -> HookRemoveHelper:
        handle = HookRemoveHelper(self._forward_pre_hooks)
        self._forward_pre_hooks[handle._id] = hook
        return handle

    def register_forward_post_hook(self, hook: Callable) -> HookRemoveHelper:
        handle = HookRemoveHelper(self._forward_post_hooks)
        self._forward_post_hooks[handle._id] = hook
        return handle

    def __call__(self, *inputs: Any, **kwargs: Any) -> Any:
        check_static_mode(f"paddle.nn.{type(self).__name__}.__call__")  # Paddle runs it eagerly in dygraph
        for hook in list(self._forward_pre_hooks.values()):
            result = hook(self, inputs)
            if result is not None:
                inputs = result if isinstance(result, tuple) else (result,)
        outputs = self.forward(*inputs, **kwargs)
        for hook in list(self._forward_post_hooks.values()):
            result = hook(self, inputs, outputs)
            if result is not None:
                outputs = result
        return outputs

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.forward is not implemented")

    # ---- attribute registration -------------------------------------------------------------------
    def __setattr__(self, name: str, value: Any) -> None:
        d = self.__dict__
        params, layers, buffers = d.get("_parameters"), d.get("_sub_layers"), d.get("_buffers")
        if isinstance(value, Parameter):
            if params is None:
                raise InvalidArgument("super().__init__() should be called first")
            for other in (d, buffers, layers):
                other.pop(name, None)
            params[name] = value
        elif params is not None and name in params:
            if value is not None:
                raise TypeError(f"assignment to parameter '{name}' should be of type Parameter or None, "
                                f"but got '{type(value).__name__}'")
            params[name] = None
        elif isinstance(value, Layer):
            if layers is None:
                raise InvalidArgument("super().__init__() should be called first")
            for other in (d, params, buffers):
                other.pop(name, None)
            layers[name] = value
        elif layers is not None and name in layers:
            if value is not None:
                raise TypeError(f"assignment to sublayer '{name}' should be of type Layer or None, "
                                f"but got '{type(value).__name__}'")
            layers[name] = None
        elif buffers is not None and name in buffers:
            if value is not None and not isinstance(value, Variable):
                raise TypeError(f"assignment to buffer '{name}' should be of type Variable or None, "
                                f"but got '{type(value).__name__}'")
            buffers[name] = value
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> Any:
        d = self.__dict__
        for key in ("_parameters", "_sub_layers", "_buffers"):
            table = d.get(key)
            if table is not None and name in table:
                return table[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name: str) -> None:
        for key in ("_parameters", "_sub_layers", "_buffers"):
            if name in self.__dict__.get(key, {}):
                del self.__dict__[key][name]
                return
        object.__delattr__(self, name)

    def __dir__(self) -> List[str]:
        return sorted(set(super().__dir__()) | set(self._parameters) | set(self._sub_layers) | set(self._buffers))

    # ---- printing ---------------------------------------------------------------------------------------
    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        extra = self.extra_repr().split("\n")
        subs = ["(" + key + "): " + _add_indent(repr(layer), 2) for key, layer in self._sub_layers.items()]
        text = type(self).__name__ + "("
        text += ("\n  " + "\n  ".join(extra) + "\n") if len(extra) > 1 else extra[0]
        if subs:
            text += "\n  " + "\n  ".join(subs) + "\n"
        return text + ")"
