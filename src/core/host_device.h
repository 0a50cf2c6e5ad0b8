// QC_HOST_DEVICE marks the small inline functions that define the codecs'
// arithmetic (random bits, half conversions, minmax levels) as callable from
// CUDA kernels too. The CPU and CUDA kernels then share one definition
// instead of two copies that must be kept in step, which is what makes
// "same seed, same bytes on CPU and GPU" hold by construction.
#pragma once

#if defined(__CUDACC__)
#define QC_HOST_DEVICE __host__ __device__
#else
#define QC_HOST_DEVICE
#endif
