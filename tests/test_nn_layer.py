"""``paddle.nn.Layer`` in static mode: names, registration, parameters, sublayers, state dicts, modes, printing.

Expected names, orders and texts were printed by Paddle 3.3.1 (``FLAGS_enable_pir_api=0``) running the
same code, and are pasted here as literals.
"""
import warnings

import numpy as np
import pytest

import refimpl as paddle
from refimpl.core.errors import InvalidArgument, NotFound, OutOfRange
from refimpl.framework import unique_name

nn, F = paddle.nn, paddle.nn.functional
paddle.enable_static()


@pytest.fixture
def progs():
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        yield main, startup


class CausalSelfAttention(nn.Layer):
    def __init__(self):
        super().__init__()
        self.q = nn.Linear(4, 4)
        self.k = nn.Linear(4, 4, bias_attr=False)

    def forward(self, x):
        return self.k(self.q(x))


class Net(nn.Layer):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2D(3, 4, 3, padding=1, bias_attr=False), nn.BatchNorm2D(4), nn.ReLU())
        self.blocks = nn.LayerList([nn.Linear(4, 4), nn.Linear(4, 4, bias_attr=False)])
        self.shared = self.blocks[0]
        self.emb = nn.Embedding(10, 4)
        self.ln = nn.LayerNorm(4)
        self.drop = nn.Dropout(0.1)
        self.pool = nn.AdaptiveAvgPool2D(1)
        self.act = nn.GELU()
        self.sm = nn.Softmax()
        self.fl = nn.Flatten()
        self.mp = nn.MaxPool2D(2)
        self.ap = nn.AvgPool2D(2, stride=1)


# Paddle 3.3.1: print(repr(Net()))
NET_REPR = """Net(
  (stem): Sequential(
    (0): Conv2D(3, 4, kernel_size=[3, 3], padding=1, data_format=NCHW)
    (1): BatchNorm2D(num_features=4, momentum=0.9, epsilon=1e-05)
    (2): ReLU()
  )
  (blocks): LayerList(
    (0): Linear(in_features=4, out_features=4, dtype=float32)
    (1): Linear(in_features=4, out_features=4, dtype=float32)
  )
  (shared): Linear(in_features=4, out_features=4, dtype=float32)
  (emb): Embedding(10, 4, sparse=False, scale_grad_by_freq=False)
  (ln): LayerNorm(normalized_shape=[4], epsilon=1e-05)
  (drop): Dropout(p=0.1, axis=None, mode=upscale_in_train, inplace=False)
  (pool): AdaptiveAvgPool2D(output_size=1)
  (act): GELU(approximate=False)
  (sm): Softmax(axis=-1)
  (fl): Flatten()
  (mp): MaxPool2D(kernel_size=2, stride=None, padding=0)
  (ap): AvgPool2D(kernel_size=2, stride=1, padding=0)
)"""


def test_full_names_follow_the_snake_case_class_name(progs):
    # Paddle 3.3.1: causal_self_attention_0 re_lu_0 gelu_0 batch_norm2d_0 conv2d_0 layer_norm_0 embedding_0
    # sequential_0 layer_list_0 adaptive_avg_pool2d_0 max_pool2d_0 dropout_0 flatten_0 softmax_0 batch_norm1d_0
    assert CausalSelfAttention().full_name() == "causal_self_attention_0"
    layers = [nn.ReLU(), nn.GELU(), nn.BatchNorm2D(3), nn.Conv2D(3, 3, 3), nn.LayerNorm(3), nn.Embedding(3, 3),
              nn.Sequential(), nn.LayerList(), nn.AdaptiveAvgPool2D(1), nn.MaxPool2D(2), nn.Dropout(),
              nn.Flatten(), nn.Softmax(), nn.BatchNorm1D(3)]
    assert [layer.full_name() for layer in layers] == [
        "re_lu_0", "gelu_0", "batch_norm2d_0", "conv2d_0", "layer_norm_0", "embedding_0", "sequential_0",
        "layer_list_0", "adaptive_avg_pool2d_0", "max_pool2d_0", "dropout_0", "flatten_0", "softmax_0",
        "batch_norm1d_0"]
    assert nn.Layer(name_scope="demo").full_name() == "demo_0"


