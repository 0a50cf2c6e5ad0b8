// Pipelined SRA, ring and alltoall (ScheduleShape::chunk: blocks cut into
// pieces, each piece's transfers in groups of their own) in the symbolic
// simulator (schedule_sim.h), for 1..64 ranks, with the host's and the
// device's view of when a transfer is visible. Every property the
// whole-block schedules have (test_schedules.cpp) is checked again —
// matching and progress, buffer hygiene per outstanding transfer, the
// allreduce's sums (SRA's in rank order, requantized at most twice; the
// ring's at most n times), decoded from one encode everywhere and safe in
// place, the alltoall's delivery — and the pieces themselves: every piece
// starts a multiple of `chunk` from its block's start and goes into slot
// block * pieces + c, each element is encoded exactly once as unpipelined,
// each piece takes the whole block's messages, and each output element
// goes through the whole schedule's steps in the same order.
// Internal API (the schedules): links the internal objects.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "core/schedules/registry.h"
#include "core/schedules/schedule.h"
#include "schedule_checks.h"
#include "schedule_sim.h"

namespace {

using qc::Schedule;
using qc::Step;
using qc::StepKind;
using qcsim::Collective;
using qcsim::ScheduleSim;
using qcsim::check_uncut;
using qcsim::play_both;

constexpr int kMaxRanks = 64;

// A call's values and the piece size it is cut into.
struct Cut {
  size_t count;
  size_t chunk;
};

// SRA's and the ring's counts are the allreduce's, in n blocks of count/n
// (the first count % n one value longer). Past 16 ranks, the two that give
// uneven and empty pieces; the rest only cost time.
std::vector<Cut> allreduce_cuts(int n) {
  const size_t un = static_cast<size_t>(n);
  std::vector<Cut> cuts = {
      {4 * 2 * un + un - 1, 4},  // blocks of 9 and 8: 3 pieces, the last 1 value or empty
      {un + 1, 1},               // blocks of 2 and 1: pieces of 1, the last empty but block 0's
  };
  if (n <= 16) {
    cuts.push_back({8 * un, 4});               // 2 whole pieces a block
    cuts.push_back({10 * un, 4});              // 3 pieces, the last of 2 values
    cuts.push_back({4 * 3 * un + un - 1, 4});  // 4 pieces, the last 1 value or empty
    cuts.push_back({3 * un + 2, 2});           // blocks of 4 and 3: pieces 2+2 and 2+1
    cuts.push_back({37 * un + 5, 2});          // 19 pieces
    cuts.push_back({4 * un, 4});               // blocks fit one piece: not cut
    cuts.push_back({0, 4});
  }
  return cuts;
}

// The alltoall's count is its block size, the same for every block: its
// pieces are never empty. Past 16 ranks, one uneven cut.
std::vector<Cut> alltoall_cuts(int n) {
  std::vector<Cut> cuts = {{10, 4}};
  if (n <= 16) {
    cuts.push_back({8, 4});
    cuts.push_back({2, 1});
    cuts.push_back({41, 3});  // 14 pieces, the last of 2 values
    cuts.push_back({4, 4});   // not cut
    cuts.push_back({0, 4});
  }
  return cuts;
}

size_t pieces_of(size_t values, size_t chunk) {
  return values <= chunk ? 1 : (values + chunk - 1) / chunk;
}

// Block b of an allreduce of `count` values over n ranks: its size.
size_t allreduce_block(size_t count, int n, int b) {
  const size_t un = static_cast<size_t>(n);
  return count / un + (static_cast<size_t>(b) < count % un ? 1 : 0);
}

std::string cut_label(const char* name, int n, const Cut& cut) {
  return qcsim::case_label(name, n, cut.count, 1) + " chunk=" + std::to_string(cut.chunk);
}

// A rank's sends, receives and waits; the waits must each name one group,
// a different one each.
struct Counted {
  int sends = 0, recvs = 0, waits = 0;
};

std::string count_steps(const std::string& label, int r, const Schedule& s, Counted* counted) {
  std::set<uint32_t> awaited;
  for (const Step& st : s.steps) {
    if (st.kind == StepKind::kSend) ++counted->sends;
    if (st.kind == StepKind::kRecv) ++counted->recvs;
    if (st.kind != StepKind::kWait) continue;
    ++counted->waits;
    if (st.group == qc::kAllGroups || !awaited.insert(st.group).second) {
      return label + ": rank " + std::to_string(r) + " waits on all groups or one twice";
    }
  }
  return "";
}

// The number of non-empty pieces of block b.
int block_pieces(const Cut& cut, int n, int b) {
  return static_cast<int>((allreduce_block(cut.count, n, b) + cut.chunk - 1) / cut.chunk);
}

// "" when rank r's schedule has these numbers of sends, receives and waits.
std::string expect_counts(const std::string& label, int r, const Counted& counted, int sends,
                          int recvs, int waits) {
  if (counted.sends == sends && counted.recvs == recvs && counted.waits == waits) return "";
  return label + ": rank " + std::to_string(r) + " has " + std::to_string(counted.sends) +
         " sends, " + std::to_string(counted.recvs) + " receives and " +
         std::to_string(counted.waits) + " waits, not " + std::to_string(sends) + ", " +
         std::to_string(recvs) + " and " + std::to_string(waits);
}

std::string play_sra(int n, const Cut& cut) {
  const std::string label = cut_label("SRA", n, cut);
  const std::vector<Schedule> piped =
      qcsim::build_all(qc::build_allreduce_sra, n, cut.count, 1, cut.chunk);
  const std::vector<Schedule> whole = qcsim::build_all(qc::build_allreduce_sra, n, cut.count, 1);
  const size_t pieces = pieces_of(allreduce_block(cut.count, n, 0), cut.chunk);
  std::string failure;
  if (n == 1 || pieces == 1) {
    failure = check_uncut(label, piped, whole);
  } else {
    for (int r = 0; r < n && failure.empty(); ++r) {
      const Schedule& s = piped[static_cast<size_t>(r)];
      failure = qcsim::check_pieces(label, r, s, whole[static_cast<size_t>(r)], cut.chunk,
                                    pieces, cut.count);
      if (failure.empty()) {
        failure = qcsim::check_same_value_steps(label, r, s, whole[static_cast<size_t>(r)],
                                                cut.count);
      }
      Counted counted;
      if (failure.empty()) failure = count_steps(label, r, s, &counted);
      if (!failure.empty()) break;
      // Each non-empty piece travels as its block does: scattered to its
      // owner, then gathered from it by every other rank.
      int expected = 0;
      for (int b = 0; b < n; ++b) {
        expected += b == r ? (n - 1) * block_pieces(cut, n, b) : block_pieces(cut, n, b);
      }
      failure = expect_counts(label, r, counted, expected, expected, 2 * static_cast<int>(pieces));
    }
  }
  if (!failure.empty()) return failure;
  ScheduleSim::Options options;
  options.collective = Collective::kAllreduce;
  options.count = cut.count;
  options.rank_ordered_sums = true;
  options.in_place = true;
  // Each value requantized at most twice, its contribution and the sum,
  // piece by piece as whole.
  return play_both(label, piped, options, [](const std::string& at, const ScheduleSim& sim) {
    return qcsim::check_allreduce_result(at, sim, 2);
  });
}

std::string play_ring(int n, const Cut& cut) {
  const std::string label = cut_label("ring", n, cut);
  const std::vector<Schedule> piped =
      qcsim::build_all(qc::build_allreduce_ring, n, cut.count, 1, cut.chunk);
  const std::vector<Schedule> whole = qcsim::build_all(qc::build_allreduce_ring, n, cut.count, 1);
  const size_t pieces = pieces_of(allreduce_block(cut.count, n, 0), cut.chunk);
  std::string failure;
  if (n == 1 || pieces == 1) {
    failure = check_uncut(label, piped, whole);
  } else {
    for (int r = 0; r < n && failure.empty(); ++r) {
      const Schedule& s = piped[static_cast<size_t>(r)];
      const Schedule& w = whole[static_cast<size_t>(r)];
      failure = qcsim::check_pieces(label, r, s, w, cut.chunk, pieces, cut.count);
      if (failure.empty()) failure = qcsim::check_same_value_steps(label, r, s, w, cut.count);
      Counted counted;
      if (failure.empty()) failure = count_steps(label, r, s, &counted);
      if (!failure.empty()) break;
      // Each non-empty piece travels as its block does. The reduce-scatter
      // sends every block but r+1 and receives every block but r; the
      // allgather forwards every block but r+2 and receives every one but
      // r+1. One wait per piece of each of the 2(n-1) steps.
      int all = 0;
      for (int b = 0; b < n; ++b) all += block_pieces(cut, n, b);
      auto of = [&](int b) { return block_pieces(cut, n, b % n); };
      const int sends = 2 * all - of(r + 1) - of(r + 2);
      const int recvs = 2 * all - of(r) - of(r + 1);
      const int waits = 2 * (n - 1) * static_cast<int>(pieces);
      failure = expect_counts(label, r, counted, sends, recvs, waits);
    }
  }
  if (!failure.empty()) return failure;
  ScheduleSim::Options options;
  options.collective = Collective::kAllreduce;
  options.count = cut.count;
  options.in_place = true;
  // Each hop of the reduce-scatter requantizes the partial sum, the owner
  // its total once more: at most n encodes, piece by piece as whole.
  return play_both(label, piped, options, [n](const std::string& at, const ScheduleSim& sim) {
    return qcsim::check_allreduce_result(at, sim, n);
  });
}

std::string play_alltoall(int n, const Cut& cut) {
  const std::string label = cut_label("alltoall", n, cut);
  const std::vector<Schedule> piped =
      qcsim::build_all(qc::build_alltoall_pairwise, n, cut.count, 1, cut.chunk);
  const std::vector<Schedule> whole =
      qcsim::build_all(qc::build_alltoall_pairwise, n, cut.count, 1);
  const size_t pieces = pieces_of(cut.count, cut.chunk);
  std::string failure;
  if (n == 1 || pieces == 1) {
    failure = check_uncut(label, piped, whole);
  } else {
    const size_t elements = static_cast<size_t>(n) * cut.count;
    for (int r = 0; r < n && failure.empty(); ++r) {
      const Schedule& s = piped[static_cast<size_t>(r)];
      failure = qcsim::check_pieces(label, r, s, whole[static_cast<size_t>(r)], cut.chunk,
                                    pieces, elements);
      Counted counted;
      if (failure.empty()) failure = count_steps(label, r, s, &counted);
      if (!failure.empty()) break;
      const int expected = (n - 1) * static_cast<int>(pieces);
      failure = expect_counts(label, r, counted, expected, expected, static_cast<int>(pieces));
    }
  }
  if (!failure.empty()) return failure;
  ScheduleSim::Options options;
  options.collective = Collective::kAlltoall;
  options.count = cut.count;
  return play_both(label, piped, options, [&cut](const std::string& at, const ScheduleSim& sim) {
    return qcsim::check_alltoall_result(at, sim, cut.count);
  });
}

TEST(PipelinedSchedule, SraPiecesMatchSumInRankOrderAndRequantizeAtMostTwice) {
  for (int n = 1; n <= kMaxRanks; ++n) {
    for (const Cut& cut : allreduce_cuts(n)) ASSERT_EQ(play_sra(n, cut), "");
  }
}

TEST(PipelinedSchedule, RingPiecesMatchSumEachRankOnceInTheWholeRingsOrder) {
  for (int n = 1; n <= kMaxRanks; ++n) {
    for (const Cut& cut : allreduce_cuts(n)) ASSERT_EQ(play_ring(n, cut), "");
  }
}

TEST(PipelinedSchedule, AlltoallPiecesDeliverEachElementEncodedOnce) {
  for (int n = 1; n <= kMaxRanks; ++n) {
    for (const Cut& cut : alltoall_cuts(n)) ASSERT_EQ(play_alltoall(n, cut), "");
  }
}

}  // namespace
