"""``python -m refimpl.distributed.launch``: start a training script on N ranks.

Mirrors ``paddle.distributed.launch`` for collective jobs, with MPI as the
engine instead of Paddle's own process controller:

* ``--nproc_per_node N train.py args...`` runs ``mpiexec -n N`` (the ``mpich``
  wheel's, or any on PATH); each rank re-enters this module, which sets the
  ``PADDLE_*`` environment Paddle's launcher sets (``PADDLE_TRAINER_ID``,
  ``PADDLE_TRAINERS_NUM``, ``PADDLE_TRAINER_ENDPOINTS``,
  ``PADDLE_CURRENT_ENDPOINT``, ``PADDLE_RANK_IN_NODE``, ``PADDLE_LOCAL_SIZE``...)
  from its MPI rank and runs the script, so role makers work unchanged;
* ``--hostfile FILE`` is passed to ``mpiexec`` to span several machines;
* ``--in-process`` runs the N ranks as threads of this process instead (the
  script sees its rank through the rank context, not the environment, since
  threads share one environment);
* ``--server_num S --worker_num W`` starts a parameter-server job of S + W
  ranks, servers first (Paddle's ``--server_num`` / ``--worker_num``): each
  rank gets Paddle's PS environment (``TRAINING_ROLE`` = PSERVER or TRAINER,
  ``PADDLE_PSERVERS_IP_PORT_LIST``, ``PADDLE_TRAINER_ENDPOINTS``,
  ``PADDLE_PORT``, ``POD_IP``, ``PADDLE_TRAINER_ID``, ``PADDLE_TRAINERS_NUM``);
  with ``--in-process`` the threads take their role from their rank.

The launcher's exit code is non-zero when any rank fails: 1 when a rank
raised, 124 when a rank hung (did not arrive where the others waited for it
within ``--timeout`` seconds, 30 by default; the message names it and the
ranks that waited), 125 when a rank's process ended mid-job (MPI: ``os._exit``,
a signal, the OOM killer). ``--timeout`` bounds every
wait of one rank for another, in-process and under MPI (there through
``$REFIMPL_COMM_TIMEOUT``), so a hang is reported about ``--timeout`` seconds
after the last rank arrived. Paddle's launcher has no such timeout (a hung
NCCL collective waits for ``FLAGS_nccl_blocking_wait``'s watchdog); this one
is refimpl's. Under MPI it passes ``-disable-auto-cleanup`` to Hydra's
``mpiexec`` (the ``mpich`` wheel's), so that when a process dies the other
ranks live long enough to say which rank it was (``communication/mpi.py``).
A process killed by a signal makes Hydra kill the job within milliseconds,
before any rank can speak; so the launcher itself watches the ranks' pids on
this machine (each rank writes its pid to a file of a temporary folder,
``$REFIMPL_LAUNCH_DIR``) and, when the job ends with a status that is not
refimpl's, names the rank whose process ended first and exits with 125
(Hydra's own status then depends on a race: the signal number, or 255).
"""
from __future__ import annotations

import argparse
import os
import runpy
import select
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence

from refimpl.distributed.communication.communicator import DEFAULT_TIMEOUT, EXIT_DIED, EXIT_FAILED, EXIT_HUNG

BASE_PORT = 6170


