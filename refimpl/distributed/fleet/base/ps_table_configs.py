"""Parameter-server table settings of DistributedStrategy (``sparse_table_configs``, ``fleet_desc_configs``).

Mirrors the two table setters of Paddle 3.3.1's ``DistributedStrategy``:

* ``sparse_table_configs = {table: {"table_parameters.<table>.<field path>":
  value, ...}}`` fills a ``TableParameter`` message from dotted field paths
  (``<path>.num`` makes that many items of a repeated message; a list value
  gives item ``i`` its ``i``-th element), as Paddle does;
* ``fleet_desc_configs = {table: {"sparse_shard_num": 8, ...}}`` checks the
  keys, the table class and the accessor class with Paddle's messages.

Difference: refimpl has no parameter server, so ``fleet_desc_configs``
records only the table name, class, shard count and accessor class and
sizes; Paddle also fills the accessor's coefficients and SGD rules.
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
        unknown = [k for k in config if k not in FLEET_DESC_KEYS]
        if unknown:
            raise InvalidArgument(f"strategy key '{unknown[0]}' not support")
        table_class = config.get("sparse_table_class", "DownpourSparseTable")
        if table_class not in TABLE_CLASSES:
            raise InvalidArgument(f"support sparse_table_class: {list(TABLE_CLASSES)}, but actual {table_class}")
        accessor = config.get("sparse_accessor_class", "DownpourCtrAccessor")
        if accessor not in ACCESSOR_CLASSES:
            raise InvalidArgument(f"support sparse_accessor_class: {list(ACCESSOR_CLASSES)}, but actual {accessor}")
        embedx_dim = config.get("sparse_embedx_dim", 8)
        tables.append(Message("TableParameter", {
            "table_name": name, "table_class": TABLE_CLASSES[table_class],
            "shard_num": config.get("sparse_shard_num", 1000),
            "accessor": {"accessor_class": accessor, "embedx_dim": embedx_dim, "fea_dim": embedx_dim + 3}}))
    return tables
