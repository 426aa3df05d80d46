"""Global flags: ``refimpl.set_flags({...})`` / ``get_flags``, seeded from the environment.

Mirrors ``paddle.set_flags`` / ``paddle.get_flags`` for the flags refimpl
reads. A flag's environment variable (same name) sets its initial value.
"""
import os

from refimpl.core.errors import InvalidArgument

_DEFAULTS = {
    # < 0: no garbage collection; 0: free at once; > 0: batch up to this many GB
    "FLAGS_eager_delete_tensor_gb": 0.0,
    # GPU backend: True releases a dead tensor's device memory at once (Paddle's
    # UnsafeFastGPUGarbageCollector); False queues it behind the work already issued
    # on the kernels' stream (StreamGarbageCollector). See cuda_backend.garbage_collector.
    "FLAGS_fast_eager_deletion_mode": True,
    # which IR the pipeline passes assume (Paddle's default is the new IR)
    "FLAGS_enable_pir_api": True,
    # True: the first op whose floating-point output holds NaN or Inf fails the run, named
    # (Paddle's CheckOpHasNanOrInf; read when a program is prepared, see executor/nan_inf.py)
    "FLAGS_check_nan_inf": False,
}

_flags = {}


def _parse(name, text):
    kind = type(_DEFAULTS[name])
    if kind is bool:
        low = text.strip().lower()
        if low not in ("1", "0", "true", "false"):
            raise InvalidArgument(f"flag {name}: cannot read {text!r} as a boolean")
        return low in ("1", "true")
    try:
        return kind(text)
    except ValueError:
        raise InvalidArgument(f"flag {name}: cannot read {text!r} as {kind.__name__}") from None


def _reset_from_env():
    _flags.clear()
    for name, default in _DEFAULTS.items():
        env = os.environ.get(name)
        _flags[name] = _parse(name, env) if env is not None else default


def set_flags(flags):
    if not isinstance(flags, dict):
        raise InvalidArgument("set_flags expects a dict of {flag name: value}")
    for name, value in flags.items():
        if name not in _DEFAULTS:
            raise InvalidArgument(f"unknown flag {name!r}; known flags: {sorted(_DEFAULTS)}")
        _flags[name] = _parse(name, str(value)) if isinstance(value, str) else type(_DEFAULTS[name])(value)


def get_flags(names):
    if isinstance(names, str):
        names = [names]
    out = {}
    for name in names:
        if name not in _DEFAULTS:
            raise InvalidArgument(f"unknown flag {name!r}; known flags: {sorted(_DEFAULTS)}")
        out[name] = _flags[name]
    return out


def flag(name):
    return _flags[name]


_reset_from_env()