def test_parameters_and_call_of_a_subclass(progs):
    main, _ = progs
    m = CausalSelfAttention()
    # Paddle 3.3.1
    assert [p.name for p in m.parameters()] == ["linear_0.w_0", "linear_0.b_0", "linear_1.w_0"]
    assert [n for n, _ in m.named_parameters()] == ["q.weight", "q.bias", "k.weight"]
    assert [n for n, _ in m.named_sublayers()] == ["q", "k"] and m.sublayers() == [m.q, m.k]
    assert m.parameters(include_sublayers=False) == [] and m.training
    y = m(paddle.static.data("x", [None, 4], "float32"))
    # Paddle 3.3.1 (2.6.2 would say linear_2.tmp_0: its helpers used the global counter)
    assert [(op.type, op.output_arg_names) for op in main.global_block().ops] == [
        ("matmul_v2", ["linear_0.tmp_0"]), ("elementwise_add", ["linear_0.tmp_1"]),
        ("matmul_v2", ["linear_1.tmp_0"])]
    assert y.name == "linear_1.tmp_0" and list(y.shape) == [-1, 4]


def test_sublayers_parameters_state_dict_and_repr_of_a_nested_model(progs):
    net = Net()
    assert repr(net) == NET_REPR
    # Paddle 3.3.1: a layer reached twice (shared is blocks.0) is listed once; state_dict lists it twice
    assert [n for n, _ in net.named_sublayers()] == [
        "stem", "stem.0", "stem.1", "stem.2", "blocks", "blocks.0", "blocks.1", "emb", "ln", "drop", "pool",
        "act", "sm", "fl", "mp", "ap"]
    assert [(n, p.name) for n, p in net.named_parameters()] == [
        ("stem.0.weight", "conv2d_0.w_0"), ("stem.1.weight", "batch_norm2d_0.w_0"),
        ("stem.1.bias", "batch_norm2d_0.b_0"), ("stem.1._mean", "batch_norm2d_0.w_1"),
        ("stem.1._variance", "batch_norm2d_0.w_2"), ("blocks.0.weight", "linear_0.w_0"),
        ("blocks.0.bias", "linear_0.b_0"), ("blocks.1.weight", "linear_1.w_0"), ("emb.weight", "embedding_0.w_0"),
        ("ln.weight", "layer_norm_0.w_0"), ("ln.bias", "layer_norm_0.b_0")]
    sd = net.state_dict()
    assert [(k, v.name) for k, v in sd.items()][7:10] == [
        ("blocks.1.weight", "linear_1.w_0"), ("shared.weight", "linear_0.w_0"), ("shared.bias", "linear_0.b_0")]
    assert len(sd) == 13 and sd["stem.1._mean"] is net.stem[1]._mean
    assert (len(net.sublayers()), len(list(net.children())), net.full_name()) == (16, 12, "net_0")
    # Paddle 3.3.1 prints these two
    assert repr(nn.BatchNorm1D(3)) == "BatchNorm1D(num_features=3, momentum=0.9, epsilon=1e-05, data_format=NCL)"
    assert repr(nn.Conv2D(3, 6, (3, 2), stride=2, groups=3, padding_mode="reflect", padding=1)) == (
        "Conv2D(3, 6, kernel_size=[3, 2], stride=[2, 2], padding=1, padding_mode=reflect, groups=3, "
        "data_format=NCHW)")


def test_setattr_registration_rules(progs):
    m = CausalSelfAttention()
    m.q = None                                  # a sublayer slot may be emptied
    assert m.q is None and [n for n, _ in m.named_parameters()] == ["k.weight"]
    with pytest.raises(TypeError, match="sublayer 'k'"):
        m.k = 3
    w = m.k.weight
    m.k.weight = None
    assert m.k.parameters() == [] and "weight" in m.k._parameters
    with pytest.raises(TypeError, match="parameter 'weight'"):
        m.k.weight = np.zeros((4, 4))
    m.k.weight = w
    m.extra = nn.ReLU()                        # a later sublayer comes last
    assert [n for n, _ in m.named_children()] == ["k", "extra"]
    m.plain = [1, 2]
    assert m.plain == [1, 2] and "plain" not in m._sub_layers
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        m.nope

    class Early(nn.Layer):
        def __init__(self):
            self.fc = nn.Linear(2, 2)          # before super().__init__()

    with pytest.raises(InvalidArgument, match="super"):
        Early()


