"""Model-parallel random seeds: ``RNGStatesTracker``, ``get_rng_state_tracker``, ``model_parallel_random_seed``.

Mirrors ``paddle/distributed/fleet/layers/mpu/random.py`` of Paddle 3.3.1.
A tracker keeps named generator states beside the global one;
``rng_state(name)`` runs its body drawing from the named state (and keeps
where it got to). ``model_parallel_random_seed(seed)`` seeds the global
generator with ``seed`` (the same on every rank) and adds the tracker state
``model_parallel_rng`` seeded with ``seed + 1 + mp_rank * pp_size + pp_rank``
(different on every model-parallel rank): parameters created under
``rng_state()`` are then initialised differently, and reproducibly, on each
rank. Paddle's dygraph ``fleet.init`` calls it with
``tensor_parallel_configs['tensor_init_seed']`` (-1: a random seed) when building
a hybrid group with ``mp_degree > 1``; its static ``init``, and so refimpl's,
does not (the user's ``paddle.seed`` stands): a script calls it itself.

Differences: refimpl's generator is Paddle's CPU one, per thread (in-process
ranks are threads), so the tracker is kept per rank too, and its states are
:class:`refimpl.core.random.GeneratorState` snapshots rather than indices of
registered generators. As in Paddle's static mode, the mp layers create
their parameters without the tracker (the startup program's random ops draw
from the global generator when the startup program runs), so for static
programs the tracker matters only to code that draws inside ``rng_state()``.
``dropout`` with an ``rng_name`` (Paddle's ``seed`` op) is not implemented.
"""
from __future__ import annotations

import contextlib
import threading
import weakref
from typing import Any, Dict, Iterator, Optional

import numpy as np

from refimpl.core import random as _random
from refimpl.core.errors import InvalidArgument, Unimplemented

MODEL_PARALLEL_RNG = "model_parallel_rng"
#: an InvalidArgument that is also the ValueError Paddle raises
_InvalidValue = type("InvalidArgumentValue", (InvalidArgument, ValueError), {"kind": InvalidArgument.kind})


class RNGStatesTracker:
    """Named generator states (see the module docstring)."""

    def __init__(self) -> None:
        self.states_: Dict[str, _random.GeneratorState] = {}
        self.seeds_: set = set()

    def reset(self) -> None:
        self.states_, self.seeds_ = {}, set()

    def add(self, name: str, seed: int) -> None:
        """A new state ``name`` seeded with ``seed`` (each name and each seed once)."""
        if seed in self.seeds_:
            raise _InvalidValue(f"RNGStatesTracker.add: seed {seed} already exists")
        self.seeds_.add(seed)
        if name in self.states_:
            raise _InvalidValue(f"RNGStatesTracker.add: state {name!r} already exists")
        self.states_[name] = _random.Generator(int(seed)).get_state()

    def get_states_tracker(self) -> Dict[str, _random.GeneratorState]:
        return dict(self.states_)

    def set_states_tracker(self, states: Dict[str, _random.GeneratorState]) -> None:
        for name in states:
            if name not in self.states_:
                raise _InvalidValue(f"RNGStatesTracker.set_states_tracker: state {name!r} does not exist; "
                                    f"the states are {sorted(self.states_)}")
        self.states_.update(states)

    @contextlib.contextmanager
    def rng_state(self, name: str = MODEL_PARALLEL_RNG) -> Iterator[None]:
        """Draw from state ``name`` inside the body; the global generator is restored after it."""
        if name not in self.states_:
            raise _InvalidValue(f"RNGStatesTracker.rng_state: state {name!r} does not exist; the states are "
                                f"{sorted(self.states_)} (model_parallel_random_seed() adds "
                                f"{MODEL_PARALLEL_RNG!r})")
        orig = _random.get_rng_state()
        _random.set_rng_state([self.states_[name]])
        try:
            yield
        finally:
            self.states_[name] = _random.get_rng_state()[0]
            _random.set_rng_state(orig)


_TRACKERS: "weakref.WeakKeyDictionary[Any, RNGStatesTracker]" = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def get_rng_state_tracker() -> RNGStatesTracker:
    """This rank's tracker (Paddle: the module's ``RNG_STATE_TRACKER``)."""
    from refimpl.distributed.communication import context
    ctx = context.current()
    with _LOCK:
        tracker = _TRACKERS.get(ctx)
        if tracker is None:
            tracker = _TRACKERS[ctx] = RNGStatesTracker()
    return tracker


def _mp_and_pp_coords(hcg: Any) -> tuple:
    """(mp_rank, pp_rank, pp_size) of this rank; a static group table has no pipeline axis (0, 1)."""
    mp_rank = int(hcg.get_model_parallel_rank())
    if hasattr(hcg, "get_stage_id"):
        return mp_rank, int(hcg.get_stage_id()), int(hcg.get_pipe_parallel_world_size())
    return mp_rank, 0, 1


def model_parallel_random_seed(seed: Optional[int] = None) -> None:
    """Seed the global generator with ``seed`` and this rank's ``model_parallel_rng`` state with
    ``seed + 1 + mp_rank * pp_size + pp_rank`` (no seed: a random one from NumPy, as Paddle)."""
    from refimpl.distributed.fleet import fleet
    mp_rank, pp_rank, pp_size = _mp_and_pp_coords(fleet.get_hybrid_communicate_group())
    global_seed = int(seed) if seed else int(np.random.randint(0, 10000))
    local_seed = global_seed + 1 + mp_rank * pp_size + pp_rank
    tracker = get_rng_state_tracker()
    tracker.reset()
    tracker.add(MODEL_PARALLEL_RNG, local_seed)
    _random.seed(global_seed)


def dropout(x: Any, p: float = 0.5, axis: Any = None, rng_name: Optional[str] = None, training: bool = True,
            mode: str = "upscale_in_train", name: Optional[str] = None) -> Any:
    """``F.dropout``; with ``rng_name`` (a tracker state), Paddle's ``seed``-op variant: not implemented."""
    from refimpl.nn import functional as F
    if rng_name is None:
        return F.dropout(x, p, axis, training, mode, name)
    raise Unimplemented(f"fleet.meta_parallel.dropout(rng_name={rng_name!r}): the dropout seeded from a tracker "
                        f"state (Paddle's 'seed' op) is not implemented by refimpl")


__all__ = ["RNGStatesTracker", "get_rng_state_tracker", "model_parallel_random_seed", "dropout",
           "MODEL_PARALLEL_RNG"]
