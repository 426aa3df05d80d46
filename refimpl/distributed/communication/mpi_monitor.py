"""The MPI job's monitor: a hung or dead rank is named, and the job ends with a fixed exit status.

New in refimpl. Paddle's nearest counterpart is ``ProcessGroupNCCL``'s
watchdog thread (``paddle/fluid/distributed/collective/process_group_nccl.cc``),
which times out the waiting rank's collective; here the waiting rank also
asks the others what they are doing, so the message blames the rank that did
not arrive rather than the one that waited for it. How it works (one daemon
thread per process, started by ``mpi.MPIWorld``):

* every blocking MPI call of the process is registered (``arm`` / ``disarm``)
  with the world ranks it waits for;
* past ``timeout`` seconds the monitor sends a probe to those ranks over a
  control communicator (a duplicate of the world's) and collects their
  states as JSON bytes (the calls they are blocked in, their last finished
  call); ranks that are not waiting, or do not answer, are blamed
  (``EXIT_HUNG``); if all wait, it is a deadlock (``EXIT_HUNG`` too);
* past ``DEATH_GRACE`` seconds it also checks that the processes of those
  ranks on this host still exist (pids and host names are exchanged when
  the job starts); a gone one is named (``EXIT_DIED``);
* a process killed by a signal cannot be named here: Hydra kills the whole
  job within milliseconds (even with ``-disable-auto-cleanup``), and its
  exit status depends on a race (the signal number, or 255);
  ``refimpl.distributed.launch`` names the rank from outside the job
  instead (it watches the ranks' pids) and exits with ``EXIT_DIED``.

The message goes to stderr as ``refimpl: ...; aborting all ranks`` and the
job ends with ``MPI_Abort(code)``. Needs MPI_THREAD_MULTIPLE (mpi4py's default).
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any, List, Sequence

import numpy as np

from .communicator import EXIT_DIED, EXIT_HUNG

DEATH_GRACE = 0.5  # seconds a blocking call waits before the monitor looks for dead peers
PROBE_WAIT = 1.0   # seconds the monitor waits for the other ranks to say what they are doing
_TAG_PROBE, _TAG_STATE = 1, 2  # tags on the monitor's control communicator


def allgather_text(comm: Any, text: str) -> List[str]:
    """Every rank's ``text``, in rank order, over buffers: the UTF-8 lengths, then the bytes (Allgatherv)."""
    data = np.frombuffer(text.encode("utf-8"), np.uint8)
    sizes = np.empty(comm.Get_size(), np.int64)
    comm.Allgather(np.array([data.size], np.int64), sizes)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    out = np.empty(int(sizes.sum()), np.uint8)
    comm.Allgatherv(data, [out, (sizes.tolist(), offsets.tolist())])
    return [out[o:o + n].tobytes().decode("utf-8") for o, n in zip(offsets, sizes)]


class _Call:
    """One blocking MPI call in progress: what it is, the world ranks it waits for, when it started."""

    __slots__ = ("what", "ranks", "start", "deadline", "timeout")

    def __init__(self, what, ranks, timeout):
        self.what, self.ranks, self.timeout = what, ranks, timeout
        self.start = time.monotonic()
        self.deadline = None if timeout is None else self.start + timeout


