# fleet.util (UtilBase) in a single-process collective job, as Paddle's test_fleet_util / test_fleet_base do.
import os

import paddle

paddle.enable_static()
from paddle.distributed import fleet
from paddle.distributed.fleet.base import role_maker

os.environ.pop("PADDLE_TRAINER_ID", None)
os.environ["PADDLE_TRAINER_ENDPOINTS"] = "127.0.0.1:36001"
role = role_maker.PaddleCloudRoleMaker(is_collective=True)
fleet.init(role)
print("worker", fleet.worker_index(), "of", fleet.worker_num())
print("util follows init:", fleet.util.role_maker is role)
print("shard", fleet.util.get_file_shard(["a", "b", "c"]))
try:
    fleet.util.get_file_shard("a")
except TypeError as e:
    print("TypeError:", "files should be a list" in str(e))
fleet.util.print_on_rank("printed by rank 0", 0)
fleet.util.print_on_rank("printed by rank 1", 1)
print("all_reduce", fleet.util.all_reduce([1, 2], "sum"))
print("all_gather", fleet.util.all_gather(3))
fleet.util.barrier()
print("role all_gather", role._all_gather([4, 5]))
print("role all_reduce", role._all_reduce((4, 5)))

# a worker of a two-worker parameter-server job: its block of the file list
ps_role = role_maker.UserDefinedRoleMaker(
    is_collective=False, init_gloo=False, current_id=1, role=role_maker.Role.WORKER,
    worker_endpoints=["127.0.0.1:6003", "127.0.0.1:6004"], server_endpoints=["127.0.0.1:6001"])
util = fleet.UtilBase()
util._set_role_maker(ps_role)
print("worker 1 of 2:", util.get_file_shard(["a", "b", "c", "d", "e"]), util.get_file_shard(["a"]))
util.print_on_rank("worker 1 prints", 1)

factory = fleet.base.util_factory.UtilFactory()
strategy = fleet.DistributedStrategy()
made = factory._create_util({"valid_strategy": strategy, "role_maker": None})
print("factory:", made.role_maker, made.dist_strategy is strategy)


class UserDefinedUtil(fleet.UtilBase):
    def get_user_id(self):
        return 10


fleet.util = UserDefinedUtil()
print("user util:", fleet.util.get_user_id())

from paddle.distributed.fleet.utils import LocalFS

fs = LocalFS()
print("need_upload_download:", fs.need_upload_download())
print("missing dir:", fs.ls_dir("no_such_dir_for_fleet_util"))
print("is_exist:", fs.is_exist("F_fleet_util.py"), fs.is_file("F_fleet_util.py"), fs.is_dir("."))
fleet.util._set_file_system(fs)
try:
    fleet.util._set_file_system("not a file system")
except AssertionError as e:
    print("AssertionError:", "must be the instance of paddle.distributed.fleet.utils.FS" in str(e))
