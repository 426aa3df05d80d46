"""``paddle.incubate.optimizer.PipelineOptimizer``: Paddle's legacy static pipeline builder.

Mirrors ``python/paddle/incubate/optimizer/pipeline.py`` of Paddle 3.3.1 (its CUDA build, device kind
"gpu"). ``minimize`` runs the inner optimizer, places every op on a stage (``devices.py``), inserts the
send/recv pairs between stages (``send_recv.py``), splits the program into one section program per
stage and the startup program for this stage (``sections.py``), scales the loss for the micro-batches
and, without sharding, accumulates gradients into ``@GRAD@MERGED`` (``accumulate.py``, ``fuse.py``).
Afterwards ``main._pipeline_opt`` is Paddle's plain dict (``section_program`` is this stage's program,
run by :class:`refimpl.executor.section_worker.SectionWorker`) and ``startup._pipeline_opt`` holds
this stage's ``startup_program``. Fleet's ShardingOptimizer (pp_degree > 1) drives it the same way and
then calls ``_rename_gradient_var_name`` and ``_accumulate_gradients`` itself.

Differences from Paddle: Paddle's ``assert``s are typed errors (:class:`PipelineBuildError`, also an
``AssertionError``) naming the op, var, device or key; ``place`` is refimpl's place for the stage; the
disabled ``_process_persistable_vars_in_multi_sections`` of Paddle is not carried; the parameter-device
map is a copy of the inner optimizer's with refimpl's ``"stage:k"`` read as ``"gpu:k"``; a
``RecomputeOptimizer`` is looked through to the optimizer it wraps (``_optimizer``) for that map (Paddle's
has none and fails on an ``AttributeError``); ``num_microbatches`` may be any integral number (NumPy's too)
but not a bool or a float.
"""
from __future__ import annotations

import numbers
import os
import warnings
from typing import Any, Dict, List, Optional, Tuple

from refimpl.core.errors import InvalidArgument, PreconditionNotMet
from refimpl.framework.program import Program, default_startup_program

from .accumulate import AccumulateMixin
from .devices import DeviceMixin, PipelineBuildError, translate_device
from .fuse import FuseMixin
from .sections import SectionsMixin
from .send_recv import SendRecvMixin

__all__ = ["PipelineOptimizer", "PipelineBuildError", "REQUIRED_KEYS"]

#: the ``main._pipeline_opt`` keys ``minimize`` requires (fleet sets them)
REQUIRED_KEYS = ("local_rank", "schedule_mode", "micro_batch_size", "ring_id", "global_ring_id", "use_sharding",
                 "mp_degree", "mp_rank")


class MissingPipelineOptError(PreconditionNotMet, AssertionError):
    """``main._pipeline_opt`` lacks what the builder reads (Paddle: "Please use pipeline with fleet")."""


