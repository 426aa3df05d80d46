"""In-process ranks: P ranks as P threads of one Python process.

Plays the part of Paddle's multi-device collective backends (NCCL, Gloo)
when everything runs on one laptop: :func:`run_in_process` starts one
thread per rank, gives each its own rank context (see ``context.py``) and
returns each rank's result. The ranks meet in an :class:`InProcessWorld`.

* **Deterministic.** The last rank to arrive at a collective reduces the
  contributions in rank order, once, and every rank gets a copy of that one
  result, so all ranks hold bit-identical sums, run after run.
* **Checked.** Before combining, the ranks' calls are compared: a different
  collective, shape or dtype on some rank raises ``InvalidArgument`` naming
  that rank, on every rank.
* **Never hangs.** A rank that raises marks the world failed; every rank
  waiting in (or later entering) a collective, send or recv stops at once
  with :class:`RankFailed` naming the failing rank and its error.
  ``run_in_process`` then raises ``RankFailed`` for the first rank that failed.
* **A hang is blamed on the rank that hung, within one timeout.** A wait
  longer than ``timeout`` raises ``ExecutionTimeout`` in the waiter, but the
  verdict is about the ranks it waited for: following who waits for whom
  (a rank waiting in a recv from a rank that waits in a collective ...), the
  ranks at the end of the chain that are not waiting are blamed
  (``rank 1 hung: did not reach all_reduce on ring 0 (call #3) within 30 s;
  rank(s) [0, 2, 3] waited``), or a cycle is reported as a deadlock.
  ``run_in_process`` raises :class:`RankHung` at once, without waiting for
  the hung ranks: a Python thread cannot be killed, so each hung rank's
  thread is left running (a daemon thread: it does not keep the process
  alive, and if it later reaches a collective it stops there with
  ``RankFailed``). Paddle's collectives only time out in the waiter
  (``ProcessGroupNCCL``'s watchdog); the blame is refimpl's.
* ``send`` copies the array into the peer's mailbox and returns; ``recv``
  takes messages from one peer in the order they were sent.

Python threads share the GIL, so this is for correctness and teaching, not
speed (NumPy kernels release the GIL, so large ops still overlap).
"""
from __future__ import annotations

import collections
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from refimpl.core.errors import EnforceNotMet, ExecutionTimeout, InvalidArgument

from .communicator import (DEFAULT_TIMEOUT, Communicator, RankFailed, RankHung, ReduceOp, check_recv, check_root,
                           check_same, check_scatter_shape, meta_of, reduce_arrays, reduce_op)
from .context import RankContext, set_current


class _Round:
    """One collective call of one group: what each rank brought, and the outcome."""

    __slots__ = ("parts", "done", "results", "error", "taken")

    def __init__(self):
        self.parts, self.done, self.results, self.error, self.taken = {}, False, None, None, 0


