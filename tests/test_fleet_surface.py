"""The fleet surface Paddle's static fleet unit tests use, ported from those tests.

Each test below follows one of Paddle's own unit tests (named in its
docstring: test/legacy_test/test_fleet_util.py, test_fleet_base.py,
test_fleet_base_3.py, test_fleet_runtime.py,
test/collective/fleet/test_fleet_distributed_strategy.py,
test_fleet_meta_optimizer_base.py); the expected values are the ones those
tests assert, which pass on Paddle 3.3.1's CPU wheel, or values printed by
Paddle 3.3.1 (said where used). Multi-worker answers are computed
independently in the test (the sum, the list of every rank's value).
"""
import logging
import os

import numpy as np
import pytest

import refimpl as paddle
import refimpl.distributed.fleet as fleet_pkg
from refimpl.distributed import run_in_process
from refimpl.distributed.fleet import DistributedStrategy, Fleet, PaddleCloudRoleMaker, UserDefinedRoleMaker
from refimpl.distributed.fleet.base import role_maker
from refimpl.distributed.fleet.base.util_factory import FleetUtil, UtilBase, UtilFactory
from refimpl.distributed.fleet.meta_optimizers.meta_optimizer_base import MetaOptimizerBase
from refimpl.distributed.fleet.utils import FS, HDFSClient, LocalFS
from refimpl.core.errors import Unimplemented


@pytest.fixture
def env(monkeypatch):
    """A plain process's environment plus the given PADDLE_* variables."""
    for key in list(os.environ):
        if key.startswith(("PADDLE_", "TRAINING_ROLE", "POD_IP")):
            monkeypatch.delenv(key)

    def set_env(**values):
        for k, v in values.items():
            monkeypatch.setenv(k, v)
    return set_env


def _net(main, startup):
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data(name="x", shape=[-1, 32], dtype="float32")
        y = paddle.static.data(name="y", shape=[-1, 1], dtype="int64")
        hidden = paddle.static.nn.fc(x=x, size=64, activation="tanh")
        prediction = paddle.static.nn.fc(x=[hidden], size=2, activation="softmax")
        cost = paddle.nn.functional.cross_entropy(input=prediction, label=y, reduction="none", use_softmax=False)
        return paddle.mean(x=cost)


# ---- fleet.util (test_fleet_util.py) --------------------------------------------------------------
def test_util_base_and_factory():
    """test_util_base / test_util_factory."""
    util = UtilBase()
    strategy = DistributedStrategy()
    util._set_strategy(strategy)
    util._set_role_maker(None)
    assert util.dist_strategy is strategy and util.role_maker is None
    made = UtilFactory()._create_util({"role_maker": None, "valid_strategy": strategy})
    assert made.role_maker is None and made.dist_strategy is strategy
    assert fleet_pkg.base.util_factory.UtilFactory is UtilFactory and fleet_pkg.UtilBase is UtilBase


def test_util_follows_the_fleet_and_can_be_replaced(env, monkeypatch):
    """test_get_util / test_set_user_defined_util."""
    env(PADDLE_TRAINER_ENDPOINTS="127.0.0.1:36001")
    f = Fleet()
    util = FleetUtil(f)
    assert util.role_maker is None
    role = PaddleCloudRoleMaker(is_collective=True)
    f.init(role)
    assert util.role_maker is role and util.dist_strategy is f._user_defined_strategy

    class UserDefinedUtil(fleet_pkg.UtilBase):
        def get_user_id(self):
            return 10

    monkeypatch.setattr(fleet_pkg, "util", UserDefinedUtil())
    assert fleet_pkg.util.get_user_id() == 10 and fleet_pkg.util.role_maker is None


def test_get_file_shard():
    """test_get_file_shard, plus the block split Paddle's docstring gives ([a, b, c] / [d, e])."""
    with pytest.raises(TypeError, match="files should be a list"):
        UtilBase().get_file_shard("files")
    util = UtilBase()
    for current_id, want in ((0, ["1", "2"]), (1, ["3"])):
        util._set_role_maker(UserDefinedRoleMaker(
            is_collective=False, init_gloo=False, current_id=current_id, role=role_maker.Role.WORKER,
            worker_endpoints=["127.0.0.1:6003", "127.0.0.1:6004"],
            server_endpoints=["127.0.0.1:6001", "127.0.0.1:6002"]))
        assert util.get_file_shard(["1", "2", "3"]) == want
    assert util.get_file_shard(list("abcde")) == ["d", "e"] and util.get_file_shard(["a"]) == []


