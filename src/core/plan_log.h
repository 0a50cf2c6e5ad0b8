// What QC_DEBUG=info tells about a communicator's calls, each once per
// change rather than per call: a layer's resolved policy on its first use,
// the algorithm AUTO chose for it and why, and a layer's messages going
// uncompressed (under min_compress_bytes). QC_DEBUG=debug adds a line per
// call (planner.h's log_call_plan).
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <string>

#include "core/planner.h"
#include "qc.h"

namespace qc {

class PlanLog {
 public:
  // A call of `collective` on `layer` (nullptr: "*") resolved `resolved`,
  // which the message size (min_compress_bytes) turned into `effective`.
  void layer_used(const char* collective, const char* layer, const qc_policy_t& resolved,
                  const qc_policy_t& effective, size_t message_bytes);
  // The algorithm of an allreduce on `layer`, chosen by `why`.
  void algorithm_chosen(const char* layer, qc_algorithm_t requested, qc_algorithm_t chosen,
                        const char* why, size_t message_bytes, int ranks);
  // Both, for an allreduce planned as `plan` (planner.h).
  void allreduce_planned(const char* layer, const qc_policy_t& resolved, const AllreducePlan& plan,
                         size_t message_bytes, int ranks) {
    layer_used("allreduce", layer, resolved, plan.policy, message_bytes);
    algorithm_chosen(layer, plan.policy.algorithm, plan.algorithm, plan.why, message_bytes, ranks);
  }

 private:
  struct Layer {
    bool seen = false;
    bool told_uncompressed = false;
    int algorithm = -1;  // the last one told
  };
  // Calls of one communicator run one at a time, but a request's run on the
  // progress thread may overlap a query of the caller's.
  std::mutex mutex_;
  std::map<std::string, Layer> layers_;
};

}  // namespace qc
