// Row-sparse tensors (paper 001): rows of `row_len` values named by a row
// index. What a sparse allreduce does to its rows before and after they
// travel, independent of transports and codecs: the local canonical form
// (sorted, each index once) and the union of the ranks' indices.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/status.h"

namespace qc {

// Rows with ascending, distinct indices; values row-major, row_len each.
struct SparseRows {
  std::vector<int64_t> indices;
  std::vector<float> values;
};

// The canonical form of `nnz` rows given in any order, duplicates allowed:
// sorted by index (stably), each duplicate added to the first row of its
// index in input order, in float32, so the result does not depend on how
// the sort moves equal indices. INVALID_ARGUMENT for a negative index
// (named by its position) or an index >= `limit` (0: no limit).
Status canonical_rows(const int64_t* indices, const float* values, size_t nnz, size_t row_len,
                      int64_t limit, SparseRows* out);

// The sorted union of `lists` (each ascending and distinct, counts[i]
// entries) in *merged, and for each list the position in *merged of each of
// its entries (positions[i][k] for lists[i][k]).
void merge_row_indices(const std::vector<const int64_t*>& lists,
                       const std::vector<size_t>& counts, std::vector<int64_t>* merged,
                       std::vector<std::vector<size_t>>* positions);

}  // namespace qc