def test_util_collectives_over_thread_ranks():
    """fleet.util.all_reduce / all_gather / barrier / print_on_rank with 3 ranks (Gloo's answers)."""
    def body():
        f = Fleet()
        f.init(is_collective=True)
        util = FleetUtil(f)
        r = f.worker_index()
        util.barrier()
        return (util.all_reduce([r, 1], "sum").tolist(), util.all_reduce((r,), "max").tolist(),
                util.all_gather(r * 10), util.all_gather([r, -r]), f._role_maker._all_gather(np.array([r])))

    for reduced, top, scalars, lists, arrays in run_in_process(3, body):
        assert reduced == [0 + 1 + 2, 3] and top == [2]
        assert scalars == [0, 10, 20] and lists == [[0, 0], [1, -1], [2, -2]]
        assert [a.tolist() for a in arrays] == [[0], [1], [2]]


def test_lone_worker_gets_its_input_back(env, capsys):
    """Paddle 3.3.1 without Gloo printed: all_reduce [1, 2] -> [1, 2], all_gather 3 -> 3; base class -> None."""
    env(PADDLE_TRAINER_ENDPOINTS="127.0.0.1:36001")
    role = PaddleCloudRoleMaker(is_collective=True)
    util = UtilBase()
    util._set_role_maker(role)
    assert util.all_reduce([1, 2]) == [1, 2] and util.all_gather(3) == 3
    util.barrier()
    util.print_on_rank("rank 0 speaks", 0)
    util.print_on_rank("rank 1 speaks", 1)
    assert capsys.readouterr().out == "rank 0 speaks\n"
    assert role_maker.RoleMakerBase()._all_gather(1) is None


def test_local_fs(tmp_path):
    """test_fs, and LocalFS's answers (ls_dir of a missing path, touch / mv errors)."""
    fs = LocalFS()
    assert fs.ls_dir(str(tmp_path / "test_tmp")) == ([], []) and not fs.need_upload_download()
    fs.mkdirs(str(tmp_path / "d"))
    fs.touch(str(tmp_path / "f"))
    assert fs.ls_dir(str(tmp_path)) == (["d"], ["f"]) and fs.list_dirs(str(tmp_path)) == ["d"]
    from refimpl.distributed.fleet.utils.fs import FSFileExistsError, FSFileNotExistsError
    with pytest.raises(FSFileExistsError):
        fs.touch(str(tmp_path / "f"), exist_ok=False)
    with pytest.raises(FSFileNotExistsError):
        fs.mv(str(tmp_path / "none"), str(tmp_path / "g"))
    fs.mv(str(tmp_path / "f"), str(tmp_path / "g"))
    fs.delete(str(tmp_path / "d"))
    assert fs.ls_dir(str(tmp_path)) == ([], ["g"])
    util = UtilBase()
    util._set_file_system(fs)
    with pytest.raises(AssertionError, match="fleet.utils.FS"):
        util._set_file_system("fs")
    with pytest.raises(NotImplementedError):
        FS().ls_dir(".")
    with pytest.raises(Unimplemented, match="HDFSClient"):
        HDFSClient("hadoop", {})


# ---- the runtime handler (test_fleet_base.py, test_fleet_runtime.py) -------------------------------------
def test_ps_methods_need_a_runtime(env, caplog):
    """test_exception / test_init_worker / test_stop_worker: ValueError before init and before minimize."""
    f = Fleet()
    with pytest.raises(ValueError, match="runtime handler"):
        f.init_worker()
    env(PADDLE_TRAINER_ENDPOINTS="127.0.0.1:36000,127.0.0.1:36001", PADDLE_TRAINER_ID="0")
    f.init(PaddleCloudRoleMaker(is_collective=True))
    for method in (f.init_worker, f.stop_worker, f.init_server, f.run_server):
        with pytest.raises(ValueError, match="runtime handler"):
            method()
    for key in ("PADDLE_TRAINER_ENDPOINTS", "PADDLE_TRAINER_ID"):  # no launcher: non-distributed
        os.environ.pop(key)
    f.init(PaddleCloudRoleMaker(is_collective=True))
    with caplog.at_level(logging.WARNING, logger="refimpl.distributed.fleet"):
        assert f.init_worker() is None
    assert "doesn't work when use non_distributed fleet" in caplog.text


