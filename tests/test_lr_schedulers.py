"""The LR schedulers of ``paddle.optimizer.lr``: Paddle's values, printed lines, state and errors.

Values and ``verbose=True`` lines are compared with real Paddle's, pasted below as literals
(printed by Paddle 3.3.1; Paddle 2.6.2 printed the very same for every scheduler here), with
independent formulas, and with the ``lr_schedule.values`` of every zoo recording that has one
(the executor writes ``scheduler()`` into ``learning_rate_0`` before each step).
"""
import math
import os

import pytest

import refimpl as paddle
from oracle import load, oracle_file
from refimpl.core.errors import InvalidArgument, OutOfRange
from zoo_build import zoo_module

paddle.enable_static()
L = paddle.optimizer.lr

SCHEDULERS = {
    "NoamDecay": lambda v: L.NoamDecay(d_model=16, warmup_steps=3, learning_rate=0.5, verbose=v),
    "PiecewiseDecay": lambda v: L.PiecewiseDecay([2, 4], [0.1, 0.05, 0.01], verbose=v),
    "NaturalExpDecay": lambda v: L.NaturalExpDecay(0.5, gamma=0.3, verbose=v),
    "InverseTimeDecay": lambda v: L.InverseTimeDecay(0.5, gamma=0.3, verbose=v),
    "PolynomialDecay": lambda v: L.PolynomialDecay(0.5, decay_steps=3, end_lr=0.01, power=2.0, verbose=v),
    "PolynomialDecayCycle": lambda v: L.PolynomialDecay(0.5, decay_steps=3, end_lr=0.01, power=1.5, cycle=True,
                                                        verbose=v),
    "LinearWarmup": lambda v: L.LinearWarmup(0.5, warmup_steps=3, start_lr=0.1, end_lr=0.5, verbose=v),
    "LinearWarmupCosine": lambda v: L.LinearWarmup(L.CosineAnnealingDecay(0.01, T_max=4), warmup_steps=2,
                                                   start_lr=0.002, end_lr=0.01, verbose=v),
    "CosineAnnealingDecay": lambda v: L.CosineAnnealingDecay(0.01, T_max=4, verbose=v),
    "CosineAnnealingDecayEta": lambda v: L.CosineAnnealingDecay(0.3, T_max=3, eta_min=0.05, verbose=v),
    "NoamDecayDefault": lambda v: L.NoamDecay(8, 2, verbose=v),
    "MultiStepDecay": lambda v: L.MultiStepDecay(0.5, milestones=[2, 5], gamma=0.5, verbose=v),
    "StepDecay": lambda v: L.StepDecay(0.5, step_size=2, gamma=0.3, verbose=v),
    "ExponentialDecay": lambda v: L.ExponentialDecay(0.5, gamma=0.7, verbose=v),
    "LambdaDecay": lambda v: L.LambdaDecay(0.5, lambda e: 0.9 ** e, verbose=v),
    "OneCycleLR": lambda v: L.OneCycleLR(0.1, total_steps=10, verbose=v),
    "OneCycleLRThreeLinear": lambda v: L.OneCycleLR(0.1, total_steps=10, divide_factor=10.0,
                                                    end_learning_rate=0.001, phase_pct=0.25,
                                                    anneal_strategy="linear", three_phase=True, verbose=v),
}
PLATEAU = {
    "ReduceOnPlateau": (lambda: L.ReduceOnPlateau(1.0, patience=1, factor=0.5, cooldown=1, verbose=True),
                        [5.0, 4.0, 4.0, 4.0, 4.0, 4.0, 3.0, 3.0, 3.0, 3.0]),
    "ReduceOnPlateauMaxAbs": (lambda: L.ReduceOnPlateau(0.2, mode="max", threshold=0.1, threshold_mode="abs",
                                                        patience=0, min_lr=0.03, verbose=True),
                              [1.0, 1.05, 1.2, 1.25, 1.0, 2.0, 1.0, 1.0]),
}

