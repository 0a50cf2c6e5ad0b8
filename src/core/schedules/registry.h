// Every collective algorithm qc runs as a schedule, written once each, and
// the one table that names them. The executors run whichever the planner
// picks; nothing else switches over algorithms.
#pragma once

#include "core/schedules/schedule.h"
#include "qc.h"

namespace qc {

// Allreduce: the input holds this rank's `count` values (read only; it may
// be the output's memory), the output gets the sum (every rank the same
// bits). Every rank decodes the same final
// bytes: the owner of each reduced block encodes it once, and those bytes
// travel on unchanged.
void build_allreduce_ring(const ScheduleShape& shape, Schedule* schedule);
void build_allreduce_recursive_doubling(const ScheduleShape& shape, Schedule* schedule);
void build_allreduce_sra(const ScheduleShape& shape, Schedule* schedule);
void build_allreduce_tree(const ScheduleShape& shape, Schedule* schedule);

// Alltoall: input block j (count values) goes to rank j, output block i
// comes from rank i; every block, the own one too, is encoded by its sender
// and decoded by its receiver.
void build_alltoall_pairwise(const ScheduleShape& shape, Schedule* schedule);

// Reduce-scatter: the input holds `ranks` blocks of count values, block j
// for rank j; the output (count values) gets the sum of every rank's block
// `rank`. Direct: each value encoded once, by its sender; ring: n-1 hops,
// each requantizing a partial sum.
// Neither may run in place (the output over the own input block): both
// write the output before they read that block, so the driver gives them
// an output of their own (NCCL's in-place form is handled there).
void build_reduce_scatter_direct(const ScheduleShape& shape, Schedule* schedule);
void build_reduce_scatter_ring(const ScheduleShape& shape, Schedule* schedule);

// Allgather: the input (count values) becomes block `rank` of every rank's
// output (ranks x count); each block encoded once by its owner, the bytes
// forwarded unchanged, decoded by every rank (the owner included).
// Direct pipelines its block in pieces of shape.chunk.
void build_allgather_direct(const ScheduleShape& shape, Schedule* schedule);
void build_allgather_ring(const ScheduleShape& shape, Schedule* schedule);
// Needs a power-of-two rank count.
void build_allgather_recursive_doubling(const ScheduleShape& shape, Schedule* schedule);
bool allgather_recursive_doubling_fits(int ranks);

// Broadcast: the root's input (count values) becomes every rank's output,
// the root's too; encoded once at the root, forwarded unchanged. The chain
// pipelines pieces of shape.chunk values.
void build_broadcast_chain(const ScheduleShape& shape, Schedule* schedule);
void build_broadcast_tree(const ScheduleShape& shape, Schedule* schedule);

struct AllreduceSchedule {
  qc_algorithm_t algorithm;
  const char* name;
  void (*build)(const ScheduleShape& shape, Schedule* schedule);
};

// The allreduce algorithms that are schedules (ring, recursive doubling,
// SRA, tree); null for any other (native: the transport sums integer codes).
const AllreduceSchedule* find_allreduce_schedule(qc_algorithm_t algorithm);

}  // namespace qc
