#include "core/codecs/codec.h"

#include <string>
#include <vector>

#include "core/codecs/codec_cast.h"
#include "core/codecs/codec_none.h"
#include "core/codecs/codec_quantized.h"
#include "core/policy.h"

namespace qc {

Status Codec::encode_error_compensated(const float* t, float* e, size_t count,
                                       const RandomKey& key, uint8_t* dst, size_t capacity,
                                       size_t* written) const {
  std::vector<float> z(count);
  for (size_t i = 0; i < count; ++i) z[i] = t[i] + e[i];
  QC_RETURN_IF_ERROR(encode(z.data(), count, key, dst, capacity, written));
  QC_RETURN_IF_ERROR(decode(dst, *written, e, count));
  for (size_t i = 0; i < count; ++i) e[i] = z[i] - e[i];
  return Status::ok();
}

Status make_codec(const qc_policy_t& policy, qc_dtype_t dtype, std::unique_ptr<Codec>* codec) {
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
  }
  Status valid = validate_policy(policy, "message");
  if (!valid) return corrupt_data("encoded message header is invalid: " + valid.message());
  return make_codec(policy, static_cast<qc_dtype_t>(header.dtype), codec);
}

}  // namespace qc
