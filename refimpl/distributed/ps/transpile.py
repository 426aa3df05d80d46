"""The program split of parameter-server training.

Mirrors what Paddle 3.3.1's parameter-server passes do to a program after
``optimizer.minimize`` (``paddle.distributed.passes.ps_trainer_pass`` /
``ps_server_pass`` and, before them, ``DistributeTranspiler``):

* the **worker program** keeps forward and backward; in sync and async mode
  its optimizer ops are replaced by ``ps_send`` (push every gradient to the
  servers holding its blocks) and ``ps_recv`` (pull the parameters back); in
  GEO mode the optimizer ops stay (workers train locally) and ``ps_geo``
  after them pushes parameter deltas every ``k_steps`` runs;
* each **server program** holds server ``s``'s blocks of the parameters and
  of their optimizer state (accumulators cut by the same rows, beta pows and
  other small state copied per block, the learning rate shared) and one
  copy of each optimizer op rewritten to update a block from its received
  gradient ``<grad>.block<i>``.

Differences from Paddle: no sparse tables, no LR-decay program on the
server (an ``LRScheduler`` raises Unimplemented), optimizer-role ops that do
not update a (param, grad) pair (gradient clipping ...) raise Unimplemented.
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, TYPE_CHECKING, Tuple

from refimpl.core.errors import Unimplemented
from refimpl.framework.op_role import OP_ROLE_VAR_ATTR, OpRole, is_optimize
from refimpl.framework.program import Program

from .plan import ShardPlan, mode_of

if TYPE_CHECKING:
    from refimpl.distributed.fleet.base.distributed_strategy import DistributedStrategy
    from refimpl.framework.variable import Parameter, Variable
    from .plan import Block


class PSJob:
    """Everything a rank needs about one PS job: mode, plan, programs (what ``transpile`` returns)."""

    def __init__(self, mode: str, k_steps: int, plan: ShardPlan, params_grads: Sequence[Tuple[Any, Any]],
                 startup: Program, server_programs: List[Program], server_vars: List[Any],
                 worker_num: int) -> None:
        self.mode, self.k_steps, self.plan = mode, k_steps, plan
        self.params_grads = params_grads            # [(param name, grad name)] in plan order
        self.startup = startup                       # the original startup program
        self.server_programs = server_programs       # [Program] per server
        self.server_vars = server_vars               # [{server var: (full var, Block or None)}] per server
        self.worker_num = worker_num

    @property
    def server_num(self) -> int:
        return self.plan.server_num

    def plan_grad(self, block: Block) -> str:
        """The server-side name of the gradient of ``block``."""
        return dict(self.params_grads)[block.param] + block.suffix


def transpile(main: Program, startup: Program, params_grads: Sequence[Tuple[Parameter, Variable]],
              strategy: DistributedStrategy, server_num: int, worker_num: int,
              min_block_size: Optional[int] = None) -> PSJob:
    """Split ``main`` for PS training (rewriting it in place into the worker program); return a PSJob."""
    if getattr(main, "lr_scheduler", None) is not None:
        raise Unimplemented("parameter-server training with an LRScheduler: refimpl's servers have no "
                            "learning-rate program; use a float learning rate")
    mode, k = mode_of(strategy)
    pairs = sorted((p.name, g.name) for p, g in params_grads if g is not None and not p.stop_gradient)
    block = main.global_block()
    plan = ShardPlan([(p, block.var(p).shape) for p, _ in pairs], server_num, min_block_size)
    opt_ops = _optimize_ops(block)
    programs, svars = zip(*[_server_program(block, opt_ops, plan, s) for s in range(server_num)])
    _rewrite_worker(block, opt_ops, pairs, mode, k)
    return PSJob(mode, k, plan, pairs, startup, list(programs), list(svars), worker_num)


def _optimize_ops(block):
    """The optimizer ops of ``block`` (role Optimize), each with its ``op_role_var`` (param, grad)."""
    ops = []
    for op in block.ops:
        if not is_optimize(op.role()):
            continue
        pair = op.attr(OP_ROLE_VAR_ATTR) if op.has_attr(OP_ROLE_VAR_ATTR) else []
        if len(pair) != 2:
            raise Unimplemented(f"parameter-server training: the optimizer op {op.type!r} updates no "
                                f"(param, grad) pair (gradient clipping, regularization ops ...); refimpl's "
                                f"servers run only per-parameter update ops")
        ops.append(op)
    return ops


def _rewrite_worker(block, opt_ops, pairs, mode, k):
    params, grads = [p for p, _ in pairs], [g for _, g in pairs]
    attrs = {"param_names": params, "op_role": OpRole.RPC}
    if mode == "geo":
        block.append_op(type="ps_geo", inputs={"Param": params}, outputs={"ParamOut": params},
                        attrs=dict(attrs, k_steps=k))
        return
    for op in opt_ops:
        block._remove_op(block.ops.index(op))
    block.append_op(type="ps_send", inputs={"X": grads}, outputs={}, attrs=attrs)
    block.append_op(type="ps_recv", inputs={}, outputs={"Out": params}, attrs=attrs)


def _server_program(block, opt_ops, plan, server):
    """Server ``server``'s program and its variables ``{name: (full var name, Block or None)}``."""
    prog = Program()
    sblock = prog.global_block()
    svars = {}
    mine = {b.param: [] for b in plan.on_server(server)}
    for b in plan.on_server(server):
        mine[b.param].append(b)
    for op in opt_ops:
        param, grad = op.attr(OP_ROLE_VAR_ATTR)
        for b in mine.get(param, []):
            rename = _block_names(block, op, param, grad, b, svars)
            for full, (new, sliced) in rename.items():
                v = block.var(full)
                shape = v.shape if not sliced or b.end is None else (b.end - b.begin,) + tuple(v.shape[1:])
                sblock.create_var(name=new, shape=shape, dtype=v.dtype, persistable=True)
            ins = {slot: [rename.get(n, (n,))[0] for n in names] for slot, names in op.inputs.items()}
            outs = {slot: [rename.get(n, (n,))[0] for n in names] for slot, names in op.outputs.items()}
            sblock.append_op(type=op.type, inputs=ins, outputs=outs, attrs=op.all_attrs())
    return prog, svars


def _block_names(block, op, param, grad, b, svars):
    """``{full name: (server name, row-sliced?)}`` for every variable ``op`` reads or writes for block ``b``.

    The parameter and same-shaped state are cut by rows; the learning rate is
    shared; other state (beta pows ...) gets one copy per block.
    """
    lr = set(op.inputs.get("LearningRate", []))
    shape = block.var(param).shape
    out = {}
    for names in list(op.inputs.values()) + list(op.outputs.values()):
        for n in names:
            if n in out:
                continue
            sliced = n in (param, grad) or tuple(block.var(n).shape or ()) == tuple(shape)
            new = n if n in lr else n + b.suffix
            out[n] = (new, sliced)
            if n != grad:
                svars[new] = (n, b if sliced else None)
    return out
