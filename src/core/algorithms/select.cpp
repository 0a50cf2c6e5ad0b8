#include "core/algorithms/algorithm.h"

namespace qc {

qc_algorithm_t select_allreduce_algorithm(qc_algorithm_t requested, const qc_policy_t& policy,
                                          int nranks, size_t message_bytes,
                                          bool transport_float_sum, const char** why) {
  const char* unused = nullptr;
  const char*& reason = why != nullptr ? *why : unused;
  if (requested != QC_ALGO_AUTO) {
    reason = "the policy names it";
    return requested;
  }
  if (nranks == 1) {
    reason = "one rank: nothing to exchange";
    return QC_ALGO_RING;
  }
  // Uncompressed data gains nothing from qc's steps: the transport's own
  // allreduce (tuned for its network, no staging copies) is faster.
  if (policy.codec == QC_CODEC_NONE && transport_float_sum) {
    reason = "codec none: the transport's own float allreduce is faster";
    return QC_ALGO_NATIVE;
  }
  // The global codecs put every rank on one grid: their codes add up exactly
  // as integers, which beats any scheme that decodes and re-encodes.
  if (policy.codec == QC_CODEC_GLOBAL_LINEAR ||
      (policy.codec == QC_CODEC_GLOBAL_EXP && policy.bits <= kAutoNativeExpMaxBits)) {
    reason = "a global codec: the codes add up exactly as integers";
    return QC_ALGO_NATIVE;
  }
  // Small messages are latency-bound: fewest steps wins. Large ones are
  // bandwidth-bound: SRA moves the minimum bytes and requantizes each value
  // at most twice, where ring requantizes O(n) times.
  if (message_bytes < kAutoSmallMessageBytes) {
    reason = "under 64 KiB per rank: latency-bound, fewest steps";
    return QC_ALGO_RECURSIVE_DOUBLING;
  }
  reason = "64 KiB per rank or more: bandwidth-bound, fewest bytes, requantized at most twice";
  return QC_ALGO_SRA;
}

}  // namespace qc
