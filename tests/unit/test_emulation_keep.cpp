// EmulationKeep (src/core/emulation_keep.h): what qc_emulate_* keep from
// one call to the next. A set over the limit is freed, a kept set comes
// back whole (capacity, not contents, is the point), a larger set replaces
// a smaller one, and a call with fewer ranks takes only its own.
#include <gtest/gtest.h>

#include <vector>

#include "core/emulation_keep.h"

namespace qc {
namespace {

std::vector<RankBuffers> buffers(size_t ranks, size_t floats) {
  std::vector<RankBuffers> v(ranks);
  for (RankBuffers& b : v) {
    b.work.resize(floats);
    b.scratch.messages.resize(2);
    b.scratch.messages[0].reserve_payload(floats);
  }
  return v;
}

class EmulationKeepTest : public ::testing::Test {
 protected:
  void SetUp() override { EmulationKeep::take(0); }  // whatever an earlier test kept
  void TearDown() override { EmulationKeep::take(0); }
};

TEST_F(EmulationKeepTest, BytesCountWhatTheBuffersHold) {
  const auto v = buffers(1, 1000);
  EXPECT_GE(v[0].bytes(), 1000 * sizeof(float) + 1000);
  EXPECT_LT(v[0].bytes(), 2 * (1000 * sizeof(float) + 1000) + 1024);
}

TEST_F(EmulationKeepTest, ASetOverTheLimitIsNotKept) {
  auto v = buffers(4, 1000);
  const size_t bytes = v[0].bytes() * 4;
  EmulationKeep::give_back(std::move(v), bytes - 1);
  EXPECT_EQ(EmulationKeep::kept_bytes(), 0u);
  EXPECT_TRUE(EmulationKeep::take(4).empty());
}

TEST_F(EmulationKeepTest, AKeptSetComesBackWithItsCapacity) {
  auto v = buffers(4, 1000);
  const size_t bytes = v[0].bytes() * 4;
  EmulationKeep::give_back(std::move(v), bytes);
  EXPECT_EQ(EmulationKeep::kept_bytes(), bytes);
  auto back = EmulationKeep::take(4);
  ASSERT_EQ(back.size(), 4u);
  for (const RankBuffers& b : back) {
    EXPECT_GE(b.work.capacity(), 1000u);
    ASSERT_EQ(b.scratch.messages.size(), 2u);
    EXPECT_GE(b.scratch.messages[0].payload_capacity(), 1000u);
  }
  EXPECT_EQ(EmulationKeep::kept_bytes(), 0u);  // taken: the next call starts fresh
  EXPECT_TRUE(EmulationKeep::take(4).empty());
}

TEST_F(EmulationKeepTest, FewerRanksTakeTheirShare) {
  EmulationKeep::give_back(buffers(8, 100), size_t{1} << 30);
  EXPECT_EQ(EmulationKeep::take(3).size(), 3u);
}

TEST_F(EmulationKeepTest, TheLargerOfTwoSetsIsKept) {
  EmulationKeep::give_back(buffers(2, 100), size_t{1} << 30);
  const size_t small = EmulationKeep::kept_bytes();
  EmulationKeep::give_back(buffers(2, 5000), size_t{1} << 30);
  const size_t large = EmulationKeep::kept_bytes();
  EXPECT_GT(large, small);
  EmulationKeep::give_back(buffers(2, 100), size_t{1} << 30);  // two calls at once
  EXPECT_EQ(EmulationKeep::kept_bytes(), large);
  const auto back = EmulationKeep::take(2);
  ASSERT_EQ(back.size(), 2u);
  EXPECT_GE(back[0].work.capacity(), 5000u);
}

}  // namespace
}  // namespace qc
