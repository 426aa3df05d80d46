"""Helpers for the kernel tests: call registered kernels and check gradients numerically."""

import numpy as np

import refimpl.ops  # noqa: F401  (registers the ops)
from refimpl.core.tensor import TensorMeta
from refimpl.ops import get_op_def
from refimpl.ops.grad_maker import make_grad_op_descs
from refimpl.ops.registry import EMPTY_VAR_NAME


def run(op_type, *inputs, need=None, **attrs):
    """Call the registered NumPy kernel: positional inputs in slot order, attrs by keyword."""
    od = get_op_def(op_type)
    fn, attr_names, wants_need = od.kernel("numpy")
    kw = {a: attrs[a] if a in attrs else od.default(a) for a in attr_names}
    if wants_need:
        kw["need"] = need or (True,) * len(od.outputs)
    return fn(*inputs, **kw)


def _as_tuple(od, res):
    return res if len(od.outputs) > 1 else (res,)


def _lookup(env, name):
    if name in env:
        return env[name]
    base = name[:-len("@GRAD")]  # a missing output grad: zeros, as Paddle's fill_any_like
    return np.zeros_like(env[base])


def run_desc(d, env):
    """Run one grad op desc on the named values in ``env`` (like an executor would)."""
    god = get_op_def(d["type"])
    args = []
    for s in god.inputs:
        vals = [_lookup(env, n) for n in d["inputs"].get(s.name, [])]
        if s.name in god.no_need_buffer:
            vals = [TensorMeta(v.shape, v.dtype) for v in vals]
        args.append(vals if s.duplicable else (vals[0] if vals else None))
    fn, attr_names, wants_need = god.kernel("numpy")
    kw = {a: d["attrs"][a] if a in d["attrs"] else god.default(a) for a in attr_names}
    if wants_need:
        kw["need"] = tuple(bool(d["outputs"].get(s.name)) for s in god.outputs)
    for s, r in zip(god.outputs, _as_tuple(god, fn(*args, **kw))):
        names = d["outputs"].get(s.name, [])
        for n, a in zip(names, r if s.duplicable else [r]):
            if n != EMPTY_VAR_NAME:
                env[n] = a


def grad_check(op_type, inputs, attrs=None, out_slot="Out", wrt=("X",), eps=1e-6, rtol=1e-6, atol=1e-8):
    """d sum(W * out) / d input via the grad op(s) == central differences (float64)."""
    od = get_op_def(op_type)
    attrs = dict(od.attrs, **(attrs or {}))
    lists = {s: (v if isinstance(v, list) else [v]) for s, v in inputs.items()}

    def forward(vals):
        args = [vals.get(s.name, [] if s.duplicable else None) for s in od.inputs]
        return dict(zip(od.output_slot_names(), _as_tuple(od, run(op_type, *args, **attrs))))

    outs = forward(inputs)
    target = outs[out_slot] if isinstance(outs[out_slot], list) else [outs[out_slot]]
    rng = np.random.default_rng(0)
    weights = [rng.standard_normal(t.shape) for t in target]

    def loss(vals):
        o = forward(vals)[out_slot]
        return sum(float((w * a).sum()) for w, a in zip(weights, o if isinstance(o, list) else [o]))

    in_names = {s: [f"{s}{i}" for i in range(len(v))] for s, v in lists.items()}
    out_names, env = {}, {}
    for s, vs in lists.items():
        env.update(zip(in_names[s], vs))
    for s, v in outs.items():
        vs = v if isinstance(v, list) else [v]
        out_names[s] = [f"{s}_out{i}" for i in range(len(vs))] if v is not None else []
        env.update((n, a) for n, a in zip(out_names[s], vs) if a is not None)
    env.update((n + "@GRAD", w) for n, w in zip(out_names[out_slot], weights))
    no_grad = {n + "@GRAD" for s, ns in in_names.items() if s not in wrt for n in ns}
    descs, _ = make_grad_op_descs(op_type, in_names, out_names, attrs, no_grad)
    assert descs, f"{op_type} produced no grad op"
    for d in descs:
        run_desc(d, env)
    for s in wrt:
        for i, x in enumerate(lists[s]):
            analytic = env[f"{s}{i}@GRAD"]
            numeric = np.zeros_like(x)
            for idx in np.ndindex(x.shape):
                vals = {k: ([a.copy() for a in v] if isinstance(v, list) else v.copy())
                        for k, v in inputs.items()}
                arr = vals[s][i] if isinstance(vals[s], list) else vals[s]
                arr[idx] += eps
                up = loss(vals)
                arr[idx] -= 2 * eps
                numeric[idx] = (up - loss(vals)) / (2 * eps)
            np.testing.assert_allclose(analytic, numeric, rtol=rtol, atol=atol, err_msg=f"{op_type} d{s}{i}")


R = np.random.default_rng(42)
X = np.array([[-1.3, -0.4, 0.2, 0.9], [1.7, -2.1, 0.55, -0.75]])   # no value near a kink
POS = np.abs(X) + 0.3


