#!/usr/bin/env bash
# Issue 8's GPU checks (docs/cuda.md) in as few device minutes as possible.
# The lent GPU machines have nvcc, CMake and ninja but no GoogleTest, so the
# programs are built here and carried there:
#
#   bash scripts/gpu_check.sh build   # here: Release build of the GPU
#                                     # programs into build-gpu/ (git-ignored)
#   bash scripts/gpu_check.sh run     # there, with build-gpu carried: the GPU
#                                     # tests and the NCCL smoke test (stage
#                                     # "tests"); 2-4 MPI processes on the one
#                                     # GPU (with that machine's Open MPI, or
#                                     # the one carried in build-gpu/ompi-debs;
#                                     # "mpi"); the 256 MiB kernel table and
#                                     # qc-perf on device buffers with and
#                                     # without the device codec ("bench");
#                                     # compute-sanitizer memcheck on a subset
#                                     # ("memcheck"); logs, tables and
#                                     # summary.txt go to ./gpu-out, or packed
#                                     # into $OUT/gpu-logs.tar.gz
#   bash scripts/gpu_check.sh run tests bench   # only these stages, in order
#   bash scripts/gpu_check.sh report DIR  # here: a docs/benchmarks.md
#                                     # section drafted from the files a
#                                     # run sent back to DIR
set -euo pipefail
cd "$(dirname "$0")/.."
# What Debian's libmpi.so.40 and mpirun need beyond glibc, zlib and libudev.
ompi_packages=(openmpi-bin openmpi-common libopenmpi3 libhwloc15 libevent-core-2.1-7
               libevent-pthreads-2.1-7 libpmix2)