def _parser():
    p = argparse.ArgumentParser(prog="python -m refimpl.distributed.launch", description=__doc__.splitlines()[0])
    p.add_argument("--nproc_per_node", type=int, default=1, help="ranks to start (per machine)")
    p.add_argument("--nnodes", type=int, default=1, help="machines (with --hostfile)")
    p.add_argument("--hostfile", default=None, help="hosts file passed to mpiexec (-f)")
    p.add_argument("--in-process", dest="in_process", action="store_true", help="ranks as threads of one process")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                   help="seconds a rank may wait for another before the job stops, naming the rank that did "
                        f"not arrive (default {DEFAULT_TIMEOUT:g})")
    p.add_argument("--server_num", type=int, default=0, help="parameter servers (a PS job)")
    p.add_argument("--worker_num", type=int, default=0, help="PS workers (with --server_num)")
    p.add_argument("--_rank_child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("script")
    p.add_argument("script_args", nargs=argparse.REMAINDER)
    return p


def paddle_env(rank: int, world_size: int, local_rank: int, local_size: int,
               host: str = "127.0.0.1") -> Dict[str, str]:
    """The PADDLE_* variables Paddle's launcher gives rank ``rank`` of a collective job."""
    endpoints = ",".join(f"{host}:{BASE_PORT + i}" for i in range(world_size))
    return {
        "PADDLE_TRAINER_ID": str(rank), "PADDLE_TRAINERS_NUM": str(world_size),
        "PADDLE_TRAINER_ENDPOINTS": endpoints, "PADDLE_CURRENT_ENDPOINT": f"{host}:{BASE_PORT + rank}",
        "PADDLE_RANK_IN_NODE": str(local_rank), "PADDLE_LOCAL_SIZE": str(local_size),
        "PADDLE_LOCAL_RANK": str(local_rank), "PADDLE_WORLD_SIZE": str(world_size),
        "PADDLE_GLOBAL_SIZE": str(world_size), "PADDLE_GLOBAL_RANK": str(rank),
        "TRAINING_ROLE": "TRAINER", "PADDLE_DISTRI_BACKEND": "mpi",
    }


def ps_env(rank: int, server_num: int, worker_num: int, host: str = "127.0.0.1") -> Dict[str, str]:
    """The PADDLE_* variables Paddle's launcher gives rank ``rank`` of a PS job (servers are ranks 0..S-1)."""
    from refimpl.distributed.ps.runtime import endpoints
    servers, workers = endpoints(server_num, worker_num, host, BASE_PORT)
    env = {"PADDLE_PSERVERS_IP_PORT_LIST": ",".join(servers), "PADDLE_TRAINER_ENDPOINTS": ",".join(workers),
           "PADDLE_TRAINERS_NUM": str(worker_num), "POD_IP": host, "PADDLE_PORT": str(BASE_PORT + rank),
           "PADDLE_DISTRI_BACKEND": "mpi"}
    if rank < server_num:
        env.update(TRAINING_ROLE="PSERVER", PADDLE_PSERVER_ID=str(rank))
    else:
        env.update(TRAINING_ROLE="TRAINER", PADDLE_TRAINER_ID=str(rank - server_num))
    return env


def _run_script(script, args):
    sys.argv = [script] + list(args)
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:  # sys.exit(0) from a rank is success; anything else is that rank failing
        if exc.code not in (0, None):
            raise RuntimeError(f"{script} exited with status {exc.code}") from None


def _child(args):
    """Inside mpiexec: set this rank's PADDLE_* environment, then run the script."""
    rank = int(os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", 0)))
    size = int(os.environ.get("PMI_SIZE", os.environ.get("OMPI_COMM_WORLD_SIZE", 1)))
    local = int(os.environ.get("MPI_LOCALRANKID", rank % args.nproc_per_node))
    folder = os.environ.get("REFIMPL_LAUNCH_DIR")
    if folder and os.path.isdir(folder):  # for the launcher's watch (the module docstring)
        tmp = os.path.join(folder, f".rank-{rank}.pid")
        with open(tmp, "w") as f:
            f.write(str(os.getpid()))
        os.replace(tmp, os.path.join(folder, f"rank-{rank}.pid"))
    if args.server_num:
        os.environ.update(ps_env(rank, args.server_num, args.worker_num))
    else:
        os.environ.update(paddle_env(rank, size, local, args.nproc_per_node))
    _run_script(args.script, args.script_args)
    return 0


def _in_process(args):
    from refimpl.distributed.communication import RankFailed, run_in_process
    from refimpl.distributed.communication.communicator import exit_code_of
    try:
        if args.server_num:
            from refimpl.distributed.ps import run_ps_in_process
            run_ps_in_process(args.server_num, args.worker_num, _run_script, args.script, args.script_args,
                              timeout=args.timeout)
        else:
            run_in_process(args.nproc_per_node, _run_script, args.script, args.script_args, timeout=args.timeout)
    except RankFailed as exc:
        print(f"refimpl.distributed.launch: {exc}", file=sys.stderr)
        return exit_code_of(exc)
    return 0


def _mpiexec():
    here = os.path.dirname(sys.executable)
    for cand in (os.path.join(here, "mpiexec"), shutil.which("mpiexec")):
        if cand and os.path.exists(cand):
            return cand
    raise SystemExit("refimpl.distributed.launch: mpiexec not found; pip install mpich, or use --in-process")


def _hydra_flags(exe: str) -> List[str]:
    """``-disable-auto-cleanup`` for MPICH's Hydra (see the module docstring); nothing for other mpiexecs."""
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return ["-disable-auto-cleanup"] if "HYDRA" in out.upper() else []


def _ps_flags(args):
    return ["--server_num", str(args.server_num), "--worker_num", str(args.worker_num)] if args.server_num else []


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parser().parse_args(argv)
    if args.nproc_per_node < 1:
        raise SystemExit(f"refimpl.distributed.launch: --nproc_per_node must be >= 1, got {args.nproc_per_node}")
    if args.server_num or args.worker_num:
        if args.server_num < 1 or args.worker_num < 1:
            raise SystemExit(f"refimpl.distributed.launch: a PS job needs --server_num >= 1 and --worker_num >= 1, "
                             f"got {args.server_num} and {args.worker_num}")
        args.nproc_per_node = args.server_num + args.worker_num
    if args._rank_child:
        return _child(args)
    if args.in_process:
        return _in_process(args)
    exe = _mpiexec()
    cmd = [exe] + _hydra_flags(exe)
    if args.hostfile:
        cmd += ["-f", args.hostfile]
    cmd += ["-n", str(args.nproc_per_node * args.nnodes), sys.executable, "-m", "refimpl.distributed.launch",
            "--_rank_child", "--nproc_per_node", str(args.nproc_per_node)] + _ps_flags(args) + \
        [args.script] + args.script_args
    return _run_mpiexec(cmd, dict(os.environ, REFIMPL_COMM_TIMEOUT=str(args.timeout)))


def _run_mpiexec(cmd: List[str], env: Dict[str, str]) -> int:
    """Run the job; if it ends with a status that is not refimpl's, name the rank that ended first."""
    with tempfile.TemporaryDirectory(prefix="refimpl-launch-") as folder:
        proc = subprocess.Popen(cmd, env=dict(env, REFIMPL_LAUNCH_DIR=folder))
        try:
            first = _first_to_end(proc, folder)
        finally:
            code = proc.wait()
    if code not in (0, EXIT_FAILED, EXIT_HUNG, EXIT_DIED) and first is not None:
        rank, pid = first
        print(f"refimpl.distributed.launch: rank {rank} (pid {pid}) died: it ended first, while the other ranks "
              f"still ran (killed by a signal, or exited outside refimpl); mpiexec ended the job with status "
              f"{code}, the launcher exits with {EXIT_DIED}", file=sys.stderr, flush=True)
        return EXIT_DIED  # Hydra's status here depends on a race (the signal's number, or 255)
    return code


def _first_to_end(proc, folder):
    """(rank, pid) of the only rank whose process ended first, on this machine; None if unknown or a tie.

    Waits on a pidfd per rank (Linux), so the first death is seen within
    microseconds, before Hydra kills the others.
    """
    if not hasattr(os, "pidfd_open"):
        return None
    fds = {}  # pidfd -> (rank, pid)
    try:
        while proc.poll() is None:
            for name in os.listdir(folder):
                if name.startswith("rank-") and name.endswith(".pid"):
                    rank = int(name[5:-4])
                    if all(r != rank for r, _ in fds.values()):
                        pid = int(open(os.path.join(folder, name)).read())
                        try:
                            fds[os.pidfd_open(pid)] = (rank, pid)
                        except OSError:  # already gone: first, unless a watched one ended too
                            return None if fds and select.select(list(fds), [], [], 0)[0] else (rank, pid)
            if not fds:
                time.sleep(0.05)
                continue
            ended = select.select(list(fds), [], [], 0.05)[0]
            if ended:
                return fds[ended[0]] if len(ended) == 1 else None
        return None
    finally:
        for fd in fds:
            os.close(fd)
