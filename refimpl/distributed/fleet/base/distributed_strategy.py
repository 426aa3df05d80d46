"""``DistributedStrategy``: every distributed-training setting in one object.

Mirrors ``paddle.distributed.fleet.DistributedStrategy`` of Paddle 3.3.1:
the same public properties with the same defaults (those of the
``paddle.fleet.DistributedStrategy`` protobuf message, kept here as a
:class:`~.strategy_message.Message` in ``strategy.strategy``), and the same
setter behaviour:

* switches (``amp``, ``pipeline`` ...) and number settings ignore a value of
  the wrong type with a warning on the ``refimpl.distributed.fleet`` logger
  (``amp should have value of bool type``); ``a_sync`` / ``adam_d2sum``
  raise ``ValueError``, ``fp16_allreduce`` ``TypeError`` and
  ``last_comm_group_size_MB`` rejects values <= 0;
* ``*_configs`` setters reject unknown keys naming the key (an
  ``InvalidArgument`` that is also Paddle's ``AssertionError``), then set
  the keys in order with protobuf's type rules: repeated fields (e.g.
  ``recompute_configs["checkpoints"]``) are *extended*; a failing key keeps
  the keys before it;
* ``hybrid_configs`` takes ``order`` (-> ``hybrid_parallel_order``),
  ``mp_configs`` (``sync_param_name`` -> ``sync_param_name``) and
  ``pp_configs`` as nested dicts;
* setting an attribute that does not exist raises ``TypeError``;
* ``_is_strict_auto()`` is true while ``auto`` is on and no other setter of
  any strategy has run in this process (module-wide state, as in Paddle).

Getters answer as Paddle's: ``*_configs`` a dict whose nested messages are
:class:`~.strategy_message.Message` objects with attribute access
(``hybrid_configs["mp_configs"].sync_param``), ``fs_client_param`` the
message, ``sparse_table_configs`` / ``fleet_desc_configs`` the list of
``TableParameter`` messages. Differences: those messages are refimpl's, not
protobuf's (they also read as dicts); ``build_strategy`` gives a new
``refimpl.static.BuildStrategy``; ``hybrid_configs`` never mutates the
caller's dict (Paddle pops ``mp_configs`` / ``pp_configs`` and
``sync_param_name`` from it); ``recompute_configs["refined_ops_patterns"]``
takes a list of dicts with their values (Paddle appends empty patterns);
``fleet_desc_configs`` checks keys and classes but records only the table
names, classes and sizes (refimpl has no parameter server); ``_enable_env``
is a no-op (refimpl has none of those flags). Additions: ``to_dict`` /
``from_dict`` and ``to_json`` / ``from_json`` (a lossless round trip), and
``_unimplemented_enabled()``, the enabled settings refimpl cannot apply.
"""
from __future__ import annotations

import copy
import json
import logging
from typing import Any, Dict, List, Optional

from refimpl.core.errors import InvalidArgument
from refimpl.static.build_strategy import BuildStrategy, ReduceStrategy

from .compat_errors import InvalidArgumentType
from .ps_table_configs import fleet_desc_tables, sparse_tables
from .strategy_message import Message, assign, check_keys, merge_dict, parse_text, to_text

logger = logging.getLogger("refimpl.distributed.fleet")

#: Paddle's module flag: False once any strict-auto-breaking setter has run
non_auto_func_called = True


def _breaks_strict_auto(fset):
    def setter(self, value):
        global non_auto_func_called
        non_auto_func_called = False
        return fset(self, value)
    return setter


def _switch(name, kind=bool, field=None, warning=None, strict=True):
    """A bool/int/float property; a value that is not a ``kind`` is ignored with a warning."""
    field = field or name
    warning = warning or f"{name} should have value of {kind.__name__} type"

    def fset(self, value):
        if isinstance(value, kind):
            self.strategy.set(field, value)
        else:
            logger.warning(warning)
    return property(lambda self: self.strategy.get(field), _breaks_strict_auto(fset) if strict else fset,
                    doc=f"``{field}`` of the strategy message ({kind.__name__}).")


def _msg_dict(msg):
    """Paddle's ``get_msg_dict``: field -> value, nested messages kept as messages, repeated fields as lists."""
    return {name: list(msg.get(name)) if f.repeated else msg.get(name) for name, f in msg.fields.items()}


def _configs(name, label=None, strict=True):
    """A ``*_configs`` property: a dict getter; the setter checks keys, then assigns them in order."""
    def fset(self, configs):
        msg = self.strategy.get(name)
        check_keys(msg, configs, label or name)
        assign(msg, configs)
    return property(lambda self: _msg_dict(self.strategy.get(name)), _breaks_strict_auto(fset) if strict else fset,
                    doc=f"The ``{name}`` message as a dict; setting merges the given keys.")