# Unpacks the carried Open MPI into $1 and points PATH, the loader and Open
# MPI's relocation variables at it (OPAL_PREFIX moves every path under /usr;
# the MCA parameter file lives in etc/).
use_carried_mpi() {
  local root=$1
  rm -rf "$root" && mkdir -p "$root"
  local deb
  for deb in build-gpu/ompi-debs/*.deb; do dpkg -x "$deb" "$root"; done
  # Debian names it mpirun through update-alternatives, which dpkg -x skips.
  ln -sf orterun "$root/usr/bin/mpirun"
  export OPAL_PREFIX="$root/usr" PATH="$root/usr/bin:$PATH"
  export LD_LIBRARY_PATH="$root/usr/lib/x86_64-linux-gnu:$root/usr/lib/x86_64-linux-gnu/openmpi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export OMPI_MCA_mca_base_param_files="$root/etc/openmpi/openmpi-mca-params.conf"
  export PMIX_MCA_pcompress_base_silence_warning=1
}
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
    cmake --build build-gpu --target qc_test_cuda_codecs qc-cuda-bench qc_test_cuda_nccl qc-perf
    programs=(build-gpu/tests/cuda/qc_test_cuda_codecs build-gpu/tools/qc-cuda-bench/qc-cuda-bench
              build-gpu/tests/cuda/qc_test_cuda_nccl build-gpu/tools/qc-perf/qc-perf
              "$(readlink -f build-gpu/src/libqc.so)")
    configure build-gpu/mpi AUTO
    if grep -q qc_test_mpi_device_collectives build-gpu/mpi/build.ninja; then  # MPI found here
      cmake --build build-gpu/mpi --target qc_test_mpi_device_collectives
      programs+=(build-gpu/mpi/tests/mpi/qc_test_mpi_device_collectives
                 "$(readlink -f build-gpu/mpi/src/libqc.so)")
      # Open MPI itself, for a GPU machine without it (the lent ones have
      # none): this machine's Debian packages, unpacked there into a private
      # prefix by `run` (3.7 MB on 2026-11-25).
      rm -rf build-gpu/ompi-debs && mkdir -p build-gpu/ompi-debs
      (cd build-gpu/ompi-debs && apt-get download -q "${ompi_packages[@]}" > /dev/null 2>&1) ||
        echo "apt-get download of Open MPI failed: the MPI device test runs only where mpirun is" >&2
      du -ch build-gpu/ompi-debs | tail -1
    fi
    git describe --always --dirty > build-gpu/commit.txt
    strip "${programs[@]}"
    du -chL "${programs[@]}"
    # Only the programs travel usefully: the objects would count against the
    # carry limit (64 MiB) and `run` builds nothing.
    find build-gpu -name '*.o' -delete
    # CMake's compiler-identification scratch (6 MB a tree), not its result.
    find build-gpu -path '*/CMakeFiles/*/CompilerId*/tmp' -prune -exec rm -rf {} +
    du -sh build-gpu
    ;;
  run)
    # Stages, each a separate `run` call if one would not fit its 600 s:
    # tests (the GPU tests, memcheck, the NCCL smoke), mpi (2-4 processes),
    # bench (the kernel table, qc-perf on device buffers); none: all three.
    # Every step has its own time limit, so a hang costs that step, not the
    # ones after it; $OUT/summary.txt says how each step ended.
    # The device tool sends back at most 8 files from $OUT, and a run writes
    # a dozen: there the logs are written elsewhere and packed into
    # $OUT/gpu-logs.tar.gz after every step (what came back before a kill
    # stays whole), with summary.txt beside it to read at once.
    out="${OUT:-gpu-out}"
    mkdir -p "$out"
    if [ -n "${OUT:-}" ]; then work=$(mktemp -d /tmp/qc-gpu-logs.XXXXXX); else work=$out; fi
    pack() {
      [ "$work" = "$out" ] && return 0
      tar czf "$out/gpu-logs.tar.gz" -C "$work" . && cp "$work/summary.txt" "$out/" 2>/dev/null || true
    }
    stages=("${@:2}")
    [ "${#stages[@]}" -gt 0 ] || stages=(tests mpi bench memcheck)
    export QC_TEST_DATA_DIR="$PWD/tests/data"
    status=0
    # step NAME SECONDS LOG COMMAND...: COMMAND's output to $work/LOG (and its
    # tail to the terminal); exit 77 counts as skipped.
    step() {
      local name=$1 limit=$2 log=$work/$3 rc=0
      shift 3
      timeout --kill-after=10 "$limit" "$@" > "$log" 2>&1 || rc=$?
      tail -4 "$log"
      local verdict=passed
      # compute-sanitizer refuses the GPU on gVisor machines (the lent H200s
      # as seen on 2026-11-04): that is the tool's limit, not a failure.
      if [ "$rc" != 0 ] && grep -q 'Device not supported' "$log"; then rc=77; fi
      case $rc in
        0) grep -q 'no CUDA device' "$log" && verdict="skipped (no CUDA device)" ;;
        77) verdict="skipped ($(grep -m1 -e 'no CUDA device' -e 'Device not supported' "$log" ||
                                 head -1 "$log"))" ;;
        124|137) verdict="timed out after $limit s"; status=1 ;;
        *) verdict="failed (exit $rc)"; status=1 ;;
      esac
      echo "$name: $verdict" | tee -a "$work/summary.txt"
      pack
    }
    # Line 2: "name, driver, memory"; line 3: the commit built (what report
    # quotes).
    { date -u
      nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null ||
        echo "no nvidia-smi, ?, ?"
      cat build-gpu/commit.txt 2>/dev/null || echo "unknown commit"
      nvidia-smi; } > "$work/device.txt" 2>&1 || true
    pack
    for stage in "${stages[@]}"; do
      case $stage in
        tests)
          step cuda.codecs 300 cuda_tests.log build-gpu/tests/cuda/qc_test_cuda_codecs
          # NCCL's library: the system's, else the one PyTorch's wheels bring
          # (nvidia-nccl-cu13 and its like, wherever the wheel puts it).
          nccl_dir=
          system_nccl=$(ldconfig -p 2>/dev/null | grep -m1 -o '/[^ ]*libnccl[.]so[.]2' || true)
          if [ -z "$system_nccl" ]; then
            nccl_lib=$(python3 -c 'import site; print("\n".join(site.getsitepackages()))' 2>/dev/null |
                       while read -r d; do find "$d/nvidia" -name 'libnccl.so.2*' 2>/dev/null; done | head -1)
            [ -z "$nccl_lib" ] || nccl_dir=$(dirname "$nccl_lib")
          fi
          echo "libnccl.so.2: ${nccl_dir:-${system_nccl:-none found}}" | tee "$work/nccl_library.txt"
          step cuda.nccl_smoke 120 nccl_smoke.log \
            env LD_LIBRARY_PATH="${nccl_dir:+$nccl_dir:}${LD_LIBRARY_PATH:-}" \
            build-gpu/tests/cuda/qc_test_cuda_nccl
          ;;
        mpi)
          mpi_test=build-gpu/mpi/tests/mpi/qc_test_mpi_device_collectives
          # The machine's own Open MPI if it is the 4.x the test was linked
          # with (libmpi.so.40; QC_GPU_CHECK_CARRIED_MPI=1 takes the carried
          # one anyway), else the carried packages: an mpirun of another MPI
          # or version (say one a Python package brought) cannot start it.
          if { [ "${QC_GPU_CHECK_CARRIED_MPI:-0}" = 1 ] ||
               ! mpirun --version 2>/dev/null | grep -q 'Open MPI) 4\.'; } &&
             compgen -G 'build-gpu/ompi-debs/*.deb' > /dev/null; then
            use_carried_mpi /tmp/qc-carried-mpi
            echo "Open MPI: the carried packages, unpacked in /tmp/qc-carried-mpi" | tee "$work/mpi_device.log"
          fi
          { echo "mpirun: $(command -v mpirun || echo none)"
            mpirun --version 2>&1 | head -1; } | tee -a "$work/mpi_device.log"
          if [ -x "$mpi_test" ] && command -v mpirun > /dev/null &&
             ! ldd "$mpi_test" | grep -q 'not found'; then
            # Shared memory without the cross-process single copy (CMA),
            # which sandboxed machines commonly refuse (ptrace rules).
            for np in 2 3 4; do
              step "mpi.device.np$np" 150 "mpi_device_np$np.log" \
                env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
                OMPI_MCA_btl_vader_single_copy_mechanism=none \
                mpirun -np "$np" --oversubscribe "$mpi_test" --device
            done
          else
            echo "mpi.device: not run (no mpirun or libmpi here, or no MPI build)" \
              | tee -a "$work/mpi_device.log" "$work/summary.txt"
            status=1
          fi
          ;;
        memcheck)
          # Last by default: under compute-sanitizer the tests run many times
          # slower, and the gVisor machines refuse it (skipped, above). The
          # test that records on no event on purpose is left out:
          # memcheck counts that API error as one of the program's.
          if command -v compute-sanitizer > /dev/null; then
            step memcheck 300 memcheck.log compute-sanitizer --tool memcheck --error-exitcode 3 \
              build-gpu/tests/cuda/qc_test_cuda_codecs \
              --gtest_filter='CudaGolden.*:CudaQuant.EdgesMatchTheCpu:CudaGlobal.EdgesMatchTheCpu:CudaVector.*:CudaApi.*:CudaStaging.*:-CudaApi.AReportedCudaErrorIsNotReportedAgain'
          else
            echo "memcheck: skipped (no compute-sanitizer)" | tee -a "$work/summary.txt"
          fi
          ;;
        bench)
          step qc-cuda-bench 200 cuda_bench.txt \
            build-gpu/tools/qc-cuda-bench/qc-cuda-bench --size 256 -i 20 --check
          # Collectives on device buffers, 3 ranks of one process on the one
          # GPU: the codec on the device (default) against whole-buffer
          # staging (QC_DEVICE_CODEC=0), the same rows, in one run.
          for codec_on_device in 1 0; do
            step "qc-perf --device (QC_DEVICE_CODEC=$codec_on_device)" 180 \
              "qc_perf_device_codec$codec_on_device.txt" \
              env QC_DEVICE_CODEC=$codec_on_device build-gpu/tools/qc-perf/qc-perf -n 3 --device \
              -o all -c none,fp16,minmax:4,minmax:2,qsgd+ef,onebit+ef -a ring,sra,tree,auto \
              -b 64K -e 16M -f 4 --profile
          done
          ;;
        *)
          echo "unknown stage '$stage' (tests, mpi, bench, memcheck)" >&2
          exit 2
          ;;
      esac
    done
    pack
    exit "$status"
    ;;
  report)
    # A docs/benchmarks.md section drafted from a run's files ($2: the
    # folder they came back to): device, driver and date from device.txt,
    # each step's verdict, the GPU tests' summary and the kernel table.
    # Numbers are copied, never typed; the prose around them is yours.
    dir=${2:?usage: bash scripts/gpu_check.sh report DIR}
    if [ -f "$dir/gpu-logs.tar.gz" ]; then
      logs=$(mktemp -d)
      tar xzf "$dir/gpu-logs.tar.gz" -C "$logs"
      dir=$logs
    fi
    IFS=, read -r gpu driver memory < <(sed -n 2p "$dir/device.txt")
    echo "## CUDA kernels and GPU tests ($(head -1 "$dir/device.txt"))"
    echo
    echo "Device: ${gpu:-?} (${memory# }), driver ${driver# }. Built here with \`bash scripts/gpu_check.sh build\`,"
    echo "run there with \`bash scripts/gpu_check.sh run\` (commit $(sed -n 3p "$dir/device.txt"))."
    echo
    echo '```'
    cat "$dir/summary.txt" 2>/dev/null || echo "(no summary.txt)"
    echo '```'
    if [ -f "$dir/cuda_tests.log" ]; then
      echo
      echo "GPU tests (CPU/GPU byte equality on the golden vectors and random tensors):"
      echo
      echo '```'
      grep -E '^\[ *(PASSED|FAILED) *\]|tests? from .* ran' "$dir/cuda_tests.log" | tail -5
      echo '```'
    fi
    if [ -f "$dir/cuda_bench.txt" ]; then
      echo
      echo "Kernel throughput, 256 MiB float32, GB/s of input bytes, \`xcopy\` the ratio to a"
      echo "device-to-device copy in the same run (\`qc-cuda-bench --size 256 -i 20 --check\`):"
      echo
      echo '```'
      cat "$dir/cuda_bench.txt"
      echo '```'
    fi
    ;;
  *)
    echo "usage: bash scripts/gpu_check.sh build | run [tests] [mpi] [bench] [memcheck] | report DIR" >&2
    exit 2
    ;;
esac
