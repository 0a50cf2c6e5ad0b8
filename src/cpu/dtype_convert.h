// Conversions between the ABI's dtypes and float32 (the working precision).
// Scalar reference kernels; rounding is IEEE round-to-nearest-even, NaN stays
// NaN and overflow goes to infinity, as a hardware cast would.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cpu/half_convert.h"
#include "qc.h"

namespace qc {
namespace cpu {

// float_to_half, half_to_float, float_to_bfloat16, bfloat16_to_float:
// cpu/half_convert.h (shared with the CUDA kernels).

// dst[i] = float(src[i]); src holds `count` elements of `dtype`.
void to_float32(const void* src, qc_dtype_t dtype, float* dst, size_t count);
// dst[i] = dtype(src[i]).
void from_float32(const float* src, qc_dtype_t dtype, void* dst, size_t count);
// dst[i] += float(src[i]); src may be unaligned (it comes off the wire).
void accumulate_to_float32(const void* src, qc_dtype_t dtype, float* dst, size_t count);

}  // namespace cpu
}  // namespace qc