class Monitor:
    """Ends the job, naming the rank to blame, when a blocking call waits too long or a peer died.

    One daemon thread per process. It also answers the other ranks' probes
    (``_TAG_PROBE`` on ``ctrl``, a duplicate of the world communicator) with
    this rank's state as JSON bytes: the calls it is blocked in, and its last
    finished call. Needs MPI_THREAD_MULTIPLE (mpi4py's default).
    """

    def __init__(self, world: Any) -> None:
        self.world, self.pending, self.last = world, {}, ("nothing yet", time.monotonic())
        self.ctrl, self.pids, self.hosts, self.answers, self.stopped = None, [], [], [], False
        self.thread = threading.Thread(target=self._loop, name="refimpl-mpi-watchdog", daemon=True)
        self.thread.start()

    def connect(self) -> None:
        """Make the control communicator and learn every rank's pid and host (collective, once)."""
        world = self.world
        comm, what = world.world_comm, f"rank {world.rank}: joining the MPI job"
        ctrl = world.blocking(what, comm.Dup)
        pids = np.empty(world.nranks, np.int64)
        world.blocking(what, ctrl.Allgather, np.array([os.getpid()], np.int64), pids)
        self.hosts = world.blocking(what, allgather_text, ctrl, world.MPI.Get_processor_name())
        self.pids, self.ctrl = pids.tolist(), ctrl

    def arm(self, what: str, ranks: Sequence[int]) -> None:
        self.pending[threading.get_ident()] = _Call(what, ranks, self.world.timeout)

    def disarm(self) -> None:
        call = self.pending.pop(threading.get_ident(), None)
        if call is not None:
            self.last = (call.what, time.monotonic())

    def stop(self) -> None:
        self.stopped = True
        if self.thread is not threading.current_thread():
            self.thread.join(1.0)

    def _loop(self):
        while not self.stopped:
            time.sleep(0.05)
            if self.stopped or self.world.MPI.Is_finalized():
                return
            try:
                self._tick()
            except Exception as exc:  # noqa: BLE001  (say so: without the monitor a hang is not reported)
                if not (self.stopped or self.world.MPI.Is_finalized()):
                    sys.stderr.write(f"refimpl: rank {self.world.rank}: the MPI monitor stopped: "
                                     f"{type(exc).__name__}: {exc}\n")
                return

    def _tick(self):
        if self.ctrl is not None:
            self._answer()
        now = time.monotonic()
        for call in list(self.pending.values()):
            if now - call.start > DEATH_GRACE:
                self._check_alive(call)
            if call.deadline is not None and now > call.deadline:
                code, message = self._blame(call)
                self.world.abort(message, code)

    # ---- probes: what are the other ranks doing? ---------------------------------------------
    def _state(self):
        now = time.monotonic()
        return {"waiting": [c.what for c in list(self.pending.values())],
                "last": self.last[0], "last_ago": round(now - self.last[1], 1)}

    def _answer(self):
        MPI, st = self.world.MPI, self.world.MPI.Status()
        while self.ctrl.Iprobe(MPI.ANY_SOURCE, _TAG_PROBE, st):
            src = st.Get_source()
            self.ctrl.Recv(np.empty(1, np.int64), src, _TAG_PROBE)
            msg = np.frombuffer(json.dumps(self._state()).encode("utf-8"), np.uint8).copy()
            self.answers.append((self.ctrl.Isend(msg, src, _TAG_STATE), msg))
        self.answers = [a for a in self.answers if not a[0].Test()]

    def _probe(self, peers):
        """{rank: state} of those of ``peers`` that answer within PROBE_WAIT seconds."""
        if self.ctrl is None:
            return {}
        MPI, st, me = self.world.MPI, self.world.MPI.Status(), np.array([self.world.rank], np.int64)
        sent = [self.ctrl.Isend(me, r, _TAG_PROBE) for r in peers]
        states, end = {}, time.monotonic() + PROBE_WAIT
        while len(states) < len(peers) and time.monotonic() < end:
            self._answer()  # the others may be probing this rank at the same time
            if self.ctrl.Iprobe(MPI.ANY_SOURCE, _TAG_STATE, st):
                src, buf = st.Get_source(), np.empty(st.Get_count(MPI.BYTE), np.uint8)
                self.ctrl.Recv(buf, src, _TAG_STATE)
                states[src] = json.loads(buf.tobytes().decode("utf-8"))
            else:
                time.sleep(0.01)
        del sent  # (a probe to a rank that never answers stays unreceived; the job ends now anyway)
        return states

    def _blame(self, call):
        """(exit code, message) when ``call`` waited longer than its timeout."""
        me = self.world.rank
        peers = [r for r in call.ranks if r != me]
        states = self._probe(peers)
        dead = [r for r in peers if r not in states and self._gone(r)]
        if dead:
            return EXIT_DIED, self._died(dead[0], call)
        silent = [r for r in peers if r not in states]
        busy = [r for r in peers if r in states and not states[r]["waiting"]]
        waited = sorted([me] + [r for r in peers if r in states and states[r]["waiting"]])
        timed_out = f"{call.what}: timed out after {call.timeout:g} s"
        if busy or silent:
            first = sorted(busy + silent)[0]
            head = f"rank {first} hung" if len(busy + silent) == 1 else f"rank(s) {sorted(busy + silent)} hung"
            why = [f"rank {r} is busy outside communication: its last call, "
                   f"{states[r]['last'].split(': ', 1)[-1]}, ended {states[r]['last_ago']:g} s ago" for r in busy]
            why += [f"rank {r} does not answer (stuck outside Python, or its host is gone)" for r in silent]
            return EXIT_HUNG, f"{head}: {timed_out} waiting for it; rank(s) {waited} waited; " + "; ".join(why)
        where = "; ".join(f"rank {r} waits in {', '.join(states[r]['waiting'])}" for r in peers)
        return EXIT_HUNG, f"deadlock: {timed_out}, but ranks {waited} all wait ({where})"

    # ---- dead peers ---------------------------------------------------------------------------
    def _gone(self, r):
        """Whether rank ``r``'s process has ended (known only for ranks on this host)."""
        if not self.pids or self.hosts[r] != self.hosts[self.world.rank]:
            return False
        pid = self.pids[r]
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        try:  # a zombie (ended, not yet reaped by mpiexec's proxy) is gone too
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
        except (OSError, IndexError):
            return False

    def _died(self, r, call):
        return (f"rank {r} died: its process (pid {self.pids[r]} on {self.hosts[r]}) ended while "
                f"{call.what} waited for it")

    def _check_alive(self, call):
        me = self.world.rank
        for r in call.ranks:
            if r != me and self._gone(r):
                self.world.abort(self._died(r, call), EXIT_DIED)
