#include "core/codecs/codec_block_scaled.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "core/checked_math.h"
#include "core/policy.h"
#include "cpu/bitstream.h"
#include "cpu/random.h"

namespace qc {
namespace {

constexpr float kNvfp4Range = 2688.0f;  // 448 (E4M3's largest) x 6 (E2M1's)
constexpr uint8_t kMxNanScale = 0xFF;    // E8M0 NaN
constexpr uint8_t kE4M3NanScale = 0x7F;  // E4M3 NaN

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

// z = t (+ e) block by block: scale, codes, and with e the residual
// z - decode(z) (0 where the decode is not finite: a NaN block).
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
  uint8_t* p = dst + kWireHeaderBytes;
  auto z_at = [t, e](size_t i) { return e != nullptr ? t[i] + e[i] : t[i]; };
  float S = 0.0f;
  if (nvfp4_) {
    float amax = 0.0f;  // over the finite values
    for (size_t i = 0; i < count; ++i) {
      const float a = std::fabs(z_at(i));
      if (a <= std::numeric_limits<float>::max() && a > amax) amax = a;
    }
    S = amax / kNvfp4Range;
    cpu::store_f32(p, S);
    p += 4;
  }
  const size_t blocks = groups_of(count, block_);
  uint8_t* scales = p;
  cpu::BitWriter codes(p + blocks);
  const cpu::RandomStream rng = cpu::make_random_stream(key.seed, key.rank, key.stream);
  float z[32];
  for (size_t b = 0; b < blocks; ++b) {
    const size_t first = b * block_;
    const size_t n = std::min(block_, count - first);
    bool finite = true;
    float amax = 0.0f;
    for (size_t j = 0; j < n; ++j) {
      z[j] = z_at(first + j);
      const float a = std::fabs(z[j]);
      if (!(a <= std::numeric_limits<float>::max())) finite = false;  // NaN or Inf
      else if (a > amax) amax = a;
    }
    // The block's scale byte and how q and the decoded value follow from z.
    uint8_t byte = 0;
    bool zero = true;  // every code 0
    float x = 0.0f;                  // nvfp4: q = z / x, decoded = value x
    cpu::Pow2Pair enc{1.0f, 1.0f};   // MX: q = z enc.first enc.second
    cpu::Pow2Pair dec{1.0f, 1.0f};   // MX: decoded = value dec.first dec.second
    if (!finite) {
      byte = nvfp4_ ? kE4M3NanScale : kMxNanScale;
    } else if (nvfp4_) {
      if (S > 0.0f) {
        byte = static_cast<uint8_t>(cpu::e4m3_scale_code((amax / 6.0f) / S));
        x = cpu::element_value(byte, cpu::kE4M3) * S;
        zero = !(x > 0.0f);
      }
    } else if (amax > 0.0f) {
      const int s = cpu::mx_scale_exponent(amax, format_);
      byte = static_cast<uint8_t>(s + 127);
      enc = cpu::pow2_pair(-s);
      dec = cpu::pow2_pair(s);
      zero = false;
    }
    scales[b] = byte;
    for (size_t j = 0; j < n; ++j) {
      uint32_t code = 0;
      float decoded = 0.0f;
      if (!zero) {
        const float q = nvfp4_ ? z[j] / x : (z[j] * enc.first) * enc.second;
        const float u = stochastic_ ? cpu::random_uniform(rng, key.element_offset + first + j) : 0.0f;
        code = cpu::round_element(q, format_, stochastic_, u);
        if (e != nullptr) {
          const float v = cpu::element_value(code, format_);
          decoded = nvfp4_ ? v * x : (v * dec.first) * dec.second;
        }
      }
      codes.put(code, format_.bits);
      if (e != nullptr) e[first + j] = finite ? z[j] - decoded : 0.0f;
    }
  }
  codes.flush();
  *written = need;
  return Status::ok();
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
  const uint8_t* p = src + kWireHeaderBytes;
  if (nvfp4_) {
    const float S = cpu::load_f32(p);
    if (!(S >= 0.0f && S <= std::numeric_limits<float>::max())) {
      return corrupt_data(what + "message scale " + std::to_string(S) +
                          " is not a finite value >= 0");
    }
    const size_t blocks = groups_of(count, block_);
    for (size_t b = 0; b < blocks; ++b) {
      if ((p[4 + b] & 0x80u) != 0) {
        return corrupt_data(what + "block " + std::to_string(b) + "'s scale is negative");
      }
    }
  }
  const size_t used_bits = (count % 8) * static_cast<size_t>(format_.bits) % 8;
  if (used_bits != 0 && (src[size - 1] >> used_bits) != 0) {
    return corrupt_data(what + "unused high bits of the last code byte are not zero");
  }
  return Status::ok();
}

Status BlockScaledCodec::decode_impl(const uint8_t* src, size_t size, float* dst, size_t count,
                                     bool accumulate) const {
  QC_RETURN_IF_ERROR(check_message(src, size, count));
  const uint8_t* p = src + kWireHeaderBytes;
  float S = 0.0f;
  if (nvfp4_) {
    S = cpu::load_f32(p);
    p += 4;
  }
  const size_t blocks = groups_of(count, block_);
  const uint8_t* codes = p + blocks;
  float value[256];  // every code's element value
  for (uint32_t c = 0; c < (1u << format_.bits); ++c) value[c] = cpu::element_value(c, format_);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (size_t b = 0; b < blocks; ++b) {
    const size_t first = b * block_;
    const size_t n = std::min(block_, count - first);
    const uint8_t byte = p[b];
    float x = 0.0f;
    cpu::Pow2Pair dec{1.0f, 1.0f};
    bool is_nan = false;
    if (nvfp4_) {
      x = cpu::element_value(byte, cpu::kE4M3) * S;  // NaN for byte 0x7F
    } else if (byte == kMxNanScale) {
      is_nan = true;
    } else {
      dec = cpu::pow2_pair(static_cast<int>(byte) - 127);
    }
    for (size_t j = 0; j < n; ++j) {
      const float v = value[cpu::get_code(codes, first + j, format_.bits)];
      const float d = is_nan ? nan : nvfp4_ ? v * x : (v * dec.first) * dec.second;
      dst[first + j] = accumulate ? dst[first + j] + d : d;
    }
  }
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