def test_add_sublayer_add_parameter_create_parameter_and_buffers(progs):
    m = nn.Layer()
    lin = m.add_sublayer("lin", nn.Linear(2, 3))
    p = m.create_parameter([3], is_bias=True)
    m.add_parameter("scale", p)
    assert p.name == "layer_0.b_0" and m.scale is p and lin is m.lin
    assert [n for n, _ in m.named_parameters()] == ["scale", "lin.weight", "lin.bias"]
    with pytest.raises(InvalidArgument, match="Parameter"):
        m.add_parameter("bad", paddle.static.data("d", [2], "float32"))
    buf = paddle.static.create_global_var([2], 0.0, "float32", persistable=True, name="buf")
    m.register_buffer("stat", buf)
    m.register_buffer("tmp", buf, persistable=False)
    assert "stat" in m.state_dict() and "tmp" not in m.state_dict() and m.buffers() == [buf]


def test_train_eval_switch_batch_norm_and_dropout(progs):
    main, _ = progs
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1D(4), nn.Dropout(0.5))
    x = paddle.static.data("x", [None, 4], "float32")
    model(x)
    assert model.eval() is model and not any(m.training for m in model.sublayers(include_self=True))
    model(x)
    model.train()
    assert all(m.training for m in model.sublayers(include_self=True))
    ops = {op.type: [] for op in main.global_block().ops}
    for op in main.global_block().ops:
        ops[op.type].append(op)
    assert [op.attr("is_test") for op in ops["batch_norm"]] == [False, True]
    assert [op.attr("use_global_stats") for op in ops["batch_norm"]] == [False, True]
    assert [op.attr("is_test") for op in ops["dropout"]] == [False, True]
    with pytest.raises(InvalidArgument, match="bool"):
        model.train(1)


def _build_model(model_fn):
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        model = model_fn()
        y = model(paddle.static.data("x", [None, 4], "float32"))
    return main, startup, model, y


def test_state_dict_round_trip_through_set_state_dict():
    scope = paddle.static.Scope()
    main, startup, model, y = _build_model(lambda: nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2)))
    sd = model.state_dict()
    assert {k: v.name for k, v in sd.items()} == {"0.weight": "linear_0.w_0", "0.bias": "linear_0.b_0",
                                                  "2.weight": "linear_1.w_0", "2.bias": "linear_1.b_0"}
    rng = np.random.default_rng(3)
    values = {k: rng.standard_normal(v.shape).astype("float32") for k, v in sd.items()}
    x = rng.standard_normal((5, 4)).astype("float32")
    with paddle.static.scope_guard(scope):
        with pytest.raises(NotFound, match="linear_0.w_0"):
            model.set_state_dict(values)         # the startup program has not run into this scope
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)
        missing, unexpected = model.set_state_dict(dict(values, extra=np.zeros(2)))
        assert (missing, unexpected) == ([], ["extra"])
        got, = exe.run(main, feed={"x": x}, fetch_list=[y])
        want = np.maximum(x @ values["0.weight"] + values["0.bias"], 0) @ values["2.weight"] + values["2.bias"]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(np.asarray(scope.find_var("linear_1.b_0").get_tensor()), values["2.bias"])
        # by parameter name; a wrong shape and a missing key are skipped with a warning
        by_name = {"linear_0.w_0": np.zeros((4, 3), "float32"), "linear_0.b_0": np.zeros((2,), "float32")}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            missing, unexpected = model.set_state_dict(by_name, use_structured_name=False)
        assert missing == ["linear_0.b_0", "linear_1.w_0", "linear_1.b_0"] and unexpected == ["linear_0.b_0"]
        assert any("receives a shape [2]" in str(w.message) for w in caught)
        assert not np.asarray(scope.find_var("linear_0.w_0").get_tensor()).any()


