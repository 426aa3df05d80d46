# DistributedStrategy's nested settings are messages with attributes, as in Paddle's test_fleet_distributed_strategy.
import paddle

paddle.enable_static()
from paddle.distributed import fleet

s = fleet.DistributedStrategy()
s.hybrid_configs = {
    "dp_degree": 1, "mp_degree": 2, "pp_degree": 4,
    "mp_configs": {"sync_param": True, "sync_grad": False, "sync_mode": "broadcast",
                   "sync_param_name": ["embedding", ".w"]},
    "pp_configs": {"enable_timer": True},
}
h = s.hybrid_configs
print(type(h).__name__, h["dp_degree"], h["mp_degree"], h["pp_degree"])
mp = h["mp_configs"]
print("mp_configs:", mp.sync_param, mp.sync_grad, mp.sync_moment, mp.sync_mode)
print("pp_configs:", h["pp_configs"].enable_timer, h["pp_configs"].dp_comm_overlap)
print("sync_param_name:", s.sync_param_name)

s.a_sync_configs = {"k_steps": 1000}
a = s.a_sync_configs
print("a_sync_configs:", type(a).__name__, a["k_steps"], a["launch_barrier"], a["heter_worker_device_guard"])

s.fs_client_param = {"uri": "123", "user": "456", "passwd": "789", "hadoop_bin": "hadoop"}
print("fs_client_param:", s.fs_client_param.uri, s.fs_client_param.user, s.fs_client_param.hadoop_bin)

s.sparse_table_configs = {"emb": {
    "table_parameters.emb.accessor.embed_sgd_param.adagrad.learning_rate": 0.05,
    "table_parameters.emb.accessor.table_accessor_save_param.num": 2,
    "table_parameters.emb.accessor.table_accessor_save_param.param": [1, 2],
}}
t = s.sparse_table_configs[0]
print("sparse table:", len(s.sparse_table_configs), t.table_name, t.shard_num,
      t.accessor.embed_sgd_param.adagrad.learning_rate,
      [p.param for p in t.accessor.table_accessor_save_param])

for optimizer in ("adagrad", "naive", "adam", "shared_adam", "std_adagrad"):
    d = fleet.DistributedStrategy()
    d.fleet_desc_configs = {"emb": {"sparse_optimizer": optimizer, "sparse_embedx_dim": 4}}
    sgd = d.sparse_table_configs[0].accessor.embed_sgd_param
    print(optimizer, sgd.name, sgd.adagrad.learning_rate, sgd.adagrad.initial_range, sgd.naive.learning_rate,
          sgd.adam.beta1_decay_rate, sgd.adam.learning_rate)

d = fleet.DistributedStrategy()
d.fleet_desc_configs = {"emb": {"sparse_accessor_class": "DownpourUnitAccessor",
                                "embed_sparse_optimizer": "std_adagrad", "sparse_shard_num": 8},
                        "dense_table": {}}
print(d.sparse_table_configs[0])
