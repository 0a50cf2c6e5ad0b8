// src/cuda/quantize_kernels.cu compiled for the warp emulator. The kernels'
// host entry points land in qc::cuda_emulated, so this object can sit next
// to the library's real qc::cuda ones in one test program.
#define QC_CUDA_EMULATION 1
#include "warp_emulator.h"
#define cuda cuda_emulated
#include "cuda/quantize_kernels.cu"
