// algorithm.h's calls: a schedule from the registry, given to an executor.
#include <string>
#include <vector>

#include "core/algorithms/algorithm.h"
#include "core/executors/device_executor.h"
#include "core/executors/host_executor.h"
#include "core/schedules/registry.h"

namespace qc {
namespace {

// `chunk`: ScheduleShape::chunk (0 on the stream-ordered executor, whose
// device groups already overlap with the kernels around them).
Status allreduce_schedule(qc_algorithm_t algorithm, int ranks, int rank, size_t count,
                          int group_size, size_t chunk, Schedule* schedule, const char** name,
                          bool partials_in_scratch = false) {
  const AllreduceSchedule* a = find_allreduce_schedule(algorithm);
  if (a == nullptr) {
    return internal_error("algorithm " + std::to_string(static_cast<int>(algorithm)) +
                          " has no schedule");
  }
  ScheduleShape shape{ranks, rank, count, group_size, chunk};
  shape.partials_in_scratch = partials_in_scratch;
  a->build(shape, schedule);
  if (name != nullptr) *name = a->name;
  return Status::ok();
}

Schedule alltoall_schedule(int ranks, int rank, size_t count_per_rank, size_t chunk = 0) {
  Schedule schedule;
  build_alltoall_pairwise(ScheduleShape{ranks, rank, count_per_rank, 1, chunk}, &schedule);
  return schedule;
}

// The same into the call's reusable schedule (host runs).
const Schedule& alltoall_schedule(CollectiveContext& ctx, size_t count_per_rank, size_t chunk) {
  Schedule* schedule = ctx.schedule_scratch();
  build_alltoall_pairwise(ScheduleShape{ctx.size(), ctx.rank(), count_per_rank, 1, chunk},
                          schedule);
  return *schedule;
}

}  // namespace

bool is_step_algorithm(qc_algorithm_t algorithm) {
  return find_allreduce_schedule(algorithm) != nullptr;
}

bool reads_input_in_place(qc_algorithm_t algorithm) {
  return algorithm == QC_ALGO_SRA || algorithm == QC_ALGO_RING;
}

Status run_allreduce(CollectiveContext& ctx, qc_algorithm_t algorithm, const float* input,
                     float* output, size_t count, int group_size) {
  Schedule& schedule = *ctx.schedule_scratch();
  // The largest block of SRA and the ring: a rank's share. The ring is cut
  // only where transfers move on their own: a ring hop waits on its
  // neighbour's previous one, so on a transport whose transfers are copies
  // made while waiting (local), pieces only add waits. SRA's pieces pay
  // off even there (measured, docs/benchmarks.md): they stay in cache from
  // encode to send.
  const size_t block = count / static_cast<size_t>(ctx.size()) + 1;
  const bool cut = algorithm != QC_ALGO_RING || ctx.transfers_overlap_compute();
  QC_RETURN_IF_ERROR(allreduce_schedule(algorithm, ctx.size(), ctx.rank(), count, group_size,
                                        cut ? ctx.pipeline_chunk(block) : 0, &schedule,
                                        nullptr, !ctx.values_on_device()));
  return run_on_host(ctx, schedule, input, output);
}

Status allreduce_enqueued(CollectiveContext& ctx, qc_algorithm_t algorithm, float* data,
                          size_t count, int group_size) {
  Schedule schedule;
  const char* name = nullptr;
  QC_RETURN_IF_ERROR(allreduce_schedule(algorithm, ctx.size(), ctx.rank(), count, group_size,
                                        /*chunk=*/0, &schedule, &name));
  return run_enqueued(ctx, schedule, data, data, name);
}

Status allreduce_enqueued_payload_bytes(qc_algorithm_t algorithm, const Codec& codec,
                                        size_t count, int ranks, int rank, int group_size,
                                        size_t* bytes) {
  Schedule schedule;
  QC_RETURN_IF_ERROR(allreduce_schedule(algorithm, ranks, rank, count, group_size,
                                        /*chunk=*/0, &schedule, nullptr));
  return device_payload_bytes(schedule, codec, bytes);
}

Status alltoall_pairwise(CollectiveContext& ctx, const float* send, float* recv,
                         size_t count_per_rank) {
  const size_t chunk = ctx.pipeline_chunk(count_per_rank);
  return run_on_host(ctx, alltoall_schedule(ctx, count_per_rank, chunk), send, recv);
}

Status alltoall_enqueued(CollectiveContext& ctx, const float* send, float* recv,
                         size_t count_per_rank) {
  return run_enqueued(ctx, alltoall_schedule(ctx.size(), ctx.rank(), count_per_rank), send, recv,
                      "alltoall");
}

Status alltoall_enqueued_payload_bytes(size_t payload, int ranks, size_t* bytes) {
  *bytes = device_payload_bytes(alltoall_schedule(ranks, 0, 0), payload);
  return Status::ok();
}

Status alltoall_exchange(CollectiveContext& ctx, Message* out, Message* in,
                         size_t count_per_rank) {
  const int n = ctx.size();
  // The pairwise schedule's slots: j for the block to rank j, n + i for the
  // one from rank i.
  std::vector<Message*> slots(2 * static_cast<size_t>(n));
  for (int j = 0; j < n; ++j) {
    slots[static_cast<size_t>(j)] = &out[j];
    slots[static_cast<size_t>(n + j)] = &in[j];
  }
  return run_transfers_on_host(ctx, alltoall_schedule(ctx, count_per_rank, /*chunk=*/0),
                               slots.data());
}

}  // namespace qc
