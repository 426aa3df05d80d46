"""The messages between workers and servers, over the world communicator's send / recv.

Plays the part of Paddle's brpc PS service (``PsService``: push dense,
pull dense, barrier, stop, save, load, shrink). A message is an int64
header ``[kind, count, ndim of each array]`` followed by ``count`` arrays
(the ndims restore 0-d arrays, which the communicators send as 1-d); names
travel as one
uint8 array of ``\\n``-joined UTF-8 (never pickled). Replies use the same
format. Ranks: server ``i`` is rank ``i``, worker ``j`` is rank
``server_num + j``.
"""
from __future__ import annotations

from typing import List, Sequence, TYPE_CHECKING, Tuple

import numpy as np

if TYPE_CHECKING:
    from refimpl.distributed.communication.communicator import Communicator

PUSH_GRAD, PULL, PUSH_DELTA, BARRIER, STOP, SAVE, LOAD, SHRINK, REPLY = range(1, 10)
KIND_NAMES = {PUSH_GRAD: "push_grad", PULL: "pull", PUSH_DELTA: "push_delta", BARRIER: "barrier",
              STOP: "stop", SAVE: "save", LOAD: "load", SHRINK: "shrink", REPLY: "reply"}


def send(comm: Communicator, peer: int, kind: int, arrays: Sequence[np.ndarray] = ()) -> None:
    arrays = [np.asarray(a) for a in arrays]
    comm.send(np.array([kind, len(arrays)] + [a.ndim for a in arrays], np.int64), peer)
    for a in arrays:
        comm.send(np.ascontiguousarray(a), peer)


def recv(comm: Communicator, peer: int) -> Tuple[int, List[np.ndarray]]:
    """``(kind, [arrays])`` of the next message from ``peer``."""
    head = comm.recv(peer)
    kind, count = int(head[0]), int(head[1])
    arrays = [comm.recv(peer) for _ in range(count)]
    return kind, [a.reshape(()) if ndim == 0 else a for a, ndim in zip(arrays, head[2:])]


def encode_names(names: Sequence[str]) -> np.ndarray:
    return np.frombuffer("\n".join(names).encode("utf-8"), np.uint8).copy()


def decode_names(array: np.ndarray) -> List[str]:
    text = bytes(np.asarray(array, np.uint8)).decode("utf-8")
    return text.split("\n") if text else []
