"""The small MPI control messages use buffers or JSON bytes, never mpi4py's pickle-based calls.

mpi4py's lowercase methods (``comm.bcast``, ``allgather``, ``allreduce``,
``send`` ... of Python objects) pickle their payload, and unpickling runs
code from the peer. An AST scan of the three files that exchange control
messages checks none remains; ``tests/test_mpi.py`` (``control``) runs them.
"""
import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILES = ["refimpl/distributed/communication/mpi.py", "refimpl/distributed/communication/mpi_monitor.py",
         "refimpl/distributed/fleet/base/mpi_role_maker.py", "cuda_backend/nccl.py"]
# mpi4py's pickle-based methods; refimpl's own communicators never use these names ...
PICKLING = {"bcast", "allgather", "allreduce", "gather", "scatter", "alltoall", "scan", "exscan", "sendrecv",
            "isend", "irecv", "ibsend", "issend", "bsend", "ssend", "mprobe", "improbe", "ibcast", "iallgather",
            "iallreduce", "igather", "iscatter", "ialltoall", "ireduce", "neighbor_allgather", "neighbor_alltoall"}
# ... but these they do (``c.send(x, peer)``): pickling only on an mpi4py communicator
AMBIGUOUS = {"send", "recv", "reduce"}
MPI_LIKE = ("mpi", "comm", "world", "sub", "ctrl")


def pickling_calls(source, name="<source>"):
    """``file:line: expression`` of every use of an mpi4py pickle-based method in ``source``."""
    hits = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute):
            continue
        owner = ast.unparse(node.value)
        last = owner.rsplit(".", 1)[-1].lower()
        if node.attr in PICKLING or (node.attr in AMBIGUOUS and any(last.endswith(m) or last.startswith(m)
                                                                    for m in MPI_LIKE)):
            hits.append(f"{name}:{node.lineno}: {owner}.{node.attr}")
    return hits


@pytest.mark.parametrize("source", [
    "raw = self.mpi.bcast(bytes(uid.internal) if self.rank == 0 else None, root=0)",
    "hosts = world.allgather(MPI.Get_processor_name())",
    "world.blocking(what, sub.allreduce, int(bool(ok)), world.MPI.MIN)",
    "self.comm.send({'a': 1}, dest=1)",
    "x = ctrl.recv(source=0)",
])
def test_the_scan_finds_pickle_based_calls(source):
    assert pickling_calls(source), source


@pytest.mark.parametrize("source", [
    "comm.Bcast(buf, root=0)", "world.Allgather(a, b)", "sub.Allreduce(MPI.IN_PLACE, flag, MPI.MIN)",
    "c.send(to_device(x), peer=1)", "super().reduce(x, root, op, out)", "self.nccl.all_reduce(x, op)",
])
def test_the_scan_lets_buffer_calls_and_refimpl_communicators_be(source):
    assert not pickling_calls(source), source


def test_no_control_message_is_pickled():
    hits = []
    for rel in FILES:
        with open(os.path.join(ROOT, rel)) as f:
            hits += pickling_calls(f.read(), rel)
    assert not hits, "mpi4py pickle-based calls remain:\n" + "\n".join(hits)
