// make_codec and make_codec_for_header (declared in codecs/codec.h): the one
// place that knows every codec, apart from the interface they implement so
// that codec.h and the codecs do not include each other.
#include <memory>
#include <string>

#include "core/codecs/codec.h"
#include "core/codecs/codec_block_scaled.h"
#include "core/codecs/codec_cast.h"
#include "core/codecs/codec_global.h"
#include "core/codecs/codec_none.h"
#include "core/codecs/codec_quantized.h"
#include "core/codecs/codec_topk.h"
#include "core/policy.h"

namespace qc {

Status make_codec(const qc_policy_t& policy, qc_dtype_t dtype, std::unique_ptr<Codec>* codec) {
  // The same check as every entry that takes a policy, so a collective
  // refuses exactly what qc_comm_set_layer_policy refuses (and no codec is built
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
                                                rounds_stochastically(policy));
      return Status::ok();
    case QC_CODEC_GLOBAL_LINEAR:
    case QC_CODEC_GLOBAL_EXP:
      *codec = std::make_unique<GlobalCodec>(policy.codec, policy.bits,
                                             rounds_stochastically(policy),
                                             scales_by_max_abs(policy));
      return Status::ok();
    case QC_CODEC_TOPK:
      *codec = std::make_unique<TopkCodec>(policy.topk_ratio);
      return Status::ok();
    default:
      if (is_block_scaled(policy.codec)) {
        *codec = std::make_unique<BlockScaledCodec>(policy.codec, rounds_stochastically(policy));
        return Status::ok();
      }
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
    policy.scale = (header.flags & kWireFlagMaxAbsScale) ? QC_SCALE_MAX_ABS : QC_SCALE_L2;
    if (header.codec == QC_CODEC_ONEBIT && header.bits == 1) policy.bits = 1;
    // topk messages carry bits 32 (TopkCodec::decode checks it) and k in the
    // payload; the policy's bits and topk_ratio do not matter for decoding.
    if (header.codec == QC_CODEC_TOPK) policy.bits = default_policy().bits;
  }
  Status valid = validate_policy(policy, "message");
  if (!valid) return corrupt_data("encoded message header is invalid: " + valid.message());
  return make_codec(policy, static_cast<qc_dtype_t>(header.dtype), codec);
}

}  // namespace qc
