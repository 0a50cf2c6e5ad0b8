#!/usr/bin/env bash
# Issue 32's GPU check of the torch backend "qc" on CUDA tensors (the
# one-rank NCCL smoke through the backend, docs/python.md): the test
# test_cuda_tensors_go_through_qcs_nccl_communicator, skipped everywhere
# without a CUDA device.
#
#   bash scripts/gpu_torch_check.sh prepare  # here: pybind11 and pytest as
#                                           # wheels into .whl/ (git-ignored
#                                           # through .git/info/exclude)
#   bash scripts/gpu_torch_check.sh run      # there, with .whl carried: builds
#                                           # qc's Python package with CUDA
#                                           # against that machine's python3,
#                                           # torch and torch's NCCL, then runs
#                                           # the backend's one-rank tests;
#                                           # logs to $OUT (else ./gpu-out)
#
# The lent machines have nvcc, CMake, ninja and a python3 with torch, and
# fetch nothing, hence the wheels. The build takes a few minutes of the
# session's device time (kernels for sm_90 only).
set -euo pipefail
cd "$(dirname "$0")/.."
wheels=(pybind11 pytest iniconfig pluggy packaging pygments)

case "${1:-}" in
  prepare)
    grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
    rm -rf .whl && mkdir -p .whl
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
      --implementation py --abi none --platform any -d .whl "${wheels[@]}"
    ls .whl
    ;;
  run)
    out=${OUT:-gpu-out}
    mkdir -p "$out"
    exec > >(tee "$out/gpu_torch_check.log") 2>&1
    nvidia-smi -L || true
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/qc-site .whl/*.whl
    export PYTHONPATH=/tmp/qc-site
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())'
    # NCCL as torch has it (the nvidia-nccl wheel): header and library.
    nccl_root=$(python3 -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])')
    nccl_lib=$(ls "$nccl_root"/lib/libnccl.so* | head -1)
    echo "NCCL: $nccl_root ($nccl_lib)"
    cmake -S . -B /tmp/qc-torch -G Ninja -DCMAKE_BUILD_TYPE=Release -DQC_WITH_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES=90 -DQC_WITH_MPI=OFF -DQC_WITH_PYTHON=ON \
      -DQC_WITH_JAVA=OFF -DQC_WITH_FORTRAN=OFF -DQC_BUILD_TESTS=OFF -DQC_BUILD_TOOLS=OFF \
      -DQC_BUILD_EXAMPLES=OFF -DPython3_EXECUTABLE="$(command -v python3)" \
      -Dpybind11_DIR="$(python3 -m pybind11 --cmakedir)" \
      -DNCCL_INCLUDE_DIR="$nccl_root/include" -DNCCL_LIBRARY="$nccl_lib"
    cmake --build /tmp/qc-torch
    export PYTHONPATH=/tmp/qc-torch/bindings/python:/tmp/qc-site
    export LD_LIBRARY_PATH="$nccl_root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export GLOO_SOCKET_IFNAME=lo QC_DEBUG=info
    rc=0
    python3 -m pytest -q -p no:cacheprovider -rs bindings/python/tests/test_torch_backend.py \
      -k 'cuda or collectives or ddp' || rc=$?
    echo "pytest exit status: $rc"
    exit "$rc"
    ;;
  *)
    echo "usage: $0 prepare | run" >&2
    exit 2
    ;;
esac
