"""CommunicateTopology and HybridCommunicateGroup against Paddle 3.3.1 (``fleet.json`` ``topology``)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from oracle import check_exception, load_fleet

from refimpl.distributed import all_reduce, run_in_process
from refimpl.distributed.fleet import CommunicateTopology, HybridCommunicateGroup, ParallelMode
from refimpl.distributed.fleet.base.topology import get_hybrid_communicate_group

DATA = load_fleet("topology")
CONFIGS = DATA["configs"]



def make(ctor_args):
    return CommunicateTopology() if ctor_args is None else CommunicateTopology(**ctor_args)


@pytest.mark.parametrize("cfg", CONFIGS, ids=[c["id"] for c in CONFIGS])
def test_topology_config(cfg):
    topo = make(cfg["ctor_args"])
    names = topo.get_hybrid_group_names()
    assert topo.world_size() == cfg["world_size"] and names == cfg["hybrid_group_names"]
    assert type(topo.coordinate).__name__ == "type" and topo.coordinate.__name__ == cfg["coordinate_type_name"]
    assert list(topo.coordinate._fields) == cfg["coordinate_type_fields"]
    assert {n: topo.get_dim(n) for n in names} == cfg["dim"]
    assert {n: topo.get_dim_size(n) for n in names} == cfg["dim_size"]
    for rank, coord in enumerate(cfg["coord_of_rank"]):
        got = topo.get_coord(rank)
        assert list(got) == coord and hasattr(got, "_fields") == cfg["coord_is_namedtuple"]
    for coord, rank in cfg["rank_of_coord"]:
        assert topo.get_rank(**dict(zip(names, coord))) == rank
    for n in names:
        assert [topo.get_axis_list(n, i) for i in range(topo.get_dim(n))] == cfg["axis_list"][n]
        assert topo.get_axis_list(n, topo.get_dim(n)) == cfg["axis_list_out_of_range_index"][n]
        assert topo.get_comm_list(n) == cfg["comm_list"][n]
    for rec in cfg["fused_ranks"]:
        groups = topo.get_fused_ranks(rec["fused_axis"])
        assert sorted(groups) == rec["groups_sorted"] and len(groups) == rec["num_groups"]
    for rank, kwargs, want in cfg["rank_from_stage"]:
        assert topo.get_rank_from_stage(rank, **kwargs) == want


def test_every_fused_candidate_recorded():
    for cfg in CONFIGS:
        names = set(make(cfg["ctor_args"]).get_hybrid_group_names())
        expected = [c for c in DATA["fused_axis_candidates"] if set(c) <= names]
        assert [r["fused_axis"] for r in cfg["fused_ranks"]] == expected


def test_fused_ranks_do_not_depend_on_hash_seed():
    probe = DATA["fused_ranks_hash_seed_probe"]
    groups = make(probe["topology"]).get_fused_ranks(probe["fused_axis"])
    for raw in probe["raw_by_hash_seed"].values():
        assert sorted(groups) == sorted(raw)
    assert groups == sorted(groups)  # refimpl: topology order, whatever the seed


@pytest.mark.parametrize("case", DATA["error_cases"], ids=[c["id"] for c in DATA["error_cases"]])
def test_error_case(case):
    env = {"CommunicateTopology": CommunicateTopology, "ctor_args": case.get("ctor_args")}
    if "topology" in case:
        env["topo"] = make(case["topology"])
    expr = case["call"] if case["call"].startswith("CommunicateTopology") else "topo." + case["call"]
    if case["outcome"] == "returned":
        assert eval(expr, env) == case["value"]
    else:
        with pytest.raises(Exception) as info:
            eval(expr, env)
        check_exception(info.value, case["exception"])


def test_parallel_mode_constants():
    want = DATA["hybrid_parallel_mode"]["parallel_mode_constants"]
    assert {k: getattr(ParallelMode, k) for k in want} == want


@pytest.mark.parametrize("row", DATA["hybrid_parallel_mode"]["rows"])
def test_parallel_mode_row(row):
    hcg = HybridCommunicateGroup.__new__(HybridCommunicateGroup)  # degrees only, as the oracle did
    hcg._dp_degree, hcg._mp_degree, hcg._pp_degree = row["dp"], row["mp"], row["pp"]
    hcg._sharding_degree, hcg._sep_degree, hcg.nranks = row["sharding"], row["sep"], row["nranks"]
    assert hcg.get_parallel_mode() == row["parallel_mode"]
    assert hcg._check_valid_topo() == row["check_valid_topo"]


DP2_PP2 = (["data", "pipe", "sharding", "sep", "model"], [2, 2, 1, 1, 1])


def _dp2_pp2_rank():
    hcg = HybridCommunicateGroup(CommunicateTopology(*DP2_PP2))
    rank = hcg.get_global_rank()
    dp_sum = all_reduce(np.array([rank + 1.0]), group=hcg.get_data_parallel_group())
    pp_sum = all_reduce(np.array([rank + 1.0]), group=hcg.get_pipe_parallel_group())
    mp_sum = all_reduce(np.array([rank + 1.0]), group=hcg.get_model_parallel_group())
    dp_group, pp_group = hcg.get_data_parallel_group(), hcg.get_pipe_parallel_group()
    return {
        "dp": (hcg.get_data_parallel_rank(), hcg.get_data_parallel_world_size(), dp_group.ranks, dp_group.rank,
               hcg.get_data_parallel_group_src_rank(), float(dp_sum[0])),
        "pp": (hcg.get_stage_id(), hcg.get_pipe_parallel_world_size(), pp_group.ranks, float(pp_sum[0]),
               hcg.is_first_stage, hcg.is_last_stage, hcg._get_p2p_prev_rank(), hcg._get_p2p_next_rank()),
        "mp": (hcg.get_model_parallel_rank(), hcg.get_model_parallel_world_size(), float(mp_sum[0])),
        "sharding": (hcg.get_sharding_parallel_rank(), hcg.get_sharding_parallel_world_size(),
                     hcg.get_sharding_parallel_group().ranks),
        "check": hcg.get_check_parallel_group().ranks,
        "mode": hcg.get_parallel_mode(),
        "from_stage": [hcg.get_rank_from_stage(s) for s in range(2)],
        "registered": get_hybrid_communicate_group() is hcg,
    }


def _expected_dp2_pp2(rank):
    d, p = divmod(rank, 2)  # rank = data * 2 + pipe
    return {
        "dp": (d, 2, [p, 2 + p], d, p, float((p + 1) + (p + 3))),
        "pp": (p, 2, [2 * d, 2 * d + 1], float(4 * d + 3), p == 0, p == 1, 2 * d + 1 - p, 2 * d + 1 - p),
        "mp": (0, 1, float(rank + 1)),
        "sharding": (0, 1, [rank]),
        "check": [2 * d, 2 * d + 1],
        "mode": ParallelMode.PIPELINE_PARALLEL,
        "from_stage": [2 * d, 2 * d + 1],
        "registered": True,
    }


def test_hybrid_group_dp2_pp2_in_process():
    got = run_in_process(4, _dp2_pp2_rank, timeout=20)
    for rank in range(4):
        assert got[rank] == _expected_dp2_pp2(rank), rank


def test_hybrid_group_sep_and_errors():
    def body():
        topo = CommunicateTopology(["data", "pipe", "sharding", "sep", "model"], [1, 1, 1, 2, 1])
        hcg = HybridCommunicateGroup(topo)
        sep = hcg.get_sep_parallel_group()
        total = all_reduce(np.array([1.0]), group=sep)
        return (hcg.get_parallel_mode(), sep.ranks, hcg.get_dp_sep_parallel_group().ranks, float(total[0]))
    assert run_in_process(2, body, timeout=20) == [(ParallelMode.SEGMENT_PARALLEL, [0, 1], [0, 1], 2.0)] * 2

    def wrong_size():
        HybridCommunicateGroup(CommunicateTopology(*DP2_PP2))
    with pytest.raises(Exception) as info:
        run_in_process(2, wrong_size, timeout=20)
    assert isinstance(info.value.error, AssertionError) and "nranks: 2" in str(info.value.error)

    def no_sep():
        HybridCommunicateGroup(CommunicateTopology(["data", "pipe", "sharding", "sep", "model"],
                                                   [1] * 5)).get_sep_parallel_group()
    with pytest.raises(Exception) as info:
        run_in_process(1, no_sep)
    assert isinstance(info.value.error, AssertionError) and "sep not exist" in str(info.value.error)


_MPI_SCRIPT = """
import json, sys
import refimpl.distributed as dist
sys.path.insert(0, sys.argv[2])
dist.init_parallel_env()
import test_topology as t
facts = t._dp2_pp2_rank()
with open(sys.argv[1] + str(dist.get_rank()), "w") as f:
    json.dump(facts, f)
"""


def test_hybrid_group_dp2_pp2_under_mpiexec(tmp_path):
    pytest.importorskip("mpi4py")
    script = tmp_path / "hcg.py"
    script.write_text(_MPI_SCRIPT)
    here = os.path.dirname(os.path.abspath(__file__))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PADDLE_", "PMI", "OMPI", "PMIX"))}
    env["PYTHONPATH"] = os.path.dirname(here)
    try:
        out = subprocess.run(["mpiexec", "-n", "4", sys.executable, str(script), str(tmp_path / "rank"), here],
                             env=env, capture_output=True, text=True, timeout=120)
    except FileNotFoundError:
        pytest.skip("no mpiexec")
    assert out.returncode == 0, out.stderr[-3000:]
    for rank in range(4):
        got = json.loads((tmp_path / f"rank{rank}").read_text())
        want = json.loads(json.dumps(_expected_dp2_pp2(rank)))
        assert got == want, rank
