#!/usr/bin/env bash
# Issue 8's GPU checks (docs/cuda.md) in as few device minutes as possible.
# The lent GPU machines have nvcc, CMake and ninja but no GoogleTest, so the
# programs are built here and carried there:
#
#   bash scripts/gpu_check.sh build   # here: Release build of the two GPU
#                                     # programs into build-gpu/ (git-ignored)
#   bash scripts/gpu_check.sh run     # there, with build-gpu carried: the GPU
#                                     # tests, compute-sanitizer memcheck on a
#                                     # subset, the 256 MiB kernel table; logs
#                                     # and tables go to $OUT (or ./gpu-out)
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  build)
    cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DQC_WITH_CUDA=ON \
      -DQC_WITH_MPI=OFF -DQC_WITH_PYTHON=OFF -DQC_WITH_JAVA=OFF -DQC_WITH_FORTRAN=OFF
    cmake --build build-gpu --target qc_test_cuda_codecs qc-cuda-bench
    strip build-gpu/tests/cuda/qc_test_cuda_codecs build-gpu/tools/qc-cuda-bench/qc-cuda-bench
    du -ch build-gpu/tests/cuda/qc_test_cuda_codecs build-gpu/tools/qc-cuda-bench/qc-cuda-bench
    ;;
  run)
    out="${OUT:-gpu-out}"
    mkdir -p "$out"
    export QC_TEST_DATA_DIR="$PWD/tests/data"
    status=0
    { date -u; nvidia-smi; } > "$out/device.txt" 2>&1 || true
    build-gpu/tests/cuda/qc_test_cuda_codecs 2>&1 | tee "$out/cuda_tests.log" || status=1
    if command -v compute-sanitizer > /dev/null; then
      compute-sanitizer --tool memcheck --error-exitcode 3 build-gpu/tests/cuda/qc_test_cuda_codecs \
        --gtest_filter='CudaGolden.*:CudaQuant.EdgesMatchTheCpu:CudaGlobal.EdgesMatchTheCpu:CudaApi.*' \
        > "$out/memcheck.log" 2>&1 || status=1
      tail -3 "$out/memcheck.log"
    fi
    build-gpu/tools/qc-cuda-bench/qc-cuda-bench --size 256 -i 20 --check \
      2>&1 | tee "$out/cuda_bench.txt" || status=1
    exit "$status"
    ;;
  *)
    echo "usage: bash scripts/gpu_check.sh build|run" >&2
    exit 2
    ;;
esac