# ---- printed by Paddle 3.3.1: scheduler() at construction and after each step() ----------------
PADDLE_VALUES = {'NoamDecay': [0.0,
               0.024056261216234408,
               0.048112522432468816,
               0.07216878364870322,
               0.0625,
               0.05590169943749474,
               0.05103103630798288,
               0.04724555912615341,
               0.04419417382415922],
 'PiecewiseDecay': [0.1, 0.1, 0.05, 0.05, 0.01, 0.01, 0.01, 0.01, 0.01],
 'NaturalExpDecay': [0.5,
                     0.37040911034085894,
                     0.2744058180470132,
                     0.20328482987029958,
                     0.15059710595610107,
                     0.11156508007421491,
                     0.08264944411079328,
                     0.06122821412649095,
                     0.045358976644706256],
 'InverseTimeDecay': [0.5,
                      0.3846153846153846,
                      0.3125,
                      0.2631578947368421,
                      0.22727272727272727,
                      0.2,
                      0.17857142857142858,
                      0.16129032258064516,
                      0.14705882352941177],
 'PolynomialDecay': [0.5, 0.22777777777777783, 0.06444444444444446, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01],
 'PolynomialDecayCycle': [0.5,
                          0.27672221643639056,
                          0.10430054396763888,
                          0.01,
                          0.10430054396763888,
                          0.0433402770545488,
                          0.01,
                          0.06133071448613456,
                          0.028148148148148158],
 'LinearWarmup': [0.1, 0.23333333333333334, 0.3666666666666667, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5],
 'LinearWarmupCosine': [0.002,
                        0.006,
                        0.01,
                        0.008535533905932738,
                        0.005,
                        0.0014644660940672626,
                        0.0,
                        0.0014644660940672616,
                        0.004999999999999999],
 'CosineAnnealingDecay': [0.01,
                          0.008535533905932738,
                          0.005,
                          0.0014644660940672626,
                          0.0,
                          0.0014644660940672622,
                          0.005000000000000001,
                          0.008535533905932742,
                          0.010000000000000005],
 'CosineAnnealingDecayEta': [0.3,
                             0.2375,
                             0.11250000000000003,
                             0.05,
                             0.11249999999999999,
                             0.2375000000000001,
                             0.3000000000000001,
                             0.23750000000000016,
                             0.11250000000000014],
 'NoamDecayDefault': [0.0,
                      0.12500000000000003,
                      0.25000000000000006,
                      0.2041241452319315,
                      0.1767766952966369,
                      0.15811388300841897,
                      0.14433756729740646,
                      0.1336306209562122,
                      0.12500000000000003],
 'MultiStepDecay': [0.5, 0.5, 0.25, 0.25, 0.25, 0.125, 0.125, 0.125, 0.125],
 'StepDecay': [0.5, 0.5, 0.15, 0.15, 0.045, 0.045, 0.013499999999999998, 0.013499999999999998, 0.00405],
 'ExponentialDecay': [0.5,
                      0.35,
                      0.24499999999999997,
                      0.17149999999999996,
                      0.12004999999999998,
                      0.08403499999999997,
                      0.05882449999999998,
                      0.04117714999999998,
                      0.028824004999999986],
 'LambdaDecay': [0.5,
                 0.45,
                 0.405,
                 0.36450000000000005,
                 0.32805,
                 0.29524500000000004,
                 0.2657205,
                 0.23914845000000004,
                 0.21523360500000005],
 'OneCycleLR': [0.0040000000000000036,
                0.052000000000000005,
                0.1,
                0.09505339495172584,
                0.08119331560284375,
                0.06116492065111791,
                0.0389350793488821,
                0.018906684397156263,
                0.005046605048274169,
                0.0001],
 'OneCycleLRThreeLinear': [0.01,
                           0.07,
                           0.07,
                           0.009999999999999995,
                           0.0085,
                           0.007,
                           0.0055,
                           0.004,
                           0.0024999999999999988,
                           0.0009999999999999992],
 'ReduceOnPlateau': [1.0, 1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.5, 0.5, 0.25, 0.25],
 'ReduceOnPlateauMaxAbs': [0.2, 0.2, 0.03, 0.03, 0.03, 0.03, 0.03, 0.03, 0.03],
 'CosineJump': [0.0014644660940672626, 0.0]}
