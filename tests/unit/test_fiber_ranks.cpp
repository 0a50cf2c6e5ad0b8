// FiberRanks (src/core/fiber_ranks.h): virtual ranks as fibers on a few
// threads, talking through a local group whose waits yield to the next
// rank. The transport's promises hold as they do for threads: messages in
// order, a failure breaks every waiting rank at once, a wait past its
// deadline times out, and a body that throws fails only its own rank.
#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/fiber_ranks.h"
#include "core/transports/local_transport.h"

namespace qc {
namespace {

// A group of n ranks over `fibers`.
std::vector<std::unique_ptr<LocalTransport>> group(int n, FiberRanks* fibers) {
  auto g = std::make_shared<LocalGroup>(n, fibers);
  std::vector<std::unique_ptr<LocalTransport>> t;
  for (int r = 0; r < n; ++r) t.push_back(std::make_unique<LocalTransport>(g, r));
  return t;
}

Deadline in_seconds(double s) { return deadline_after(s); }

// Each round, rank r sends round * 1000 + r to r + 1 and receives from
// r - 1: every rank waits on a neighbour that may not have run yet.
Status ring_rounds(LocalTransport& t, int rounds, std::vector<uint64_t>* got) {
  const int n = t.size(), r = t.rank();
  for (int k = 0; k < rounds; ++k) {
    uint64_t out = static_cast<uint64_t>(k) * 1000 + r, in = ~uint64_t{0};
    Request reqs[2];
    Status s = t.post_send((r + 1) % n, k, &out, sizeof out, sizeof out, &reqs[0]);
    if (s) s = t.post_recv((r + n - 1) % n, k, &in, sizeof in, &reqs[1]);
    if (s) s = t.wait_all(reqs, 2, in_seconds(3600));
    if (!s) return s;
    got->push_back(in);
  }
  return Status::ok();
}

TEST(FiberRanks, RingRoundsArriveInOrderOnAnyThreadCount) {
  for (int n : {1, 2, 3, 64, 1000}) {
    for (int threads : {1, 2, 3}) {
      SCOPED_TRACE("ranks " + std::to_string(n) + ", threads " + std::to_string(threads));
      FiberRanks fibers(n, threads);
      EXPECT_EQ(fibers.threads(), std::min(n, threads));
      auto t = group(n, &fibers);
      const int rounds = 5;
      std::vector<std::vector<uint64_t>> got(n);
      std::vector<Status> results;
      ASSERT_TRUE(fibers.run([&](int r) { return ring_rounds(*t[r], rounds, &got[r]); }, &results)
                      .is_ok());
      for (int r = 0; r < n; ++r) {
        ASSERT_TRUE(results[r].is_ok()) << "rank " << r << ": " << results[r].message();
        ASSERT_EQ(got[r].size(), static_cast<size_t>(rounds));
        for (int k = 0; k < rounds; ++k)
          EXPECT_EQ(got[r][k], static_cast<uint64_t>(k) * 1000 + (r + n - 1) % n);
      }
      t.clear();  // the ranks leave the group while the scheduler lives
    }
  }
}

// Rank 0 fails before its first send and breaks the group, as
// run_collective does: every other rank, waiting on its neighbour, gets the
// failure instead of waiting for its deadline (an hour: a rank left
// waiting holds the test past ctest's limit).
TEST(FiberRanks, AFailedRankReleasesEveryWaitingRank) {
  const int n = 13;
  FiberRanks fibers(n, 2);
  auto t = group(n, &fibers);
  std::vector<std::vector<uint64_t>> got(n);
  std::vector<Status> results;
  ASSERT_TRUE(fibers.run([&](int r) {
    if (r == 0) {
      Status s = invalid_argument("rank 0 had a bad argument");
      t[0]->abort(s);
      return s;
    }
    return ring_rounds(*t[r], 3, &got[r]);
  }, &results).is_ok());
  EXPECT_EQ(results[0].code(), QC_ERROR_INVALID_ARGUMENT);
  for (int r = 1; r < n; ++r) {
    EXPECT_EQ(results[r].code(), QC_ERROR_INVALID_ARGUMENT) << "rank " << r;
    EXPECT_NE(results[r].message().find("bad argument"), std::string::npos);
  }
  t.clear();
}

// A rank waiting for a message nobody sends times out at its deadline,
// while the ranks that have nothing to wait for finish.
TEST(FiberRanks, AWaitPastItsDeadlineTimesOut) {
  const int n = 3;
  FiberRanks fibers(n, 1);
  auto t = group(n, &fibers);
  std::vector<Status> results;
  ASSERT_TRUE(fibers.run([&](int r) {
    if (r != 1) return Status::ok();
    uint64_t in = 0;
    Request req;
    Status s = t[1]->post_recv(2, 7, &in, sizeof in, &req);
    return s ? t[1]->wait_all(&req, 1, in_seconds(0.2)) : s;
  }, &results).is_ok());
  EXPECT_TRUE(results[0].is_ok());
  EXPECT_TRUE(results[2].is_ok());
  EXPECT_EQ(results[1].code(), QC_ERROR_TIMEOUT) << results[1].message();
  EXPECT_NE(results[1].message().find("rank 2"), std::string::npos) << results[1].message();
  t.clear();
}

// An exception ends only its own rank's body, as an internal error.
TEST(FiberRanks, ABodyThatThrowsFailsItsRankOnly) {
  const int n = 4;
  FiberRanks fibers(n, 2);
  std::vector<Status> results;
  ASSERT_TRUE(fibers.run([&](int r) -> Status {
    if (r == 2) throw std::runtime_error("boom");
    return Status::ok();
  }, &results).is_ok());
  for (int r = 0; r < n; ++r) {
    if (r == 2) {
      EXPECT_EQ(results[r].code(), QC_ERROR_INTERNAL);
      EXPECT_NE(results[r].message().find("boom"), std::string::npos);
    } else {
      EXPECT_TRUE(results[r].is_ok()) << "rank " << r;
    }
  }
}

}  // namespace
}  // namespace qc
