#include "core/codecs/codec_global.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "core/byte_order.h"
#include "core/checked_math.h"
#include "core/policy.h"
#include "cpu/bitstream.h"
#include "cpu/codec_kernels.h"

namespace qc {
namespace {

using cpu::load_f32;
using cpu::store_f32;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

}  // namespace

GlobalCodec::GlobalCodec(qc_codec_t codec, int bits, bool stochastic, bool max_abs_scale)
    : codec_(codec), bits_(bits), stochastic_(stochastic), max_abs_scale_(max_abs_scale) {}

Status GlobalCodec::set_global_norm(float norm) {
  if (norm < 0.0f) {
    return invalid_argument("the agreed global norm is " + std::to_string(norm) +
                            "; a norm is >= 0 (or NaN/Inf for a non-finite gradient)");
  }
  has_global_norm_ = true;
  global_norm_ = norm == 0.0f ? 0.0f : norm;  // -0 -> +0
  return Status::ok();
}

float GlobalCodec::sum_of_squares(const float* t, const float* e, size_t count) {
  return cpu::kernels().global_sum_of_squares(t, e, count);
}

float GlobalCodec::max_abs(const float* t, const float* e, size_t count) {
  return cpu::kernels().global_max_abs(t, e, count);
}

size_t GlobalCodec::payload_bytes(size_t count) const {
  size_t codes = 0, payload = 0;
  const bool fits = checked_bit_bytes(count, static_cast<size_t>(bits_), &codes) &&
                    checked_add(4, codes, &payload);
  return fits ? payload : SIZE_MAX;
}

size_t GlobalCodec::max_encoded_size(size_t count) const {
  size_t total = 0;
  return checked_add(kWireHeaderBytes, payload_bytes(count), &total) ? total : SIZE_MAX;
}

bool GlobalCodec::header_for(size_t count, WireHeader* h) const {
  *h = WireHeader();
  h->codec = static_cast<uint8_t>(codec_);
  h->bits = static_cast<uint8_t>(bits_);
  h->bucket_size = 1;  // no buckets; 1 keeps the header a valid policy
  h->flags = (stochastic_ ? kWireFlagStochastic : 0u) | (max_abs_scale_ ? kWireFlagMaxAbsScale : 0u);
  h->count = count;
  h->payload_bytes = payload_bytes(count);
  return true;
}

Status GlobalCodec::encode_impl(const float* src, float* e, size_t count, const RandomKey& key,
                                uint8_t* dst, size_t capacity, size_t* written) const {
  const size_t need = max_encoded_size(count);
  if (capacity < need) {
    return invalid_argument("argument 'capacity' (" + std::to_string(capacity) +
                            " bytes) is too small; the message needs " + std::to_string(need));
  }
  // The passes run in the CPU kernel tables (cpu/codec_kernels.h); every
  // ISA writes the same bytes and residuals.
  const cpu::KernelTable& kernels = cpu::kernels();
  float norm;
  bool finite;
  if (has_global_norm_) {
    norm = global_norm_;
    // max-abs is NaN or Inf exactly when some z is.
    finite = std::isfinite(norm) && std::isfinite(kernels.global_max_abs(src, e, count));
  } else {
    // A NaN or Inf anywhere (or an overflowing sum) makes the norm non-finite.
    norm = max_abs_scale_ ? cpu::global_max_abs_scale(kernels.global_max_abs(src, e, count))
                          : std::sqrt(kernels.global_sum_of_squares(src, e, count));
    finite = std::isfinite(norm);
  }

  WireHeader h;
  header_for(count, &h);
  write_wire_header(h, dst);
  uint8_t* meta = dst + kWireHeaderBytes;
  uint8_t* codes = meta + 4;

  if (!finite) {
    store_f32(meta, kNaN);
    std::memset(codes, 0, cpu::codes_bytes(count, bits_));
    if (e != nullptr)
      for (size_t i = 0; i < count; ++i) e[i] = 0.0f;  // nothing sensible to carry forward
    *written = need;
    return Status::ok();
  }
  store_f32(meta, norm);

  const bool exponential = codec_ == QC_CODEC_GLOBAL_EXP;
  cpu::QuantArgs args;
  args.bits = bits_;
  args.stochastic = stochastic_;
  args.rng = cpu::make_random_stream(key.seed, key.rank, key.stream);
  args.index_base = key.element_offset;
  kernels.global_encode(src, e, count, args, exponential, norm, codes);
  const int Mi = (1 << (bits_ - 1)) - 1;
  // Residual hygiene (cpu/codec_kernels.h), the message one bucket: drop
  // residuals whose squares could overflow the next norm by themselves.
  if (e != nullptr &&
      !cpu::keeps_residuals(cpu::global_residual_gauge(exponential, norm, Mi),
                            cpu::global_residual_limit(count))) {
    std::fill(e, e + count, 0.0f);
  }
  *written = need;
  return Status::ok();
}

Status GlobalCodec::encode(const float* src, size_t count, const RandomKey& key, uint8_t* dst,
                           size_t capacity, size_t* written) const {
  return encode_impl(src, nullptr, count, key, dst, capacity, written);
}

Status GlobalCodec::encode_error_compensated(const float* t, float* e, size_t count,
                                             const RandomKey& key, uint8_t* dst,
                                             size_t capacity, size_t* written) const {
  return encode_impl(t, e, count, key, dst, capacity, written);
}

Status GlobalCodec::check_message(const uint8_t* src, size_t size, size_t count) const {
  WireHeader h;
  QC_RETURN_IF_ERROR(read_header_for(src, size, codec_, count, &h));
  if (h.bits != bits_) {
    return mismatch("message has bits " + std::to_string(h.bits) + "; expected bits " +
                    std::to_string(bits_));
  }
  if (h.bucket_size != 1) {
    return corrupt_data(std::string("codec ") + codec_name(codec_) + " message: bucket size " +
                        std::to_string(h.bucket_size) + " where a global codec writes 1");
  }
  // Sizes are re-derived from this codec's own parameters, so a lying
  // header cannot make the decoder read past the message.
  const size_t want = payload_bytes(count);
  if (h.payload_bytes != want) {
    return corrupt_data(std::string("codec ") + codec_name(codec_) + " message: " +
                        std::to_string(h.payload_bytes) + " payload bytes where " +
                        std::to_string(count) + " elements need " + std::to_string(want));
  }
  const uint8_t* meta = src + kWireHeaderBytes;
  const uint8_t* codes = meta + 4;
  const float norm = load_f32(meta);
  if (!std::isnan(norm) && !(norm >= 0.0f && std::isfinite(norm))) {
    return corrupt_data(std::string("codec ") + codec_name(codec_) + " message: norm " +
                        std::to_string(norm) + " is neither NaN nor a finite value >= 0");
  }
  const size_t used_bits = (count * static_cast<size_t>(bits_)) % 8;
  if (used_bits != 0 && (codes[want - 5] >> used_bits) != 0) {
    return corrupt_data(std::string("codec ") + codec_name(codec_) +
                        " message: unused high bits of the last code byte are not zero");
  }
  return Status::ok();
}

Status GlobalCodec::decode_impl(const uint8_t* src, size_t size, float* dst, size_t count,
                                bool accumulate) const {
  QC_RETURN_IF_ERROR(check_message(src, size, count));
  const uint8_t* meta = src + kWireHeaderBytes;
  cpu::kernels().global_decode(meta + 4, count, bits_, codec_ == QC_CODEC_GLOBAL_EXP,
                               load_f32(meta), dst, accumulate);
  return Status::ok();
}

Status GlobalCodec::decode_typed(const uint8_t* src, size_t size, void* dst, size_t count,
                                 qc_dtype_t dtype) const {
  if (dtype == QC_DTYPE_FLOAT32) return Codec::decode_typed(src, size, dst, count, dtype);
  QC_RETURN_IF_ERROR(check_message(src, size, count));
  const uint8_t* meta = src + kWireHeaderBytes;
  const uint8_t* codes = meta + 4;
  const float norm = load_f32(meta);
  const bool exponential = codec_ == QC_CODEC_GLOBAL_EXP;
  // 8 codes end on a byte, whatever the width.
  decode_in_blocks(count, 8, dtype, dst, [&](size_t first, size_t n, float* out) {
    cpu::kernels().global_decode(codes + first * bits_ / 8, n, bits_, exponential, norm, out,
                                 false);
  });
  return Status::ok();
}

Status GlobalCodec::codes_of(const uint8_t* src, size_t size, size_t count, float norm,
                             const uint8_t** codes) const {
  QC_RETURN_IF_ERROR(check_message(src, size, count));
  const float theirs = load_f32(src + kWireHeaderBytes);
  if (std::memcmp(&theirs, &norm, sizeof norm) != 0) {
    return mismatch(std::string("codec ") + codec_name(codec_) + " message: norm " +
                    std::to_string(theirs) + " where the ranks agreed on " +
                    std::to_string(norm));
  }
  *codes = src + kWireHeaderBytes + 4;
  return Status::ok();
}

Status GlobalCodec::decode(const uint8_t* src, size_t size, float* dst, size_t count) const {
  return decode_impl(src, size, dst, count, false);
}

Status GlobalCodec::decode_accumulate(const uint8_t* src, size_t size, float* dst,
                                      size_t count) const {
  return decode_impl(src, size, dst, count, true);
}

}  // namespace qc
