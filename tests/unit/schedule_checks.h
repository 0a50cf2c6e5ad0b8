// What the schedule tests check on a simulator's run (schedule_sim.h) or
// on the schedules themselves; shared by test_schedules.cpp (whole blocks),
// test_schedule_pipelining.cpp (blocks cut into pieces) and
// test_sharded_schedules.cpp (reduce-scatter, allgather, broadcast). Each
// returns "" or the first failure, starting with `label`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/schedules/schedule.h"
#include "schedule_sim.h"

namespace qcsim {

using BuildFn = void (*)(const qc::ScheduleShape&, qc::Schedule*);

// Every rank's schedule of one call; `chunk` 0: whole blocks.
std::vector<qc::Schedule> build_all(BuildFn build, int n, size_t count, int group_size,
                                    size_t chunk = 0, int root = 0);

// Plays the call under both views of visibility (the host's, the
// device's), then `check_result(label, sim)`; "" or the first failure.
template <typename Check>
std::string play_both(const std::string& label, const std::vector<qc::Schedule>& schedules,
                      ScheduleSim::Options options, Check check_result) {
  for (Visibility v : {Visibility::kAtPost, Visibility::kAtWait}) {
    options.visibility = v;
    const std::string at = label + (v == Visibility::kAtPost ? " (host)" : " (device)");
    ScheduleSim sim(at, schedules, options);
    std::string failure = sim.run();
    if (failure.empty()) failure = check_result(at, sim);
    if (!failure.empty()) return failure;
  }
  return "";
}

// A call that is not cut (one rank, or blocks that fit one piece) builds
// the whole-block schedule, step for step.
std::string check_uncut(const std::string& label, const std::vector<qc::Schedule>& piped,
                        const std::vector<qc::Schedule>& whole);

std::string case_label(const char* name, int n, size_t count, int group_size);

uint64_t all_ranks(int n);

// Every element of every rank's output sums all ranks once, in place, and
// was last written by a decode of the same encode on every rank.
// `max_depth` > 0 bounds the encodes on any element's way.
std::string check_allreduce_result(const std::string& label, const ScheduleSim& sim,
                                   int max_depth);

// Output block i of rank r is rank i's input block r, element by element,
// and every input element was encoded exactly once.
std::string check_alltoall_result(const std::string& label, const ScheduleSim& sim,
                                  size_t count);

// Output element i of rank r sums every rank's input element r * count + i
// once, rank r's own entering unencoded; `depth` encodes on the longest way
// (exactly). Each rank encoded every element offset of the others' blocks
// exactly once (one residual each), none of its own block.
std::string check_reduce_scatter_result(const std::string& label, const ScheduleSim& sim,
                                        size_t count, int depth);

// Output block b of every rank, the owner b's too, is rank b's input,
// decoded from the one encode rank b made of it (every replica the same
// bits), encoded once on the way; each rank encoded each of its input
// elements exactly once.
std::string check_allgather_result(const std::string& label, const ScheduleSim& sim,
                                   size_t count);

// Every rank's output, the root's too, is the root's input decoded from
// the one encode the root made of each element; the root encoded each
// input element exactly once.
std::string check_broadcast_result(const std::string& label, const ScheduleSim& sim, int root);

// One rank's pipelined schedule against its unpipelined one (the same call
// with chunk 0), whose encodes are the whole blocks: every non-empty encode
// of `piped` is piece c of one whole encode W — it starts at W's offset +
// c * chunk, holds min(chunk, what is left of W) values and goes into slot
// b * pieces + c, W being block b (its block slot, or without one its place
// among the whole encodes: the pipelined slot numbering) — and
// each element is encoded exactly once by both schedules (`elements`: the
// element offsets there are).
std::string check_pieces(const std::string& label, int rank, const qc::Schedule& piped,
                         const qc::Schedule& whole, size_t chunk, size_t pieces,
                         size_t elements);

// One rank's pipelined schedule against its unpipelined one: every output
// element (of `elements`) goes through the same steps in the same order —
// copies, encodes, adds, decodes and decode_adds, each decode of a slot
// received from the same peer (or encoded on this rank). With the
// simulator's matching, its sums are then added in the same order, hop by
// hop: the bits of the unpipelined schedule.
std::string check_same_value_steps(const std::string& label, int rank, const qc::Schedule& piped,
                                   const qc::Schedule& whole, size_t elements);

}  // namespace qcsim