class InProcessWorld:
    """The meeting place of ``nranks`` thread ranks: collective rounds and mailboxes."""

    backend = "inprocess"
    communicator_class: type[InProcessCommunicator]  # set below the class
    ps_layout: Optional[Tuple[int, int]] = None  # (servers, workers) of a run_ps_in_process job

    def __init__(self, nranks: int, timeout: Optional[float] = DEFAULT_TIMEOUT) -> None:
        if not isinstance(nranks, int) or nranks < 1:
            raise InvalidArgument(f"nranks must be a positive int, got {nranks!r}")
        self.nranks, self.timeout = nranks, timeout
        self.cond = threading.Condition()
        self.failed: Optional[Tuple[int, BaseException]] = None  # (rank, exception) of the first rank that failed
        self.verdict: Optional[RankHung] = None  # set instead of a plain failure when a wait timed out
        self.waiting = {}             # rank -> (what it does, what the others must reach, callable: who it awaits)
        self.finished = set()         # ranks whose function returned or raised
        self.rounds = {}              # (ring_id, call number) -> _Round
        self.mail = collections.defaultdict(collections.deque)  # (ring_id, src, dst) -> arrays
        self.group_ranks = {}         # ring_id -> ranks, the same on every rank

    def reset(self) -> None:
        """Forget which ranks finished, so the same world (and its rings) can run again."""
        with self.cond:
            self.finished.clear()

    def context(self, rank: int) -> RankContext:
        """A new rank context for ``rank`` (with the world group, ring 0)."""
        return RankContext(rank, self.nranks, self)

    def new_communicator(self, ring_id: int, ranks: Sequence[int], rank: int) -> Optional[Communicator]:
        ranks = tuple(int(r) for r in ranks)
        if not ranks or len(set(ranks)) != len(ranks) or not all(0 <= r < self.nranks for r in ranks):
            raise InvalidArgument(f"group ranks {list(ranks)} must be distinct ranks of 0..{self.nranks - 1}")
        with self.cond:
            known = self.group_ranks.setdefault(ring_id, ranks)
        if known != ranks:
            raise InvalidArgument(f"rank {rank}: ring_id {ring_id} was created with ranks {list(known)} "
                                  f"on another rank but with {list(ranks)} here")
        return self.communicator_class(self, ring_id, ranks, rank) if rank in ranks else None

    # ---- failure and waiting (call with self.cond held) -----------------
    def fail(self, rank: int, exc: BaseException, verdict: Optional[RankHung] = None) -> None:
        with self.cond:
            if self.failed is None:
                self.failed, self.verdict = (rank, exc), verdict
            self.cond.notify_all()

    def raise_if_failed(self, me: int) -> None:
        if self.failed is not None and self.failed[0] != me:
            r, e = self.failed
            why = f"rank {r} failed: {type(e).__name__}: {e}"
            if self.verdict is not None:  # blame the rank that hung, not the waiter that timed out
                r, why = self.verdict.rank if self.verdict.rank is not None else r, self.verdict.args[0]
            raise RankFailed(f"rank {me}: stopped because {why}", rank=r, error=e)

    def wait(self, ready: Callable[[], Any], me: int, what: str,
             missing: Optional[Callable[[], Any]] = None, site: Optional[str] = None) -> None:
        """Wait until ``ready()``; stop on a failed peer or after ``timeout`` seconds.

        ``missing()`` gives the ranks still awaited and ``site`` says what they
        must reach (``all_reduce on ring 0 (call #2)``), for the verdict.
        """
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        self.waiting[me] = (what, site or what, missing or (lambda: []))
        try:
            while not ready():
                self.raise_if_failed(me)
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    who = f"; rank(s) {missing()} never arrived" if missing else ""
                    exc = ExecutionTimeout(f"{what}: timed out after {self.timeout:g} s{who}")
                    if missing:
                        self.fail(me, exc, self._verdict(me, missing(), exc))
                    raise exc
                self.cond.wait(left)
        finally:
            del self.waiting[me]

    def _verdict(self, me: int, missing: Sequence[int], exc: BaseException) -> RankHung:
        """Who to blame when ``me`` waited ``timeout`` s for ``missing`` (see the module docstring)."""
        sites, seen, todo = {}, set(), [(r, self.waiting[me][1]) for r in missing]
        while todo:  # follow who waits for whom; the ranks at the ends of the chains are not waiting
            r, site = todo.pop(0)
            if r not in seen:
                seen.add(r)
                if r in self.waiting:
                    todo.extend((m, self.waiting[r][1]) for m in self.waiting[r][2]())
                else:
                    sites[r] = site  # where the rank that waits for r waits
        culprits = sorted(sites)
        waited = sorted(r for r in self.waiting if r not in culprits)
        t = f"{self.timeout:g} s"
        if not culprits:
            cycle = "; ".join(self.waiting[r][0] for r in waited)
            return RankHung(f"deadlock: ranks {waited} all wait for each other ({cycle}); rank {me} gave up "
                            f"after {t}", rank=list(missing)[0], error=exc, waited=waited)
        first = culprits[0]
        site = sites[first]
        finished = [r for r in culprits if r in self.finished]
        if first in finished:
            head = f"rank(s) {finished} finished without reaching {site}" if len(finished) > 1 else \
                f"rank {first} finished without reaching {site}"
            msg = f"{head}; rank(s) {waited} waited ({self.waiting[me][0]}: timed out after {t})"
        else:
            head = f"rank(s) {culprits} hung" if len(culprits) > 1 else f"rank {first} hung"
            msg = f"{head}: did not reach {site} within {t}; rank(s) {waited} waited"
        if list(missing) != culprits:
            msg += f" (rank {me} waited for rank(s) {list(missing)}, who wait in turn)"
        return RankHung(msg, rank=first, error=exc, hung=culprits, waited=waited)


