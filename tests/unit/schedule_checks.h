// What the schedule tests check on a simulator's run (schedule_sim.h) or
// on the schedules themselves; shared by test_schedules.cpp (whole blocks)
// and test_schedule_pipelining.cpp (blocks cut into pieces). Each returns
// "" or the first failure, starting with `label`.
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
                                    size_t chunk = 0);

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

// One rank's pipelined schedule against its unpipelined one (the same call
// with chunk 0), whose encodes are the whole blocks: every non-empty encode
// of `piped` is piece c of one whole encode W — it starts at W's offset +
// c * chunk, holds min(chunk, what is left of W) values and goes into slot
// w * pieces + c, W's slot being w (the pipelined slot numbering) — and
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
