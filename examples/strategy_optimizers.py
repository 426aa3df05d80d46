"""The strategies example's optimizers: the fleet strategy of a row, the optimizer handed to fleet, and the
one-device optimizer that does what fleet's meta-optimizers do (``examples/fleet_strategies.py``).

Split out of ``examples/fleet_strategies.py`` (its docstring says which optimizer each strategy runs and
why). The one-device optimizers are built with the hyper-parameters fleet gives its meta-optimizers
(``refimpl/distributed/fleet/meta_optimizers/{lamb,lars,amp,gradient_merge}_optimizer.py``, mirroring
Paddle's ``python/paddle/distributed/fleet/meta_optimizers/``); the ``--tp`` / ``--sharding`` / ``--pp`` /
``--dp`` switches are set by ``examples/gpt_parallel.py``'s ``set_degrees``.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import gpt_parallel  # noqa: E402
import refimpl as paddle  # noqa: E402
from refimpl.distributed.fleet import DistributedStrategy  # noqa: E402


def make_strategy(opts, checkpoints):
    """The DistributedStrategy the switches in ``opts`` ask for (a dict of the command-line flags)."""
    s = DistributedStrategy()
    if opts.get("recompute") and not recompute_inside_bf16(opts):
        s.recompute = True
        s.recompute_configs = {"checkpoints": checkpoints}
    if opts.get("amp") == "fp16":
        s.amp = True
        s.amp_configs = {"init_loss_scaling": 1024.0, "use_dynamic_loss_scaling": True}
    for name in ("lamb", "lars", "localsgd", "adaptive_localsgd", "fp16_allreduce", "dgc"):
        if opts.get(name):
            setattr(s, name, True)
    if opts.get("localsgd"):
        s.localsgd_configs = {"k_steps": 2, "begin_step": 1}
    if opts.get("adaptive_localsgd"):
        s.adaptive_localsgd_configs = {"init_k_steps": 2, "begin_step": 1}
    if opts.get("gradient_merge"):
        s.gradient_merge = True
        s.gradient_merge_configs = {"k_steps": opts["gradient_merge"], "avg": True}
    gpt_parallel.set_degrees(s, opts)
    return s


def momentum():
    """The inner optimizer of every strategy but LAMB."""
    return paddle.optimizer.Momentum(0.05, 0.9)


ADAM = dict(learning_rate=0.01, beta1=0.9, beta2=0.999, epsilon=1e-8)  # paddle.optimizer.Adam's defaults


def recompute_inside_bf16(opts):
    """Recompute with bf16: the RecomputeOptimizer goes inside ``decorate_bf16`` (see the docstring)."""
    return bool(opts.get("recompute")) and opts.get("amp") == "bf16"


def inner_optimizer(opts, checkpoints):
    """The optimizer handed to fleet: Momentum (Adam for LAMB); bf16 AMP wraps it with
    ``static.amp.bf16.decorate_bf16`` (fleet's ``amp`` switch is float16 only, as in Paddle 3.3.1)."""
    opt = paddle.optimizer.Adam(**ADAM) if opts.get("lamb") else momentum()
    if recompute_inside_bf16(opts):
        opt = paddle.incubate.optimizer.RecomputeOptimizer(opt)
        opt._set_checkpoints(checkpoints)
    if opts.get("amp") == "bf16":
        opt = paddle.static.amp.bf16.decorate_bf16(opt)
    return opt


def one_device_optimizer(opts):
    """The optimizer fleet's meta-optimizers run for ``opts``, built directly with fleet's
    hyper-parameters (``refimpl/distributed/fleet/meta_optimizers/{lamb,lars,amp,gradient_merge}_optimizer.py``):
    LAMB / LARS replace the inner optimizer, AMP decorates that, gradient merge wraps the result.
    Recompute, DGC (no parameter is large enough here), LocalSGD and FP16 allreduce run plain Momentum."""
    strategy = make_strategy(opts, [])
    if opts.get("lamb"):
        c = strategy.lamb_configs
        opt = paddle.optimizer.Lamb(ADAM["learning_rate"], lamb_weight_decay=c["lamb_weight_decay"],
                                    beta1=ADAM["beta1"], beta2=ADAM["beta2"], epsilon=ADAM["epsilon"])
    elif opts.get("lars"):
        c = strategy.lars_configs
        opt = paddle.incubate.optimizer.LarsMomentumOptimizer(
            0.05, 0.9, lars_coeff=c["lars_coeff"], lars_weight_decay=c["lars_weight_decay"],
            exclude_from_weight_decay=c["exclude_from_weight_decay"], epsilon=c["epsilon"])
    else:
        opt = momentum()
    if opts.get("amp") == "fp16":
        c = strategy.amp_configs
        opt = paddle.static.amp.decorate(opt, init_loss_scaling=c["init_loss_scaling"],
                                         use_dynamic_loss_scaling=c["use_dynamic_loss_scaling"])
    elif opts.get("amp") == "bf16":
        opt = paddle.static.amp.bf16.decorate_bf16(opt)
    if opts.get("gradient_merge"):
        opt = paddle.incubate.optimizer.GradientMergeOptimizer(opt, k_steps=opts["gradient_merge"], avg=True)
    return opt


