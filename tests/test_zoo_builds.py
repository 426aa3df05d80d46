"""The model zoo built with refimpl's API: ``zoo.py``'s builders give Paddle's very programs.

Each builder of ``oracle/zoo/zoo.py`` (LeNet from ``static.nn``, a ResNet block and a GPT from
``nn.Layer``\\ s, a layer MLP sharing a weight by name, a grab-bag of tensor functions, gradient
clipping) runs here with ``import refimpl as paddle`` as it ran in Paddle: the main and startup
programs equal the recorded ones var for var and op for op (types, slots, attrs, roles, names), and
the loss has the recorded name. ``python tests/zoo_build.py NN_case`` prints the differences of one case.

The cases Paddle 2.6.2 recorded (3.3.1's legacy IR cannot build them; see the zoo's README) are
compared in 3.3.1's op format, which refimpl follows: the slots and attrs one version has and the
other lacks (:data:`VERSION_SLOTS`, :data:`VERSION_ATTRS`) are set aside, and the names of
temporaries are compared up to a consistent renaming, since 2.6.2 numbered a layer's temporaries
from the same counter as the layer's name (``embedding_2.tmp_0`` for the first ``nn.Embedding``)
where 3.3.1 uses the program's own counter (``embedding_0.tmp_0``). Parameters, feeds and the
learning-rate variables keep their names; every op, slot, attr value, shape and dtype still counts.
"""
import copy

import pytest

from oracle import diff_programs
from zoo_build import build

BUILT = ["00_lenet", "01_resnet_block", "02_gpt_mini", "03_mlp_layers", "04_tensor_ops",
         "10_grad_clip", "11_grad_clip", "12_grad_clip"]
BUILT += ["08_mlp_recompute", "09_gpt_recompute"]  # recompute
BUILT += ["05_mlp_bf16", "06_gpt_bf16", "07_mlp_fp16", "16_mlp_fp16"]  # amp

# {op type: slots} that only one of 2.6.2 / 3.3.1 has
VERSION_SLOTS = {"scale": {"BiasTensor"}, "adam": {"Moment2Max", "Moment2MaxOut"},
                 "adamw": {"Moment2Max", "Moment2MaxOut"}}
VERSION_ATTRS = {"amsgrad", "use_mkldnn", "mkldnn_data_type"}


def _across_versions(prog):
    """``prog`` (a program/v1 dict) with version-only slots and attrs dropped and temporaries renamed."""
    prog = copy.deepcopy(prog)
    for block in prog["blocks"]:
        persistable = {v["name"] for v in block["vars"] if v["persistable"] or v.get("is_data")}
        names = {}

        def canon(name):
            base, sep, rest = name.partition("@")
            if base in persistable or not base:
                return name
            return names.setdefault(base, f"tmp#{len(names)}") + sep + rest

        for op in block["ops"]:
            drop = VERSION_SLOTS.get(op["type"], set())
            for key in ("inputs", "outputs"):
                op[key] = {s: [canon(n) for n in op[key][s]] for s in sorted(op[key]) if s not in drop}
            op["attrs"] = {k: ([canon(n) for n in v] if k == "op_role_var" else v)
                           for k, v in op["attrs"].items() if k not in VERSION_ATTRS}
        for v in block["vars"]:
            v["name"] = canon(v["name"])
    return prog


@pytest.mark.parametrize("name", BUILT)
def test_builder_gives_paddles_programs(name):
    main, startup, loss, d = build(name)
    got_main, got_startup, want_main, want_startup = main.to_dict(), startup.to_dict(), d["main"], d["startup"]
    if d["paddle_version"] == "2.6.2":
        got_main, want_main = _across_versions(got_main), _across_versions(want_main)
        got_startup, want_startup = _across_versions(got_startup), _across_versions(want_startup)
    else:
        assert loss.name == d["loss_name"]
    assert diff_programs(got_main, want_main) == []
    assert diff_programs(got_startup, want_startup) == []


def test_the_comparison_across_versions_still_sees_a_changed_attr():
    """Renaming temporaries must not hide a real difference (here a softmax axis)."""
    main, _, _, d = build("02_gpt_mini")
    got = main.to_dict()
    op = next(o for o in got["blocks"][0]["ops"] if o["type"] == "softmax")
    op["attrs"]["axis"] = 0
    assert diff_programs(_across_versions(got), _across_versions(d["main"])) != []
