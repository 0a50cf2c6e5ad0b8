#include "core/codecs/codec.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/codecs/codec_cast.h"
#include "core/codecs/codec_global.h"
#include "core/codecs/codec_none.h"
#include "core/codecs/codec_quantized.h"
#include "core/codecs/codec_topk.h"
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

Status make_codec(const qc_policy_t& policy, qc_dtype_t dtype, std::unique_ptr<Codec>* codec) {
  // The same check as every entry that takes a policy, so a collective
  // refuses exactly what qc_set_layer_policy refuses (and no codec is built
  // from fields it cannot use).
  QC_RETURN_IF_ERROR(validate_policy(policy, "policy"));
  switch (policy.codec) {
    case QC_CODEC_NONE:
      *codec = std::make_unique<CodecNone>(dtype);
      return Status::ok();
    case QC_CODEC_FP16:
    case QC_CODEC_BF16:
      *codec = std::make_unique<CastCodec>(policy.codec);
      return Status::ok();
    case QC_CODEC_MINMAX:
    case QC_CODEC_QSGD:
    case QC_CODEC_ONEBIT:
      *codec = std::make_unique<QuantizedCodec>(policy.codec, policy.bits, policy.bucket_size,
                                                policy.rounding == QC_ROUND_STOCHASTIC);
      return Status::ok();
    case QC_CODEC_GLOBAL_LINEAR:
    case QC_CODEC_GLOBAL_EXP:
      *codec = std::make_unique<GlobalCodec>(policy.codec, policy.bits,
                                             policy.rounding == QC_ROUND_STOCHASTIC);
      return Status::ok();
    case QC_CODEC_TOPK:
      *codec = std::make_unique<TopkCodec>(policy.topk_ratio);
      return Status::ok();
    default:
      return unsupported(std::string("codec '") + codec_name(policy.codec) +
                         "' is not implemented in this build of qc");
  }
}

Status make_codec_for_header(const WireHeader& header, std::unique_ptr<Codec>* codec) {
  // The header is untrusted: its fields go through the same validation as a
  // user's policy, and a failure is a corrupt message, not a bad argument.
  qc_policy_t policy = default_policy();
  policy.codec = static_cast<qc_codec_t>(header.codec);
  if (header.codec != QC_CODEC_NONE && header.codec != QC_CODEC_FP16 &&
      header.codec != QC_CODEC_BF16) {
    policy.bits = header.bits;
    policy.bucket_size = header.bucket_size > 0x7fffffffu ? 0 : static_cast<int>(header.bucket_size);
    policy.rounding = (header.flags & kWireFlagStochastic) ? QC_ROUND_STOCHASTIC
                                                           : QC_ROUND_NEAREST_EVEN;
    if (header.codec == QC_CODEC_ONEBIT && header.bits == 1) policy.bits = 1;
    // topk messages carry bits 32 (TopkCodec::decode checks it) and k in the
    // payload; the policy's bits and topk_ratio do not matter for decoding.
    if (header.codec == QC_CODEC_TOPK) policy.bits = default_policy().bits;
  }
  Status valid = validate_policy(policy, "message");
  if (!valid) return corrupt_data("encoded message header is invalid: " + valid.message());
  return make_codec(policy, static_cast<qc_dtype_t>(header.dtype), codec);
}

Status Codec::encode_reusing_scales(const float* src, float* e, size_t count,
                                    const RandomKey& key, const uint8_t*, size_t, uint8_t* dst,
                                    size_t capacity, size_t* written) const {
  if (e != nullptr) return encode_error_compensated(src, e, count, key, dst, capacity, written);
  return encode(src, count, key, dst, capacity, written);
}

}  // namespace qc
