#include "core/policy.h"

#include <cmath>

#include "core/log.h"
#include "core/struct_io.h"

namespace qc {

qc_policy_t default_policy() {
  qc_policy_t p = QC_POLICY_INIT;
  return p;
}

qc_comm_config_t default_comm_config() {
  qc_comm_config_t c = QC_COMM_CONFIG_INIT;
  return c;
}

namespace {
Status bad_field(const char* arg, const char* field, const std::string& value, const char* allowed) {
  return invalid_argument(std::string("argument '") + arg + "': field '" + field + "' is " + value +
                          "; " + allowed);
}
}  // namespace

int min_bits_for(qc_codec_t codec) {
  // These spend one bit on the sign: with one bit there are no magnitude
  // levels (M = 2^(bits-1) - 1 = 0), and their encoders would divide by it.
  switch (codec) {
    case QC_CODEC_QSGD:
    case QC_CODEC_GLOBAL_LINEAR:
    case QC_CODEC_GLOBAL_EXP: return 2;
    default: return 1;
  }
}

Status validate_policy(const qc_policy_t& p, const char* arg) {
  const int codec = static_cast<int>(p.codec);
  if (codec < QC_CODEC_NONE || codec > QC_CODEC_NVFP4)
    return bad_field(arg, "codec", std::to_string(codec), "expected a qc_codec_t value (0..15)");
  if (p.bits < 1 || p.bits > 8)
    return bad_field(arg, "bits", std::to_string(p.bits), "expected 1..8");
  if (p.bits < min_bits_for(p.codec)) {
    const std::string needs = std::string("codec ") + codec_name(p.codec) + " needs " +
                              std::to_string(min_bits_for(p.codec)) +
                              "..8 (a sign bit plus magnitude levels)";
    return bad_field(arg, "bits", std::to_string(p.bits), needs.c_str());
  }
  if (p.bucket_size < 1)
    return bad_field(arg, "bucket_size", std::to_string(p.bucket_size), "expected >= 1");
  const int rounding = static_cast<int>(p.rounding);
  if (rounding < QC_ROUND_NEAREST_EVEN || rounding > QC_ROUND_AUTO)
    return bad_field(arg, "rounding", std::to_string(rounding), "expected a qc_rounding_t value (0..2)");
  const int algorithm = static_cast<int>(p.algorithm);
  if (algorithm < QC_ALGO_AUTO || algorithm > QC_ALGO_NATIVE)
    return bad_field(arg, "algorithm", std::to_string(algorithm),
                     "expected a qc_algorithm_t value (0..5)");
  if (p.error_feedback != 0 && p.error_feedback != 1)
    return bad_field(arg, "error_feedback", std::to_string(p.error_feedback), "expected 0 or 1");
  if (p.group_size < 1)
    return bad_field(arg, "group_size", std::to_string(p.group_size), "expected >= 1");
  if (!(p.topk_ratio > 0.0f && p.topk_ratio <= 1.0f))
    return bad_field(arg, "topk_ratio", std::to_string(p.topk_ratio), "expected a ratio in (0, 1]");
  const int scale = static_cast<int>(p.scale);
  if (scale < QC_SCALE_AUTO || scale > QC_SCALE_MAX_ABS)
    return bad_field(arg, "scale", std::to_string(scale), "expected a qc_scale_t value (0..2)");
  if (p.scale_update_period < 1)
    return bad_field(arg, "scale_update_period", std::to_string(p.scale_update_period),
                     "expected >= 1");
  return Status::ok();
}

Status read_policy(const qc_policy_t* user, const char* arg, qc_policy_t* out) {
  QC_RETURN_IF_ERROR(read_struct(user, kPolicyV0Size, default_policy(), arg, "qc_policy_t", out));
  return validate_policy(*out, arg);
}

bool scales_by_max_abs(const qc_policy_t& p) { return p.scale != QC_SCALE_L2; }

bool rounds_stochastically(const qc_policy_t& p) {
  if (p.rounding == QC_ROUND_AUTO)
    return p.codec == QC_CODEC_GLOBAL_LINEAR || p.codec == QC_CODEC_GLOBAL_EXP;
  return p.rounding == QC_ROUND_STOCHASTIC;
}

qc_policy_t effective_policy(const qc_policy_t& policy, size_t message_bytes) {
  qc_policy_t p = policy;
  if (message_bytes < p.min_compress_bytes && p.codec != QC_CODEC_NONE) {
    p.codec = QC_CODEC_NONE;
    // Native was asked for the compressed codec's shared grid (global_linear
    // / global_exp). The uncompressed message has no grid: AUTO gives it the
    // transport's own float sum where there is one (what native means for
    // codec none) and a point-to-point algorithm elsewhere, instead of
    // failing as unsupported on a transport without a float sum.
    if (p.algorithm == QC_ALGO_NATIVE) p.algorithm = QC_ALGO_AUTO;
  }
  return p;
}

std::string describe_policy(const qc_policy_t& p) {
  return std::string("codec ") + codec_name(p.codec) + ", bits " + std::to_string(p.bits) +
         ", bucket " + std::to_string(p.bucket_size) + ", algorithm " +
         algorithm_name(p.algorithm) + ", error_feedback " + std::to_string(p.error_feedback);
}

std::string error_feedback_divergence(const qc_policy_t& p) {
  if (p.error_feedback == 0) return "";
  const long long M = (1ll << (p.bits - 1)) - 1;  // levels per sign (bits 2..8)
  if (p.codec == QC_CODEC_QSGD && static_cast<long long>(p.bucket_size) >= M * M) {
    return std::string("qsgd with ") + std::to_string(p.bits) + " bits and buckets of " +
           std::to_string(p.bucket_size) + " elements is not contractive (buckets under M^2 = " +
           std::to_string(M * M) + " elements would be)";
  }
  if (p.codec == QC_CODEC_GLOBAL_LINEAR || p.codec == QC_CODEC_GLOBAL_EXP) {
    return std::string(codec_name(p.codec)) +
           " shares one norm over the whole message, so it is not contractive for messages of " +
           std::to_string(M * M) + " elements or more";
  }
  return "";
}

void warn_if_error_feedback_diverges(const qc_policy_t& policy, const std::string& where) {
  const std::string why = error_feedback_divergence(policy);
  if (why.empty()) return;
  log_warning(where + ": error feedback with " + why +
              ": its residual can grow every call until the output overflows; use this codec "
              "without error feedback, or minmax with it (docs/policies.md)");
}

}  // namespace qc