def test_minimize_reports_the_applied_optimizers(env, caplog):
    """test_fleet_get_applied_optimizer: [] before minimize, one meta-optimizer after, no graph optimizer."""
    env(PADDLE_TRAINER_ENDPOINTS="127.0.0.1:36001")
    f = Fleet()
    main, startup = paddle.static.Program(), paddle.static.Program()
    loss = _net(main, startup)
    f.init(is_collective=True)
    assert f._get_applied_meta_list() == [] and f._get_applied_graph_list() == []
    opt = f.distributed_optimizer(paddle.optimizer.SGD(learning_rate=0.001), strategy=DistributedStrategy())
    with paddle.static.program_guard(main, startup):
        opt.minimize(loss)
    assert f._get_applied_meta_list() == ["RawProgramOptimizer"] and f._get_applied_graph_list() == []
    assert type(f._runtime_handle).__name__ == "CollectiveRuntime"
    assert FleetUtil(f).dist_strategy is f._final_strategy()
    assert [op.type for op in main.global_block().ops][-4:] == ["sgd"] * 4  # one worker: nothing inserted
    with caplog.at_level(logging.WARNING, logger="refimpl.distributed.fleet"):
        f.stop_worker()
    assert "You should not call 'stop_worker' method for collective mode." in caplog.text


def test_minimize_before_init_fails_as_paddle(env):
    """Paddle 3.3.1 (legacy IR) raised AttributeError at minimize: "'Fleet' object has no attribute
    '_user_defined_strategy'" (no strategy given) or "'NoneType' object has no attribute '_is_collective'"."""
    from refimpl.core.errors import PreconditionNotMet
    f = Fleet()
    main, startup = paddle.static.Program(), paddle.static.Program()
    loss = _net(main, startup)
    for strategy in (None, DistributedStrategy()):
        opt = f.distributed_optimizer(paddle.optimizer.SGD(learning_rate=0.1), strategy=strategy)
        with paddle.static.program_guard(main, startup):
            with pytest.raises(AttributeError, match="call fleet.init") as e:
                opt.minimize(loss)
        assert isinstance(e.value, PreconditionNotMet)
    assert f._runtime_handle is None and [op.type for op in main.global_block().ops][-1] != "sgd"


def test_public_views_of_the_fleet_state(env):
    env(PADDLE_TRAINER_ENDPOINTS="127.0.0.1:36001")
    f = Fleet()
    assert f.role_maker is None and f.is_collective is False and f.strategy is None
    rm = PaddleCloudRoleMaker(is_collective=True)
    s = DistributedStrategy()
    s.gradient_merge = True
    f.init(rm, strategy=s)
    assert f.role_maker is rm and f.is_collective is True and f.strategy.gradient_merge is True
    opt = f.distributed_optimizer(paddle.optimizer.SGD(learning_rate=0.1))
    main, startup = paddle.static.Program(), paddle.static.Program()
    loss = _net(main, startup)
    with paddle.static.program_guard(main, startup):
        opt.minimize(loss)
    assert f.strategy is opt._final_strategy() and f.strategy is not f._user_defined_strategy
    assert type(f._runtime_handle).__name__ == "CollectiveRuntime"


def test_distributed_optimizer_needs_no_init():
    """As Paddle's: distributed_optimizer only records the optimizer and strategy."""
    f = Fleet()
    s = DistributedStrategy()
    s.gradient_merge = True
    opt = paddle.optimizer.SGD(learning_rate=0.1)
    f.distributed_optimizer(opt, strategy=s)
    assert f.user_defined_optimizer is opt and f._user_defined_strategy.gradient_merge is True