def _strict_bool(name, error):
    """A bool property whose setter raises ``error(value)`` for a non-bool."""
    def fset(self, flag):
        if not isinstance(flag, bool):
            raise error(flag)
        self.strategy.set(name, flag)
        if name == "a_sync":  # Paddle resets the step count whenever a_sync is set
            self.a_sync_configs = {"k_steps": 0}
    return property(lambda self: self.strategy.get(name), _breaks_strict_auto(fset), doc=f"``{name}`` (bool).")


def _bad_flag(flag):
    return InvalidArgument(  # a ValueError, as in Paddle
        f"The type of `flag` is invalid, expected type is bool, but received {type(flag)}")


# Unsupported by refimpl when switched on (see _unimplemented_enabled); amp, recompute, lars, lamb, dgc,
# localsgd, adaptive_localsgd and fp16_allreduce are applied by fleet's meta-optimizers
UNIMPLEMENTED_SWITCHES = ("asp", "qat", "elastic", "auto", "semi_auto",
                          "auto_search", "heter_ccl_mode", "is_fl_ps_mode", "sync_batch_norm",
                          "use_hierarchical_allreduce", "fuse_grad_merge", "adam_d2sum")
_UNIMPLEMENTED_DEGREES = ("sep_degree", "cp_degree", "ep_degree",
                          "moe_sharding_degree")


