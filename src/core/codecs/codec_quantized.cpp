#include "core/codecs/codec_quantized.h"

#include <string>

#include "core/checked_math.h"
#include "core/policy.h"

namespace qc {

QuantizedCodec::QuantizedCodec(qc_codec_t codec, int bits, int bucket_size, bool stochastic)
    : codec_(codec),
      bits_(codec == QC_CODEC_ONEBIT ? 1 : bits),
      bucket_(static_cast<size_t>(bucket_size)),
      stochastic_(stochastic && codec != QC_CODEC_ONEBIT),
      meta_floats_(codec == QC_CODEC_MINMAX ? 2 : 1) {
  const cpu::KernelTable& k = cpu::kernels();
  switch (codec) {
    case QC_CODEC_MINMAX:
      encode_fn_ = k.minmax_encode;
      decode_fn_ = k.minmax_decode;
      break;
    case QC_CODEC_QSGD:
      encode_fn_ = k.qsgd_encode;
      decode_fn_ = k.qsgd_decode;
      break;
    default:
      encode_fn_ = k.onebit_encode;
      decode_fn_ = k.onebit_decode;
      break;
  }
}

size_t QuantizedCodec::meta_bytes(size_t count) const {
  size_t bytes = 0;
  return checked_mul(groups_of(count, bucket_), meta_floats_ * 4, &bytes) ? bytes : SIZE_MAX;
}

size_t QuantizedCodec::max_encoded_size(size_t count) const {
  size_t codes = 0, total = 0;
  const bool fits = checked_bit_bytes(count, static_cast<size_t>(bits_), &codes) &&
                    checked_sum({kWireHeaderBytes, meta_bytes(count), codes}, &total);
  return fits ? total : SIZE_MAX;
}

bool QuantizedCodec::header_for(size_t count, WireHeader* h) const {
  *h = WireHeader();
  h->codec = static_cast<uint8_t>(codec_);
  h->bits = static_cast<uint8_t>(bits_);
  h->bucket_size = static_cast<uint32_t>(bucket_);
  h->flags = stochastic_ ? kWireFlagStochastic : 0;
  h->count = count;
  h->payload_bytes = max_encoded_size(count) - kWireHeaderBytes;
  return true;
}

Status QuantizedCodec::encode_impl(const void* src, qc_dtype_t dtype, float* e, size_t count,
                                   const RandomKey& key, uint8_t* dst, size_t capacity,
                                   size_t* written, const uint8_t* reuse_meta) const {
  const size_t need = max_encoded_size(count);
  if (capacity < need) {
    return invalid_argument("argument 'capacity' (" + std::to_string(capacity) +
                            " bytes) is too small; the message needs " + std::to_string(need));
  }
  WireHeader h;
  header_for(count, &h);
  write_wire_header(h, dst);
  cpu::QuantArgs args;
  args.bits = bits_;
  args.bucket = bucket_;
  args.stochastic = stochastic_;
  args.rng = cpu::make_random_stream(key.seed, key.rank, key.stream);
  args.index_base = key.element_offset;
  args.input_dtype = dtype;  // the kernel widens 16-bit input as it reads it
  args.reuse_meta = reuse_meta;
  uint8_t* meta = dst + kWireHeaderBytes;
  encode_fn_(static_cast<const float*>(src), e, count, args, meta, meta + meta_bytes(count));
  *written = need;
  return Status::ok();
}

Status QuantizedCodec::encode(const float* src, size_t count, const RandomKey& key, uint8_t* dst,
                              size_t capacity, size_t* written) const {
  return encode_impl(src, QC_DTYPE_FLOAT32, nullptr, count, key, dst, capacity, written);
}

Status QuantizedCodec::encode_typed(const void* src, qc_dtype_t dtype, size_t count,
                                    const RandomKey& key, uint8_t* dst, size_t capacity,
                                    size_t* written) const {
  if (dtype != QC_DTYPE_FLOAT32 && dtype != QC_DTYPE_FLOAT16 && dtype != QC_DTYPE_BFLOAT16) {
    return Codec::encode_typed(src, dtype, count, key, dst, capacity, written);
  }
  return encode_impl(src, dtype, nullptr, count, key, dst, capacity, written);
}

Status QuantizedCodec::encode_error_compensated(const float* t, float* e, size_t count,
                                                const RandomKey& key, uint8_t* dst,
                                                size_t capacity, size_t* written) const {
  return encode_impl(t, QC_DTYPE_FLOAT32, e, count, key, dst, capacity, written);
}

Status QuantizedCodec::encode_reusing_scales(const float* src, float* e, size_t count,
                                             const RandomKey& key, const uint8_t* previous,
                                             size_t previous_size, uint8_t* dst, size_t capacity,
                                             size_t* written) const {
  // The previous message must be one of ours for this count, checked as a
  // decoder would (a stale or foreign one just means fresh scales).
  WireHeader h;
  const bool fits = previous != nullptr &&
                    read_header_for(previous, previous_size, codec_, count, &h) &&
                    h.bits == bits_ && h.bucket_size == bucket_ &&
                    h.payload_bytes == max_encoded_size(count) - kWireHeaderBytes;
  return encode_impl(src, QC_DTYPE_FLOAT32, e, count, key, dst, capacity, written,
                     fits ? previous + kWireHeaderBytes : nullptr);
}

Status QuantizedCodec::check_message(const uint8_t* src, size_t size, size_t count) const {
  WireHeader h;
  QC_RETURN_IF_ERROR(read_header_for(src, size, codec_, count, &h));
  if (h.bits != bits_ || h.bucket_size != bucket_) {
    return mismatch("message has bits " + std::to_string(h.bits) + ", bucket " +
                    std::to_string(h.bucket_size) + "; expected bits " + std::to_string(bits_) +
                    ", bucket " + std::to_string(bucket_));
  }
  // Sizes are re-derived from this codec's own parameters, so a lying
  // header cannot make the kernel read past the message.
  if (h.payload_bytes != max_encoded_size(count) - kWireHeaderBytes) {
    return corrupt_data(std::string("codec ") + codec_name(codec_) + " message: " +
                        std::to_string(h.payload_bytes) + " payload bytes where " +
                        std::to_string(count) + " elements need " +
                        std::to_string(max_encoded_size(count) - kWireHeaderBytes));
  }
  return Status::ok();
}

Status QuantizedCodec::decode_impl(const uint8_t* src, size_t size, float* dst, size_t count,
                                   bool accumulate) const {
  QC_RETURN_IF_ERROR(check_message(src, size, count));
  const uint8_t* meta = src + kWireHeaderBytes;
  decode_fn_(meta, meta + meta_bytes(count), count, bits_, bucket_, dst, accumulate);
  return Status::ok();
}

Status QuantizedCodec::decode_typed(const uint8_t* src, size_t size, void* dst, size_t count,
                                    qc_dtype_t dtype) const {
  if (dtype == QC_DTYPE_FLOAT32) return Codec::decode_typed(src, size, dst, count, dtype);
  QC_RETURN_IF_ERROR(check_message(src, size, count));
  const uint8_t* meta = src + kWireHeaderBytes;
  const uint8_t* codes = meta + meta_bytes(count);
  // A piece starts on a bucket (its scales) and on a byte of the codes:
  // at most 8 buckets.
  size_t granule = bucket_;
  while (granule * static_cast<size_t>(bits_) % 8 != 0) granule += bucket_;
  const size_t meta_per_bucket = meta_floats_ * 4;
  decode_in_blocks(count, granule, dtype, dst, [&](size_t first, size_t n, float* out) {
    decode_fn_(meta + first / bucket_ * meta_per_bucket, codes + first * bits_ / 8, n, bits_,
               bucket_, out, false);
  });
  return Status::ok();
}

Status QuantizedCodec::decode(const uint8_t* src, size_t size, float* dst, size_t count) const {
  return decode_impl(src, size, dst, count, false);
}

Status QuantizedCodec::decode_accumulate(const uint8_t* src, size_t size, float* dst,
                                         size_t count) const {
  return decode_impl(src, size, dst, count, true);
}

}  // namespace qc
