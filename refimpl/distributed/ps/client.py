"""A worker's side of parameter-server training: push, pull, GEO deltas, barrier, stop, tables.

Mirrors Paddle's worker ``Communicator`` (``SyncCommunicator``,
``AsyncCommunicator``, ``GeoCommunicator``) and ``BrpcPsClient``: the
``ps_send`` / ``ps_recv`` / ``ps_geo`` ops of the worker program call it
through the rank's runtime. Differences: every push goes out at once (no
send queue, no merging of several steps' gradients, no background thread);
GEO keeps the parameters as last seen from the servers and, every
``k_steps`` runs, pushes ``delta = (local - seen) / worker_num``, adds
``delta`` to ``seen``, pulls the servers' values and adds
``servers - seen`` to its local parameters (Paddle's ``GeoCommunicator``
formulas).
"""
from __future__ import annotations

from typing import Dict, List, Sequence, TYPE_CHECKING

import numpy as np

from refimpl.core.errors import InvalidArgument

from . import protocol as P

if TYPE_CHECKING:
    from refimpl.distributed.communication.communicator import Communicator
    from .transpile import PSJob


class PSClient:
    """Worker ``index`` of ``job``, talking over ``comm`` (the world communicator)."""

    def __init__(self, job: PSJob, index: int, comm: Communicator) -> None:
        self.job, self.index, self.comm = job, index, comm
        self.plan = job.plan
        self.servers = list(range(job.server_num))
        self.last_seen = {}  # GEO: param -> full value last pulled from the servers
        self.steps = 0

    def _peer(self, server):
        return self.comm.ranks.index(server)

    # ---- dense push / pull -----------------------------------------------------------------
    def _by_server(self, values):
        """``{server: [parts in the server's block order]}`` of full-size values by parameter name."""
        parts = {s: [] for s in self.servers}
        for s in self.servers:
            for b in self.plan.on_server(s):
                parts[s].append(b.rows(values[b.param]))
        return parts

    def push(self, kind: int, values: Dict[str, np.ndarray]) -> None:
        for s, parts in self._by_server(values).items():
            P.send(self.comm, self._peer(s), kind, parts)

    def request(self, server: int, kind: int, arrays: Sequence[np.ndarray] = ()) -> List[np.ndarray]:
        """Send one request to ``server`` and return its reply's arrays."""
        P.send(self.comm, self._peer(server), kind, arrays)
        got, reply = P.recv(self.comm, self._peer(server))
        if got != P.REPLY:
            raise InvalidArgument(f"worker {self.index}: server {server} answered {P.KIND_NAMES.get(got, got)} "
                                  f"to {P.KIND_NAMES[kind]}")
        return reply

    def pull(self) -> Dict[str, np.ndarray]:
        """Every trainable parameter, full size, assembled from the servers' blocks."""
        for s in self.servers:  # ask every server first, so they work on it at once
            P.send(self.comm, self._peer(s), P.PULL)
        got = {}
        for s in self.servers:
            kind, arrays = P.recv(self.comm, self._peer(s))
            for b, a in zip(self.plan.on_server(s), arrays):
                got.setdefault(b.param, {})[b.begin] = a
        return {name: np.concatenate([parts[k] for k in sorted(parts)]) if len(parts) > 1 else parts[0]
                for name, parts in got.items()}

    def push_grads(self, grads: Dict[str, np.ndarray]) -> None:
        self.push(P.PUSH_GRAD, grads)

    def geo_step(self, params: Dict[str, np.ndarray], k_steps: int) -> Dict[str, np.ndarray]:
        """One GEO run: every ``k_steps`` runs, push deltas and merge the servers' values into ``params``."""
        self.steps += 1
        if self.steps % k_steps:
            return params
        w = self.job.worker_num
        deltas = {n: (params[n] - self.last_seen[n]) / params[n].dtype.type(w) for n in params}
        self.push(P.PUSH_DELTA, deltas)
        seen = {n: self.last_seen[n] + deltas[n] for n in params}  # our own share is already merged
        fresh = self.pull()
        out = {n: params[n] + (fresh[n] - seen[n]) for n in params}
        self.last_seen = fresh
        return out

    # ---- control -----------------------------------------------------------------------------
    def barrier(self) -> None:
        self.request(0, P.BARRIER)

    def stop(self) -> None:
        for s in self.servers:
            P.send(self.comm, self._peer(s), P.STOP)

    def gather_tables(self) -> Dict[str, np.ndarray]:
        """``{full var name: value}`` of every variable the servers hold (parameters and optimizer state)."""
        pieces = {}
        for s in self.servers:
            reply = self.request(s, P.SAVE)
            svars = self.job.server_vars[s]
            for name, a in zip(P.decode_names(reply[0]), reply[1:]):
                full, block = svars[name]
                pieces.setdefault(full, {})[block.begin if block is not None else -1] = a
        return {full: parts[-1] if -1 in parts else np.concatenate([parts[k] for k in sorted(parts)])
                for full, parts in pieces.items()}

    def load_tables(self, values: Dict[str, np.ndarray]) -> int:
        """Send each server its parts of ``values`` (full size, by name); return how many it set."""
        count = 0
        for s in self.servers:
            names, arrays = [], []
            for name, (full, block) in sorted(self.job.server_vars[s].items()):
                if full in values:
                    names.append(name)
                    arrays.append(block.rows(values[full]) if block is not None else values[full])
            count += int(self.request(s, P.LOAD, [P.encode_names(names)] + arrays)[0])
        return count

    def shrink(self) -> int:
        return sum(int(self.request(s, P.SHRINK)[0]) for s in self.servers)
