import paddle
paddle.enable_static()
g = paddle.seed(2023)
print(type(g).__name__, g.initial_seed())
st = paddle.get_rng_state()
print(len(st), type(st[0]).__name__)
print(paddle.base.core.default_cpu_generator().initial_seed())
paddle.set_rng_state(st)
print(paddle.get_cuda_rng_state())