class InProcessCommunicator(Communicator):
    """One thread rank's communicator for one group of an :class:`InProcessWorld`."""

    backend = "inprocess"

    def __init__(self, world: InProcessWorld, ring_id: int, ranks: Sequence[int], global_rank: int) -> None:
        super().__init__(ring_id, ranks, global_rank, world.timeout)
        self.world = world
        self.calls = 0

    def _local(self):
        """Who meets here for a collective: (how many, my index among them, their global ranks)."""
        return self.nranks, self.rank, self.ranks

    def _collective(self, kind, args, x, combine):
        """Bring ``x`` to call number ``calls`` of this group; return this rank's share.

        The last rank to arrive checks every rank's call and computes
        ``combine(arrays in group order)`` -> one result per rank, outside
        the lock (a hybrid world makes an MPI call there).
        """
        self.calls += 1
        w, me = self.world, self.global_rank
        n, mine, ranks = self._local()
        key = (self.ring_id, self.calls)
        what = f"{kind} on ring {self.ring_id} (call #{self.calls})"
        with w.cond:
            w.raise_if_failed(me)
            rnd = w.rounds.setdefault(key, _Round())
            rnd.parts[mine] = (meta_of(kind, args, x), x)
            last = len(rnd.parts) == n
            if not last:
                w.wait(lambda: rnd.done, me, f"rank {me}: {what}",
                       lambda: [ranks[r] for r in range(n) if r not in rnd.parts], what)
        if last:  # the parts are complete and nobody else touches the round until it is done
            self._combine(rnd, what, combine, n, ranks)
        with w.cond:
            rnd.taken += 1
            if rnd.taken == n:
                del w.rounds[key]
        if rnd.error is not None:
            e = rnd.error
            kind_ = type(e) if isinstance(e, EnforceNotMet) else InvalidArgument
            raise kind_(f"rank {me}: {e.args[0] if isinstance(e, EnforceNotMet) else repr(e)}") from None
        return rnd.results[mine]

    def _combine(self, rnd, what, combine, n, ranks):
        try:
            parts = [rnd.parts[r] for r in range(n)]
            check_same(what, [p[0] for p in parts], ranks)
            rnd.results = combine([p[1] for p in parts])
        except Exception as exc:  # every rank of the round raises it
            rnd.error = exc
        with self.world.cond:
            rnd.done = True
            self.world.cond.notify_all()

    def _fanout(self, result):
        """One result for every rank meeting here: the first gets it, the others a copy."""
        return [result] + [result.copy() for _ in range(self._local()[0] - 1)]

    # ---- the interface --------------------------------------------------
    def all_reduce(self, x: np.ndarray, op: int = ReduceOp.SUM,
                   out: Optional[np.ndarray] = None) -> np.ndarray:
        op = reduce_op(op)
        x = np.asarray(x)
        res = self._collective("all_reduce", (op,), x, lambda xs: self._fanout(reduce_arrays(xs, op)))
        return _into(out, res)

    def broadcast(self, x: np.ndarray, root: int = 0, out: Optional[np.ndarray] = None) -> np.ndarray:
        check_root(root, self.nranks, self.where("broadcast"))
        x = np.asarray(x)
        res = self._collective("broadcast", (root,), x,
                               lambda xs: [xs[root] if r == root else xs[root].copy() for r in range(self.nranks)])
        return _into(out, res)

    def reduce(self, x: np.ndarray, root: int = 0, op: int = ReduceOp.SUM,
               out: Optional[np.ndarray] = None) -> np.ndarray:
        check_root(root, self.nranks, self.where("reduce"))
        op = reduce_op(op)
        x = np.asarray(x)
        res = self._collective("reduce", (root, op), x,
                               lambda xs: [reduce_arrays(xs, op) if r == root else xs[r] for r in range(self.nranks)])
        return _into(out, res)

    def all_gather(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x)
        join = np.stack if x.ndim == 0 else np.concatenate
        return self._collective("all_gather", (), x, lambda xs: self._fanout(join(xs)))

    def reduce_scatter(self, x: np.ndarray, op: int = ReduceOp.SUM) -> np.ndarray:
        op = reduce_op(op)
        x = np.asarray(x)
        check_scatter_shape(x, self.nranks, self.where("reduce_scatter"))
        return self._collective("reduce_scatter", (op,), x,
                                lambda xs: np.split(reduce_arrays(xs, op), self.nranks))

    def barrier(self) -> None:
        self._collective("barrier", (), None, lambda xs: [None] * self.nranks)

    def send(self, x: np.ndarray, peer: int) -> None:
        self.check_peer(peer, "send")
        w, me = self.world, self.global_rank
        a = np.array(x, copy=True)  # the sender may reuse its buffer at once
        with w.cond:
            w.raise_if_failed(me)
            w.mail[(self.ring_id, me, self.ranks[peer])].append(a)
            w.cond.notify_all()

    def recv(self, peer: int, shape: Optional[Sequence[int]] = None, dtype: Any = None) -> np.ndarray:
        self.check_peer(peer, "recv")
        w, me = self.world, self.global_rank
        src = self.ranks[peer]
        box = w.mail[(self.ring_id, src, me)]
        what = self.where(f"recv from peer {peer}")
        with w.cond:
            w.wait(lambda: box, me, what, lambda: [src], f"the send to rank {me} on ring {self.ring_id}")
            a = box.popleft()
        check_recv(a, shape, dtype, what)
        return a


