"""Parameter-server table settings of DistributedStrategy (``sparse_table_configs``, ``fleet_desc_configs``).

Mirrors the two table setters of Paddle 3.3.1's ``DistributedStrategy``:

* ``sparse_table_configs = {table: {"table_parameters.<table>.<field path>":
  value, ...}}`` fills a ``TableParameter`` message from dotted field paths
  (``<path>.num`` makes that many items of a repeated message; a list value
  gives item ``i`` its ``i``-th element), as Paddle does;
* ``fleet_desc_configs = {table: {"sparse_shard_num": 8, ...}}`` checks the
  keys, the table class and the accessor class with Paddle's messages and
  fills every field Paddle fills, with Paddle's defaults (the table cache,
  the accessor's class, sizes and CTR coefficients, the two save params,
  the SGD rule of the embedding and of embedx, the graph SGD parameters).
"""
from __future__ import annotations

from typing import Any, Dict, List

from refimpl.core.errors import InvalidArgument

from .strategy_message import Message

FLEET_DESC_KEYS = (  # the per-table keys Paddle's fleet_desc_configs accepts
    "sparse_table_class sparse_compress_in_save sparse_shard_num sparse_accessor_class sparse_learning_rate "
    "sparse_initial_g2sum sparse_initial_range sparse_weight_bounds sparse_fea_dim sparse_embedx_dim "
    "sparse_embedx_threshold sparse_nonclk_coeff sparse_click_coeff sparse_base_threshold sparse_delta_threshold "
    "sparse_delta_keep_days sparse_delete_after_unseen_days sparse_show_click_decay_rate sparse_delete_threshold "
    "sparse_converter sparse_deconverter sparse_enable_cache sparse_cache_rate sparse_cache_file_num "
    "sparse_beta1_decay_rate sparse_beta2_decay_rate sparse_ada_epsilon sparse_optimizer "
    "sparse_ssd_unseenday_threshold embed_sparse_optimizer embed_sparse_learning_rate embed_sparse_weight_bounds "
    "embed_sparse_initial_range embed_sparse_initial_g2sum embed_sparse_beta1_decay_rate "
    "embed_sparse_beta2_decay_rate embedx_sparse_optimizer embedx_sparse_learning_rate "
    "embedx_sparse_weight_bounds embedx_sparse_initial_range embedx_sparse_initial_g2sum "
    "embedx_sparse_beta1_decay_rate embedx_sparse_beta2_decay_rate feature_learning_rate nodeid_slot "
    "sparse_load_filter_slots sparse_save_filter_slots sparse_zero_init use_gpu_graph").split()
TABLE_CLASSES = {"DownpourSparseTable": "MemorySparseTable", "DownpourSparseSSDTable": "SSDSparseTable"}
ACCESSOR_CLASSES = ("DownpourSparseValueAccessor", "DownpourCtrAccessor", "DownpourCtrDoubleAccessor",
                     "DownpourUnitAccessor", "DownpourDoubleUnitAccessor", "DownpourCtrDymfAccessor")


def sparse_tables(configs: Dict[str, Any]) -> List[Message]:
    """One ``TableParameter`` per table of Paddle's flat ``sparse_table_configs`` dict."""
    tables = []
    for name, flat in configs.items():
        table = Message("TableParameter", {"table_name": name})
        _fill(table, "table_parameters." + name, flat)
        tables.append(table)
    return tables


def _fill(msg, prefix, flat, index=0):
    """Paddle's ``sparse_table_configs`` walk: keys are dotted field paths under ``prefix``."""
    for name, f in msg.fields.items():
        key = f"{prefix}.{name}"
        if f.message and f.repeated:
            for i in range(flat.get(key + ".num", 0)):
                child = Message(f.message)
                _fill(child, key, flat, i)
                msg.get(name).append(child)
        elif f.message:
            _fill(msg.get(name), key, flat, index)
        elif key in flat:
            value = flat[key]
            if f.repeated:
                msg.extend(name, value)
            else:
                msg.set(name, value[index] if type(value) is list else value)


def fleet_desc_tables(configs: Dict[str, Any]) -> List[Message]:
    """One ``TableParameter`` per sparse table of ``fleet_desc_configs`` (dense/datanorm tables are skipped)."""
    tables = []
    for name, config in configs.items():
        if name in ("dense_table", "datanorm_table") or type(config) is not dict:
            continue
        table = Message("TableParameter", {"table_name": name})
        _fill_fleet_desc(table, config, use_cvm=configs.get("use_cvm", True))
        tables.append(table)
    return tables


#: (field of the table, config key, default) and (field of ctr_accessor_param, config key, default)
_TABLE_KEYS = (("shard_num", "sparse_shard_num", 1000), ("enable_sparse_table_cache", "sparse_enable_cache", True),
               ("sparse_table_cache_rate", "sparse_cache_rate", 0.00055),
               ("sparse_table_cache_file_num", "sparse_cache_file_num", 16), ("use_gpu_graph", "use_gpu_graph", False))
