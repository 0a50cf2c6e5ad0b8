#!/usr/bin/env bash
# Issue 8's GPU checks (docs/cuda.md) in as few device minutes as possible.
# The lent GPU machines have nvcc, CMake and ninja but no GoogleTest, so the
# programs are built here and carried there:
#
#   bash scripts/gpu_check.sh build   # here: Release build of the GPU
#                                     # programs into build-gpu/ (git-ignored)
#   bash scripts/gpu_check.sh run     # there, with build-gpu carried: the GPU
#                                     # tests, compute-sanitizer memcheck on a
#                                     # subset, 2-4 MPI processes on the one
#                                     # GPU (if that machine has mpirun), the
#                                     # 256 MiB kernel table; logs and tables
#                                     # go to $OUT (or ./gpu-out)
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  build)
    # Two builds: build-gpu/ without MPI (the codec tests and the bench start on
    # any GPU machine, with or without libmpi there) and build-gpu/mpi/ for the
    # multi-process device test (runs only where that machine has Open MPI).
    # $ORIGIN run paths: the tree is carried to another path on that machine.
    configure() {  # $1: build dir, $2: QC_WITH_MPI
      cmake -S . -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=Release -DQC_WITH_CUDA=ON \
        -DCMAKE_BUILD_RPATH_USE_ORIGIN=ON -DQC_WITH_MPI="$2" \
        -DQC_WITH_PYTHON=OFF -DQC_WITH_JAVA=OFF -DQC_WITH_FORTRAN=OFF > /dev/null
    }
    configure build-gpu OFF
    cmake --build build-gpu --target qc_test_cuda_codecs qc-cuda-bench qc_test_cuda_nccl
    programs=(build-gpu/tests/cuda/qc_test_cuda_codecs build-gpu/tools/qc-cuda-bench/qc-cuda-bench
              build-gpu/tests/cuda/qc_test_cuda_nccl)
    configure build-gpu/mpi AUTO
    if grep -q qc_test_mpi_device_collectives build-gpu/mpi/build.ninja; then  # MPI found here
      cmake --build build-gpu/mpi --target qc_test_mpi_device_collectives
      programs+=(build-gpu/mpi/tests/mpi/qc_test_mpi_device_collectives
                 "$(readlink -f build-gpu/mpi/src/libqc.so)")
    fi
    strip "${programs[@]}"
    du -chL "${programs[@]}"
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
        --gtest_filter='CudaGolden.*:CudaQuant.EdgesMatchTheCpu:CudaGlobal.EdgesMatchTheCpu:CudaApi.*:CudaStaging.*' \
        > "$out/memcheck.log" 2>&1 || status=1
      tail -3 "$out/memcheck.log"
    fi
    # NCCL's library: the system's, else the one PyTorch's wheels bring.
    nccl_dir=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null || true)
    (LD_LIBRARY_PATH="${nccl_dir:+$nccl_dir:}${LD_LIBRARY_PATH:-}" build-gpu/tests/cuda/qc_test_cuda_nccl
     rc=$?; [ "$rc" = 77 ] && rc=0; exit "$rc") 2>&1 | tee "$out/nccl_smoke.log" || status=1
    mpi_test=build-gpu/mpi/tests/mpi/qc_test_mpi_device_collectives
    if [ -x "$mpi_test" ] && command -v mpirun > /dev/null &&
       ! ldd "$mpi_test" | grep -q 'not found'; then
      for np in 2 3 4; do
        OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
          mpirun -np "$np" --oversubscribe "$mpi_test" --device \
          > "$out/mpi_device_np$np.log" 2>&1 || status=1
        tail -4 "$out/mpi_device_np$np.log"
      done
    else
      echo "no mpirun or libmpi here (or no MPI build): the multi-process device test did not run" \
        | tee "$out/mpi_device.log"
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
