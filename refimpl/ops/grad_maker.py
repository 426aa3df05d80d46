"""Grad-op makers: how an op's backward ops are described.

Mirrors Paddle's ``GradOpDescMakerBase`` (``SingleGradOpMaker``): given a
forward op and the set of gradient names that must not be produced
(``no_grad_set``), a maker returns the grad op descs as plain dicts
``{"type", "inputs", "outputs", "attrs"}``. Inside a maker,
``g.input_grad("X")`` is ``["x@GRAD"]``, or ``[]`` when ``x@GRAD`` is in the
no-grad set (Paddle drops such empty names), and ``g.output_grad("Out")`` is
the gradient of the forward output.

Most ops need no code: ``simple_grad("mul_grad", ["X", "Y", "Out@GRAD"],
["X@GRAD", "Y@GRAD"])`` says "inputs X and Y, the gradient of Out; produce
the gradients of X and Y; copy the forward attrs".
"""
from .registry import GRAD_SUFFIX, get_op_def, grad_var_name


class GradContext:
    def __init__(self, op_type, inputs, outputs, attrs, no_grad_set):
        self.type = op_type
        self.inputs = inputs
        self.outputs = outputs
        self._attrs = attrs
        self.no_grad_set = no_grad_set

    def input(self, slot):
        return list(self.inputs.get(slot, ()))

    def output(self, slot):
        return list(self.outputs.get(slot, ()))

    def output_grad(self, slot):
        return [grad_var_name(n) for n in self.outputs.get(slot, ())]

    def input_grad(self, slot):
        return [grad_var_name(n) for n in self.inputs.get(slot, ())
                if grad_var_name(n) not in self.no_grad_set]

    def attrs(self, **overrides):
        a = dict(self._attrs)
        a.update(overrides)
        return a

    def op(self, type, inputs, outputs, attrs=None):
        return {"type": type, "inputs": inputs, "outputs": outputs,
                "attrs": self.attrs() if attrs is None else attrs}


def simple_grad(grad_type, inputs, outputs):
    """A maker for the common case; see the module docstring."""
    def maker(g):
        ins = {}
        for s in inputs:
            if s.endswith(GRAD_SUFFIX):
                ins[s] = g.output_grad(s[:-len(GRAD_SUFFIX)])
            elif s in g.outputs and s not in g.inputs:
                ins[s] = g.output(s)
            else:
                ins[s] = g.input(s)
        outs = {s: g.input_grad(s[:-len(GRAD_SUFFIX)]) for s in outputs}
        return [g.op(grad_type, ins, outs)]
    return maker


def make_grad_op_descs(op_type, inputs, outputs, attrs, no_grad_set):
    """Grad op descs for one forward op, and the grad-name -> var-name map."""
    opdef = get_op_def(op_type)
    if opdef.grad is None:
        return [], {}
    g = GradContext(op_type, inputs, outputs, attrs, no_grad_set)
    descs = opdef.grad(g)
    grad_to_var = {}
    for d in descs:
        for names in d["outputs"].values():
            for n in names:
                if n.endswith(GRAD_SUFFIX):
                    grad_to_var[n] = n[:-len(GRAD_SUFFIX)]
    return descs, grad_to_var