InProcessWorld.communicator_class = InProcessCommunicator


def _into(out, res):
    if out is None or out is res:
        return res
    np.copyto(out, res)
    return out


def run_in_process(nranks: int, fn: Callable[..., Any], *args: Any,
                   timeout: Optional[float] = DEFAULT_TIMEOUT, **kwargs: Any) -> List[Any]:
    """Run ``fn(*args, **kwargs)`` as ranks 0..nranks-1, one thread each; return their results.

    Inside ``fn``, ``refimpl.distributed.get_rank()`` and the collective ops
    see that thread's rank. ``timeout`` bounds every wait for a peer. If a
    rank raises, the others stop (within ``timeout`` even if they never
    communicate again) and :class:`RankFailed` is raised, naming the first
    rank that failed and its error (``.rank``, ``.error``, ``.errors`` per rank).
    """
    world = InProcessWorld(nranks, timeout)
    return run_threads(world, range(nranks), fn, args, kwargs, timeout)


def run_threads(world: InProcessWorld, ids: Sequence[int], fn: Callable[..., Any], args: Sequence[Any],
                kwargs: Dict[str, Any], timeout: Optional[float]) -> List[Any]:
    """One thread per id in ``ids``, each as the rank ``world.context(id)``; see run_in_process."""
    ids = list(ids)
    results, errors = {}, {}

    def body(i):
        ctx = None
        try:
            ctx = world.context(i)
            set_current(ctx)
            results[i] = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: B902 - any failure must stop the other ranks
            rank = ctx.rank if ctx is not None else i
            errors[rank] = exc
            world.fail(rank, exc)
        finally:
            set_current(None)
            with world.cond:
                world.finished.add(i)
                world.cond.notify_all()

    for i in ids:
        threading.Thread(target=body, args=(i,), name=f"refimpl-rank-{i}", daemon=True).start()
    stuck = _wait_for_ranks(world, ids, timeout)
    if world.failed is not None:
        r, e = world.failed
        v = world.verdict
        if v is not None:
            late = f"; rank(s) {stuck} did not stop (their threads are left running)" if stuck else ""
            raise RankHung(f"{v.args[0]}{late}", rank=v.rank, error=e, errors=dict(errors), hung=v.hung,
                           waited=v.waited) from e
        late = f"; rank(s) {stuck} did not stop in time" if stuck else ""
        raise RankFailed(f"rank {r} failed: {type(e).__name__}: {e}{late}", rank=r, error=e,
                         errors=dict(errors)) from e
    return [results[i] for i in ids]


def _wait_for_ranks(world, ids, timeout):
    """Wait for every thread; once a rank has failed, give the others ``timeout`` seconds to stop.

    After a hang verdict the hung ranks are not waited for (they will not
    stop); the others were woken by the verdict and stop at once.
    """
    give_up = None
    try:
        with world.cond:
            while True:
                pending = set(ids) - world.finished
                if world.verdict is not None:
                    pending -= set(world.verdict.hung)
                if not pending:
                    break
                if world.failed is not None and give_up is None:
                    give_up = time.monotonic() + (DEFAULT_TIMEOUT if timeout is None else timeout)
                if give_up is not None and time.monotonic() >= give_up:
                    break
                world.cond.wait(None if give_up is None else max(0.0, give_up - time.monotonic()))
    except BaseException as exc:  # e.g. KeyboardInterrupt: stop the ranks too
        world.fail(-1, exc)
        raise
    return sorted(set(ids) - world.finished)
