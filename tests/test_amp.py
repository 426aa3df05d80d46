"""``paddle.static.amp`` (float16 and bfloat16) builds Paddle's programs and gives Paddle's numbers.

Every case of ``tests/oracle_amp/amp_models.py`` (custom white / black lists and black varnames,
O1 / O2 / OD, the fp16-only and the common ``decorate`` signature, ``fp16_guard``, master weights
with Momentum / SGD / Adam, ``decorate_bf16`` with custom lists, ``use_bf16_guard`` and
``use_pure_bf16``) is built with refimpl and compared with what Paddle 3.3.1 built for it
(``tests/oracle_amp/programs.json``, written by ``FLAGS_enable_pir_api=0 /tmp/pd33/bin/python
tests/oracle_amp/amp_models.py``): every op of the main and startup programs (type, slots, attrs),
every var of block 0 (shape, dtype, persistability). The ``gpu`` cases are the programs of a build
where every op has a float16 GPU kernel: both sides replace ``_get_sys_unsupported_list`` by "none
unsupported" (Paddle's CPU wheel has no GPU kernel, so it would insert no cast at all); one test
builds them again under refimpl's CUDA backend (numba's simulator, another process) with no
replacement, since that is refimpl's rule there. The recorded steps (loss scaling with an ``inf``
fed, bf16 and pure-bf16 training) and ``amp_init``'s scope values are replayed and compared with
Paddle's; float16 training on the CUDA backend (simulated) is compared with Paddle's float32 run
of the same model. Where Paddle 3.3.1's legacy IR cannot build a case (overflow flags ORed with
``paddle.any``), Paddle 2.6.2's program is the reference (``programs_262.json``, written by
``/tmp/pd26/bin/python tests/oracle_amp/amp_models.py``).
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import refimpl as paddle
from refimpl.core.errors import InvalidArgument
from refimpl.static.amp import fp16_lists

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "oracle_amp"))
import amp_models as M  # noqa: E402

with open(os.path.join(HERE, "oracle_amp", "programs.json")) as f:
    RECORDED = json.load(f)
with open(os.path.join(HERE, "oracle_amp", "programs_262.json")) as f:
    RECORDED_262 = json.load(f)

# bfloat16 keeps 8 significant bits: the zoo's bf16 tolerance (oracle/zoo/README.md, "Tolerances")
BF16_TOL = dict(rtol=2 ** -6, atol=2 ** -8)
FP32_TOL = dict(rtol=1e-5, atol=1e-6)


@pytest.fixture(autouse=True)
def _static():
    paddle.enable_static()


def _build(case, monkeypatch):
    if M.ALL_CASES[case].get("gpu"):
        real = fp16_lists._get_sys_unsupported_list
        monkeypatch.setattr(fp16_lists, "_get_sys_unsupported_list", lambda dtype: ("GPU", set(), real(dtype)[2]))
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        with paddle.utils.unique_name.guard():
            loss, dec = M.build(paddle, case)
    monkeypatch.undo()
    return main, startup, loss, dec


def _summary(prog):
    return json.loads(json.dumps(M.summary(prog)))  # tuples as lists, as in the recorded file


@pytest.mark.parametrize("case", sorted(M.CASES))
def test_programs_match_paddle(case, monkeypatch):
    main, startup, _, _ = _build(case, monkeypatch)
    for part, prog in (("main", main), ("startup", startup)):
        got, want = _summary(prog), RECORDED[case][part]
        for i, (g, w) in enumerate(zip(got["blocks"][0], want["blocks"][0])):
            assert g == w, f"{case} {part} op {i}"
        assert len(got["blocks"][0]) == len(want["blocks"][0]), f"{case} {part}: op count"
        assert got == want, f"{case} {part}: vars"


@pytest.mark.parametrize("case", sorted(c for c in M.CASES if M.CASES[c].get("test_program")))
def test_amp_init_rewrites_a_test_program_as_paddle(case, monkeypatch):
    real = fp16_lists._get_sys_unsupported_list
    _, _, _, dec = _build(case, monkeypatch)
    if M.CASES[case].get("gpu"):  # amp_init builds its lists anew only at OD; the patch matters for the build
        monkeypatch.setattr(fp16_lists, "_get_sys_unsupported_list", lambda dtype: ("GPU", set(), real(dtype)[2]))
    assert _summary(M.rewrite_test_program(case, dec)) == RECORDED[case]["test_program"]


def _values(entry):
    """The recorded values as float64 (bfloat16 tensors are recorded as their uint16 bit patterns)."""
    data = np.array(entry["data"])
    if entry["dtype"] == "uint16":
        return (data.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return data.astype(np.float64)


@pytest.mark.parametrize("case", sorted(c for c in M.CASES if M.CASES[c].get("steps")))
def test_training_steps_match_paddle(case, monkeypatch):
    main, startup, loss, dec = _build(case, monkeypatch)
    got = M._run(paddle, case, main, startup, loss, dec)["steps"]
    want = RECORDED[case]["steps"]
    tol = BF16_TOL if M.CASES[case]["api"] == "bf16" else FP32_TOL
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert set(g) == set(w)
        np.testing.assert_allclose(g["loss"], w["loss"], **tol, err_msg=f"{case} step {i} loss")
        for name in sorted(set(w) - {"loss"}):
            if name.endswith(("_steps_0", "loss_scaling_0")):  # the scaling state: exactly
                assert g[name] == w[name], f"{case} step {i} {name}"
            else:
                np.testing.assert_allclose(_values(g[name]), _values(w[name]), **tol, err_msg=f"{case} step {i} {name}")


def test_an_overflowing_step_skips_the_update_and_lowers_the_scale(monkeypatch):
    """Invariants behind the recorded numbers: Adam reads the overflow flag as SkipUpdate (parameters
    unchanged); Momentum gets zeroed gradients (its velocity still moves the parameters); the scale
    halves after ``decr_every_n_nan_or_inf`` bad steps and doubles after ``incr_every_n_steps`` good ones."""
    params = ["fc_0.b_0", "fc_0.w_0", "fc_1.b_0", "fc_1.w_0", "fc_2.b_0", "fc_2.w_0"]
    main, startup, loss, dec = _build("fp16_cpu_overflow_adam", monkeypatch)
    steps = M._run(paddle, "fp16_cpu_overflow_adam", main, startup, loss, dec)["steps"]
    assert np.isnan(steps[1]["loss"])  # the inf step
    for p in params:
        assert steps[1][p] == steps[0][p]
    scale = [s["loss_scaling_0"]["data"][0] for s in steps]
    bad = [s["num_bad_steps_0"]["data"][0] for s in steps]
    assert scale == [8.0, 8.0, 16.0, 32.0, 64.0] and bad == [0, 1, 0, 0, 0]  # decr every 2: not yet lowered
    main, startup, loss, dec = _build("fp16_cpu_overflow_momentum", monkeypatch)
    steps = M._run(paddle, "fp16_cpu_overflow_momentum", main, startup, loss, dec)["steps"]
    assert [s["loss_scaling_0"]["data"][0] for s in steps] == [16.0, 32.0, 16.0, 16.0, 32.0]
    assert any(steps[2][p] != steps[1][p] for p in params)  # the velocity of step 1 still applies


@pytest.mark.parametrize("case", sorted(c for c in M.ALL_CASES if M.ALL_CASES[c].get("amp_init")))
def test_amp_init_converts_parameters_as_paddle(case, monkeypatch):
    main, startup, loss, dec = _build(case, monkeypatch)
    got = M._run(paddle, case, main, startup, loss, dec)["after_amp_init"]
    want = (RECORDED if case in RECORDED else RECORDED_262)[case]["after_amp_init"]
    assert got == want  # float16 values / bfloat16 bit patterns, exactly


def test_the_cuda_backend_inserts_the_casts_of_paddles_gpu_build():
    """Under refimpl's CUDA backend (``is_compiled_with_cuda()``), an op has a float16 kernel when the
    backend has a kernel for it: with no replacement, the gpu cases give Paddle's GPU programs."""
    code = ("import json, sys; sys.path.insert(0, 'tests/oracle_amp'); import amp_models as M; "
            "import refimpl as paddle; paddle.enable_static(); r = json.load(open('tests/oracle_amp/programs.json'))\n"
            "for case in ('fp16_o1_lists_gpu', 'fp16_o2_momentum_gpu', 'common_o2_adam_gpu'):\n"
            "    main, startup = paddle.static.Program(), paddle.static.Program()\n"
            "    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():\n"
            "        M.build(paddle, case)\n"
            "    assert json.loads(json.dumps(M.summary(main))) == r[case]['main'], case\n"
            "print('ok')\n")
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", REFIMPL_BACKEND="cuda")
    out = subprocess.run([sys.executable, "-c", code], cwd=os.path.dirname(HERE), env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stdout[-2000:] + out.stderr[-2000:]


# float16 keeps 11 significant bits (unit roundoff 2**-11, about 4.9e-4); each cast and float16 op of the
# forward and backward rounds once, a handful of roundings deep, over three steps: 1e-2 relative, 1e-3
# absolute for values that cancel towards zero.
FP16_TOL = dict(rtol=1e-2, atol=1e-3)
_CUDA_RUN = """
import json, sys
sys.path.insert(0, 'tests/oracle_amp')
import amp_models as M
import refimpl as paddle
paddle.enable_static()
out = {}
for case in sys.argv[1:]:
    M.ALL_CASES[case]['steps'] = 3
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        loss, dec = M.build(paddle, case)
    out[case] = M._run(paddle, case, main, startup, loss, dec, place=paddle.CUDAPlace(0))['steps']
print(json.dumps(out))
"""


def test_float16_training_on_the_cuda_backend_follows_paddles_float32_numbers():
    """The gpu programs (O1 Adam; O2 Momentum with master weights after ``amp_init``, with every layer or
    only the last two in ``fp16_guard``, the latter with float32 and float16 gradients) run in float16 on
    the CUDA backend (numba's simulator): losses, loss-scaling state and parameters follow Paddle's
    float32 run of the same model (its CPU wheel, where the decorator inserts no cast) within float16's
    precision; the scaling state exactly."""
    pairs = {"fp16_o1_adam_gpu": "fp16_cpu_adam", "fp16_o2_momentum_gpu": "fp16_cpu_o2_momentum",
             "fp16_o2_mixed_guard_gpu": "fp16_cpu_o2_mixed_guard"}
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", REFIMPL_BACKEND="cuda")
    out = subprocess.run([sys.executable, "-c", _CUDA_RUN, *pairs], cwd=os.path.dirname(HERE), env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    got_all = json.loads(out.stdout.strip().splitlines()[-1])
    for case, ref in pairs.items():
        for i, (g, w) in enumerate(zip(got_all[case], RECORDED[ref]["steps"])):
            np.testing.assert_allclose(g["loss"], w["loss"], **FP16_TOL, err_msg=f"{case} step {i} loss")
            for name in sorted(set(w) - {"loss"}):
                if name.endswith(("_steps_0", "loss_scaling_0")):
                    assert g[name]["data"] == w[name]["data"], f"{case} step {i} {name}"
                else:
                    np.testing.assert_allclose(_values(g[name]), _values(w[name]), **FP16_TOL,
                                               err_msg=f"{case} step {i} {name}")


def test_on_the_cpu_every_op_lacks_a_float16_gpu_kernel():
    """Paddle's CPU wheel: ``op_supported_infos('GPU', FP16)`` supports nothing, so no cast is inserted."""
    all_ops, supported, unsupported = fp16_lists.op_supported_infos("GPU", "float16")
    assert supported == set() and unsupported == all_ops and "mul" in all_ops
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        loss = M._mlp(paddle)
        paddle.static.amp.decorate(paddle.optimizer.SGD(0.1), use_pure_fp16=True).minimize(loss)
    assert "cast" not in [op.type for op in main.global_block().ops]
    assert all(v.dtype != "float16" for v in main.global_block().vars.values())


def _decorate(**kw):
    return paddle.static.amp.decorate(paddle.optimizer.SGD(learning_rate=0.1), **kw)


@pytest.mark.parametrize("value", [0, -1.0, "1024", None, True, float("nan")])
def test_a_loss_scale_that_is_no_positive_number_is_refused_at_decorate_time(value):
    with pytest.raises(InvalidArgument, match="init_loss_scaling") as err:
        _decorate(init_loss_scaling=value)
    assert repr(value) in str(err.value)


def test_unknown_or_overlapping_ops_in_custom_lists_are_refused():
    """Paddle takes any name (a typo changes nothing, silently); refimpl names the list and the op."""
    with pytest.raises(InvalidArgument, match="custom_white_list.*'matmull'"):
        paddle.static.amp.CustomOpLists(custom_white_list={"matmull"})
    with pytest.raises(InvalidArgument, match="custom_fp32_list.*'relux'"):
        paddle.static.amp.bf16.AutoMixedPrecisionListsBF16(custom_fp32_list={"relux"})
    with pytest.raises(InvalidArgument, match="overlaps custom_black_list with < relu >"):
        paddle.static.amp.CustomOpLists(custom_white_list={"relu"}, custom_black_list={"relu"})
    lists = paddle.static.amp.CustomOpLists(custom_white_list={"fused_attention"}, custom_black_list={"mul"})
    assert "mul" in lists.black_list and "mul" not in lists.white_list and "mul" in lists.unsupported_list


def test_bad_level_dtype_and_arguments_are_typed_errors():
    with pytest.raises(InvalidArgument, match="level"):
        _decorate(level="O3")
    with pytest.raises(InvalidArgument, match="float16' or 'bfloat16"):
        _decorate(dtype="float64")
    with pytest.raises(InvalidArgument, match="decorate"):
        _decorate(no_such_option=1)
    with pytest.raises(InvalidArgument, match="decorate_bf16: optimizer must be"):
        paddle.static.amp.bf16.decorate_bf16("sgd")
    with pytest.raises(InvalidArgument, match="decorate: optimizer must be"):
        paddle.static.amp.decorate(None, None, 8.0)


def _minimize_small_net(decorated):
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        x = paddle.static.data("x", [2, 4], "float32")
        loss = paddle.mean(paddle.static.nn.fc(x, 3))
        decorated().minimize(loss)
    return main


def _bf16_lists():
    return paddle.static.amp.bf16.AutoMixedPrecisionListsBF16()


@pytest.mark.parametrize("lists, got", [({"relu"}, "got set"), (["relu"], "got list"),
                                        ("relu", "got str"), (_bf16_lists, "got AutoMixedPrecisionListsBF16")])
def test_decorate_refuses_amp_lists_of_the_wrong_kind(lists, got):
    """Paddle 3.3.1 (legacy IR) fails inside minimize with ``AttributeError: 'set' object has no attribute
    'unsupported_list'``; refimpl names the argument and what it got, before the program is touched."""
    value = lists() if callable(lists) else lists
    with pytest.raises(InvalidArgument, match=f"decorate: amp_lists must be an AutoMixedPrecisionLists.*{got}"):
        _minimize_small_net(lambda: paddle.static.amp.decorate(paddle.optimizer.SGD(0.1), amp_lists=value))
    with pytest.raises(InvalidArgument, match="amp_lists must be an AutoMixedPrecisionLists"):
        _decorate(amp_lists=value, level="O2")  # the common signature checks them too


def test_decorate_bf16_refuses_float16_lists():
    """Paddle 3.3.1: ``AttributeError: 'AutoMixedPrecisionLists' object has no attribute 'fp32_varnames'``."""
    with pytest.raises(InvalidArgument, match="decorate_bf16: amp_lists must be an AutoMixedPrecisionListsBF16.*"
                                              "got AutoMixedPrecisionLists"):
        _minimize_small_net(lambda: paddle.static.amp.bf16.decorate_bf16(
            paddle.optimizer.SGD(0.1), amp_lists=paddle.static.amp.CustomOpLists()))


@pytest.mark.parametrize("optimizer, got", [(None, "got NoneType"), ("sgd", "got str"), (3, "got int")])
def test_decorate_refuses_what_is_no_optimizer(optimizer, got):
    """Paddle 3.3.1: ``decorate(None)`` is an AttributeError ('NoneType' object has no attribute
    '_learning_rate'), ``decorate("sgd")`` a RuntimeError; refimpl: InvalidArgument naming the argument."""
    amp = paddle.static.amp
    for call in (lambda: amp.decorate(optimizer), lambda: amp.decorate(optimizer, None, 8.0),
                 lambda: amp.bf16.decorate_bf16(optimizer)):
        with pytest.raises(InvalidArgument, match=f"optimizer must be a paddle.optimizer.Optimizer, {got}"):
            call()


@pytest.mark.parametrize("kw, name", [(dict(incr_every_n_steps=0), "incr_every_n_steps"),
                                      (dict(decr_every_n_nan_or_inf=1.5), "decr_every_n_nan_or_inf"),
                                      (dict(incr_ratio=0.5), "incr_ratio"), (dict(decr_ratio=2.0), "decr_ratio"),
                                      (dict(decr_ratio=0.0), "decr_ratio"), (dict(incr_ratio="2"), "incr_ratio")])
def test_loss_scaling_steps_out_of_range_are_refused(kw, name):
    with pytest.raises(InvalidArgument, match=f"decorate: {name} must be") as err:
        _decorate(**kw)
    assert repr(next(iter(kw.values()))) in str(err.value)


def test_custom_lists_move_ops_between_the_default_lists():
    """Invariant of Paddle's ``_update_list``: a custom op leaves the list it was in and joins the chosen
    one; a custom black / fp32 op also counts as unsupported."""
    default = paddle.static.amp.AutoMixedPrecisionLists()
    assert "tanh" in default.gray_list and "softmax" in default.black_list
    lists = paddle.static.amp.CustomOpLists(custom_white_list={"softmax"}, custom_black_list={"tanh"})
    assert "softmax" in lists.white_list and "softmax" not in lists.black_list
    assert "tanh" in lists.black_list and "tanh" not in lists.gray_list and "tanh" in lists.unsupported_list
    bf16 = paddle.static.amp.bf16.AutoMixedPrecisionListsBF16(custom_bf16_list={"tanh"},
                                                              custom_fp32_list={"matmul_v2"})
    assert "tanh" in bf16.bf16_list and "tanh" not in bf16.gray_list
    assert "matmul_v2" in bf16.fp32_list and "matmul_v2" not in bf16.bf16_list
    assert "matmul_v2" in bf16.unsupported_list
    with pytest.raises(InvalidArgument, match="Custom bf16 list overlap custom fp32 list with < relu >"):
        paddle.static.amp.bf16.AutoMixedPrecisionListsBF16(custom_bf16_list={"relu"}, custom_fp32_list={"relu"})


# attrs only one of Paddle 2.6.2 / 3.3.1 puts on these ops (as in test_zoo_builds.VERSION_ATTRS)
VERSION_ATTRS = {"amsgrad", "use_mkldnn", "mkldnn_data_type"}


def _without_version_attrs(summary):
    for block in summary["blocks"]:
        for op in block:
            op[3] = {k: v for k, v in op[3].items() if k not in VERSION_ATTRS}
    return summary


@pytest.mark.parametrize("case", sorted(M.CASES_262))
def test_overflow_flags_are_ored_as_paddle_262(case, monkeypatch):
    """O2 with float32 and float16 gradients (a layer outside ``fp16_guard``), or one flag per gradient
    when distributed: the flags are ORed by ``concat`` + ``reduce_any``. Paddle 3.3.1's legacy IR cannot
    build that (its ``paddle.any`` takes only PIR values): Paddle 2.6.2's programs are the reference."""
    main, startup, _, _ = _build(case, monkeypatch)
    for part, prog in (("main", main), ("startup", startup)):
        got, want = _without_version_attrs(_summary(prog)), _without_version_attrs(RECORDED_262[case][part])
        assert got == want, f"{case} {part}"
    assert [op.type for op in main.global_block().ops].count("reduce_any") == 1


def test_bf16_bit_patterns_truncate_as_paddles():
    x = np.array([1.0, 1.00390625 + 2 ** -9, -3.5, 65504.0], dtype=np.float32)
    bits = paddle.static.amp.bf16.convert_float_to_uint16(x)
    assert bits.dtype == np.uint16
    assert list(bits) == [int(b) >> 16 for b in x.view(np.uint32)]  # the top half of each float32
