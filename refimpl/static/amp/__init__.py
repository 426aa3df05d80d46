"""``paddle.static.amp``: automatic mixed precision for static programs (float16 and bfloat16).

Mirrors Paddle 3.3.1's ``python/paddle/static/amp/__init__.py`` (the legacy-IR
parts): ``decorate`` (:mod:`.decorator`), the op lists
``AutoMixedPrecisionLists`` / ``CustomOpLists`` (:mod:`.fp16_lists`), cast
insertion ``cast_model_to_fp16`` / ``cast_parameters_to_fp16`` and
``fp16_guard`` (:mod:`.fp16_utils`), the loss-scaling layers (:mod:`.amp_nn`)
and the ``bf16`` subpackage (``decorate_bf16`` ...). Paddle's ``debugging``
module (operator statistics, accuracy comparison) is not here.
"""
from . import amp_nn, bf16, decorator, fp16_lists, fp16_utils  # noqa: F401
from .decorator import decorate
from .fp16_lists import AutoMixedPrecisionLists, CustomOpLists
from .fp16_utils import cast_model_to_fp16, cast_parameters_to_fp16, fp16_guard

__all__ = ["decorate", "AutoMixedPrecisionLists", "CustomOpLists", "cast_model_to_fp16", "cast_parameters_to_fp16",
           "fp16_guard", "bf16"]
