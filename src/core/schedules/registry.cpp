#include "core/schedules/registry.h"

namespace qc {
namespace {

const AllreduceSchedule kAllreduceSchedules[] = {
    {QC_ALGO_RING, "ring", build_allreduce_ring},
    {QC_ALGO_RECURSIVE_DOUBLING, "recursive doubling", build_allreduce_recursive_doubling},
    {QC_ALGO_SRA, "SRA", build_allreduce_sra},
    {QC_ALGO_TREE, "tree", build_allreduce_tree},
};

}  // namespace

const AllreduceSchedule* find_allreduce_schedule(qc_algorithm_t algorithm) {
  for (const AllreduceSchedule& s : kAllreduceSchedules) {
    if (s.algorithm == algorithm) return &s;
  }
  return nullptr;
}

}  // namespace qc
