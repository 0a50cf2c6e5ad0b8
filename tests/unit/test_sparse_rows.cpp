// The row-sparse building blocks of the sparse allreduce
// (src/core/sparse_rows.h): the canonical form of a rank's rows and the
// union of the ranks' indices.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <thread>

#include "core/communicator.h"
#include "core/codecs/codec.h"
#include "core/sparse_plan.h"
#include "core/sparse_rows.h"
#include "test_util.h"

namespace {

TEST(CanonicalRows, SortsAndSumsDuplicatesInInputOrder) {
  const std::vector<int64_t> idx = {7, 2, 7, 0, 2, 7};
  // row_len 2; rows k = (k, 10k) but the duplicates of 7 are chosen so that
  // float32 addition order matters: 1e8 + 1 - 1e8 is 0 in input order.
  const std::vector<float> val = {1e8f, 0, 2, 20, 1, 1, 3, 30, 4, 40, -1e8f, 5};
  qc::SparseRows rows;
  ASSERT_TRUE(qc::canonical_rows(idx.data(), val.data(), idx.size(), 2, 0, &rows).is_ok());
  EXPECT_EQ(rows.indices, (std::vector<int64_t>{0, 2, 7}));
  const float in_order = (1e8f + 1.0f) + -1e8f;  // rows 0, 2, 5 of the input, in that order
  EXPECT_EQ(rows.values, (std::vector<float>{3, 30, 2 + 4.0f, 20 + 40.0f, in_order, 0 + 1 + 5.0f}));
}

TEST(CanonicalRows, EmptyAndRowLenOne) {
  qc::SparseRows rows;
  ASSERT_TRUE(qc::canonical_rows(nullptr, nullptr, 0, 4, 0, &rows).is_ok());
  EXPECT_TRUE(rows.indices.empty());
  EXPECT_TRUE(rows.values.empty());
  const std::vector<int64_t> idx = {3, 3, 3};
  const std::vector<float> val = {1, 2, 3};
  ASSERT_TRUE(qc::canonical_rows(idx.data(), val.data(), 3, 1, 0, &rows).is_ok());
  EXPECT_EQ(rows.indices, (std::vector<int64_t>{3}));
  EXPECT_EQ(rows.values, (std::vector<float>{6}));
}

TEST(CanonicalRows, RefusesNegativeAndOutOfRangeIndices) {
  const std::vector<int64_t> idx = {1, -4};
  const std::vector<float> val = {0, 0};
  qc::SparseRows rows;
  qc::Status s = qc::canonical_rows(idx.data(), val.data(), 2, 1, 0, &rows);
  EXPECT_EQ(s.code(), QC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(s.message().find("entry 1 is -4"), std::string::npos) << s.message();
  const std::vector<int64_t> big = {9, 10};
  s = qc::canonical_rows(big.data(), val.data(), 2, 1, 10, &rows);
  EXPECT_EQ(s.code(), QC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(s.message().find("entry 1 is 10; expected 0..9"), std::string::npos) << s.message();
}

// Against a std::map: random lists with overlaps, disjoint ranges and empty lists.
TEST(MergeRowIndices, UnionAndPositionsMatchAMap) {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    const size_t n = 1 + rng() % 6;
    std::vector<std::vector<int64_t>> lists(n);
    std::map<int64_t, int> seen;
    for (size_t i = 0; i < n; ++i) {
      const size_t k = rng() % 4 == 0 ? 0 : rng() % 50;
      const int64_t base = trial % 3 == 0 ? static_cast<int64_t>(i) * 1000 : 0;  // disjoint
      std::map<int64_t, int> mine;
      for (size_t j = 0; j < k; ++j) mine[base + static_cast<int64_t>(rng() % 100)] = 1;
      for (const auto& e : mine) {
        lists[i].push_back(e.first);
        seen[e.first] = 1;
      }
    }
    std::vector<const int64_t*> ptrs;
    std::vector<size_t> counts;
    for (const auto& l : lists) {
      ptrs.push_back(l.data());
      counts.push_back(l.size());
    }
    std::vector<int64_t> merged;
    std::vector<std::vector<size_t>> pos;
    qc::merge_row_indices(ptrs, counts, &merged, &pos);
    std::vector<int64_t> want;
    for (const auto& e : seen) want.push_back(e.first);
    ASSERT_EQ(merged, want);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(pos[i].size(), lists[i].size());
      for (size_t k = 0; k < lists[i].size(); ++k) ASSERT_EQ(merged[pos[i][k]], lists[i][k]);
    }
  }
}

}  // namespace

