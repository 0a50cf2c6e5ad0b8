#include "core/codecs/codec_block_scaled.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "core/checked_math.h"
#include "core/policy.h"
#include "cpu/bitstream.h"
#include "cpu/codec_kernels.h"
#include "cpu/random.h"

namespace qc {
namespace {

const cpu::ElementFormat& format_of(qc_codec_t codec) {
  switch (codec) {
    case QC_CODEC_MXFP8: return cpu::kE4M3;
    case QC_CODEC_MXFP8_E5M2: return cpu::kE5M2;
    case QC_CODEC_MXFP6: return cpu::kE2M3;
    case QC_CODEC_MXFP6_E3M2: return cpu::kE3M2;
    case QC_CODEC_MXINT8: return cpu::kInt8;
    default: return cpu::kE2M1;  // mxfp4, nvfp4
  }
}

}  // namespace

bool is_block_scaled(qc_codec_t codec) {
  switch (codec) {
    case QC_CODEC_MXFP8:
    case QC_CODEC_MXFP8_E5M2:
    case QC_CODEC_MXFP6:
    case QC_CODEC_MXFP6_E3M2:
    case QC_CODEC_MXFP4:
    case QC_CODEC_MXINT8:
    case QC_CODEC_NVFP4: return true;
    default: return false;
  }
}

BlockScaledCodec::BlockScaledCodec(qc_codec_t codec, bool stochastic)
    : codec_(codec),
      format_(format_of(codec)),
      block_(codec == QC_CODEC_NVFP4 ? 16 : 32),
      nvfp4_(codec == QC_CODEC_NVFP4),
      stochastic_(stochastic) {}

size_t BlockScaledCodec::scale_bytes(size_t count) const {
  return (nvfp4_ ? 4 : 0) + groups_of(count, block_);
}

size_t BlockScaledCodec::max_encoded_size(size_t count) const {
  size_t codes = 0, total = 0;
  const bool fits = checked_bit_bytes(count, static_cast<size_t>(format_.bits), &codes) &&
                    checked_sum({kWireHeaderBytes, scale_bytes(count), codes}, &total);
  return fits ? total : SIZE_MAX;
}

bool BlockScaledCodec::header_for(size_t count, WireHeader* h) const {
  const size_t size = max_encoded_size(count);
  if (size == SIZE_MAX) return false;
  *h = WireHeader();
  h->codec = static_cast<uint8_t>(codec_);
  h->bits = static_cast<uint8_t>(format_.bits);
  h->bucket_size = static_cast<uint32_t>(block_);
  h->flags = stochastic_ ? kWireFlagStochastic : 0u;
  h->count = count;
  h->payload_bytes = size - kWireHeaderBytes;
  return true;
}

Status BlockScaledCodec::encode(const float* src, size_t count, const RandomKey& key,
                                uint8_t* dst, size_t capacity, size_t* written) const {
  return encode_impl(src, nullptr, count, key, dst, capacity, written);
}

Status BlockScaledCodec::encode_error_compensated(const float* t, float* e, size_t count,
                                                  const RandomKey& key, uint8_t* dst,
                                                  size_t capacity, size_t* written) const {
  return encode_impl(t, e, count, key, dst, capacity, written);
}

// z = t (+ e): the kernel writes the payload (and e: z - decode(z)).
Status BlockScaledCodec::encode_impl(const float* t, float* e, size_t count,
                                     const RandomKey& key, uint8_t* dst, size_t capacity,
                                     size_t* written) const {
  WireHeader h;
  if (!header_for(count, &h)) {
    return invalid_argument("argument 'count' (" + std::to_string(count) + ") is too large");
  }
  const size_t need = kWireHeaderBytes + h.payload_bytes;
  if (capacity < need) {
    return invalid_argument("argument 'capacity' (" + std::to_string(capacity) +
                            " bytes) is too small; the message needs " + std::to_string(need));
  }
  write_wire_header(h, dst);
  cpu::BlockArgs a = block_kernel_args(codec_, stochastic_);
  a.rng = cpu::make_random_stream(key.seed, key.rank, key.stream);
  a.index_base = key.element_offset;
  cpu::kernels().block_encode(t, e, count, a, dst + kWireHeaderBytes);
  *written = need;
  return Status::ok();
}

cpu::BlockArgs block_kernel_args(qc_codec_t codec, bool stochastic) {
  cpu::BlockArgs a;
  a.format = format_of(codec);
  a.nvfp4 = codec == QC_CODEC_NVFP4;
  a.block = a.nvfp4 ? 16 : 32;
  a.stochastic = stochastic;
  return a;
}

Status BlockScaledCodec::check_message(const uint8_t* src, size_t size, size_t count) const {
  WireHeader h;
  QC_RETURN_IF_ERROR(read_header_for(src, size, codec_, count, &h));
  const std::string what = std::string("codec ") + codec_name(codec_) + " message: ";
  if (h.bits != format_.bits || h.bucket_size != block_) {
    return corrupt_data(what + "bits " + std::to_string(h.bits) + ", block " +
                        std::to_string(h.bucket_size) + " where the format has bits " +
                        std::to_string(format_.bits) + ", block " + std::to_string(block_));
  }
  // Sizes are re-derived from the format, so a lying header cannot make the
  // decoder read past the message.
  const size_t want = max_encoded_size(count) - kWireHeaderBytes;
  if (h.payload_bytes != want) {
    return corrupt_data(what + std::to_string(h.payload_bytes) + " payload bytes where " +
                        std::to_string(count) + " elements need " + std::to_string(want));
  }
  return check_block_scaled_payload(codec_, count, src + kWireHeaderBytes, src[size - 1]);
}

Status check_block_scaled_payload(qc_codec_t codec, size_t count, const uint8_t* scales,
                                  uint8_t last_byte) {
  const std::string what = std::string("codec ") + codec_name(codec) + " message: ";
  const cpu::BlockArgs a = block_kernel_args(codec, false);
  if (a.nvfp4) {
    const float S = cpu::load_f32(scales);
    if (!(S >= 0.0f && S <= std::numeric_limits<float>::max())) {
      return corrupt_data(what + "message scale " + std::to_string(S) +
                          " is not a finite value >= 0");
    }
    const size_t blocks = groups_of(count, a.block);
    for (size_t b = 0; b < blocks; ++b) {
      if ((scales[4 + b] & 0x80u) != 0) {
        return corrupt_data(what + "block " + std::to_string(b) + "'s scale is negative");
      }
    }
  }
  const size_t used_bits = (count % 8) * static_cast<size_t>(a.format.bits) % 8;
  if (used_bits != 0 && (last_byte >> used_bits) != 0) {
    return corrupt_data(what + "unused high bits of the last code byte are not zero");
  }
  return Status::ok();
}

Status BlockScaledCodec::decode_impl(const uint8_t* src, size_t size, float* dst, size_t count,
                                     bool accumulate) const {
  QC_RETURN_IF_ERROR(check_message(src, size, count));
  cpu::kernels().block_decode(src + kWireHeaderBytes, count, block_kernel_args(codec_, stochastic_), dst, accumulate);
  return Status::ok();
}

Status BlockScaledCodec::decode(const uint8_t* src, size_t size, float* dst, size_t count) const {
  return decode_impl(src, size, dst, count, false);
}

Status BlockScaledCodec::decode_accumulate(const uint8_t* src, size_t size, float* dst,
                                           size_t count) const {
  return decode_impl(src, size, dst, count, true);
}

}  // namespace qc
