#include "cpu/dtype_convert.h"

#include <cstring>

namespace qc {
namespace cpu {
namespace {

uint16_t load_u16(const unsigned char* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

float load_f32(const unsigned char* p) {
  float v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

void to_float32(const void* src, qc_dtype_t dtype, float* dst, size_t count) {
  const auto* p = static_cast<const unsigned char*>(src);
  switch (dtype) {
    case QC_DTYPE_FLOAT32:
      if (count > 0 && static_cast<const void*>(dst) != src) std::memmove(dst, src, count * 4);
      return;
    case QC_DTYPE_FLOAT16:
      for (size_t i = 0; i < count; ++i) dst[i] = half_to_float(load_u16(p + 2 * i));
      return;
    case QC_DTYPE_BFLOAT16:
      for (size_t i = 0; i < count; ++i) dst[i] = bfloat16_to_float(load_u16(p + 2 * i));
      return;
  }
}

void from_float32(const float* src, qc_dtype_t dtype, void* dst, size_t count) {
  auto* p = static_cast<unsigned char*>(dst);
  switch (dtype) {
    case QC_DTYPE_FLOAT32:
      if (count > 0 && static_cast<const void*>(src) != dst) std::memmove(dst, src, count * 4);
      return;
    case QC_DTYPE_FLOAT16:
      for (size_t i = 0; i < count; ++i) {
        const uint16_t h = float_to_half(src[i]);
        std::memcpy(p + 2 * i, &h, 2);
      }
      return;
    case QC_DTYPE_BFLOAT16:
      for (size_t i = 0; i < count; ++i) {
        const uint16_t h = float_to_bfloat16(src[i]);
        std::memcpy(p + 2 * i, &h, 2);
      }
      return;
  }
}

void accumulate_to_float32(const void* src, qc_dtype_t dtype, float* dst, size_t count) {
  const auto* p = static_cast<const unsigned char*>(src);
  switch (dtype) {
    case QC_DTYPE_FLOAT32:
      for (size_t i = 0; i < count; ++i) dst[i] += load_f32(p + 4 * i);
      return;
    case QC_DTYPE_FLOAT16:
      for (size_t i = 0; i < count; ++i) dst[i] += half_to_float(load_u16(p + 2 * i));
      return;
    case QC_DTYPE_BFLOAT16:
      for (size_t i = 0; i < count; ++i) dst[i] += bfloat16_to_float(load_u16(p + 2 * i));
      return;
  }
}

}  // namespace cpu
}  // namespace qc