def test_forward_hooks_and_containers(progs):
    seq = nn.Sequential(("a", nn.ReLU()), ("b", nn.Tanh()))
    assert [n for n, _ in seq.named_children()] == ["a", "b"] and seq["b"] is seq[1] is seq[-1]
    assert isinstance(seq[0:1], nn.Sequential) and len(seq[0:1]) == 1
    with pytest.raises(OutOfRange):
        seq[2]
    calls = []
    handle = seq.register_forward_pre_hook(lambda layer, inputs: calls.append("pre"))
    seq.register_forward_post_hook(lambda layer, inputs, out: calls.append("post"))
    seq(paddle.static.data("x", [None, 4], "float32"))
    handle.remove()
    seq(paddle.static.data("x2", [None, 4], "float32"))
    assert calls == ["pre", "post", "post"]

    ll = nn.LayerList([nn.ReLU(), nn.Tanh()])
    assert ll.append(nn.Sigmoid()) is ll
    ll.insert(0, nn.GELU())
    assert [type(m).__name__ for m in ll] == ["GELU", "ReLU", "Tanh", "Sigmoid"]
    del ll[1]
    assert [type(m).__name__ for m in ll] == ["GELU", "Tanh", "Sigmoid"] and list(ll._sub_layers) == ["0", "1", "2"]
    ll.extend([nn.ReLU()])
    assert len(ll) == 4 and type(ll[-1]).__name__ == "ReLU" and len(ll[1:3]) == 2
    with pytest.raises(OutOfRange, match=r"range \[-4, 4\)"):
        ll[4]


def test_layer_names_come_from_the_global_counter_helpers_from_the_program():
    """Paddle 3.3.1 builds the same code twice without a unique_name guard and prints (ops, parameters):

    program 1: fc_0.tmp_0 ... relu_0.tmp_0, linear_0.tmp_0, linear_1.tmp_0 (second call), linear_2.tmp_0
    (F.linear), fc_1.tmp_0; parameters fc_0.w_0 fc_0.b_0 linear_0.w_0 linear_0.b_0 fc_1.w_0 fc_1.b_0.
    program 2: the same op outputs; parameters fc_0.w_0 fc_0.b_0 linear_1.w_0 linear_1.b_0 fc_1.w_0 fc_1.b_0.
    """
    results = []
    with unique_name.guard():
        for _ in range(2):
            main, startup = paddle.static.Program(), paddle.static.Program()
            with paddle.static.program_guard(main, startup):
                x = paddle.static.data("x", [None, 4], "float32")
                h = F.relu(paddle.static.nn.fc(x, 4))
                lin = nn.Linear(4, 4)
                h = lin(lin(h))
                paddle.static.nn.fc(F.linear(h, lin.weight), 4)
            results.append(([op.output_arg_names[0] for op in main.global_block().ops],
                            [p.name for p in main.all_parameters()]))
    outs = ["fc_0.tmp_0", "fc_0.tmp_1", "relu_0.tmp_0", "linear_0.tmp_0", "linear_0.tmp_1", "linear_1.tmp_0",
            "linear_1.tmp_1", "linear_2.tmp_0", "fc_1.tmp_0", "fc_1.tmp_1"]
    assert results[0] == (outs, ["fc_0.w_0", "fc_0.b_0", "linear_0.w_0", "linear_0.b_0", "fc_1.w_0", "fc_1.b_0"])
    assert results[1] == (outs, ["fc_0.w_0", "fc_0.b_0", "linear_1.w_0", "linear_1.b_0", "fc_1.w_0", "fc_1.b_0"])


def test_a_parameter_shared_by_name_is_created_and_initialised_once(progs):
    main, startup = progs
    x = paddle.static.data("x", [None, 4], "float32")
    attr = paddle.ParamAttr(name="shared.w")
    a, b = nn.Linear(4, 4, weight_attr=attr), nn.Linear(4, 4, weight_attr=attr)
    assert a.weight is b.weight and a.weight.name == "shared.w"
    b(a(x))
    assert [op.output_arg_names for op in startup.global_block().ops].count(["shared.w"]) == 1
    with pytest.raises(InvalidArgument, match="shared.w.*\\[4, 4\\].*\\[4, 5\\]"):
        nn.Linear(4, 5, weight_attr=attr)


def test_a_clone_never_reuses_a_temporary_name(progs):
    main, startup = progs
    y = nn.Linear(4, 4)(paddle.static.data("x", [None, 4], "float32"))
    test_prog = main.clone(for_test=True)
    with paddle.static.program_guard(test_prog, startup):
        z = F.relu(nn.Linear(4, 4)(test_prog.global_block().var(y.name)))
    names = [n for op in test_prog.global_block().ops for n in op.output_arg_names]
    assert len(names) == len(set(names)) and z.name == "relu_0.tmp_0"
