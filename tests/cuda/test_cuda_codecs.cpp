// The CUDA codec kernels on a GPU against the CPU reference (the cases are
// in cuda_codec_cases.h). Without a CUDA device the program prints
// "no CUDA device" and exits 77, which CTest reports as skipped
// (tests/cuda/CMakeLists.txt); the same cases still run on the CPU through
// the warp emulator (test_cuda_emulated.cpp).
#include <cuda_runtime.h>

#include "cuda_codec_cases.h"

int main(int argc, char** argv) {
  if (qc::cuda::device_count() == 0) {
    std::printf("no CUDA device: the GPU tests are skipped\n");
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
