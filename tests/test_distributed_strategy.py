"""DistributedStrategy against Paddle 3.3.1 (``fleet.json`` ``strategy``): defaults, setters, schema, round trips."""
import copy
import logging
import re

import pytest

from oracle import check_exception, load_fleet

from refimpl.distributed.fleet import DistributedStrategy
from refimpl.distributed.fleet.base import distributed_strategy as ds_mod
from refimpl.distributed.fleet.base.strategy_message import fields_of, to_text
from refimpl.distributed.fleet.base.strategy_schema import ENUMS, MESSAGES
from refimpl.static import BuildStrategy
from refimpl.static.build_strategy import ReduceStrategy

DATA = load_fleet("strategy")



def py_value(v):
    if isinstance(v, dict) and v.get("__py__") == "build_strategy":
        bs = BuildStrategy()
        for name, value in v["fields"].items():
            setattr(bs, name, ReduceStrategy[value] if name == "reduce_strategy" else value)
        return bs
    return copy.deepcopy(v)


def plain(name, value):
    """A property value in the oracle's encoding."""
    if name == "build_strategy":
        fields = {f: getattr(value, f) for f in fields_of("BuildStrategy")}
        rs = fields["reduce_strategy"]
        fields["reduce_strategy"] = {"__enum__": "ReduceStrategy", "name": rs.name, "value": int(rs)}
        return fields
    return value


@pytest.mark.parametrize("name", sorted(DATA["properties"]))
def test_property_default(name):
    assert plain(name, getattr(DistributedStrategy(), name)) == DATA["properties"][name]["value"]


@pytest.mark.parametrize("name", sorted(DATA["private_properties"]))
def test_private_property_default(name):
    assert getattr(DistributedStrategy(), name) == DATA["private_properties"][name]["value"]


def test_instance_attributes_and_raw_default():
    s = DistributedStrategy()
    for name, value in DATA["instance_attributes"].items():
        assert getattr(s, name) == value
    assert s.strategy.to_dict() == DATA["raw_proto_default"]
    assert to_text(s.strategy) == DATA["prototxt_default"]
    for name in DATA["proto_fields_without_property"]:
        assert name in s.strategy.fields and not isinstance(getattr(DistributedStrategy, name, None), property)


@pytest.mark.parametrize("name", sorted(DATA["absent_attributes"]))
def test_absent_attribute(name):
    rec, s = DATA["absent_attributes"][name], DistributedStrategy()
    assert hasattr(s, name) == rec["hasattr"]
    with pytest.raises(Exception) as info:
        setattr(s, name, 1)
    check_exception(info.value, rec["set_result"]["exception"])


def test_schema_equals_paddle_proto():
    for full_name, fields in DATA["proto_schema"].items():
        mine = fields_of(full_name.split(".")[-1])
        assert list(mine) == list(fields), full_name
        for name, rec in fields.items():
            f = mine[name]
            assert f.repeated == rec["repeated"], (full_name, name)
            if rec["type"] == "message":
                assert f.message == rec["message_type"].split(".")[-1]
            elif rec["type"] == "enum":
                assert ENUMS[f.type[5:]] == rec["enum_values"] and f.default == rec.get("default")
            else:
                assert f.type == rec["type"] and f.default == rec.get("default"), (full_name, name)
    assert set(MESSAGES) == {n.split(".")[-1] for n in DATA["proto_schema"]}


def test_standalone_build_strategy_defaults():
    bs = BuildStrategy()  # refimpl.static's, which DistributedStrategy.build_strategy gives and takes
    for name, want in DATA["standalone_build_strategy_defaults"].items():
        got = getattr(bs, name)
        if name == "reduce_strategy":
            got = {"__enum__": "ReduceStrategy", "name": got.name, "value": int(got)}
        elif isinstance(got, set):
            got = sorted(got)
        assert got == want, name


@pytest.mark.parametrize("case", DATA["set_cases"], ids=[c["id"] for c in DATA["set_cases"]])
def test_set_case(case, caplog):
    s = DistributedStrategy()
    for step in case["steps"]:
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="refimpl.distributed.fleet"):
            if step["outcome"] == "accepted":
                setattr(s, step["set"], py_value(step["value"]))
            else:
                with pytest.raises(Exception) as info:
                    setattr(s, step["set"], py_value(step["value"]))
                check_exception(info.value, step["exception"])
        got = [{"level": r.levelname, "message": r.getMessage()} for r in caplog.records
               if r.name == "refimpl.distributed.fleet" and r.levelno >= logging.WARNING]
        assert got == step.get("log_warnings", [])
    for name, rec in case["observed"].items():
        if "exception" in rec:
            with pytest.raises(Exception) as info:
                getattr(s, name)
            check_exception(info.value, rec["exception"])
        else:
            assert plain(name, getattr(s, name)) == rec["value"], name
    if "prototxt_after" in case:
        assert to_text(s.strategy) == case["prototxt_after"]


