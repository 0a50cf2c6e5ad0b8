// The CUDA kernel cases (cuda_codec_cases.h) on the CPU: the kernels of
// src/cuda run under the warp emulator (warp_emulator.h), 32 threads per
// warp, so the lane logic is checked against the CPU reference on every
// machine and in CI, which has no GPU. The names qc::cuda::* below resolve
// to the emulated build of the kernels (qc::cuda_emulated, compiled by
// emulated_*_kernels.cpp), not to the library's device code.
#define QC_CUDA_EMULATION 1
#include "warp_emulator.h"
#define cuda cuda_emulated
#include "cuda_codec_cases.h"