def test_runtime_classes(caplog):
    """test_fleet_runtime_base / test_fleet_collective_runtime / test_fleet_ps_runtime."""
    from refimpl.distributed.fleet import runtime
    base = runtime.runtime_base.RuntimeBase()
    for hook in ("_run_worker", "_init_server", "_run_server", "_stop_worker", "_save_inference_model",
                 "_save_persistables"):
        assert getattr(base, hook)() is None
    collective = runtime.CollectiveRuntime()
    with caplog.at_level(logging.WARNING, logger="refimpl.distributed.fleet"):
        collective._init_worker(), collective._run_worker(), collective._run_server(), collective._stop_worker()
    assert caplog.text.count("for collective mode") == 4
    ps = runtime.ParameterServerRuntime()
    with pytest.raises(ValueError, match="fleet can not support optimizer: test_op"):
        ps._get_optimizer_status("test_op", None)
    assert ps._get_optimizer_status("adam", "param") == (["param_moment1_0", "param_moment2_0"],
                                                         ["param_beta1_pow_acc_0", "param_beta2_pow_acc_0"])
    assert ps._get_optimizer_status("sgd", "param") == ([], [])


# ---- MetaOptimizerBase (test_fleet_meta_optimizer_base.py) --------------------------------------------
def test_meta_optimizer_base_minimize_and_apply_optimize():
    main, startup = paddle.static.Program(), paddle.static.Program()
    loss = _net(main, startup)
    opt = MetaOptimizerBase(paddle.optimizer.SGD(learning_rate=0.01))
    assert not opt._can_apply() and not opt._is_graph_out()
    with paddle.static.program_guard(main, startup):
        opt_ops, params_grads = opt.minimize(loss)
        assert [op.type for op in opt_ops] == ["sgd"] * 4
        again = opt.apply_optimize(loss, startup, params_grads)
    assert [op.type for op in again] == ["sgd"] * 4
    assert sorted(p.name for p, _ in params_grads) == ["fc_0.b_0", "fc_0.w_0", "fc_1.b_0", "fc_1.w_0"]
    with pytest.raises(NotImplementedError, match="MetaOptimizerBase"):
        opt._disable_strategy(DistributedStrategy())


# ---- DistributedStrategy's messages (test_fleet_distributed_strategy.py) ----------------------------------
def test_hybrid_mp_configs_are_a_message():
    """test_hybrid_parallel_mp_configs."""
    s = DistributedStrategy()
    s.hybrid_configs = {"dp_degree": 1, "mp_degree": 2, "pp_degree": 4,
                        "mp_configs": {"sync_param": True, "sync_grad": False, "sync_moment": False,
                                       "sync_mode": "broadcast",
                                       "sync_param_name": ["embedding", "layer_norm", ".w", ".b_"]}}
    h = s.hybrid_configs
    assert (h["dp_degree"], h["mp_degree"], h["pp_degree"]) == (1, 2, 4)
    mp = h["mp_configs"]
    assert (mp.sync_param, mp.sync_grad, mp.sync_moment, mp.sync_mode) == (True, False, False, "broadcast")
    assert s.sync_param_name == ["embedding", "layer_norm", ".w", ".b_"]
    with pytest.raises(AttributeError):
        mp.no_such_field


def test_sparse_table_and_fs_client_messages():
    """test_sparse_table_configs."""
    s = DistributedStrategy()
    s.sparse_table_configs = {"emb": {
        "table_parameters.emb.accessor.embed_sgd_param.adagrad.learning_rate": 0.05,
        "table_parameters.emb.accessor.table_accessor_save_param.num": 2,
        "table_parameters.emb.accessor.table_accessor_save_param.param": [1, 2]}}
    table = s.sparse_table_configs[0]
    assert table.accessor.embed_sgd_param.adagrad.learning_rate == 0.05
    assert table.accessor.table_accessor_save_param[0].param == 1
    s.adam_d2sum = True
    assert s.adam_d2sum is True
    s.fs_client_param = {"uri": "123", "user": "456", "passwd": "789", "hadoop_bin": "hadoop"}
    assert s.fs_client_param.user == "456"


