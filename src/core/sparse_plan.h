// Which schedule a sparse allreduce runs (sparse_host.cpp), chosen by every
// rank alike from the row counts all ranks exchanged first: the one whose
// busiest rank receives the fewest bytes by the model below.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/codecs/codec.h"
#include "core/enum_names.h"
#include "qc.h"

namespace qc {

// What every rank knows once the counts are exchanged.
struct SparseShape {
  int ranks = 1;
  size_t row_len = 1;
  // counts[r * ranks + j]: rank r's rows whose index is owned by rank j
  // (index mod ranks).
  std::vector<uint64_t> counts;
  // The table's rows: nrows of the dense form, else one past the largest
  // index any rank has.
  uint64_t extent = 0;
  bool dense_output = false;
};

struct SparsePlan {
  SparseSchedule schedule = SparseSchedule::kAllgather;
  // Modeled bytes the busiest rank receives, by schedule (kAllgather,
  // kScatterReduce, kDensify; -1: not possible).
  double bytes[3] = {0, 0, -1};
  std::string why;
};

// The most bytes a message of `rows` rows takes: the codec's message of
// rows x row_len values (one bucket per row) and an 8-byte index per row.
// Saturates at SIZE_MAX (a peer's count is not trusted to be small).
size_t sparse_rows_capacity(const Codec& codec, uint64_t rows, size_t row_len);

// The schedule: `forced` when not kAuto (kDensify only with dense output);
// else policy algorithm SRA gives kScatterReduce, AUTO the model's choice,
// any other algorithm kAllgather. `codec` has the row as its bucket.
SparsePlan plan_sparse(const SparseShape& shape, const Codec& codec, qc_algorithm_t algorithm,
                       SparseSchedule forced);

}  // namespace qc
