#include "core/codecs/codec_none.h"

#include <string>

#include "core/checked_math.h"
#include "core/dtype.h"
#include "core/policy.h"
#include "cpu/dtype_convert.h"

namespace qc {

size_t CodecNone::max_encoded_size(size_t count) const {
  size_t payload = 0, total = 0;
  const bool fits = checked_mul(count, dtype_size(wire_dtype_), &payload) &&
                    checked_add(kWireHeaderBytes, payload, &total);
  return fits ? total : SIZE_MAX;
}

bool CodecNone::header_for(size_t count, WireHeader* h) const {
  *h = WireHeader();
  h->codec = QC_CODEC_NONE;
  h->bits = static_cast<uint8_t>(8 * dtype_size(wire_dtype_));
  h->dtype = static_cast<uint8_t>(wire_dtype_);
  h->count = count;
  h->payload_bytes = max_encoded_size(count) - kWireHeaderBytes;
  return true;
}

Status CodecNone::encode(const float* src, size_t count, const RandomKey&, uint8_t* dst,
                         size_t capacity, size_t* written) const {
  const size_t need = max_encoded_size(count);
  if (capacity < need) {
    return invalid_argument("argument 'capacity' (" + std::to_string(capacity) +
                            " bytes) is too small; the message needs " + std::to_string(need));
  }
  WireHeader h;
  header_for(count, &h);
  write_wire_header(h, dst);
  cpu::from_float32(src, wire_dtype_, dst + kWireHeaderBytes, count);
  *written = need;
  return Status::ok();
}

Status CodecNone::check(const uint8_t* src, size_t size, size_t count) const {
  WireHeader h;
  QC_RETURN_IF_ERROR(read_header_for(src, size, QC_CODEC_NONE, count, &h));
  if (h.dtype != wire_dtype_) {
    return mismatch(std::string("message carries ") + dtype_name(static_cast<qc_dtype_t>(h.dtype)) +
                    " values, expected " + dtype_name(wire_dtype_));
  }
  if (h.bits != 8 * dtype_size(wire_dtype_) ||
      h.payload_bytes != max_encoded_size(count) - kWireHeaderBytes) {
    return corrupt_data("codec none message: " + std::to_string(h.payload_bytes) +
                        " payload bytes for " + std::to_string(count) + " " +
                        dtype_name(wire_dtype_) + " values");
  }
  return Status::ok();
}

Status CodecNone::decode(const uint8_t* src, size_t size, float* dst, size_t count) const {
  QC_RETURN_IF_ERROR(check(src, size, count));
  cpu::to_float32(src + kWireHeaderBytes, wire_dtype_, dst, count);
  return Status::ok();
}

Status CodecNone::decode_typed(const uint8_t* src, size_t size, void* dst, size_t count,
                               qc_dtype_t dtype) const {
  if (dtype == QC_DTYPE_FLOAT32) return Codec::decode_typed(src, size, dst, count, dtype);
  QC_RETURN_IF_ERROR(check(src, size, count));
  const uint8_t* payload = src + kWireHeaderBytes;
  const size_t width = dtype_size(wire_dtype_);
  decode_in_blocks(count, 1, dtype, dst, [&](size_t first, size_t n, float* out) {
    cpu::to_float32(payload + first * width, wire_dtype_, out, n);
  });
  return Status::ok();
}

Status CodecNone::decode_accumulate(const uint8_t* src, size_t size, float* dst,
                                    size_t count) const {
  QC_RETURN_IF_ERROR(check(src, size, count));
  cpu::accumulate_to_float32(src + kWireHeaderBytes, wire_dtype_, dst, count);
  return Status::ok();
}

}  // namespace qc