class DistributedStrategy:
    """All distributed-training settings (see the module docstring for the rules)."""

    _locked = False

    def __init__(self):
        self.strategy = Message("DistributedStrategy")
        self.hybrid_parallel_order = ["dp", "pp", "sharding", "sep", "cp", "mp"]
        self.sync_param_name = ["embedding", "layer_norm", ".b_"]
        self._locked = True
        logger.info("distributed strategy initialized")

    def __setattr__(self, key, value):
        if self._locked and not hasattr(self, key) and key not in self.strategy.fields:
            raise InvalidArgumentType(f"{key} is not a attribute of {type(self).__name__}")
        object.__setattr__(self, key, value)

    # ---- switches: a wrong type is ignored with a warning ----------------------
    amp = _switch("amp")
    asp = _switch("asp")
    recompute = _switch("recompute")
    sync_nccl_allreduce = _switch("sync_nccl_allreduce")
    use_hierarchical_allreduce = _switch("use_hierarchical_allreduce")
    sync_batch_norm = _switch("sync_batch_norm")
    fuse_all_reduce_ops = _switch("fuse_all_reduce_ops")
    find_unused_parameters = _switch("find_unused_parameters")
    sharding = _switch("sharding")
    without_graph_optimization = _switch("without_graph_optimization")
    _calc_comm_same_stream = _switch("_calc_comm_same_stream", field="calc_comm_same_stream",
                                     warning="calc_comm_same_stream should have value of boolean type")
    fuse_grad_merge = _switch("fuse_grad_merge", warning="fuse_grad_merge should have value of boolean type")
    is_fl_ps_mode = _switch("is_fl_ps_mode")
    is_with_coordinator = _switch("is_with_coordinator", field="with_coordinator",
                                  warning="with_coordinator should have value of bool type")
    pipeline = _switch("pipeline")
    tensor_parallel = _switch("tensor_parallel")
    localsgd = _switch("localsgd")
    adaptive_localsgd = _switch("adaptive_localsgd")
    dgc = _switch("dgc")
    gradient_merge = _switch("gradient_merge")
    lars = _switch("lars")
    lamb = _switch("lamb")
    elastic = _switch("elastic")
    cudnn_exhaustive_search = _switch("cudnn_exhaustive_search")
    cudnn_batchnorm_spatial_persistent = _switch("cudnn_batchnorm_spatial_persistent")
    auto = _switch("auto", strict=False)
    semi_auto = _switch("semi_auto", warning="semi-auto should have value of bool type", strict=False)
    auto_search = _switch("auto_search", warning="auto-search should have value of bool type", strict=False)
    split_data = _switch("split_data", strict=False)
    qat = _switch("qat", strict=False)
    heter_ccl_mode = _switch("heter_ccl_mode", strict=False)
    nccl_comm_num = _switch("nccl_comm_num", int)
    hierarchical_allreduce_inter_nranks = _switch("hierarchical_allreduce_inter_nranks", int)
    fuse_grad_size_in_MB = _switch("fuse_grad_size_in_MB", int)
    fuse_grad_size_in_num = _switch("fuse_grad_size_in_num", int,
                                    warning="fuse_grad_size_in_num should have value of int32 type")
    conv_workspace_size_limit = _switch("conv_workspace_size_limit", int)
    _fuse_grad_size_in_TFLOPS = _switch("_fuse_grad_size_in_TFLOPS", float, field="fuse_grad_size_in_TFLOPS",
                                        warning="fuse_grad_size_in_TFLOPS should have value of float type")
    # ---- switches that raise ----------------------------------------------------------
    a_sync = _strict_bool("a_sync", _bad_flag)
    adam_d2sum = _strict_bool("adam_d2sum", _bad_flag)
    fp16_allreduce = _strict_bool("fp16_allreduce",
                                  lambda flag: InvalidArgumentType("fp16_allreduce must be value of bool type"))

    @property
    def last_comm_group_size_MB(self) -> float:
        return self.strategy.get("last_comm_group_size_MB")

    @last_comm_group_size_MB.setter
    @_breaks_strict_auto
    def last_comm_group_size_MB(self, value: float) -> None:
        if not value > 0:
            raise InvalidArgument("last_comm_group_size_MB should be greater than 0")
        self.strategy.set("last_comm_group_size_MB", value)

    # ---- config dicts -------------------------------------------------------------------
    amp_configs = _configs("amp_configs")
    recompute_configs = _configs("recompute_configs", label="checkpoint_configs")
    sharding_configs = _configs("sharding_configs")
    pipeline_configs = _configs("pipeline_configs")
    tensor_parallel_configs = _configs("tensor_parallel_configs")
    localsgd_configs = _configs("localsgd_configs")
    adaptive_localsgd_configs = _configs("adaptive_localsgd_configs")
    dgc_configs = _configs("dgc_configs")
    gradient_merge_configs = _configs("gradient_merge_configs", label="gradient_configs")
    lars_configs = _configs("lars_configs")
    lamb_configs = _configs("lamb_configs")
    a_sync_configs = _configs("a_sync_configs")
    trainer_desc_configs = _configs("trainer_desc_configs")
    fs_client_param = property(lambda self: self.strategy.get("fs_client_param"), _configs("fs_client_param").fset,
                               doc="The ``FsClientParameter`` message (``.uri``, ``.user`` ...); setting merges keys.")
    gradient_scale_configs = _configs("gradient_scale_configs")
    qat_configs = _configs("qat_configs", strict=False)

    @property
    def hybrid_configs(self) -> Dict[str, Any]:
        """Degrees of data/model/pipeline/sharding/sep parallelism and their nested configs."""
        return _msg_dict(self.strategy.get("hybrid_configs"))

    @hybrid_configs.setter
    def hybrid_configs(self, configs: Dict[str, Any]) -> None:
        configs = copy.deepcopy(configs)  # never touch the caller's dict
        if "order" in configs:
            self.hybrid_parallel_order = configs.pop("order")
        msg = self.strategy.get("hybrid_configs")
        check_keys(msg, configs, "hybrid_configs")
        mp = configs.pop("mp_configs", None)
        if mp is not None:
            if "sync_param_name" in mp:
                self.sync_param_name = mp.pop("sync_param_name")
            assign(msg.get("mp_configs"), mp)
        pp = configs.pop("pp_configs", None)
        if pp is not None:
            assign(msg.get("pp_configs"), pp)
        assign(msg, configs)

    @property
    def build_strategy(self) -> BuildStrategy:
        """A new :class:`BuildStrategy` holding the fields stored in the strategy."""
        bs = BuildStrategy()
        for name, value in self.strategy.get("build_strategy").to_dict().items():
            setattr(bs, name, ReduceStrategy(value) if name == "reduce_strategy" else value)
        return bs

    @build_strategy.setter
    @_breaks_strict_auto
    def build_strategy(self, build_strategy: BuildStrategy) -> None:
        msg = self.strategy.get("build_strategy")
        for name, f in msg.fields.items():  # copies every field the message has, as Paddle does
            value = getattr(build_strategy, name)
            if f.repeated:
                msg.extend(name, value)
            else:
                msg.set(name, int(value) if name == "reduce_strategy" else value)

    @property
    def sparse_table_configs(self) -> List[Message]:
        """The parameter-server tables: a copy of the ``downpour_table_param`` list (its messages live)."""
        return list(self.strategy.get("downpour_table_param"))

    @sparse_table_configs.setter
    @_breaks_strict_auto
    def sparse_table_configs(self, configs: Optional[Dict[str, Any]]) -> None:
        if not configs:
            logger.info("table configs is empty")
        self.strategy.get("downpour_table_param").extend(sparse_tables(configs or {}))

    fleet_desc_configs = property(sparse_table_configs.fget, doc="The parameter-server tables (messages).")

    @fleet_desc_configs.setter
    def fleet_desc_configs(self, configs: Optional[Dict[str, Any]]) -> None:
        if not configs:
            logger.info("fleet desc config is empty")
        self.strategy.get("downpour_table_param").extend(fleet_desc_tables(configs or {}))

    # ---- Paddle's helpers ------------------------------------------------------------------
    def _is_strict_auto(self):
        """Auto mode with nothing else configured (``auto`` on, no other setter called yet)."""
        return bool(self.strategy.get("auto")) and non_auto_func_called

    def _enable_env(self):
        """Paddle copies a few settings into global flags here; refimpl has none of those flags."""

    def save_to_prototxt(self, output: str) -> None:
        """Write the set fields in protobuf text format (Paddle's prototxt)."""
        with open(output, "w") as f:
            f.write(to_text(self.strategy))

    def load_from_prototxt(self, pb_file: str) -> None:
        """Merge a prototxt written by Paddle or :meth:`save_to_prototxt` into this strategy."""
        with open(pb_file) as f:
            parse_text(self.strategy, f.read())

    # ---- refimpl additions -------------------------------------------------------------------
    def to_dict(self, only_set: bool = True) -> Dict[str, Any]:
        """The settings as plain data (``only_set``: just the fields that were set, like prototxt)."""
        return {"strategy": self.strategy.to_dict(only_set=only_set),
                "hybrid_parallel_order": list(self.hybrid_parallel_order),
                "sync_param_name": list(self.sync_param_name)}

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> DistributedStrategy:
        """A new strategy from :meth:`to_dict` output."""
        s = cls()
        merge_dict(s.strategy, data.get("strategy", {}))
        for key in ("hybrid_parallel_order", "sync_param_name"):
            if key in data:
                setattr(s, key, list(data[key]))
        return s

    def to_json(self, only_set: bool = True, **dump_kwargs: Any) -> str:
        return json.dumps(self.to_dict(only_set), **dump_kwargs)

    @classmethod
    def from_json(cls, text: str) -> DistributedStrategy:
        return cls.from_dict(json.loads(text))

    def _unimplemented_enabled(self, is_collective=True):
        """The enabled settings refimpl cannot apply, e.g. ``["amp", "hybrid_configs.mp_degree"]``.

        ``a_sync`` (on by default) only matters for parameter-server training,
        so it is listed only when ``is_collective`` is False.
        """
        out = [name for name in UNIMPLEMENTED_SWITCHES if getattr(self, name) is True]
        if not is_collective and self.a_sync:
            out.append("a_sync")
        hybrid = self.strategy.get("hybrid_configs")
        out += [f"hybrid_configs.{k}" for k in _UNIMPLEMENTED_DEGREES if hybrid.get(k) > 1]
        return out

    def __repr__(self):
        return _overview(self)