PADDLE_PRINTED = {'NoamDecay': ['Epoch 0: NoamDecay set learning rate to 0.0.',
               'Epoch 1: NoamDecay set learning rate to 0.024056261216234408.',
               'Epoch 2: NoamDecay set learning rate to 0.048112522432468816.'],
 'PiecewiseDecay': ['Epoch 0: PiecewiseDecay set learning rate to 0.1.',
                    'Epoch 1: PiecewiseDecay set learning rate to 0.1.',
                    'Epoch 2: PiecewiseDecay set learning rate to 0.05.'],
 'NaturalExpDecay': ['Epoch 0: NaturalExpDecay set learning rate to 0.5.',
                     'Epoch 1: NaturalExpDecay set learning rate to 0.37040911034085894.',
                     'Epoch 2: NaturalExpDecay set learning rate to 0.2744058180470132.'],
 'InverseTimeDecay': ['Epoch 0: InverseTimeDecay set learning rate to 0.5.',
                      'Epoch 1: InverseTimeDecay set learning rate to 0.3846153846153846.',
                      'Epoch 2: InverseTimeDecay set learning rate to 0.3125.'],
 'PolynomialDecay': ['Epoch 0: PolynomialDecay set learning rate to 0.5.',
                     'Epoch 1: PolynomialDecay set learning rate to 0.22777777777777783.',
                     'Epoch 2: PolynomialDecay set learning rate to 0.06444444444444446.'],
 'PolynomialDecayCycle': ['Epoch 0: PolynomialDecay set learning rate to 0.5.',
                          'Epoch 1: PolynomialDecay set learning rate to 0.27672221643639056.',
                          'Epoch 2: PolynomialDecay set learning rate to 0.10430054396763888.'],
 'LinearWarmup': ['Epoch 0: LinearWarmup set learning rate to 0.1.',
                  'Epoch 1: LinearWarmup set learning rate to 0.23333333333333334.',
                  'Epoch 2: LinearWarmup set learning rate to 0.3666666666666667.'],
 'LinearWarmupCosine': ['Epoch 0: LinearWarmup set learning rate to 0.002.',
                        'Epoch 1: LinearWarmup set learning rate to 0.006.',
                        'Epoch 2: LinearWarmup set learning rate to 0.01.'],
 'CosineAnnealingDecay': ['Epoch 0: CosineAnnealingDecay set learning rate to 0.01.',
                          'Epoch 1: CosineAnnealingDecay set learning rate to 0.008535533905932738.',
                          'Epoch 2: CosineAnnealingDecay set learning rate to 0.005.'],
 'CosineAnnealingDecayEta': ['Epoch 0: CosineAnnealingDecay set learning rate to 0.3.',
                             'Epoch 1: CosineAnnealingDecay set learning rate to 0.2375.',
                             'Epoch 2: CosineAnnealingDecay set learning rate to 0.11250000000000003.'],
 'NoamDecayDefault': ['Epoch 0: NoamDecay set learning rate to 0.0.',
                      'Epoch 1: NoamDecay set learning rate to 0.12500000000000003.',
                      'Epoch 2: NoamDecay set learning rate to 0.25000000000000006.'],
 'MultiStepDecay': ['Epoch 0: MultiStepDecay set learning rate to 0.5.',
                    'Epoch 1: MultiStepDecay set learning rate to 0.5.',
                    'Epoch 2: MultiStepDecay set learning rate to 0.25.'],
 'StepDecay': ['Epoch 0: StepDecay set learning rate to 0.5.',
               'Epoch 1: StepDecay set learning rate to 0.5.',
               'Epoch 2: StepDecay set learning rate to 0.15.'],
 'ExponentialDecay': ['Epoch 0: ExponentialDecay set learning rate to 0.5.',
                      'Epoch 1: ExponentialDecay set learning rate to 0.35.',
                      'Epoch 2: ExponentialDecay set learning rate to 0.24499999999999997.'],
 'LambdaDecay': ['Epoch 0: LambdaDecay set learning rate to 0.5.',
                 'Epoch 1: LambdaDecay set learning rate to 0.45.',
                 'Epoch 2: LambdaDecay set learning rate to 0.405.'],
 'OneCycleLR': ['Epoch 0: OneCycleLR set learning rate to 0.0040000000000000036.',
                'Epoch 1: OneCycleLR set learning rate to 0.052000000000000005.',
                'Epoch 2: OneCycleLR set learning rate to 0.1.'],
 'OneCycleLRThreeLinear': ['Epoch 0: OneCycleLR set learning rate to 0.01.',
                           'Epoch 1: OneCycleLR set learning rate to 0.07.',
                           'Epoch 2: OneCycleLR set learning rate to 0.07.'],
 'ReduceOnPlateau': ['Epoch 4: ReduceOnPlateau set learning rate to 0.5.',
                     'Epoch 9: ReduceOnPlateau set learning rate to 0.25.'],
 'ReduceOnPlateauMaxAbs': ['Epoch 2: ReduceOnPlateau set learning rate to 0.03.']}
