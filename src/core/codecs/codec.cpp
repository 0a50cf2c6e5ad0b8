#include "core/codecs/codec.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/policy.h"
#include "cpu/dtype_convert.h"

namespace qc {

Status Codec::encode_error_compensated(const float* t, float* e, size_t count,
                                       const RandomKey& key, uint8_t* dst, size_t capacity,
                                       size_t* written) const {
  std::vector<float> z(count);
  for (size_t i = 0; i < count; ++i) z[i] = t[i] + e[i];
  QC_RETURN_IF_ERROR(encode(z.data(), count, key, dst, capacity, written));
  QC_RETURN_IF_ERROR(decode(dst, *written, e, count));
  // Residual hygiene (cpu/codec_kernels.h), each element its own bucket: a
  // value whose decode is not finite (NaN, Inf, or beyond the 16-bit range
  // of a cast) leaves residual 0, not z - Inf, which would poison every
  // later call. A finite decode of a finite z leaves at most half a unit in
  // the last place, which can never overflow the next encode.
  for (size_t i = 0; i < count; ++i) e[i] = std::isfinite(e[i]) ? z[i] - e[i] : 0.0f;
  return Status::ok();
}

Status Codec::encoded_size(size_t count, size_t* bytes) const {
  const size_t size = max_encoded_size(count);
  if (size == SIZE_MAX) {
    return invalid_argument("argument 'count' (" + std::to_string(count) +
                            "): the message of codec " + codec_name(id()) + " for " +
                            std::to_string(count) + " elements would be larger than SIZE_MAX bytes");
  }
  *bytes = size;
  return Status::ok();
}

Status Codec::encode_typed(const void* src, qc_dtype_t dtype, size_t count, const RandomKey& key,
                           uint8_t* dst, size_t capacity, size_t* written) const {
  if (dtype == QC_DTYPE_FLOAT32) {
    return encode(static_cast<const float*>(src), count, key, dst, capacity, written);
  }
  std::vector<float> values(count);
  cpu::to_float32(src, dtype, values.data(), count);
  return encode(values.data(), count, key, dst, capacity, written);
}

Status Codec::decode_typed(const uint8_t* src, size_t size, void* dst, size_t count,
                           qc_dtype_t dtype) const {
  if (dtype == QC_DTYPE_FLOAT32) return decode(src, size, static_cast<float*>(dst), count);
  std::vector<float> values(count);
  QC_RETURN_IF_ERROR(decode(src, size, values.data(), count));
  cpu::from_float32(values.data(), dtype, dst, count);
  return Status::ok();
}

void Codec::decode_in_blocks(size_t count, size_t granule, qc_dtype_t dtype, void* dst,
                             const std::function<void(size_t, size_t, float*)>& decode_block) {
  // About 16 KiB of floats per block (L1), a whole number of granules.
  constexpr size_t kTarget = 4096;
  const size_t g = granule > 0 ? granule : 1;
  const size_t block = g >= kTarget ? g : kTarget - kTarget % g;
  std::vector<float> buffer(block);
  auto* out = static_cast<uint8_t*>(dst);
  const size_t width = dtype_size(dtype);
  for (size_t first = 0; first < count; first += block) {
    const size_t n = count - first < block ? count - first : block;
    decode_block(first, n, buffer.data());
    cpu::from_float32(buffer.data(), dtype, out + first * width, n);
  }
}

Status read_header_for(const uint8_t* src, size_t size, qc_codec_t codec, size_t count,
                       WireHeader* h) {
  QC_RETURN_IF_ERROR(read_wire_header(src, size, h));
  if (h->codec != codec) {
    return mismatch(std::string("message was encoded with codec ") +
                    codec_name(static_cast<qc_codec_t>(h->codec)) + ", expected " +
                    codec_name(codec));
  }
  if (h->count != count) {
    return mismatch("message holds " + std::to_string(h->count) + " elements, expected " +
                    std::to_string(count));
  }
  return Status::ok();
}

Status Codec::encode_reusing_scales(const float* src, float* e, size_t count,
                                    const RandomKey& key, const uint8_t*, size_t, uint8_t* dst,
                                    size_t capacity, size_t* written) const {
  if (e != nullptr) return encode_error_compensated(src, e, count, key, dst, capacity, written);
  return encode(src, count, key, dst, capacity, written);
}

}  // namespace qc