def _overview(s, key_width=38, value_width=38):
    """The boxed table Paddle prints for a strategy: enabled strategies with their configs, then the rest."""
    width = key_width + value_width + 2
    border, line = "    +" + "=" * width + "+\n", "    +" + "-" * width + "+\n"

    def title(text):
        return f"    |{text:^{width}}|\n"

    def row(key, value):
        return f"    |{key:>{key_width}}  {str(value):^{value_width}}|\n"

    msg = s.strategy
    out = border + title("") + title("DistributedStrategy Overview") + title("")
    env = line
    for name, f in msg.fields.items():
        if name == "build_strategy" or name.endswith("_configs") or f.message or f.repeated:
            continue
        value = msg.get(name)
        if f.type == "bool" and name + "_configs" in msg.fields:
            if value:
                out += border + title(f"{name}=True <-> {name}_configs") + line
                configs = msg.get(name + "_configs")
                for key, cf in configs.fields.items():
                    v = configs.get(key)
                    if cf.repeated and not cf.message:
                        out += "".join(row(key if i == 0 else "", x) for i, x in enumerate(v))
                    elif not cf.message and not cf.repeated:
                        out += row(key, v)
        else:
            env += row(name, value)
    out += border + title("Environment Flags, Communication Flags") + env + border + title("Build Strategy") + line
    for name, value in msg.get("build_strategy").to_dict().items():
        out += row(name, value)
    return out + border


__all__ = ["DistributedStrategy", "UNIMPLEMENTED_SWITCHES"]
