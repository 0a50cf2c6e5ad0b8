// Conversions between the ABI's dtypes and float32 (the working precision).
// Scalar reference kernels; rounding is IEEE round-to-nearest-even, NaN stays
// NaN and overflow goes to infinity, as a hardware cast would.
#pragma once

#include <cstddef>
#include <cstdint>

#include "qc.h"

namespace qc {
namespace cpu {

uint16_t float_to_half(float value);
float half_to_float(uint16_t bits);
uint16_t float_to_bfloat16(float value);
float bfloat16_to_float(uint16_t bits);

// dst[i] = float(src[i]); src holds `count` elements of `dtype`.
void to_float32(const void* src, qc_dtype_t dtype, float* dst, size_t count);
// dst[i] = dtype(src[i]).
void from_float32(const float* src, qc_dtype_t dtype, void* dst, size_t count);
// dst[i] += float(src[i]); src may be unaligned (it comes off the wire).
void accumulate_to_float32(const void* src, qc_dtype_t dtype, float* dst, size_t count);

}  // namespace cpu
}  // namespace qc
