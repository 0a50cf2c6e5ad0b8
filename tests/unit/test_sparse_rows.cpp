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

void sparse_case(int n, size_t row_len, qc_codec_t codec, int overlap_mode,
                 qc_algorithm_t algorithm) {
  std::vector<std::unique_ptr<qc::Communicator>> comms;
  ASSERT_TRUE(qc::create_local_group(n, 30.0, &comms).is_ok());
  qc_policy_t p = QC_POLICY_INIT;
  p.codec = codec;
  p.bits = 8;
  p.min_compress_bytes = 0;
  p.algorithm = algorithm;
  for (auto& c : comms) c->policies.set("*", p);
  std::mt19937_64 rng(static_cast<uint64_t>(n * 131 + row_len + overlap_mode));
  std::vector<SparseInput> in(static_cast<size_t>(n));
  std::map<int64_t, std::vector<double>> exact;
  std::map<int64_t, double> magnitude;
  // Per index: the sum over ranks of the largest |value| of that rank's
  // (duplicate-summed) row, which bounds the row's quantization range.
  std::map<int64_t, double> row_scale;
  for (int r = 0; r < n; ++r) {
    // 0: overlapping random rows with duplicates; 1: disjoint ranges; 2: rank 0 empty.
    std::map<int64_t, std::vector<double>> canon;  // this rank's rows, duplicates summed
    const size_t nnz = overlap_mode == 2 && r == 0 ? 0 : 1 + rng() % 40;
    for (size_t k = 0; k < nnz; ++k) {
      const int64_t i = overlap_mode == 1 ? r * 1000 + static_cast<int64_t>(rng() % 50)
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
  std::vector<qc::SparseRows> out(static_cast<size_t>(n));
  std::vector<qc::Status> st(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      const SparseInput& x = in[static_cast<size_t>(r)];
      st[static_cast<size_t>(r)] = qc::comm_sparse_allreduce(
          comms[static_cast<size_t>(r)].get(), x.indices.data(), x.values.data(), x.indices.size(),
          row_len, 0, QC_DTYPE_FLOAT32, QC_OP_SUM, nullptr, &out[static_cast<size_t>(r)]);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) ASSERT_TRUE(st[static_cast<size_t>(r)].is_ok()) << st[static_cast<size_t>(r)].message();
  for (int r = 1; r < n; ++r) {
    EXPECT_EQ(out[static_cast<size_t>(r)].indices, out[0].indices) << "rank " << r;
    EXPECT_EQ(out[static_cast<size_t>(r)].values, out[0].values) << "rank " << r;
  }
  ASSERT_EQ(out[0].indices.size(), exact.size());
  size_t k = 0;
  for (const auto& e : exact) {
    ASSERT_EQ(out[0].indices[k], e.first);
    // none: float32 additions; minmax 8: each rank's row within one step of
    // its range (at most twice its largest |value|); the scatter-reduce
    // requantizes the owner's sum once more (its range: twice the sum of
    // the rows' largest |value|s, plus the first quantization's error).
    const double step = 2.0 * row_scale[e.first] / 255.0;
    const double bound = 1e-6 * (1 + magnitude[e.first]) +
                         (codec == QC_CODEC_NONE ? 0.0
                          : algorithm == QC_ALGO_SRA ? 2.2 * step : step);
    for (size_t j = 0; j < row_len; ++j) {
      ASSERT_NEAR(out[0].values[k * row_len + j], e.second[j], bound)
          << "row " << e.first << " column " << j;
    }
    ++k;
  }
}

TEST(SparseAllreduce, UnionOfRowsSummedAndBitIdentical) {
  for (int n : {1, 2, 3, 5}) {
    for (size_t row_len : {size_t{1}, size_t{7}, size_t{64}, size_t{1024}}) {
      for (qc_codec_t codec : {QC_CODEC_NONE, QC_CODEC_MINMAX}) {
        for (int mode : {0, 1, 2}) {
          for (qc_algorithm_t a : {QC_ALGO_AUTO, QC_ALGO_SRA}) {
            SCOPED_TRACE("n " + std::to_string(n) + " row_len " + std::to_string(row_len) +
                         " codec " + std::to_string(codec) + " mode " + std::to_string(mode) +
                         " algorithm " + std::to_string(a));
            sparse_case(n, row_len, codec, mode, a);
          }
        }
      }
    }
  }
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