PADDLE_STATE = {'NoamDecay': {'last_epoch': 8, 'last_lr': 0.04419417382415922},
 'PiecewiseDecay': {'last_epoch': 8, 'last_lr': 0.01},
 'NaturalExpDecay': {'last_epoch': 8, 'last_lr': 0.045358976644706256},
 'InverseTimeDecay': {'last_epoch': 8, 'last_lr': 0.14705882352941177},
 'PolynomialDecay': {'last_epoch': 8, 'last_lr': 0.01},
 'PolynomialDecayCycle': {'last_epoch': 8, 'last_lr': 0.028148148148148158},
 'LinearWarmup': {'last_epoch': 8, 'last_lr': 0.5},
 'LinearWarmupCosine': {'last_epoch': 8,
                        'last_lr': 0.004999999999999999,
                        'LinearWarmup_LR': {'last_epoch': 6, 'last_lr': 0.004999999999999999}},
 'CosineAnnealingDecay': {'last_epoch': 8, 'last_lr': 0.010000000000000005},
 'CosineAnnealingDecayEta': {'last_epoch': 8, 'last_lr': 0.11250000000000014},
 'NoamDecayDefault': {'last_epoch': 8, 'last_lr': 0.12500000000000003},
 'MultiStepDecay': {'last_epoch': 8, 'last_lr': 0.125},
 'StepDecay': {'last_epoch': 8, 'last_lr': 0.00405},
 'ExponentialDecay': {'last_epoch': 8, 'last_lr': 0.028824004999999986},
 'LambdaDecay': {'last_epoch': 8, 'last_lr': 0.21523360500000005},
 'OneCycleLR': {'last_epoch': 9, 'last_lr': 0.0001},
 'OneCycleLRThreeLinear': {'last_epoch': 9, 'last_lr': 0.0009999999999999992},
 'ReduceOnPlateau': {'cooldown_counter': 0,
                     'best': 3.0,
                     'num_bad_epochs': 0,
                     'last_epoch': 10,
                     'last_lr': 0.25},
 'ReduceOnPlateauMaxAbs': {'cooldown_counter': 0,
                           'best': 2.0,
                           'num_bad_epochs': 0,
                           'last_epoch': 8,
                           'last_lr': 0.03}}


def _run(name, capsys):
    if name in PLATEAU:
        make, metrics = PLATEAU[name]
        s = make()
        values = [s()]
        for m in metrics:
            s.step(m)
            values.append(s())
    else:
        s = SCHEDULERS[name](True)
        values = [s()]
        for _ in range(len(PADDLE_VALUES[name]) - 1):
            s.step()
            values.append(s())
    return s, values, capsys.readouterr().out.splitlines()


@pytest.mark.parametrize("name", [*SCHEDULERS, *PLATEAU])
def test_values_printed_lines_and_state_as_paddle(name, capsys):
    s, values, printed = _run(name, capsys)
    assert values == PADDLE_VALUES[name]          # exactly: same formulas, same order of operations
    assert printed[:3] == PADDLE_PRINTED[name]
    assert s.state_dict() == PADDLE_STATE[name]


@pytest.mark.parametrize("name", [*SCHEDULERS, *PLATEAU])
def test_set_state_dict_resumes(name, capsys):
    s, _, _ = _run(name, capsys)
    fresh = SCHEDULERS[name](False) if name in SCHEDULERS else PLATEAU[name][0]()
    fresh.set_state_dict(s.state_dict())
    assert fresh.state_dict() == s.state_dict() and fresh() == s()
    if name in SCHEDULERS and not name.startswith("OneCycle"):
        s.step()
        fresh.step()
        assert fresh() == s()


