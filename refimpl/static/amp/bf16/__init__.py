"""``paddle.static.amp.bf16``: bfloat16 mixed precision for static programs.

Mirrors Paddle 3.3.1's ``python/paddle/static/amp/bf16/__init__.py``: the op
lists (:mod:`.amp_lists`), cast insertion and the bf16 bit-pattern helper
(:mod:`.amp_utils`) and ``decorate_bf16`` (:mod:`.decorator`).
"""
from . import amp_lists, amp_utils, decorator  # noqa: F401
from .amp_lists import AutoMixedPrecisionListsBF16
from .amp_utils import (bf16_guard, cast_model_to_bf16, cast_parameters_to_bf16, convert_float_to_uint16,
                        rewrite_program_bf16)
from .decorator import decorate_bf16

__all__ = ["AutoMixedPrecisionListsBF16", "bf16_guard", "cast_model_to_bf16", "cast_parameters_to_bf16",
           "convert_float_to_uint16", "rewrite_program_bf16", "decorate_bf16"]
