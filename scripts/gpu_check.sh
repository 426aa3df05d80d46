#!/usr/bin/env bash
# GPU check (issue 6, part 7): on a machine with an NVIDIA GPU, install refimpl with
# its CUDA extras, run the conformance suite on the real device (no simulator),
# an NCCL all_reduce between 2 ranks (on one GPU if that is all there is), and the
# CUDA benchmark (medium and large MLP, refimpl CPU vs CUDA kernels).
#
#     bash scripts/gpu_check.sh            # from the repository root
set -uo pipefail
cd "$(dirname "$0")/.."
status=0
step() { echo; echo "== $*"; }

step "install"
nvidia-smi -L || { echo "no NVIDIA GPU visible (nvidia-smi failed)"; exit 1; }
python3 -m pip install -q -e ".[test,cuda]" nvidia-nccl-cu12 || exit 1
# the test extra brings the CUDA 13 compiler libraries; a driver older than CUDA 13 needs the 12 ones
driver_cuda="$(nvidia-smi | sed -n 's/.*CUDA Version: *\([0-9]*\)\..*/\1/p' | head -1)"
echo "driver supports CUDA ${driver_cuda:-?}"
if [ -n "$driver_cuda" ] && [ "$driver_cuda" -lt 13 ]; then
    python3 -m pip install -q "numba-cuda[cu12]" || exit 1
fi
export NUMBA_ENABLE_CUDASIM=0 REFIMPL_CONFORMANCE=1
python3 - <<'PY' || exit 1
from numba import cuda
import cuda_backend
cuda_backend.require()
print("device:", cuda.get_current_device().name, "simulator:", cuda_backend.simulated())
PY

step "conformance suite on the GPU"
python3 -m pytest -q tests/conformance || status=1

step "NCCL all_reduce between 2 ranks"
MPIEXEC="$(dirname "$(python3 -c 'import sys; print(sys.executable)')")/mpiexec"
[ -x "$MPIEXEC" ] || MPIEXEC=mpiexec
timeout 300 "$MPIEXEC" -n 2 python3 -m cuda_backend.nccl || status=1

step "benchmark: refimpl CPU vs CUDA kernels"
python3 benchmarks/mlp_step.py --backend cuda --profile medium large || status=1

echo; [ $status -eq 0 ] && echo "gpu_check: OK" || echo "gpu_check: FAILED"
exit $status
