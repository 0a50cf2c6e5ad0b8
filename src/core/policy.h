// Policies: defaults, validation and names. A policy is plain data
// (qc_policy_t); PolicyTable maps layer names to policies.
#pragma once

#include <cstddef>
#include <string>

#include "core/status.h"

namespace qc {

// The first released layouts; a struct_size below these is rejected.
constexpr size_t kPolicyV0Size = offsetof(qc_policy_t, min_compress_bytes);
constexpr size_t kCommConfigV0Size = sizeof(qc_comm_config_t);
constexpr size_t kStatsV0Size = sizeof(qc_stats_t);

qc_policy_t default_policy();
qc_comm_config_t default_comm_config();

// Every field in range; `arg` names the argument in messages.
Status validate_policy(const qc_policy_t& policy, const char* arg);

// struct_size check + copy over defaults + validation.
Status read_policy(const qc_policy_t* user, const char* arg, qc_policy_t* out);

// The policy a message of `message_bytes` is sent with: codec none when it is
// below the policy's min_compress_bytes, the policy itself otherwise.
qc_policy_t effective_policy(const qc_policy_t& policy, size_t message_bytes);

const char* codec_name(qc_codec_t codec);
const char* algorithm_name(qc_algorithm_t algorithm);
std::string describe_policy(const qc_policy_t& policy);

// Why error feedback cannot keep its residual bounded under `policy`, or ""
// when it can (or is off): qsgd and the global codecs are not contractive
// once d elements share a norm with d >= M^2 (docs/policies.md), and the
// residual then grows every call until the output overflows.
std::string error_feedback_divergence(const qc_policy_t& policy);

// A warning line (QC_DEBUG=warn, the default) when error_feedback_divergence
// is not empty; `where` names what is being set ("layer pattern \"*\"").
// Setting such a policy stays legal: the warning is the whole effect.
void warn_if_error_feedback_diverges(const qc_policy_t& policy, const std::string& where);

}  // namespace qc
