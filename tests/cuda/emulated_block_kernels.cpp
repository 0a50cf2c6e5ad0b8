// src/cuda/block_kernels.cu compiled for the warp emulator (see
// emulated_quantize_kernels.cpp).
#define QC_CUDA_EMULATION 1
#include "warp_emulator.h"
#define cuda cuda_emulated
#include "cuda/block_kernels.cu"
