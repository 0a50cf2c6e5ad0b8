#include "core/sparse_rows.h"

#include <algorithm>
#include <numeric>
#include <queue>
#include <string>
#include <utility>

namespace qc {

Status canonical_rows(const int64_t* indices, const float* values, size_t nnz, size_t row_len,
                      int64_t limit, SparseRows* out) {
  for (size_t k = 0; k < nnz; ++k) {
    if (indices[k] < 0 || (limit > 0 && indices[k] >= limit)) {
      return invalid_argument("argument 'indices': entry " + std::to_string(k) + " is " +
                              std::to_string(indices[k]) + "; expected 0.." +
                              (limit > 0 ? std::to_string(limit - 1) : std::string("INT64_MAX")));
    }
  }
  std::vector<size_t> order(nnz);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [indices](size_t a, size_t b) { return indices[a] < indices[b]; });
  out->indices.clear();
  out->values.clear();
  for (size_t k = 0; k < nnz; ++k) {
    const size_t from = order[k];
    const float* row = values + from * row_len;
    if (!out->indices.empty() && out->indices.back() == indices[from]) {
      float* sum = out->values.data() + (out->indices.size() - 1) * row_len;
      for (size_t j = 0; j < row_len; ++j) sum[j] += row[j];
      continue;
    }
    out->indices.push_back(indices[from]);
    out->values.insert(out->values.end(), row, row + row_len);
  }
  return Status::ok();
}

void merge_row_indices(const std::vector<const int64_t*>& lists,
                       const std::vector<size_t>& counts, std::vector<int64_t>* merged,
                       std::vector<std::vector<size_t>>* positions) {
  const size_t n = lists.size();
  merged->clear();
  positions->assign(n, {});
  // A k-way merge: the heap holds each list's next entry (index, list).
  using Head = std::pair<int64_t, size_t>;
  std::priority_queue<Head, std::vector<Head>, std::greater<Head>> heap;
  std::vector<size_t> next(n, 0);
  for (size_t i = 0; i < n; ++i) {
    (*positions)[i].resize(counts[i]);
    if (counts[i] > 0) heap.push({lists[i][0], i});
  }
  while (!heap.empty()) {
    const Head h = heap.top();
    heap.pop();
    if (merged->empty() || merged->back() != h.first) merged->push_back(h.first);
    const size_t i = h.second;
    (*positions)[i][next[i]] = merged->size() - 1;
    if (++next[i] < counts[i]) heap.push({lists[i][next[i]], i});
  }
}

}  // namespace qc