class PipelineOptimizer(DeviceMixin, SectionsMixin, SendRecvMixin, AccumulateMixin, FuseMixin):
    """Split a ``device_guard``-annotated program into pipeline section programs (static graph)."""

    def __init__(self, optimizer: Any, num_microbatches: int = 1, start_cpu_core_id: int = 0) -> None:
        from refimpl.optimizer.optimizer import Optimizer
        from refimpl.static.amp.decorator import OptimizerWithMixedPrecision
        self._device = "gpu"  # Paddle's CUDA build
        from refimpl.incubate.optimizer.recompute import RecomputeOptimizer
        # (Paddle's RecomputeOptimizer is an Optimizer; refimpl's is a wrapper class, so it is named here)
        valid = (Optimizer, OptimizerWithMixedPrecision, RecomputeOptimizer)
        if not isinstance(optimizer, valid):
            raise InvalidArgument(f"The 'optimizer' parameter for PipelineOptimizer must be an instance of "
                                  f"(Optimizer, OptimizerWithMixedPrecision), but the given type is "
                                  f"{type(optimizer).__name__}.")
        self._optimizer = optimizer
        self._origin_optimizer = self._find_origin_optimizer(optimizer, RecomputeOptimizer)
        if not (isinstance(num_microbatches, numbers.Integral) and not isinstance(num_microbatches, bool)
                and num_microbatches >= 1):
            raise InvalidArgument(f"PipelineOptimizer: num_microbatches must be a positive value, "
                                  f"got {num_microbatches!r}")
        if not (isinstance(start_cpu_core_id, int) and start_cpu_core_id >= 0):
            raise InvalidArgument(f"PipelineOptimizer: start_cpu_core_id must be a non-negative integer, "
                                  f"got {start_cpu_core_id!r}")
        self._num_microbatches = int(num_microbatches)
        self._start_cpu_core_id = start_cpu_core_id
        self._place_list = None
        self._param_device_map: Optional[Dict[str, str]] = None
        self._pipeline_pair: List[Tuple[int, int]] = []
        self._pp_ring_map: Dict[int, int] = {}
        self.output_var_to_op = None
        self.input_var_to_op = None

    @staticmethod
    def _find_origin_optimizer(optimizer: Any, recompute_cls: type) -> Any:
        """The user's optimizer: through fleet's ``inner_opt`` chain, and through a RecomputeOptimizer's
        ``_optimizer`` (the optimizer whose ``apply_gradients`` fills ``_param_device_map``)."""
        origin = optimizer
        while hasattr(origin, "inner_opt") or isinstance(origin, recompute_cls):
            origin = origin.inner_opt if hasattr(origin, "inner_opt") else origin._optimizer
        return origin

    def _read_pipeline_opt(self, main_program: Program) -> None:
        opt = getattr(main_program, "_pipeline_opt", None)
        if not opt or not isinstance(opt, dict):
            raise MissingPipelineOptError("PipelineOptimizer: main_program._pipeline_opt is not set; please use "
                                          "pipeline with fleet (or set the dict fleet sets)")
        missing = [k for k in REQUIRED_KEYS if k not in opt]
        if missing:
            raise MissingPipelineOptError(f"PipelineOptimizer: main_program._pipeline_opt lacks {missing}; "
                                          f"please use pipeline with fleet to use them")
        for key in REQUIRED_KEYS:
            setattr(self, key, opt[key])
        self.scale_gradient = opt.get("scale_gradient", False)
        if not self.mp_degree >= 1 or not 0 <= self.mp_rank < self.mp_degree:
            raise InvalidArgument(f"PipelineOptimizer: mp_rank {self.mp_rank} must be in [0, mp_degree "
                                  f"{self.mp_degree})")

    def _origin_device_map(self) -> Dict[str, str]:
        device_map = getattr(self._origin_optimizer, "_param_device_map", None)
        if device_map is None:
            raise PipelineBuildError(f"PipelineOptimizer: the inner optimizer {type(self._origin_optimizer).__name__}"
                                     f" has no _param_device_map (a decorated optimizer must expose the user's "
                                     f"optimizer as inner_opt, as fleet's meta-optimizers do)")
        # a translated copy: the inner optimizer's map keeps the spelling device_guard was given
        return {name: translate_device(device, self._device) for name, device in device_map.items()}

    def minimize(self, loss: Any, startup_program: Optional[Program] = None, parameter_list: Any = None,
                 no_grad_set: Any = None):
        """(optimize_ops, params_grads, program_list, pipeline_pair, pp_ring_map), as Paddle."""
        main_block = loss.block
        self.origin_main_block = main_block
        main_program = main_block.program
        startup_program = startup_program or default_startup_program()
        self._read_pipeline_opt(main_program)
        optimize_ops, params_grads = self._optimizer.minimize(loss, startup_program, parameter_list, no_grad_set)
        self._param_device_map = self._origin_device_map()
        self.output_var_to_op, self.input_var_to_op = self._get_input_output_info(main_block)
        self._add_op_device_attr(main_block)
        device_list = self._check_validation(main_block)
        self._check_device_order(device_list)
        self._insert_sendrecv_ops_for_boundaries(main_block)
        program_list = self._split_program(main_program, device_list)
        for prog in program_list:
            self._create_vars(prog.global_block(), main_block)
        manual = os.getenv("PADDLE_MANUAL_PIPELINE_STAGE")
        if manual:
            self.local_rank = int(manual)
            if not self.local_rank < len(device_list):
                raise InvalidArgument(f"PipelineOptimizer: PADDLE_MANUAL_PIPELINE_STAGE {self.local_rank} must be "
                                      f"less than the number of stages {len(device_list)}")
        else:
            self.local_rank %= len(device_list)
        section = program_list[self.local_rank]
        self._optimize_forward_send_sync(section)
        self._add_sub_blocks(main_block, program_list)
        new_startup = self._split_startup_program(startup_program, self.local_rank)
        startup_program._pipeline_opt = {"startup_program": new_startup}
        real_block = section.global_block()
        if not self.scale_gradient:
            self._insert_loss_scale(real_block)
        if not self.use_sharding:
            self._rename_gradient_var_name(real_block)
            self._accumulate_gradients(real_block)
        self._mv_head_recv(section)
        self._check_pipeline_persist_var(section)
        main_program._pipeline_opt = self._plain_pipeline_opt(section, len(device_list))
        return optimize_ops, params_grads, program_list, self._pipeline_pair, self._pp_ring_map

    def _plain_pipeline_opt(self, section: Program, num_stages: int) -> Dict[str, Any]:
        from refimpl.executor.backend import default_place
        return {"trainer": "PipelineTrainer", "device_worker": "Section", "pipeline_stage": self.local_rank,
                "num_pipeline_stages": num_stages, "schedule_mode": self.schedule_mode,
                "inner_parallelism": num_stages, "section_program": section, "place": default_place(),
                "place_id": int(os.getenv("FLAGS_selected_gpus", "0")), "sync_steps": -1,
                "num_microbatches": self._num_microbatches, "start_cpu_core_id": self._start_cpu_core_id}

    def _check_pipeline_persist_var(self, program: Program) -> None:
        """Warn about persistable vars written in forward and read in backward (several forwards run first)."""
        block = program.global_block()
        written, used = set(), set()
        for op in block.ops:
            if self._is_forward_op(op):
                written.update(n for n in op.output_arg_names if block.vars[n].persistable)
            elif self._is_backward_op(op):
                used.update(n for n in op.input_arg_names if n in written)
        if used:
            warnings.warn("The pipeline requires multiple forward calculations before backward, so a persistable "
                          "var changed in the forward may cause errors in the backward that reads it; please check "
                          f"these persistable vars changed in forward and used in backward:\n{used}")