// The sparse allreduce's schedules (src/core/sparse_host.cpp: the allgather
// of rows, and with algorithm sra the scatter-reduce-allgather), through
// the internal driver on a local group: the union of the ranks' indices
// with each row summed, bit-identical on every rank; codec none within
// float32 rounding of the float64 sum; minmax 8-bit within one row step
// per contribution.


namespace {

struct SparseInput {
  std::vector<int64_t> indices;
  std::vector<float> values;
};

// One sparse allreduce of random rows on n threads-as-ranks with
// `schedule` forced (kAuto: the policy's algorithm and the model choose),
// against a float64 reference; the dense form when `dense` (densify needs
// it). mode 0: overlapping random rows with duplicates; 1: disjoint
// ranges; 2: rank 0 empty; 3: nearly every row of a small table on every
// rank (auto then densifies a dense output). With kAuto the emulation
// (qc_emulate_sparse_allreduce*) must give the same bits.
void sparse_case(int n, size_t row_len, qc_codec_t codec, int mode, qc_algorithm_t algorithm,
                 qc::SparseSchedule schedule, bool dense) {
  std::vector<std::unique_ptr<qc::Communicator>> comms;
  ASSERT_TRUE(qc::create_local_group(n, 30.0, &comms).is_ok());
  qc_policy_t p = QC_POLICY_INIT;
  p.codec = codec;
  p.bits = 8;
  p.min_compress_bytes = 0;
  p.algorithm = algorithm;
  for (auto& c : comms) {
    c->policies.set("*", p);
    c->sparse_schedule = static_cast<int>(schedule);
  }
  std::mt19937_64 rng(static_cast<uint64_t>(n * 131 + row_len + mode));
  std::vector<SparseInput> in(static_cast<size_t>(n));
  std::map<int64_t, std::vector<double>> exact;
  std::map<int64_t, double> magnitude;
  // Per index: the sum over ranks of the largest |value| of that rank's
  // (duplicate-summed) row, which bounds the row's quantization range.
  std::map<int64_t, double> row_scale;
  for (int r = 0; r < n; ++r) {
    std::map<int64_t, std::vector<double>> canon;  // this rank's rows, duplicates summed
    const size_t nnz = mode == 2 && r == 0 ? 0 : mode == 3 ? 70 : 1 + rng() % 40;
    for (size_t k = 0; k < nnz; ++k) {
      const int64_t i = mode == 1 ? r * 1000 + static_cast<int64_t>(rng() % 50)
                                  : static_cast<int64_t>(rng() % 60);
      in[static_cast<size_t>(r)].indices.push_back(i);
      auto& e = exact[i];
      e.resize(row_len, 0.0);
      auto& c = canon[i];
      c.resize(row_len, 0.0);
      for (size_t j = 0; j < row_len; ++j) {
        const float v = static_cast<float>(static_cast<int64_t>(rng() % 2001) - 1000) / 1000.0f;
        in[static_cast<size_t>(r)].values.push_back(v);
        e[j] += v;
        c[j] += v;
        magnitude[i] += std::fabs(v);
      }
    }
    for (const auto& row : canon) {
      double largest = 0;
      for (double v : row.second) largest = std::max(largest, std::fabs(v));
      row_scale[row.first] += largest;
    }
  }
  const size_t nrows = mode == 1 ? static_cast<size_t>(n) * 1000 : 64;
  std::vector<qc::SparseRows> out(static_cast<size_t>(n));
  std::vector<std::vector<float>> tables(static_cast<size_t>(n));
  std::vector<qc::Status> st(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      const SparseInput& x = in[static_cast<size_t>(r)];
      qc::Communicator* comm = comms[static_cast<size_t>(r)].get();
      if (dense) {
        tables[static_cast<size_t>(r)].assign(nrows * row_len, -7.0f);
        st[static_cast<size_t>(r)] = qc::comm_sparse_allreduce_dense(
            comm, x.indices.data(), x.values.data(), x.indices.size(), row_len, nrows,
            tables[static_cast<size_t>(r)].data(), QC_DTYPE_FLOAT32, QC_OP_SUM, nullptr);
      } else {
        st[static_cast<size_t>(r)] = qc::comm_sparse_allreduce(
            comm, x.indices.data(), x.values.data(), x.indices.size(), row_len, QC_DTYPE_FLOAT32,
            QC_OP_SUM, nullptr, &out[static_cast<size_t>(r)]);
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) ASSERT_TRUE(st[static_cast<size_t>(r)].is_ok()) << st[static_cast<size_t>(r)].message();
  if (dense) {
    // Back to rows: the union's rows; every other row exactly zero.
    for (int r = 0; r < n; ++r) {
      const std::vector<float>& t = tables[static_cast<size_t>(r)];
      for (size_t row = 0; row < nrows; ++row) {
        const bool in_union = exact.count(static_cast<int64_t>(row)) > 0;
        for (size_t j = 0; j < row_len && !in_union; ++j) {
          ASSERT_EQ(t[row * row_len + j], 0.0f) << "rank " << r << " row " << row;
        }
        if (!in_union) continue;
        out[static_cast<size_t>(r)].indices.push_back(static_cast<int64_t>(row));
        out[static_cast<size_t>(r)].values.insert(out[static_cast<size_t>(r)].values.end(),
                                                  t.begin() + row * row_len,
                                                  t.begin() + (row + 1) * row_len);
      }
    }
  }
  for (int r = 1; r < n; ++r) {
    EXPECT_EQ(out[static_cast<size_t>(r)].indices, out[0].indices) << "rank " << r;
    EXPECT_EQ(out[static_cast<size_t>(r)].values, out[0].values) << "rank " << r;
  }
  ASSERT_EQ(out[0].indices.size(), exact.size());
  const bool twice = schedule == qc::SparseSchedule::kScatterReduce ||
                     schedule == qc::SparseSchedule::kDensify ||
                     (schedule == qc::SparseSchedule::kAuto && (algorithm == QC_ALGO_SRA || mode == 3));
  size_t k = 0;
  for (const auto& e : exact) {
    ASSERT_EQ(out[0].indices[k], e.first);
    // none: float32 additions; minmax 8: each rank's row within one step of
    // its range (at most twice its largest |value|); sra and densify
    // requantize the owner's sum once more (its range: twice the sum of
    // the rows' largest |value|s, plus the first quantization's error).
    const double step = 2.0 * row_scale[e.first] / 255.0;
    const double bound = 1e-6 * (1 + magnitude[e.first]) +
                         (codec == QC_CODEC_NONE ? 0.0 : twice ? 2.2 * step : step);
    for (size_t j = 0; j < row_len; ++j) {
      ASSERT_NEAR(out[0].values[k * row_len + j], e.second[j], bound)
          << "row " << e.first << " column " << j;
    }
    ++k;
  }
  if (schedule != qc::SparseSchedule::kAuto) return;
  // The emulation: the same bits.
  std::vector<const int64_t*> idx;
  std::vector<const void*> val;
  std::vector<size_t> nnz;
  for (const SparseInput& x : in) {
    idx.push_back(x.indices.data());
    val.push_back(x.values.data());
    nnz.push_back(x.indices.size());
  }
  if (dense) {
    std::vector<std::vector<float>> em(static_cast<size_t>(n), std::vector<float>(nrows * row_len));
    std::vector<void*> em_ptrs;
    for (auto& t : em) em_ptrs.push_back(t.data());
    ASSERT_EQ(qc_emulate_sparse_allreduce_dense(n, idx.data(), val.data(), nnz.data(), row_len,
                                                nrows, em_ptrs.data(), QC_DTYPE_FLOAT32,
                                                QC_OP_SUM, nullptr, 0, &p),
              QC_SUCCESS) << qc_last_error();
    for (int r = 0; r < n; ++r) EXPECT_EQ(em[static_cast<size_t>(r)], tables[0]) << "rank " << r;
  } else {
    qc_sparse_result_t res = nullptr;
    ASSERT_EQ(qc_emulate_sparse_allreduce(n, idx.data(), val.data(), nnz.data(), row_len,
                                          QC_DTYPE_FLOAT32, QC_OP_SUM, nullptr, 0, &p, &res),
              QC_SUCCESS) << qc_last_error();
    size_t rows = 0;
    ASSERT_EQ(qc_sparse_result_nnz(res, &rows), QC_SUCCESS);
    qc::SparseRows em;
    em.indices.resize(rows);
    em.values.resize(rows * row_len);
    ASSERT_EQ(qc_sparse_result_copy(res, em.indices.data(), em.values.data(), rows), QC_SUCCESS);
    EXPECT_EQ(em.indices, out[0].indices);
    EXPECT_EQ(em.values, out[0].values);
    EXPECT_EQ(qc_sparse_result_destroy(res), QC_SUCCESS);
  }
}

// One test per rank count: the whole sweep in one test outlasted its 120 s
// under ThreadSanitizer on a loaded 2-core machine.
class SparseAllreduceRanks : public ::testing::TestWithParam<int> {};

TEST_P(SparseAllreduceRanks, UnionOfRowsSummedAndBitIdentical) {
  using qc::SparseSchedule;
  const int n = GetParam();
  for (size_t row_len : {size_t{1}, size_t{7}, size_t{64}, size_t{1024}}) {
    for (qc_codec_t codec : {QC_CODEC_NONE, QC_CODEC_MINMAX}) {
      for (int mode : {0, 1, 2, 3}) {
        for (SparseSchedule s : {SparseSchedule::kAuto, SparseSchedule::kAllgather,
                                 SparseSchedule::kScatterReduce, SparseSchedule::kDensify}) {
          for (qc_algorithm_t a : {QC_ALGO_AUTO, QC_ALGO_SRA}) {
            if (s != SparseSchedule::kAuto && a == QC_ALGO_SRA) continue;  // forced anyway
            for (bool dense : {false, true}) {
              if (s == SparseSchedule::kDensify && !dense) continue;
              if (n == 8 && row_len == 1024) continue;  // time
              SCOPED_TRACE("n " + std::to_string(n) + " row_len " + std::to_string(row_len) +
                           " codec " + std::to_string(codec) + " mode " +
                           std::to_string(mode) + " schedule " +
                           qc::sparse_schedule_name(s) + " algorithm " + std::to_string(a) +
                           (dense ? " dense" : " sparse"));
              sparse_case(n, row_len, codec, mode, a, s, dense);
            }
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(SparseAllreduce, SparseAllreduceRanks, ::testing::Values(1, 2, 3, 5, 8));

// The model (sparse_plan.h): few random rows gather; rows every rank
// shares go to their owners; a table nearly full densifies; forcing wins.
TEST(SparsePlan, ChoosesByModeledBytes) {
  qc_policy_t p = QC_POLICY_INIT;
  p.codec = QC_CODEC_MINMAX;
  p.bits = 8;
  p.bucket_size = 64;
  std::unique_ptr<qc::Codec> codec;
  ASSERT_TRUE(qc::make_codec(p, QC_DTYPE_FLOAT32, &codec).is_ok());
  const int n = 4;
  auto shape = [&](uint64_t rows_per_owner, uint64_t extent, bool dense) {
    qc::SparseShape s;
    s.ranks = n;
    s.row_len = 64;
    s.counts.assign(n * n, rows_per_owner);
    s.extent = extent;
    s.dense_output = dense;
    return s;
  };
  using qc::SparseSchedule;
  // 1 % of a 65536-row table per rank, random: allgather.
  auto plan = qc::plan_sparse(shape(164, 65536, true), *codec, QC_ALGO_AUTO, SparseSchedule::kAuto);
  EXPECT_EQ(plan.schedule, SparseSchedule::kAllgather) << plan.why;
  EXPECT_NE(plan.why.find("auto"), std::string::npos) << plan.why;
  // Every rank has every row of a 4096-row table: the sum has 4096 rows, not
  // 16384, so sra beats allgather; densify beats both for a dense output.
  plan = qc::plan_sparse(shape(1024, 4096, false), *codec, QC_ALGO_AUTO, SparseSchedule::kAuto);
  EXPECT_EQ(plan.schedule, SparseSchedule::kScatterReduce) << plan.why;
  EXPECT_LT(plan.bytes[1], plan.bytes[0]);
  plan = qc::plan_sparse(shape(1024, 4096, true), *codec, QC_ALGO_AUTO, SparseSchedule::kAuto);
  EXPECT_EQ(plan.schedule, SparseSchedule::kDensify) << plan.why;
  // Random rows, the measured crossovers (docs/benchmarks.md) on a 65536 x
  // 64 table, where qc-perf's d x 65536 draws per rank give 65536 (1 -
  // exp(-d)) distinct rows: allgather at d = 0.1, sra at 0.3 and 0.5,
  // densify at 0.8 (sra there without a table to densify).
  plan = qc::plan_sparse(shape(6236 / 4, 65536, true), *codec, QC_ALGO_AUTO, SparseSchedule::kAuto);
  EXPECT_EQ(plan.schedule, SparseSchedule::kAllgather) << plan.why;
  plan = qc::plan_sparse(shape(16979 / 4, 65536, true), *codec, QC_ALGO_AUTO, SparseSchedule::kAuto);
  EXPECT_EQ(plan.schedule, SparseSchedule::kScatterReduce) << plan.why;
  plan = qc::plan_sparse(shape(25786 / 4, 65536, true), *codec, QC_ALGO_AUTO, SparseSchedule::kAuto);
  EXPECT_EQ(plan.schedule, SparseSchedule::kScatterReduce) << plan.why;
  plan = qc::plan_sparse(shape(36090 / 4, 65536, true), *codec, QC_ALGO_AUTO, SparseSchedule::kAuto);
  EXPECT_EQ(plan.schedule, SparseSchedule::kDensify) << plan.why;
  EXPECT_LT(plan.bytes[1], plan.bytes[2]);  // fewer bytes, but more work
  plan = qc::plan_sparse(shape(36090 / 4, 65536, false), *codec, QC_ALGO_AUTO, SparseSchedule::kAuto);
  EXPECT_EQ(plan.schedule, SparseSchedule::kScatterReduce) << plan.why;
  // Forced, and the policy's algorithm.
  plan = qc::plan_sparse(shape(1024, 4096, true), *codec, QC_ALGO_AUTO, SparseSchedule::kAllgather);
  EXPECT_EQ(plan.schedule, SparseSchedule::kAllgather);
  plan = qc::plan_sparse(shape(1, 4096, false), *codec, QC_ALGO_SRA, SparseSchedule::kAuto);
  EXPECT_EQ(plan.schedule, SparseSchedule::kScatterReduce);
  plan = qc::plan_sparse(shape(1024, 4096, false), *codec, QC_ALGO_RING, SparseSchedule::kAuto);
  EXPECT_EQ(plan.schedule, SparseSchedule::kAllgather);
  // densify without a table: allgather, and the reason says so.
  plan = qc::plan_sparse(shape(1024, 4096, false), *codec, QC_ALGO_AUTO, SparseSchedule::kDensify);
  EXPECT_EQ(plan.schedule, SparseSchedule::kAllgather);
  EXPECT_NE(plan.why.find("dense output"), std::string::npos) << plan.why;
}

}  // namespace

// The public entry points: a result handle's rows equal the dense table's
// non-zero rows; capacity and handle errors; an index out of range fails
// every rank (its own INVALID_ARGUMENT, the peers MISMATCH) and leaves the
// communicator usable; ranks that disagree on row_len get MISMATCH.

namespace {

TEST(SparseAllreduceApi, ResultHandleDenseTableAndErrors) {
  const int n = 3;
  const size_t row_len = 4, nrows = 50;
  qct::Group g(n, 20.0);
  ASSERT_TRUE(g.ok());
  std::vector<std::vector<int64_t>> idx = {{5, 1, 5}, {}, {49, 1}};
  std::vector<std::vector<float>> val(n);
  for (int r = 0; r < n; ++r)
    for (size_t k = 0; k < idx[r].size() * row_len; ++k) val[r].push_back(static_cast<float>(r + 1) * 0.25f * static_cast<float>(k + 1));
  std::vector<qc_sparse_result_t> res(n, nullptr);
  std::vector<std::vector<float>> dense(n, std::vector<float>(nrows * row_len, -1.0f));
  std::vector<qc_status_t> s1(n), s2(n);
  qct::run_ranks(n, [&](int r) {
    s1[r] = qc_sparse_allreduce(g[r], idx[r].data(), val[r].data(), idx[r].size(), row_len,
                                QC_DTYPE_FLOAT32, QC_OP_SUM, "emb", &res[r]);
    s2[r] = qc_sparse_allreduce_dense(g[r], idx[r].data(), val[r].data(), idx[r].size(), row_len,
                                      nrows, dense[r].data(), QC_DTYPE_FLOAT32, QC_OP_SUM, "emb");
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(s1[r], QC_SUCCESS) << qc_last_error();
    ASSERT_EQ(s2[r], QC_SUCCESS) << qc_last_error();
    size_t rows = 0;
    ASSERT_EQ(qc_sparse_result_nnz(res[r], &rows), QC_SUCCESS);
    ASSERT_EQ(rows, 3u);  // {1, 5, 49}
    std::vector<int64_t> got_idx(rows);
    std::vector<float> got(rows * row_len);
    EXPECT_EQ(qc_sparse_result_copy(res[r], got_idx.data(), got.data(), rows - 1),
              QC_ERROR_INVALID_ARGUMENT);
    ASSERT_EQ(qc_sparse_result_copy(res[r], got_idx.data(), got.data(), rows), QC_SUCCESS);
    EXPECT_EQ(got_idx, (std::vector<int64_t>{1, 5, 49}));
    for (size_t row = 0; row < nrows; ++row) {
      const auto at = std::find(got_idx.begin(), got_idx.end(), static_cast<int64_t>(row));
      for (size_t j = 0; j < row_len; ++j) {
        const float want = at == got_idx.end() ? 0.0f : got[static_cast<size_t>(at - got_idx.begin()) * row_len + j];
        EXPECT_EQ(dense[r][row * row_len + j], want) << "rank " << r << " row " << row;
      }
    }
    EXPECT_EQ(qc_sparse_result_destroy(res[r]), QC_SUCCESS);
    EXPECT_EQ(qc_sparse_result_destroy(res[r]), QC_ERROR_INVALID_ARGUMENT);
  }
  // An index out of range on rank 1: its own error, MISMATCH elsewhere, no wait.
  std::vector<int64_t> bad = {7, static_cast<int64_t>(nrows)};
  std::vector<float> v(2 * row_len, 1.0f);
  qct::run_ranks(n, [&](int r) {
    const std::vector<int64_t>& i = r == 1 ? bad : idx[0];
    s1[r] = qc_sparse_allreduce_dense(g[r], i.data(), v.data(), 2, row_len, nrows,
                                      dense[r].data(), QC_DTYPE_FLOAT32, QC_OP_SUM, "emb");
  });
  EXPECT_EQ(s1[1], QC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(s1[0], QC_ERROR_MISMATCH);
  EXPECT_EQ(s1[2], QC_ERROR_MISMATCH);
  // Still usable.
  qct::run_ranks(n, [&](int r) {
    s1[r] = qc_sparse_allreduce_dense(g[r], idx[r].data(), val[r].data(), idx[r].size(), row_len,
                                      nrows, dense[r].data(), QC_DTYPE_FLOAT32, QC_OP_AVG, "emb");
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(s1[r], QC_SUCCESS) << "rank " << r;
  // row_len disagreement: MISMATCH on every rank.
  qct::run_ranks(n, [&](int r) {
    qc_sparse_result_t out = nullptr;
    s1[r] = qc_sparse_allreduce(g[r], idx[0].data(), val[0].data(), 2, r == 2 ? 2 : 4,
                                QC_DTYPE_FLOAT32, QC_OP_SUM, "emb", &out);
    EXPECT_EQ(out, nullptr);
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(s1[r], QC_ERROR_MISMATCH) << "rank " << r;
}

}  // namespace

// The non-blocking forms: the same bits as the blocking ones; a result is
// refused until its request has succeeded (a failed one never fills it)
// and may be destroyed while its request runs.
namespace {

TEST(SparseAllreduceApi, NonBlockingFormsEqualBlocking) {
  const int n = 3;
  const size_t row_len = 5, nrows = 40;
  qct::Group g(n, 20.0);
  ASSERT_TRUE(g.ok());
  qc_policy_t p = QC_POLICY_INIT;
  p.codec = QC_CODEC_MINMAX;
  p.bits = 4;
  p.min_compress_bytes = 0;
  for (int r = 0; r < n; ++r) ASSERT_EQ(qc_comm_set_layer_policy(g[r], "emb", &p), QC_SUCCESS);
  std::vector<std::vector<int64_t>> idx = {{3, 39, 3, 8}, {8}, {}};
  std::vector<std::vector<float>> val(n);
  for (int r = 0; r < n; ++r)
    for (size_t k = 0; k < idx[r].size() * row_len; ++k)
      val[r].push_back(std::sin(static_cast<float>(r * 100 + k)));
  std::vector<qc_sparse_result_t> blocking(n, nullptr), started(n, nullptr), dropped(n, nullptr);
  std::vector<std::vector<float>> dense_b(n, std::vector<float>(nrows * row_len));
  std::vector<std::vector<float>> dense_i(n, std::vector<float>(nrows * row_len));
  std::vector<qc_status_t> st(n, QC_SUCCESS);
  qct::run_ranks(n, [&](int r) {
    qc_request_t a = nullptr, b = nullptr, c = nullptr;
    qc_status_t s = qc_sparse_allreduce(g[r], idx[r].data(), val[r].data(), idx[r].size(),
                                        row_len, QC_DTYPE_FLOAT32, QC_OP_SUM, "emb", &blocking[r]);
    if (s == QC_SUCCESS)
      s = qc_sparse_allreduce_dense(g[r], idx[r].data(), val[r].data(), idx[r].size(), row_len,
                                    nrows, dense_b[r].data(), QC_DTYPE_FLOAT32, QC_OP_SUM, "emb");
    if (s == QC_SUCCESS)
      s = qc_isparse_allreduce(g[r], idx[r].data(), val[r].data(), idx[r].size(), row_len,
                               QC_DTYPE_FLOAT32, QC_OP_SUM, "emb", &started[r], &a);
    if (s == QC_SUCCESS)
      s = qc_isparse_allreduce_dense(g[r], idx[r].data(), val[r].data(), idx[r].size(), row_len,
                                     nrows, dense_i[r].data(), QC_DTYPE_FLOAT32, QC_OP_SUM,
                                     "emb", &b);
    // Destroyed while its request may still run: the request finishes anyway.
    if (s == QC_SUCCESS)
      s = qc_isparse_allreduce(g[r], idx[r].data(), val[r].data(), idx[r].size(), row_len,
                               QC_DTYPE_FLOAT32, QC_OP_SUM, "emb", &dropped[r], &c);
    if (s == QC_SUCCESS) s = qc_sparse_result_destroy(dropped[r]);
    for (qc_request_t q : {a, b, c}) {
      if (q == nullptr) continue;
      const qc_status_t w = qc_request_wait(q);
      if (s == QC_SUCCESS) s = w;
      qc_request_free(q);
    }
    st[r] = s;
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(st[r], QC_SUCCESS) << "rank " << r;
    size_t rows_b = 0, rows_i = 0;
    ASSERT_EQ(qc_sparse_result_nnz(blocking[r], &rows_b), QC_SUCCESS);
    ASSERT_EQ(qc_sparse_result_nnz(started[r], &rows_i), QC_SUCCESS);
    ASSERT_EQ(rows_b, 3u);  // {3, 8, 39}
    ASSERT_EQ(rows_i, rows_b);
    std::vector<int64_t> ib(rows_b), ii(rows_i);
    std::vector<float> vb(rows_b * row_len), vi(rows_i * row_len);
    ASSERT_EQ(qc_sparse_result_copy(blocking[r], ib.data(), vb.data(), rows_b), QC_SUCCESS);
    ASSERT_EQ(qc_sparse_result_copy(started[r], ii.data(), vi.data(), rows_i), QC_SUCCESS);
    EXPECT_EQ(ii, ib);
    EXPECT_EQ(vi, vb);
    EXPECT_EQ(dense_i[r], dense_b[r]);
    EXPECT_EQ(dense_b[r], dense_b[0]);
    EXPECT_EQ(qc_sparse_result_destroy(blocking[r]), QC_SUCCESS);
    EXPECT_EQ(qc_sparse_result_destroy(started[r]), QC_SUCCESS);
  }
  // A request that fails (row_len differs on rank 1) leaves its result empty.
  std::vector<qc_sparse_result_t> failed(n, nullptr);
  std::vector<qc_status_t> nnz_status(n);
  std::vector<std::string> nnz_message(n);
  qct::run_ranks(n, [&](int r) {
    qc_request_t q = nullptr;
    st[r] = qc_isparse_allreduce(g[r], idx[0].data(), val[0].data(), 1, r == 1 ? 4 : 5,
                                 QC_DTYPE_FLOAT32, QC_OP_SUM, "emb", &failed[r], &q);
    if (st[r] != QC_SUCCESS) return;
    st[r] = qc_request_wait(q);
    qc_request_free(q);
    size_t rows = 0;
    nnz_status[r] = qc_sparse_result_nnz(failed[r], &rows);
    nnz_message[r] = qc_last_error();
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(st[r], QC_ERROR_MISMATCH) << "rank " << r;
    EXPECT_EQ(nnz_status[r], QC_ERROR_INVALID_ARGUMENT) << "rank " << r;
    EXPECT_NE(nnz_message[r].find("has no rows yet"), std::string::npos) << nnz_message[r];
    EXPECT_EQ(qc_sparse_result_destroy(failed[r]), QC_SUCCESS);
  }
}

}  // namespace
