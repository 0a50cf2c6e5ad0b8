// Policies: defaults, validation and names. A policy is plain data
// (qc_policy_t); PolicyTable maps layer names to policies.
#pragma once

#include <cstddef>
#include <string>

#include "core/enum_names.h"
#include "core/status.h"

namespace qc {

// The first released layouts; a struct_size below these is rejected.
constexpr size_t kPolicyV0Size = offsetof(qc_policy_t, min_compress_bytes);
constexpr size_t kCommConfigV0Size = sizeof(qc_comm_config_t);
constexpr size_t kStatsV0Size = offsetof(qc_stats_t, codec_seconds_in_flight);

qc_policy_t default_policy();
qc_comm_config_t default_comm_config();

// Whether `policy` can run: every field in range, and the fields in range
// for its codec (bits: min_bits_for). The one check of a policy: every
// entry that takes one (qc_comm_set_layer_policy, qc_comm_apply_preset, the QC_*
// environment, qc_comm_adapt_policies' result, qc_codec_encode / qc_codec_encoded_size, the
// emulation calls, a message header) calls it, and so does make_codec, the
// gate of every collective, so a policy is refused where it is given,
// never first in a later collective. Only what depends on the call is left
// to the call: algorithm native (allreduce only; it needs a global codec,
// or codec none on a transport with its own float sum) and topk's 2^32 - 1
// elements. `arg` names the argument in messages.
Status validate_policy(const qc_policy_t& policy, const char* arg);

// The narrowest code width `codec` can use: 2 for qsgd, global_linear and
// global_exp (a sign bit plus magnitude levels), 1 for the others.
int min_bits_for(qc_codec_t codec);

// struct_size check + copy over defaults + validation.
Status read_policy(const qc_policy_t* user, const char* arg, qc_policy_t* out);

// The policy a message of `message_bytes` is sent with: codec none when it is
// below the policy's min_compress_bytes, the policy itself otherwise.
// Whether a global codec's shared scale is the max-abs (QC_SCALE_AUTO and
// QC_SCALE_MAX_ABS) rather than the L2 norm.
bool scales_by_max_abs(const qc_policy_t& policy);

// Whether the policy's codec rounds stochastically: QC_ROUND_AUTO is
// stochastic for the global codecs (paper 002 dithers by definition) and
// nearest-even for the others.
bool rounds_stochastically(const qc_policy_t& policy);

qc_policy_t effective_policy(const qc_policy_t& policy, size_t message_bytes);

// codec_name and algorithm_name: core/enum_names.h.
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
