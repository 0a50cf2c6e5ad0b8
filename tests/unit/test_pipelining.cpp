// Pipelined schedules (QC_PIPELINE_CHUNK): SRA, ring and alltoall cut their
// blocks into pieces whose encode, transfer and decode overlap. The promise:
// the same bits as whole blocks, residuals included, for every codec that
// may be cut (pieces on bucket boundaries), and whole blocks for those that
// may not; in place (sendbuf == recvbuf) as out of place.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "fault_transport.h"
#include "qc.h"
#include "test_util.h"

using namespace qct;

namespace {

struct Case {
  const char* name;
  qc_codec_t codec;
  int bits;
  qc_rounding_t rounding;
  int ef;
  float topk_ratio;
};

const Case kCases[] = {
    {"minmax4", QC_CODEC_MINMAX, 4, QC_ROUND_NEAREST_EVEN, 0, 0.0f},
    {"minmax2_ef", QC_CODEC_MINMAX, 2, QC_ROUND_STOCHASTIC, 1, 0.0f},
    {"qsgd4", QC_CODEC_QSGD, 4, QC_ROUND_STOCHASTIC, 0, 0.0f},
    {"onebit_ef", QC_CODEC_ONEBIT, 1, QC_ROUND_NEAREST_EVEN, 1, 0.0f},
    {"fp16", QC_CODEC_FP16, 8, QC_ROUND_NEAREST_EVEN, 0, 0.0f},
    {"none", QC_CODEC_NONE, 8, QC_ROUND_NEAREST_EVEN, 0, 0.0f},
    {"topk_ef", QC_CODEC_TOPK, 8, QC_ROUND_NEAREST_EVEN, 1, 0.05f},
};

struct Outcome {
  std::vector<std::vector<float>> out;  // per rank: allreduce, then alltoall
  std::vector<Bytes> residuals;         // per rank
  std::vector<uint64_t> wire;           // per rank: bytes sent
};

// Two allreduces of `algorithm` (so error feedback carries), in place or
// not, and one alltoall on every rank of a fresh group made with
// QC_PIPELINE_CHUNK=`chunk` ("0": whole). The local transport's transfers
// do not overlap compute, so the planner would not cut the ring there;
// `overlap` makes each rank's transport claim they do (fault_transport.h,
// no fault), which is how the ring's pieces run here.
Outcome run(int n, const Case& c, qc_algorithm_t algorithm, const char* chunk, size_t count,
            bool in_place = false, bool overlap = true) {
  EXPECT_EQ(setenv("QC_PIPELINE_CHUNK", chunk, 1), 0);
  Group g(n);
  unsetenv("QC_PIPELINE_CHUNK");
  EXPECT_TRUE(g.ok());
  if (overlap) {
    qcfault::FaultPlan claim;
    claim.claim_overlap = true;
    for (int r = 0; r < n; ++r) qcfault::install(g[r], claim);
  }
  qc_policy_t p = make_policy(algorithm);
  p.codec = c.codec;
  p.bits = c.bits;
  p.rounding = c.rounding;
  p.error_feedback = c.ef;
  p.seed = 7;
  if (c.topk_ratio > 0) p.topk_ratio = c.topk_ratio;
  EXPECT_EQ(g.set_policy("*", p), QC_SUCCESS);
  Outcome o;
  o.out.resize(static_cast<size_t>(n));
  o.residuals.resize(static_cast<size_t>(n));
  o.wire.resize(static_cast<size_t>(n));
  run_ranks(n, [&](int r) {
    const auto ur = static_cast<size_t>(r);
    qc_error_buffer_t eb = nullptr;
    if (c.ef) {
      EXPECT_EQ(qc_error_buffer_create(g[r], count, &eb), QC_SUCCESS);
    }
    std::vector<float>& out = o.out[ur];
    for (int call = 0; call < 2; ++call) {
      auto in = random_inputs(1, count, 100 * static_cast<uint64_t>(call) + ur)[0];
      std::vector<float> res(count);
      std::vector<float>& result = in_place ? in : res;
      EXPECT_EQ(qc_allreduce(g[r], in.data(), result.data(), count, QC_DTYPE_FLOAT32, QC_OP_SUM,
                             nullptr, eb, nullptr),
                QC_SUCCESS)
          << qc_last_error();
      out.insert(out.end(), result.begin(), result.end());
    }
    const size_t per_rank = count / static_cast<size_t>(n) + 3;
    auto send = random_inputs(1, per_rank * static_cast<size_t>(n), 555 + ur)[0];
    std::vector<float> recv(send.size());
    EXPECT_EQ(qc_alltoall(g[r], send.data(), recv.data(), per_rank, QC_DTYPE_FLOAT32, nullptr,
                          nullptr),
              QC_SUCCESS)
        << qc_last_error();
    out.insert(out.end(), recv.begin(), recv.end());
    if (eb != nullptr) {
      size_t size = 0;
      EXPECT_EQ(qc_error_buffer_save(eb, nullptr, 0, &size), QC_SUCCESS);
      o.residuals[ur].resize(size);
      EXPECT_EQ(qc_error_buffer_save(eb, o.residuals[ur].data(), size, &size), QC_SUCCESS);
      qc_error_buffer_destroy(eb);
    }
    qc_stats_t stats{};
    stats.struct_size = sizeof stats;
    EXPECT_EQ(qc_comm_get_stats(g[r], &stats), QC_SUCCESS);
    o.wire[ur] = stats.wire_bytes;
  });
  return o;
}

// The allreduce algorithm, the rank count, the case.
using Param = std::tuple<qc_algorithm_t, int, size_t>;

class Pipelining : public ::testing::TestWithParam<Param> {};

// Every output and residual of `got` is the bits of `want`'s.
void expect_same_bits(const Outcome& want, const Outcome& got, int n, const std::string& what) {
  for (int r = 0; r < n; ++r) {
    const auto ur = static_cast<size_t>(r);
    ASSERT_EQ(want.out[ur].size(), got.out[ur].size());
    EXPECT_EQ(0, std::memcmp(want.out[ur].data(), got.out[ur].data(),
                             want.out[ur].size() * sizeof(float)))
        << what << ", rank " << r;
    EXPECT_EQ(want.residuals[ur], got.residuals[ur]) << what << ", rank " << r;
  }
}

// Blocks of about 2500 values: 128-value buckets, uneven last pieces.
size_t count_for(int n) { return 2500 * static_cast<size_t>(n) + 17; }

// 1000 bytes = 250 values, rounded up to a bucket multiple where needed.
const char kPieces[] = "1000";

TEST_P(Pipelining, PiecesGiveTheBitsOfWholeBlocks) {
  const qc_algorithm_t algorithm = std::get<0>(GetParam());
  const int n = std::get<1>(GetParam());
  const Case& c = kCases[std::get<2>(GetParam())];
  const size_t count = count_for(n);
  const Outcome whole = run(n, c, algorithm, "0", count);
  const Outcome pieces = run(n, c, algorithm, kPieces, count);
  expect_same_bits(whole, pieces, n, c.name);
  // Pieces are messages of their own (more headers), except where the codec
  // may not be cut: then nothing changes at all.
  if (c.codec == QC_CODEC_TOPK) {
    EXPECT_EQ(pieces.wire, whole.wire) << "top-k must never be cut";
  } else if (n > 1) {
    EXPECT_GT(pieces.wire[0], whole.wire[0]) << c.name << ": the pieces were not cut";
  }
}

// sendbuf == recvbuf: the schedule reads its input where it writes its
// result, whole and in pieces; the bits of the out-of-place call.
TEST_P(Pipelining, InPlaceGivesTheBitsOfOutOfPlace) {
  const qc_algorithm_t algorithm = std::get<0>(GetParam());
  const int n = std::get<1>(GetParam());
  const Case& c = kCases[std::get<2>(GetParam())];
  const size_t count = count_for(n);
  const Outcome apart = run(n, c, algorithm, "0", count);
  const Outcome whole = run(n, c, algorithm, "0", count, /*in_place=*/true);
  const Outcome pieces = run(n, c, algorithm, kPieces, count, /*in_place=*/true);
  expect_same_bits(apart, whole, n, std::string(c.name) + " in place, whole");
  expect_same_bits(apart, pieces, n, std::string(c.name) + " in place, in pieces");
  EXPECT_EQ(whole.wire, apart.wire) << c.name << ": in place changed the messages";
}

INSTANTIATE_TEST_SUITE_P(
    CodecsAndRanks, Pipelining,
    ::testing::Combine(::testing::Values(QC_ALGO_SRA, QC_ALGO_RING),
                       ::testing::Values(1, 2, 3, 4, 7),
                       ::testing::Range(size_t{0}, sizeof(kCases) / sizeof(kCases[0]))),
    [](const ::testing::TestParamInfo<Param>& i) {
      return std::string(std::get<0>(i.param) == QC_ALGO_SRA ? "sra_" : "ring_") +
             kCases[std::get<2>(i.param)].name + "_n" + std::to_string(std::get<1>(i.param));
    });

// Over the local transport itself the planner cuts SRA (its pieces stay in
// cache) but not the ring (its hops would only wait more). Pieces are
// messages of their own, so the bytes the cut adds show what was cut: for
// SRA as much as where transfers overlap compute, for the ring less (only
// the alltoall's pieces, which every run has).
TEST(PipeliningPlan, LocalTransportCutsSraButNotTheRing) {
  const Case& c = kCases[0];
  const int n = 3;
  const size_t count = count_for(n);
  for (qc_algorithm_t algorithm : {QC_ALGO_SRA, QC_ALGO_RING}) {
    const char* name = algorithm == QC_ALGO_SRA ? "sra" : "ring";
    const Outcome whole = run(n, c, algorithm, "0", count, false, /*overlap=*/false);
    const Outcome cut = run(n, c, algorithm, kPieces, count, false, /*overlap=*/false);
    expect_same_bits(whole, cut, n, name);
    const Outcome whole_o = run(n, c, algorithm, "0", count, false, /*overlap=*/true);
    const Outcome cut_o = run(n, c, algorithm, kPieces, count, false, /*overlap=*/true);
    const uint64_t added_local = cut.wire[0] - whole.wire[0];
    const uint64_t added_overlap = cut_o.wire[0] - whole_o.wire[0];
    EXPECT_GT(added_local, 0u) << name << ": the alltoall is cut everywhere";
    if (algorithm == QC_ALGO_SRA) {
      EXPECT_EQ(added_local, added_overlap) << "SRA is cut on the local transport too";
    } else {
      EXPECT_LT(added_local, added_overlap) << "the ring stays whole on the local transport";
    }
  }
}

// A chunk so small that a block would be thousands of pieces is raised
// (at most 1024 pieces per block): still the bits of whole blocks.
TEST(PipeliningLimits, TinyChunksAreRaisedAndStillExact) {
  const Case& c = kCases[0];
  const size_t count = 300000;
  for (qc_algorithm_t algorithm : {QC_ALGO_SRA, QC_ALGO_RING}) {
    const Outcome whole = run(3, c, algorithm, "0", count);
    const Outcome tiny = run(3, c, algorithm, "4", count);
    for (size_t r = 0; r < 3; ++r) {
      EXPECT_EQ(0, std::memcmp(whole.out[r].data(), tiny.out[r].data(),
                               whole.out[r].size() * sizeof(float)))
          << "algorithm " << algorithm << ", rank " << r;
    }
  }
}

}  // namespace
