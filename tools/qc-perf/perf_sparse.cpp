// qc-perf: the sparse allreduce's inputs (each rank's row indices and rows),
// the exact fp64 sum of every rank's rows as a dense table, and the check of
// the tables qc_sparse_allreduce_dense wrote. The bound of a row comes from
// perf_check.cpp (sparse_row_bound), with every other bound.
#include "perf.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

namespace qcperf {

size_t sparse_nnz(double density, size_t nrows) {
  return static_cast<size_t>(std::llround(density * double(nrows)));
}

// Indices uniform over the table, as a batch touching embedding rows gives
// them: unsorted, repeats allowed. The values are fill_inputs' (24 random
// bits in [-1, 1), rounded to the dtype), nnz x row_len per rank.
void fill_sparse_inputs(WorkerPool& pool, const Options& opt, Buffers& buf, size_t nnz,
                        size_t nrows) {
  fill_inputs(pool, opt, Op::SparseAllreduce, buf, nnz * opt.row_len);
  pool.run([&](int rank) {
    uint64_t state = 0x5ba75e0f0123ull ^ (0xd1b54a32d192ed03ull * (uint64_t(rank) + 1));
    std::vector<int64_t>& idx = buf.rank[rank].indices;
    idx.resize(nnz);
    for (size_t k = 0; k < nnz; ++k) idx[k] = static_cast<int64_t>(next_random(state) % nrows);
  });
}

void sparse_reference(const Options& opt, const Buffers& buf, size_t nnz, size_t nrows,
                      SparseReference* ref) {
  const size_t len = opt.row_len;
  const double u32 = std::ldexp(1.0, -24);
  ref->nrows = nrows;
  ref->row_len = len;
  ref->exact.assign(nrows * len, 0.0);
  ref->abs_sum.assign(nrows * len, 0.0);
  ref->rows.assign(nrows, SparseRowStats{});
  ref->distinct_rows = 0;
  std::vector<size_t> order(nnz);
  std::vector<double> row(len), row_abs(len);
  for (size_t r = 0; r < buf.rank.size(); ++r) {
    const int64_t* idx = buf.rank[r].indices.data();
    const void* x = buf.rank[r].send;
    // This rank's rows grouped by index: its row of each index is the sum
    // of its repeats (the library adds them in float32 before encoding).
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return idx[a] < idx[b]; });
    for (size_t g = 0; g < nnz;) {
      const size_t i = static_cast<size_t>(idx[order[g]]);
      size_t end = g;
      std::fill(row.begin(), row.end(), 0.0);
      std::fill(row_abs.begin(), row_abs.end(), 0.0);
      for (; end < nnz && static_cast<size_t>(idx[order[end]]) == i; ++end) {
        for (size_t j = 0; j < len; ++j) {
          const double v = load_elem(x, opt.dtype, order[end] * len + j);
          row[j] += v;
          row_abs[j] += std::fabs(v);
        }
      }
      const double repeats = double(end - g);
      // The float32 additions of the repeats move the row by at most this much.
      double rounding = 0, amax = 0, sq = 0;
      for (size_t j = 0; j < len; ++j) {
        ref->exact[i * len + j] += row[j];
        ref->abs_sum[i * len + j] += row_abs[j];
        rounding = std::max(rounding, (repeats - 1) * u32 * row_abs[j]);
        amax = std::max(amax, std::fabs(row[j]));
        sq += row[j] * row[j];
      }
      SparseRowStats& s = ref->rows[i];
      s.ranks += 1;
      s.terms += repeats;
      s.amax = std::max(s.amax, amax + rounding);
      s.l2 = std::max(s.l2, std::sqrt(sq) + std::sqrt(double(len)) * rounding);
      ref->distinct_rows += 1;
      g = end;
    }
  }
  for (size_t i = 0; i < nrows; ++i) {
    double smax = 0;
    for (size_t j = 0; j < len; ++j) smax = std::max(smax, ref->abs_sum[i * len + j]);
    ref->rows[i].smax = smax;
  }
}

namespace {
struct Part {
  double max_err = 0;
  double max_bound = 0;
  bool nan = false;
  uint64_t wrong = 0;
  uint64_t replica = 0;
};
}  // namespace

CheckResult check_sparse(WorkerPool& pool, const Options& opt, const qc_policy_t& policy,
                         const SparseReference& ref, const Buffers& buf, double* bound) {
  const int n = opt.nranks;
  const qc_dtype_t d = opt.dtype;
  const size_t ds = dtype_size(d), len = ref.row_len;
  const double div = opt.redop == QC_OP_AVG ? n : 1.0;
  const bool pe = sparse_per_element(policy);
  const double floor = sparse_floor(d, policy);
  // The tables held here: every rank's (local), or this process's (MPI:
  // the replicas are compared over MPI afterwards).
  const int first = opt.mpi ? opt.mpi_rank : 0, last = opt.mpi ? opt.mpi_rank : n - 1;
  std::vector<Part> part(n);
  pool.run([&](int w) {
    Part& p = part[w];
    const size_t lo = ref.nrows * size_t(w) / size_t(n);
    const size_t hi = ref.nrows * size_t(w + 1) / size_t(n);
    for (size_t i = lo; i < hi; ++i) {
      const SparseRowStats& s = ref.rows[i];
      const double b = sparse_row_bound(n, d, opt.redop, policy, len, s);
      p.max_bound = std::max(p.max_bound, b);
      for (size_t j = 0; j < len; ++j) {
        const size_t e = i * len + j;
        const double exact = ref.exact[e] / div;
        const double norm = std::max((pe ? ref.abs_sum[e] : s.smax) / div, floor);
        bool bad = false, replica_bad = false;
        for (int r = first; r <= last; ++r) {
          const double err = std::fabs(load_elem(buf.rank[r].recv, d, e) - exact) / norm;
          if (std::isnan(err)) p.nan = true;
          else p.max_err = std::max(p.max_err, err);
          bad = bad || !(err <= b);
          replica_bad = replica_bad ||
                        std::memcmp(static_cast<const char*>(buf.rank[r].recv) + e * ds,
                                    static_cast<const char*>(buf.rank[first].recv) + e * ds,
                                    ds) != 0;
        }
        if (replica_bad) ++p.replica;
        if (bad || replica_bad) ++p.wrong;
      }
    }
  });
  CheckResult res;
  bool nan = false;
  *bound = 0;
  for (const Part& p : part) {
    nan = nan || p.nan;
    res.max_err = std::max(res.max_err, p.max_err);
    res.wrong += p.wrong;
    res.replica_diff += p.replica;
    *bound = std::max(*bound, p.max_bound);
  }
  if (nan) res.max_err = std::numeric_limits<double>::quiet_NaN();
  if (opt.mpi) {
    mpi_reduce_check(opt, Op::SparseAllreduce, buf, 0, &res);
    *bound = mpi_max(*bound);
  }
  return res;
}

}  // namespace qcperf