def test_cosine_step_to_epoch_uses_closed_form():
    s = L.CosineAnnealingDecay(0.01, T_max=4)
    s.step(3)
    assert s() == PADDLE_VALUES["CosineJump"][0] == pytest.approx(0.01 * (1 + math.cos(math.pi * 3 / 4)) / 2)
    s.step()
    assert s() == PADDLE_VALUES["CosineJump"][1]


@pytest.mark.parametrize("name, formula", [
    ("NaturalExpDecay", lambda e: 0.5 * math.exp(-0.3 * e)),
    ("InverseTimeDecay", lambda e: 0.5 / (1 + 0.3 * e)),
    ("ExponentialDecay", lambda e: 0.5 * 0.7 ** e),
    ("StepDecay", lambda e: 0.5 * 0.3 ** (e // 2)),
    ("MultiStepDecay", lambda e: 0.5 * 0.5 ** ((e >= 2) + (e >= 5))),
    ("PolynomialDecay", lambda e: (0.5 - 0.01) * (1 - min(e, 3) / 3) ** 2 + 0.01),
    ("NoamDecay", lambda e: 0.5 * 16 ** -0.5 * min(e ** -0.5 if e else 1, 3 ** -1.5 * e)),
    ("CosineAnnealingDecay", lambda e: 0.01 * (1 + math.cos(math.pi * e / 4)) / 2),   # the recurrence, for e <= T_max
    ("LinearWarmup", lambda e: 0.1 + 0.4 * e / 3 if e < 3 else 0.5),
    ("LambdaDecay", lambda e: 0.5 * 0.9 ** e),
])
def test_values_follow_paddles_formulas(name, formula):
    s = SCHEDULERS[name](False)
    for e in range(6 if name == "CosineAnnealingDecay" else 9):
        if name != "CosineAnnealingDecay" or e <= 4:
            assert s() == pytest.approx(formula(e), rel=1e-12), e
        s.step()


def _zoo_cases_with_schedule():
    folder = os.path.dirname(oracle_file("zoo/programs/00_lenet.json"))
    return sorted(f[:-5] for f in os.listdir(folder) if f.endswith(".json") and "lr_schedule" in load(
        os.path.join(folder, f)))


@pytest.mark.parametrize("name", _zoo_cases_with_schedule())
def test_zoo_recorded_schedule_values(name):
    d = load(oracle_file(f"zoo/programs/{name}.json"))
    cfg = d["config"]
    if d["case"] == "mlp_layers":   # as zoo.z_mlp_layers builds it
        s = L.PiecewiseDecay(boundaries=cfg.get("boundaries", [2, 4]), values=cfg.get("values", [0.1, 0.05, 0.01]))
    else:
        s = zoo_module(paddle)._gpt_lr(cfg)
    assert type(s).__name__ == d["lr_schedule"]["scheduler"]
    values = []
    for _ in d["lr_schedule"]["values"]:
        values.append(s())
        s.step()
    assert values == d["lr_schedule"]["values"]


def test_optimizer_learning_rate_variable_as_recorded():
    d = load(oracle_file("zoo/programs/03_mlp_layers.json"))
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        x = paddle.static.data("x", [None, 4], "float32")
        loss = paddle.mean(paddle.square(paddle.static.nn.fc(x, 3)))
        sched = L.PiecewiseDecay([2, 4], [0.1, 0.05, 0.01])
        paddle.optimizer.SGD(learning_rate=sched).minimize(loss)
    name = d["lr_schedule"]["var"]
    want_var = next(v for v in d["main"]["blocks"][0]["vars"] if v["name"] == name)
    got_var = next(v for v in main.to_dict()["blocks"][0]["vars"] if v["name"] == name)
    assert got_var == want_var
    def lr_init(prog):
        return next(o for o in prog["blocks"][0]["ops"] if o["outputs"].get("Out") == [name])
    assert lr_init(startup.to_dict()) == lr_init(d["startup"])   # fill_constant of the scheduler's first value
    assert main.lr_scheduler is sched
    assert {o.input("LearningRate")[0] for o in main.global_block().ops if o.type == "sgd"} == {name}


def test_executor_writes_the_scheduled_value():
    import numpy as np
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        x = paddle.static.data("x", [None, 2], "float32")
        loss = paddle.mean(paddle.static.nn.fc(x, 1, bias_attr=False))
        sched = L.StepDecay(0.5, step_size=1, gamma=0.5)
        paddle.optimizer.SGD(learning_rate=sched).minimize(loss)
    scope, exe = paddle.static.Scope(), paddle.static.Executor(paddle.CPUPlace())
    xs = np.ones((1, 2), "float32")
    with paddle.static.scope_guard(scope):
        exe.run(startup)
        w = np.array(scope.find_var("fc_0.w_0").get_tensor()).copy()
        for lr in (0.5, 0.25, 0.125):     # d loss / d w = x = 1
            exe.run(main, feed={"x": xs})
            w = w - lr
            np.testing.assert_allclose(np.array(scope.find_var("fc_0.w_0").get_tensor()), w, rtol=1e-6)
            sched.step()


@pytest.mark.parametrize("make, words", [
    (lambda: L.CosineAnnealingDecay(0.1, T_max=0), ["CosineAnnealingDecay", "T_max", "0"]),
    (lambda: L.CosineAnnealingDecay(0.1, T_max=2.5), ["CosineAnnealingDecay", "T_max", "2.5"]),
    (lambda: L.PiecewiseDecay([2, 4], [0.1, 0.05]), ["PiecewiseDecay", "values", "boundaries"]),
    (lambda: L.PiecewiseDecay([], [0.1]), ["PiecewiseDecay", "boundaries"]),
    (lambda: L.StepDecay(0.1, step_size=2, gamma=1.5), ["StepDecay", "gamma", "1.5"]),
    (lambda: L.StepDecay(-0.1, step_size=2), ["StepDecay", "learning_rate", "-0.1"]),
    (lambda: L.ExponentialDecay(0.1, gamma=1.0), ["ExponentialDecay", "gamma"]),
    (lambda: L.MultiStepDecay(0.1, milestones=[5, 2]), ["MultiStepDecay", "milestones"]),
    (lambda: L.LinearWarmup(0.1, warmup_steps=2, start_lr=0.5, end_lr=0.1), ["LinearWarmup", "end_lr", "start_lr"]),
    (lambda: L.LinearWarmup("x", warmup_steps=2, start_lr=0.0, end_lr=0.1), ["LinearWarmup", "learning_rate"]),
    (lambda: L.PolynomialDecay(0.1, decay_steps=0), ["PolynomialDecay", "decay_steps"]),
    (lambda: L.NaturalExpDecay(0.1, gamma=0.0), ["NaturalExpDecay", "gamma"]),
    (lambda: L.NoamDecay(0, 10), ["NoamDecay", "d_model"]),
    (lambda: L.LambdaDecay(0.1, 3), ["LambdaDecay", "lr_lambda"]),
    (lambda: L.OneCycleLR(0.1, total_steps=10, phase_pct=1.5), ["OneCycleLR", "phase_pct"]),
    (lambda: L.OneCycleLR(0.1, total_steps=10, anneal_strategy="exp"), ["OneCycleLR", "anneal_strategy"]),
    (lambda: L.ReduceOnPlateau(0.1, mode="lowest"), ["ReduceOnPlateau", "mode", "lowest"]),
    (lambda: L.ReduceOnPlateau(0.1, factor=2.0), ["ReduceOnPlateau", "factor"]),
    (lambda: L.ReduceOnPlateau(0.1).step("bad"), ["ReduceOnPlateau", "metrics", "str"]),
])
def test_bad_input_is_a_typed_error(make, words):
    with pytest.raises(InvalidArgument) as e:
        make()
    assert all(w in str(e.value) for w in words), str(e.value)


def test_one_cycle_past_total_steps():
    s = L.OneCycleLR(0.1, total_steps=2)
    s.step()
    s.step()
    with pytest.raises(OutOfRange, match="OneCycleLR"):
        s.step()


def test_state_flattens_for_checkpoints():
    from refimpl.optimizer.lr_scheduler import flatten_state, unflatten_state
    s = SCHEDULERS["LinearWarmupCosine"](False)
    flat = flatten_state(s.state_dict())
    assert flat == {"last_epoch": 0, "last_lr": 0.002, "LinearWarmup_LR.last_epoch": 0,
                    "LinearWarmup_LR.last_lr": 0.01}
    assert unflatten_state(flat) == s.state_dict()