def test_hybrid_configs_leaves_the_callers_dict_alone():
    config = {"mp_degree": 2, "mp_configs": {"sync_param_name": ["w"], "sync_param": True}}
    before = copy.deepcopy(config)
    s = DistributedStrategy()
    s.hybrid_configs = config
    assert config == before and s.sync_param_name == ["w"] and s.hybrid_configs["mp_degree"] == 2


def test_strict_auto_sequence(monkeypatch):
    monkeypatch.setattr(ds_mod, "non_auto_func_called", True)
    env = {"DistributedStrategy": DistributedStrategy}
    for step in DATA["strict_auto_sequence"]["sequence"]:
        for stmt in step["op"].split(";"):
            stmt = re.sub(r"new strategy (\w+)", r"\1 = DistributedStrategy()", stmt.strip())
            exec(stmt, env)
        for key, want in step.items():
            if key != "op":
                assert eval(key + "()", env) is want, (step["op"], key)


def _configured():
    s = DistributedStrategy()
    s.gradient_merge = True
    s.gradient_merge_configs = {"k_steps": 4, "avg": False}
    s.pipeline = True
    s.pipeline_configs = {"micro_batch_size": 2, "accumulate_steps": 4, "schedule_mode": "F-then-B"}
    s.hybrid_configs = {"dp_degree": 2, "pp_degree": 2, "order": ["pp", "dp", "sharding", "sep", "mp"],
                        "pp_configs": {"enable_timer": True}}
    s.recompute_configs = {"checkpoints": ["x", "y"]}
    s.amp_configs = {"decr_ratio": 0.7, "custom_white_list": ["matmul"]}
    s.dgc_configs = {"sparsity": [0.99, 0.999]}
    s.sparse_table_configs = {"emb": {"table_parameters.emb.shard_num": 10}}
    bs = BuildStrategy()
    bs.enable_inplace, bs.reduce_strategy = True, ReduceStrategy.Reduce
    s.build_strategy = bs
    return s


def test_json_round_trip():
    s = _configured()
    t = DistributedStrategy.from_json(s.to_json())
    assert t.to_dict(only_set=False) == s.to_dict(only_set=False)
    assert to_text(t.strategy) == to_text(s.strategy)
    for name in DATA["properties"]:
        assert plain(name, getattr(t, name)) == plain(name, getattr(s, name)), name
    assert t.hybrid_parallel_order == ["pp", "dp", "sharding", "sep", "mp"]
    assert DistributedStrategy.from_json(DistributedStrategy().to_json()).to_dict(False) == \
        DistributedStrategy().to_dict(False)


def test_prototxt_round_trip(tmp_path):
    s = _configured()
    s.trainer_desc_configs = {"dump_fields_path": 'a "quoted"\\ path \u00e9'}
    path = tmp_path / "strategy.prototxt"
    s.save_to_prototxt(str(path))
    t = DistributedStrategy()
    t.load_from_prototxt(str(path))
    assert to_text(t.strategy) == to_text(s.strategy)
    assert t.strategy.to_dict() == s.strategy.to_dict()


def test_deepcopy_repr_and_unimplemented():
    s = _configured()
    c = copy.deepcopy(s)
    c.gradient_merge_configs = {"k_steps": 8}
    assert s.gradient_merge_configs["k_steps"] == 4 and c.gradient_merge_configs["k_steps"] == 8
    text = repr(s)
    assert "DistributedStrategy Overview" in text and "gradient_merge=True <-> gradient_merge_configs" in text
    assert "k_steps" in text and "Build Strategy" in text
    assert s._unimplemented_enabled() == []
    s.amp = True  # applied by fleet's AMPOptimizer: not listed
    s.sharding = s.tensor_parallel = True  # applied by ShardingOptimizer / TensorParallelOptimizer
    s.asp = True
    s.hybrid_configs = {"mp_degree": 2, "sep_degree": 2}
    assert s._unimplemented_enabled() == ["asp", "hybrid_configs.sep_degree"]
    assert DistributedStrategy()._unimplemented_enabled(is_collective=False) == ["a_sync"]


def test_fleet_desc_configs_checks_keys():
    s = DistributedStrategy()
    s.fleet_desc_configs = {"emb": {"sparse_shard_num": 8, "sparse_embedx_dim": 4}, "dense_table": {}}
    (table,) = s.fleet_desc_configs
    assert (table["table_name"], table["shard_num"], table["accessor"]["fea_dim"]) == ("emb", 8, 7)
    with pytest.raises(ValueError, match="'bogus' not support"):
        s.fleet_desc_configs = {"emb": {"bogus": 1}}