def test_table_config_lists_are_copies_of_live_messages():
    """Appending to the returned list changes nothing; the messages in it are the strategy's own."""
    s = DistributedStrategy()
    s.sparse_table_configs = {"emb": {"table_parameters.emb.accessor.embed_sgd_param.adagrad.learning_rate": 0.05}}
    tables = s.sparse_table_configs
    tables.append("stray")
    s.fleet_desc_configs.clear()
    assert len(s.sparse_table_configs) == 1 and len(s.fleet_desc_configs) == 1
    tables[0].accessor.embed_sgd_param.adagrad.learning_rate = 0.5
    assert s.sparse_table_configs[0].accessor.embed_sgd_param.adagrad.learning_rate == 0.5


@pytest.mark.parametrize("config, path, want", [
    ({"sparse_optimizer": "adagrad"}, "embed_sgd_param.adagrad.learning_rate", 0.05),
    ({"sparse_optimizer": "naive"}, "embed_sgd_param.naive.learning_rate", 0.05),
    ({"sparse_optimizer": "adam"}, "embed_sgd_param.adam.beta1_decay_rate", 0.9),
    ({"sparse_accessor_class": "DownpourUnitAccessor", "embed_sparse_optimizer": "std_adagrad"},
     "ctr_accessor_param.show_scale", False),
    ({"sparse_accessor_class": "DownpourUnitAccessor", "embed_sparse_optimizer": "std_adagrad"},
     "embed_sgd_param.adagrad.initial_range", 0),
    ({"sparse_accessor_class": "DownpourCtrDoubleAccessor", "embed_sparse_optimizer": "std_adagrad"},
     "embed_sgd_param.adagrad.initial_range", 0.0001),
    ({"sparse_optimizer": "shared_adam"}, "embed_sgd_param.adam.beta1_decay_rate", 0.9),
])
def test_fleet_desc_configs_fill_the_accessor(config, path, want):
    """test_fleet_desc_configs (each assertion of it)."""
    s = DistributedStrategy()
    s.fleet_desc_configs = {"emb": config}
    value = s.sparse_table_configs[0].accessor
    for name in path.split("."):
        value = getattr(value, name)
    assert value == want


def test_fleet_desc_configs_text_is_paddles():
    """``print(strategy.sparse_table_configs[0])``: the text Paddle 3.3.1 printed for this config."""
    s = DistributedStrategy()
    s.fleet_desc_configs = {"emb": {"sparse_optimizer": "adam", "sparse_embedx_dim": 4,
                                    "sparse_accessor_class": "DownpourUnitAccessor"}}
    assert str(s.sparse_table_configs[0]) == PADDLE_TABLE_TEXT


PADDLE_TABLE_TEXT = """\
table_name: "emb"
table_class: "MemorySparseTable"
shard_num: 1000
accessor {
  accessor_class: "CtrCommonAccessor"
  fea_dim: 7
  embedx_dim: 4
  embedx_threshold: 10
  ctr_accessor_param {
    nonclk_coeff: 0.1
    click_coeff: 1
    base_threshold: 1.5
    delta_threshold: 0.25
    delta_keep_days: 16
    show_click_decay_rate: 0.98
    delete_threshold: 0.8
    delete_after_unseen_days: 30
    ssd_unseenday_threshold: 1
    show_scale: false
    zero_init: true
  }
  table_accessor_save_param {
    param: 1
    converter: ""
    deconverter: ""
  }
  table_accessor_save_param {
    param: 2
    converter: ""
    deconverter: ""
  }
  embed_sgd_param {
    name: "SparseAdaGradSGDRule"
    adagrad {
      learning_rate: 0.05
      initial_g2sum: 3
      initial_range: 0
      weight_bounds: -10
      weight_bounds: 10
    }
  }
  embedx_sgd_param {
    name: "SparseAdaGradSGDRule"
    adagrad {
      learning_rate: 0.05
      initial_g2sum: 3
      initial_range: 0.0001
      weight_bounds: -10
      weight_bounds: 10
    }
  }
  graph_sgd_param {
    nodeid_slot: 9008
    feature_learning_rate: 0.05
  }
}
enable_sparse_table_cache: true
sparse_table_cache_rate: 0.00055
sparse_table_cache_file_num: 16
use_gpu_graph: false
"""
