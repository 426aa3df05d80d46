# A single-worker collective job: what fleet reports around minimize (Paddle's test_fleet_base_3 / test_fleet_base).
import contextlib
import io
import os

import paddle

paddle.enable_static()
from paddle.distributed import fleet
from paddle.distributed.fleet.base import role_maker

os.environ.pop("PADDLE_TRAINER_ID", None)
os.environ["PADDLE_TRAINER_ENDPOINTS"] = "127.0.0.1:36001"
os.environ["PADDLE_TRAINERS_NUM"] = "1"

try:
    fleet.init_worker()
except ValueError:
    print("init_worker before fleet.init: ValueError")

# accepted without fleet.init, as in Paddle (the strategy is only recorded)
fleet.distributed_optimizer(paddle.optimizer.SGD(learning_rate=0.1))

main, startup = paddle.static.Program(), paddle.static.Program()
with paddle.static.program_guard(main, startup):
    x = paddle.static.data(name="x", shape=[-1, 32], dtype="float32")
    y = paddle.static.data(name="y", shape=[-1, 1], dtype="int64")
    hidden = paddle.static.nn.fc(x=x, size=16, activation="tanh")
    prediction = paddle.static.nn.fc(x=hidden, size=2, activation="softmax")
    cost = paddle.nn.functional.cross_entropy(input=prediction, label=y, reduction="none", use_softmax=False)
    avg_cost = paddle.mean(x=cost)

    fleet.init(role_maker.PaddleCloudRoleMaker(is_collective=True))
    with contextlib.redirect_stdout(io.StringIO()):  # Paddle prints a warning: minimize has not run
        before = fleet._get_applied_meta_list(), fleet._get_applied_graph_list()
    print("before minimize:", *before)
    for name in ("init_worker", "stop_worker"):
        try:
            getattr(fleet, name)()
        except ValueError:
            print(name, "before minimize: ValueError")

    strategy = fleet.DistributedStrategy()
    optimizer = fleet.distributed_optimizer(paddle.optimizer.SGD(learning_rate=0.001), strategy=strategy)
    with contextlib.redirect_stdout(io.StringIO()):  # Paddle prints the optimizer lists it chose
        optimize_ops, params_grads = optimizer.minimize(avg_cost)

print("after minimize:", fleet._get_applied_meta_list(), fleet._get_applied_graph_list())
print("final strategy:", type(fleet._final_strategy()).__name__, fleet._final_strategy().without_graph_optimization)
print("optimize ops:", len(optimize_ops))
print("params:", sorted(p.name for p, g in params_grads))
print("main ops:", [op.type for op in main.global_block().ops])
fleet.stop_worker()  # collective mode after minimize: only a warning
print("done")