_CTR_KEYS = (("nonclk_coeff", "sparse_nonclk_coeff", 0.1), ("click_coeff", "sparse_click_coeff", 1),
             ("base_threshold", "sparse_base_threshold", 1.5), ("delta_threshold", "sparse_delta_threshold", 0.25),
             ("delta_keep_days", "sparse_delta_keep_days", 16),
             ("show_click_decay_rate", "sparse_show_click_decay_rate", 0.98),
             ("delete_threshold", "sparse_delete_threshold", 0.8),
             ("delete_after_unseen_days", "sparse_delete_after_unseen_days", 30),
             ("ssd_unseenday_threshold", "sparse_ssd_unseenday_threshold", 1))


def _fill_fleet_desc(table, config, use_cvm):
    """Paddle's ``set_sparse_table_config``: check the keys and classes, then every field with its default."""
    unknown = [k for k in config if k not in FLEET_DESC_KEYS]
    if unknown:
        raise InvalidArgument(f"strategy key '{unknown[0]}' not support")
    table_class = config.get("sparse_table_class", "DownpourSparseTable")
    if table_class not in TABLE_CLASSES:
        raise InvalidArgument(f"support sparse_table_class: {list(TABLE_CLASSES)}, but actual {table_class}")
    accessor_class = config.get("sparse_accessor_class", "DownpourCtrAccessor")
    if accessor_class not in ACCESSOR_CLASSES:
        raise InvalidArgument(f"support sparse_accessor_class: {list(ACCESSOR_CLASSES)}, but actual "
                              f"{accessor_class}")
    table.table_class = TABLE_CLASSES[table_class]
    for field, key, default in _TABLE_KEYS:
        table.set(field, config.get(key, default))
    acc = table.accessor
    acc.accessor_class = ("CtrDoubleAccessor" if "Double" in accessor_class else
                          "CtrDymfAccessor" if "Dymf" in accessor_class else "CtrCommonAccessor")
    if not use_cvm:
        acc.accessor_class = "SparseAccessor"
    acc.embedx_dim = config.get("sparse_embedx_dim", 8)
    acc.fea_dim = acc.embedx_dim + 3
    acc.embedx_threshold = config.get("sparse_embedx_threshold", 10)
    ctr = acc.ctr_accessor_param
    ctr.show_scale = accessor_class != "DownpourUnitAccessor"
    for field, key, default in _CTR_KEYS:
        ctr.set(field, config.get(key, default))
    ctr.extend("load_filter_slots", config.get("sparse_load_filter_slots", []))
    ctr.extend("save_filter_slots", config.get("sparse_save_filter_slots", []))
    ctr.zero_init = config.get("sparse_zero_init", True) and not table.use_gpu_graph
    converters = {"converter": config.get("sparse_converter", ""), "deconverter": config.get("sparse_deconverter", "")}
    acc.extend("table_accessor_save_param", [dict(param=1, **converters), dict(param=2, **converters)])
    ctr_like = accessor_class in ("DownpourCtrAccessor", "DownpourCtrDoubleAccessor")
    _sgd_rule(acc.embed_sgd_param, config, "" if ctr_like else "embed_")
    _sgd_rule(acc.embedx_sgd_param, config, "" if ctr_like else "embedx_")
    acc.graph_sgd_param.feature_learning_rate = config.get("feature_learning_rate", 0.05)
    acc.graph_sgd_param.nodeid_slot = config.get("nodeid_slot", 9008)


#: optimizer name -> (rule name, sub-message, default learning rate)
_SGD_RULES = {"naive": ("SparseNaiveSGDRule", "naive", 0.05), "adagrad": ("SparseAdaGradSGDRule", "adagrad", 0.05),
              "adagrad_v2": ("SparseAdaGradV2SGDRule", "adagrad", 0.05),
              "std_adagrad": ("StdAdaGradSGDRule", "adagrad", 0.05), "adam": ("SparseAdamSGDRule", "adam", 0.001),
              "shared_adam": ("SparseSharedAdamSGDRule", "adam", 0.001)}


def _sgd_rule(sgd, config, prefix):
    """Paddle's ``sparse_optimizer_config``: the SGD rule of one embedding part (``prefix``: '', embed_, embedx_)."""
    name = config.get(prefix + "sparse_optimizer", "adagrad")
    sgd.name = name
    if name not in _SGD_RULES:
        return  # as Paddle: an unknown optimizer only sets the name
    sgd.name, sub, lr = _SGD_RULES[name]
    rule = sgd.get(sub)
    rule.learning_rate = config.get(prefix + "sparse_learning_rate", lr)
    rule.initial_range = config.get(prefix + "sparse_initial_range", 1e-4)
    if sub == "adagrad":
        if prefix == "embed_":
            rule.initial_range = 0
        rule.initial_g2sum = config.get(prefix + "sparse_initial_g2sum", 3)
    elif sub == "adam":
        rule.beta1_decay_rate = config.get(prefix + "sparse_beta1_decay_rate", 0.9)
        rule.beta2_decay_rate = config.get(prefix + "sparse_beta2_decay_rate", 0.999)
        rule.ada_epsilon = config.get(prefix + "sparse_ada_epsilon", 1e-8)
    rule.extend("weight_bounds", config.get(prefix + "sparse_weight_bounds", [-10, 10]))
