#include "core/codecs/codec.h"

#include <string>
#include <vector>

#include "core/codecs/codec_none.h"
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
    default:
      return unsupported(std::string("codec '") + codec_name(policy.codec) +
                         "' is not implemented in this build of qc (only 'none' is)");
  }
}

Status make_codec_for_header(const WireHeader& header, std::unique_ptr<Codec>* codec) {
  qc_policy_t policy = default_policy();
  policy.codec = static_cast<qc_codec_t>(header.codec);
  return make_codec(policy, static_cast<qc_dtype_t>(header.dtype), codec);
}

}  // namespace qc
