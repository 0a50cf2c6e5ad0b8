#include "core/codecs/codec_cast.h"

#include <string>

#include "core/checked_math.h"
#include "core/policy.h"

namespace qc {

CastCodec::CastCodec(qc_codec_t codec) : codec_(codec) {
  const cpu::KernelTable& k = cpu::kernels();
  encode_fn_ = codec == QC_CODEC_FP16 ? k.fp16_encode : k.bf16_encode;
  decode_fn_ = codec == QC_CODEC_FP16 ? k.fp16_decode : k.bf16_decode;
  fp16_widen_fn_ = k.fp16_decode;
  bf16_widen_fn_ = k.bf16_decode;
}

size_t CastCodec::max_encoded_size(size_t count) const {
  size_t payload = 0, total = 0;
  const bool fits = checked_mul(count, 2, &payload) && checked_add(kWireHeaderBytes, payload, &total);
  return fits ? total : SIZE_MAX;
}

bool CastCodec::header_for(size_t count, WireHeader* h) const {
  *h = WireHeader();
  h->codec = static_cast<uint8_t>(codec_);
  h->bits = 16;
  h->dtype = static_cast<uint8_t>(codec_ == QC_CODEC_FP16 ? QC_DTYPE_FLOAT16 : QC_DTYPE_BFLOAT16);
  h->count = count;
  h->payload_bytes = max_encoded_size(count) - kWireHeaderBytes;
  return true;
}

Status CastCodec::write_header(size_t count, uint8_t* dst, size_t capacity,
                               size_t* written) const {
  const size_t need = max_encoded_size(count);
  if (capacity < need) {
    return invalid_argument("argument 'capacity' (" + std::to_string(capacity) +
                            " bytes) is too small; the message needs " + std::to_string(need));
  }
  WireHeader h;
  header_for(count, &h);
  write_wire_header(h, dst);
  *written = need;
  return Status::ok();
}

Status CastCodec::encode(const float* src, size_t count, const RandomKey&, uint8_t* dst,
                         size_t capacity, size_t* written) const {
  QC_RETURN_IF_ERROR(write_header(count, dst, capacity, written));
  encode_fn_(src, count, dst + kWireHeaderBytes);
  return Status::ok();
}

Status CastCodec::encode_typed(const void* src, qc_dtype_t dtype, size_t count,
                               const RandomKey& key, uint8_t* dst, size_t capacity,
                               size_t* written) const {
  if (dtype != QC_DTYPE_FLOAT16 && dtype != QC_DTYPE_BFLOAT16) {
    return Codec::encode_typed(src, dtype, count, key, dst, capacity, written);
  }
  QC_RETURN_IF_ERROR(write_header(count, dst, capacity, written));
  const auto* in = static_cast<const uint8_t*>(src);
  uint8_t* out = dst + kWireHeaderBytes;
  // Widen a block into L1 with the exact SIMD decode of the input type, then
  // cast it: one pass over memory, and the bytes of widening everything
  // first. (Input of the codec's own type comes back unchanged, a signalling
  // NaN quieted.)
  const cpu::CastDecodeFn widen = dtype == QC_DTYPE_FLOAT16 ? fp16_widen_fn_ : bf16_widen_fn_;
  constexpr size_t kBlock = 2048;
  float block[kBlock];
  for (size_t i = 0; i < count; i += kBlock) {
    const size_t n = count - i < kBlock ? count - i : kBlock;
    widen(in + 2 * i, n, block, false);
    encode_fn_(block, n, out + 2 * i);
  }
  return Status::ok();
}

Status CastCodec::check_message(const uint8_t* src, size_t size, size_t count) const {
  WireHeader h;
  QC_RETURN_IF_ERROR(read_header_for(src, size, codec_, count, &h));
  const uint8_t wire_dtype =
      static_cast<uint8_t>(codec_ == QC_CODEC_FP16 ? QC_DTYPE_FLOAT16 : QC_DTYPE_BFLOAT16);
  if (h.bits != 16 || h.dtype != wire_dtype || h.payload_bytes != max_encoded_size(count) - kWireHeaderBytes) {
    return corrupt_data(std::string("codec ") + codec_name(codec_) + " message: " +
                        std::to_string(h.payload_bytes) + " payload bytes for " +
                        std::to_string(count) + " 16-bit values");
  }
  return Status::ok();
}

Status CastCodec::decode_impl(const uint8_t* src, size_t size, float* dst, size_t count,
                              bool accumulate) const {
  QC_RETURN_IF_ERROR(check_message(src, size, count));
  decode_fn_(src + kWireHeaderBytes, count, dst, accumulate);
  return Status::ok();
}

Status CastCodec::decode_typed(const uint8_t* src, size_t size, void* dst, size_t count,
                               qc_dtype_t dtype) const {
  if (dtype == QC_DTYPE_FLOAT32) return Codec::decode_typed(src, size, dst, count, dtype);
  QC_RETURN_IF_ERROR(check_message(src, size, count));
  const uint8_t* payload = src + kWireHeaderBytes;
  decode_in_blocks(count, 1, dtype, dst, [&](size_t first, size_t n, float* out) {
    decode_fn_(payload + 2 * first, n, out, false);
  });
  return Status::ok();
}

Status CastCodec::decode(const uint8_t* src, size_t size, float* dst, size_t count) const {
  return decode_impl(src, size, dst, count, false);
}

Status CastCodec::decode_accumulate(const uint8_t* src, size_t size, float* dst,
                                    size_t count) const {
  return decode_impl(src, size, dst, count, true);
}

}  // namespace qc
