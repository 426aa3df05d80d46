"""The data feed description of both data-set APIs (Paddle 3.3.1, legacy IR)."""
import paddle

paddle.enable_static()

main = paddle.static.Program()
with paddle.static.program_guard(main, paddle.static.Program()):
    x = paddle.static.data("x", [-1, 2], "float32")
    y = paddle.static.data("y", [-1, 1], "int64")

dataset = paddle.distributed.InMemoryDataset()
dataset.init(batch_size=4, thread_num=2, use_var=[x, y], pipe_command="python my_reader.py")
print(dataset._desc())
queue = paddle.distributed.QueueDataset()
queue.init(batch_size=8, use_var=[y])
print(queue._desc())
print(dataset.thread_num, queue.thread_num)
