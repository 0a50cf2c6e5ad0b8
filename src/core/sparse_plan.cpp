#include "core/sparse_plan.h"

#include <algorithm>
#include <cstdio>

#include "core/enum_names.h"

namespace qc {

size_t sparse_rows_capacity(const Codec& codec, uint64_t rows, size_t row_len) {
  if (rows > SIZE_MAX / 16 / (row_len + 1)) return SIZE_MAX;
  const size_t values = codec.max_encoded_size(static_cast<size_t>(rows) * row_len);
  return values > SIZE_MAX - 8 * rows ? SIZE_MAX : values + 8 * static_cast<size_t>(rows);
}

namespace {

double capacity(const Codec& codec, double rows, size_t row_len) {
  return static_cast<double>(sparse_rows_capacity(codec, static_cast<uint64_t>(rows), row_len));
}

// The rows owner j's union is expected to have: its share of the table
// (indices j, j + n, ...) hit by each rank's rows as if they were drawn
// at random, no fewer than the most one rank sends it and no more than all
// of them together. Rows many ranks share make it small; disjoint rows
// make it the sum.
double expected_union(const SparseShape& s, int j) {
  const uint64_t n = static_cast<uint64_t>(s.ranks);
  const uint64_t share = s.extent / n + (static_cast<uint64_t>(j) < s.extent % n ? 1 : 0);
  double most = 0, sum = 0, miss = 1;
  for (int r = 0; r < s.ranks; ++r) {
    const double c = static_cast<double>(s.counts[static_cast<size_t>(r) * n + j]);
    most = std::max(most, c);
    sum += c;
    if (share > 0) miss *= 1.0 - std::min(1.0, c / static_cast<double>(share));
  }
  const double drawn = static_cast<double>(share) * (1.0 - miss);
  return std::min(sum, std::max(most, drawn));
}

std::string megabytes(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g MB", bytes / 1e6);
  return buf;
}

}  // namespace

SparsePlan plan_sparse(const SparseShape& s, const Codec& codec, qc_algorithm_t algorithm,
                       SparseSchedule forced) {
  SparsePlan plan;
  const size_t n = static_cast<size_t>(s.ranks);
  std::vector<double> owned_union(n);
  std::vector<double> rank_rows(n, 0.0);
  for (size_t j = 0; j < n; ++j) owned_union[j] = expected_union(s, static_cast<int>(j));
  for (size_t r = 0; r < n; ++r) {
    for (size_t j = 0; j < n; ++j) rank_rows[r] += static_cast<double>(s.counts[r * n + j]);
  }
  // Per receiving rank r: the allgather brings every other rank's rows;
  // the scatter-reduce the rows r owns from the others, then the others'
  // unions; the densified allreduce (SRA) 2 (n-1)/n of the encoded table.
  double allgather = 0, scatter = 0;
  for (size_t r = 0; r < n; ++r) {
    double a = 0, b = 0;
    for (size_t o = 0; o < n; ++o) {
      if (o == r) continue;
      a += capacity(codec, rank_rows[o], s.row_len);
      b += capacity(codec, static_cast<double>(s.counts[o * n + r]), s.row_len) +
           capacity(codec, owned_union[o], s.row_len);
    }
    allgather = std::max(allgather, a);
    scatter = std::max(scatter, b);
  }
  plan.bytes[0] = allgather;
  plan.bytes[1] = scatter;
  if (s.dense_output) {
    const double table =
        static_cast<double>(codec.max_encoded_size(static_cast<size_t>(s.extent) * s.row_len));
    plan.bytes[2] = 2.0 * static_cast<double>(n - 1) / static_cast<double>(n) * table;
  }
  const std::string model = "modeled bytes at the busiest rank: allgather " +
                            megabytes(plan.bytes[0]) + ", sra " + megabytes(plan.bytes[1]) +
                            (s.dense_output ? ", densify " + megabytes(plan.bytes[2]) : "");
  if (forced == SparseSchedule::kDensify && !s.dense_output) {
    plan.schedule = SparseSchedule::kAllgather;
    plan.why = "QC_SPARSE_SCHEDULE=densify needs a dense output (qc_sparse_allreduce_dense); "
               "allgather instead";
  } else if (forced != SparseSchedule::kAuto) {
    plan.schedule = forced;
    plan.why = std::string("QC_SPARSE_SCHEDULE=") + sparse_schedule_name(forced);
  } else if (s.ranks == 1) {
    plan.schedule = SparseSchedule::kAllgather;
    plan.why = "one rank";
  } else if (algorithm == QC_ALGO_SRA) {
    plan.schedule = SparseSchedule::kScatterReduce;
    plan.why = "policy algorithm sra";
  } else if (algorithm != QC_ALGO_AUTO) {
    plan.schedule = SparseSchedule::kAllgather;
    plan.why = std::string("policy algorithm ") + algorithm_name(algorithm) +
               " (only sra and auto choose otherwise)";
  } else {
    // Fewest bytes; a tie goes to the schedule that quantizes once.
    int best = 0;
    for (int k = 1; k < 3; ++k) {
      if (plan.bytes[k] >= 0 && plan.bytes[k] < plan.bytes[best]) best = k;
    }
    plan.schedule = static_cast<SparseSchedule>(best);
    plan.why = "auto: fewest " + model;
    return plan;
  }
  plan.why += "; " + model;
  return plan;
}

}  // namespace qc
