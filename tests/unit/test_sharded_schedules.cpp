// Reduce-scatter, allgather and broadcast schedules (registry.h) in the
// symbolic simulator (schedule_sim.h), for 1..64 ranks, under the host's and
// the device's view of when a transfer is visible. Checked:
//  - matching and progress: every send meets a receive of the same tag,
//    framing and slot sizes; no rank deadlocks; no slot changes while in
//    flight;
//  - reduce-scatter: rank r gets every rank's block r summed once, its own
//    unencoded; direct sums in rank order and encodes each value once, the
//    ring requantizes the partial sum at each of its n-1 hops;
//  - allgather, broadcast: every rank, owner and root included, decodes each
//    block from the one encode its owner (the root) made: bit-identical
//    replicas, one encode deep;
//  - error feedback's grid: every encode is at element offsets inside the
//    input, and each offset is encoded at most once per rank (exactly once
//    where the input crosses to another rank);
//  - in place as NCCL has it (allgather sendbuf == recvbuf + rank * count;
//    broadcast sendbuf == recvbuf): no input read after its memory is written;
//  - the pipelined chain: its pieces are the whole message's encode cut at
//    multiples of the chunk, and each output element goes through the same
//    steps as unpipelined.
// Internal API (the schedules): links the internal objects.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/schedules/registry.h"
#include "core/schedules/schedule.h"
#include "schedule_checks.h"
#include "schedule_sim.h"

namespace {

using qc::Schedule;
using qc::StepKind;
using qcsim::BuildFn;
using qcsim::Collective;
using qcsim::ScheduleSim;

constexpr int kMaxRanks = 64;

// Per-block counts: empty, one, an odd one; up to 16 ranks also one less
// than the rank count, the rank count and a larger odd one. The schedules
// never split a block, so past 16 ranks more counts only cost time.
std::vector<size_t> block_counts(int n) {
  const size_t un = static_cast<size_t>(n);
  std::vector<size_t> counts = {0, 1, 3};
  if (n <= 16) counts.insert(counts.end(), {un - 1, un, 37});
  std::sort(counts.begin(), counts.end());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
  return counts;
}

// Every root up to 8 ranks; past that the first two, the middle and the last.
std::vector<int> roots_for(int n) {
  std::vector<int> roots;
  if (n <= 8) {
    for (int r = 0; r < n; ++r) roots.push_back(r);
    return roots;
  }
  roots = {0, 1, n / 2, n - 1};
  return roots;
}

std::string play_reduce_scatter(BuildFn build, const char* name, int n, size_t count,
                                bool in_place = false) {
  const bool direct = build == qc::build_reduce_scatter_direct;
  ScheduleSim::Options options;
  options.collective = Collective::kReduceScatter;
  options.count = count;
  options.rank_ordered_sums = direct;  // its bits do not depend on arrival order
  options.in_place = in_place;
  // Direct encodes each contribution once; the ring's first partial sum
  // is requantized at every hop, n-1 of them.
  const int depth = n == 1 || count == 0 ? 0 : direct ? 1 : n - 1;
  return qcsim::play_both(
      qcsim::case_label(name, n, count, 1), qcsim::build_all(build, n, count, 1), options,
      [count, depth](const std::string& at, const ScheduleSim& sim) {
        return qcsim::check_reduce_scatter_result(at, sim, count, depth);
      });
}

TEST(ReduceScatterSchedule, DirectSumsEachRankOnceInRankOrderEncodingEachValueOnce) {
  for (int n = 1; n <= kMaxRanks; ++n) {
    for (size_t count : block_counts(n)) {
      ASSERT_EQ(play_reduce_scatter(qc::build_reduce_scatter_direct, "direct", n, count), "");
    }
  }
}

TEST(ReduceScatterSchedule, RingSumsEachRankOnceRequantizingAtEachHop) {
  for (int n = 1; n <= kMaxRanks; ++n) {
    for (size_t count : block_counts(n)) {
      ASSERT_EQ(play_reduce_scatter(qc::build_reduce_scatter_ring, "ring", n, count), "");
    }
  }
}

std::string play_allgather(BuildFn build, const char* name, int n, size_t count) {
  ScheduleSim::Options options;
  options.collective = Collective::kAllgather;
  options.count = count;
  options.in_place = true;  // sendbuf == recvbuf + rank * count
  return qcsim::play_both(qcsim::case_label(name, n, count, 1),
                          qcsim::build_all(build, n, count, 1), options,
                          [count](const std::string& at, const ScheduleSim& sim) {
                            return qcsim::check_allgather_result(at, sim, count);
                          });
}

TEST(AllgatherSchedule, EveryRankDecodesEachBlockFromItsOwnersOneEncode) {
  for (int n = 1; n <= kMaxRanks; ++n) {
    for (size_t count : block_counts(n)) {
      ASSERT_EQ(play_allgather(qc::build_allgather_direct, "direct", n, count), "");
      ASSERT_EQ(play_allgather(qc::build_allgather_ring, "ring", n, count), "");
      if (qc::allgather_recursive_doubling_fits(n)) {
        ASSERT_EQ(play_allgather(qc::build_allgather_recursive_doubling, "recursive doubling",
                                 n, count),
                  "");
      }
    }
  }
}

// Direct allgather cut into pieces (the host pipelines it): every rank's
// encodes are its whole block's cut at multiples of the chunk, into the
// pipelined slots, and every block still reaches every rank from its
// owner's one encode of each piece.
TEST(AllgatherSchedule, DirectPiecesAreTheWholeEncodeCutAndDeliverIt) {
  const struct {
    size_t count, chunk;
  } cuts[] = {{10, 4}, {8, 4}, {3, 1}, {41, 3}, {4, 4}, {3, 4}, {0, 4}};
  for (int n = 1; n <= 16; ++n) {
    for (const auto& cut : cuts) {
      const std::string label = qcsim::case_label("direct", n, cut.count, 1) + " chunk=" +
                                std::to_string(cut.chunk);
      const auto piped = qcsim::build_all(qc::build_allgather_direct, n, cut.count, 1, cut.chunk);
      const auto whole = qcsim::build_all(qc::build_allgather_direct, n, cut.count, 1, 0);
      const size_t pieces = cut.count <= cut.chunk ? 1 : (cut.count + cut.chunk - 1) / cut.chunk;
      std::string failure = pieces == 1 ? qcsim::check_uncut(label, piped, whole) : "";
      for (int r = 0; r < n && failure.empty() && pieces > 1; ++r) {
        failure = qcsim::check_pieces(label, r, piped[static_cast<size_t>(r)],
                                      whole[static_cast<size_t>(r)], cut.chunk, pieces, cut.count);
      }
      if (failure.empty()) {
        ScheduleSim::Options options;
        options.collective = Collective::kAllgather;
        options.count = cut.count;
        options.in_place = true;
        failure = qcsim::play_both(label, piped, options,
                                   [&cut](const std::string& at, const ScheduleSim& sim) {
                                     return qcsim::check_allgather_result(at, sim, cut.count);
                                   });
      }
      ASSERT_EQ(failure, "");
    }
  }
}

TEST(AllgatherSchedule, RecursiveDoublingFitsPowersOfTwoOnly) {
  EXPECT_FALSE(qc::allgather_recursive_doubling_fits(0));
  EXPECT_FALSE(qc::allgather_recursive_doubling_fits(-4));
  for (int n = 1; n <= kMaxRanks; ++n) {
    const bool power = n == 1 || n == 2 || n == 4 || n == 8 || n == 16 || n == 32 || n == 64;
    EXPECT_EQ(qc::allgather_recursive_doubling_fits(n), power) << n;
  }
}

std::string broadcast_label(const char* name, int n, size_t count, int root, size_t chunk) {
  std::string label = qcsim::case_label(name, n, count, 1) + " root=" + std::to_string(root);
  if (chunk != 0) label += " chunk=" + std::to_string(chunk);
  return label;
}

std::string play_broadcast(const std::string& label, const std::vector<Schedule>& schedules,
                           size_t count, int root) {
  ScheduleSim::Options options;
  options.collective = Collective::kBroadcast;
  options.count = count;
  options.root = root;
  options.in_place = true;  // the root's sendbuf == recvbuf
  return qcsim::play_both(label, schedules, options,
                          [root](const std::string& at, const ScheduleSim& sim) {
                            return qcsim::check_broadcast_result(at, sim, root);
                          });
}

TEST(BroadcastSchedule, TreeAndChainDeliverTheRootsOneEncodeFromEveryRoot) {
  for (int n = 1; n <= kMaxRanks; ++n) {
    for (int root : roots_for(n)) {
      for (size_t count : block_counts(n)) {
        for (BuildFn build : {qc::build_broadcast_tree, qc::build_broadcast_chain}) {
          const char* name = build == qc::build_broadcast_tree ? "tree" : "chain";
          const std::string label = broadcast_label(name, n, count, root, 0);
          ASSERT_EQ(play_broadcast(label, qcsim::build_all(build, n, count, 1, 0, root), count,
                                   root),
                    "");
        }
      }
    }
  }
}

// A broadcast's message and the piece size the chain cuts it into.
struct Cut {
  size_t count;
  size_t chunk;
};

const Cut kChainCuts[] = {
    {10, 4},  // 3 pieces, the last of 2 values
    {8, 4},   // 2 whole pieces
    {3, 1},   // pieces of 1
    {41, 3},  // 14 pieces, the last of 2
    {4, 4},   // fits one piece: not cut
    {3, 4},   // smaller than a piece: not cut
    {0, 4},
};

// The chain's sends, receives and waits per rank: every piece received
// from the previous rank and forwarded to the next, each receive awaited
// in its own group, the forwards all at the end.
std::string check_chain_transfers(const std::string& label, int n, int root,
                                  const std::vector<Schedule>& piped, size_t pieces,
                                  size_t count) {
  for (int r = 0; r < n; ++r) {
    const int v = (r - root + n) % n;
    int sends = 0, recvs = 0, waits = 0;
    for (const qc::Step& st : piped[static_cast<size_t>(r)].steps) {
      sends += st.kind == StepKind::kSend;
      recvs += st.kind == StepKind::kRecv;
      waits += st.kind == StepKind::kWait;
    }
    const int c = count == 0 ? 0 : static_cast<int>(pieces);
    const int want_sends = v + 1 < n ? c : 0;
    const int want_recvs = v > 0 ? c : 0;
    const int want_waits = (v > 0 ? c : 0) + (want_sends > 0 ? 1 : 0);
    if (sends != want_sends || recvs != want_recvs || waits != want_waits) {
      return label + ": rank " + std::to_string(r) + " has " + std::to_string(sends) +
             " sends, " + std::to_string(recvs) + " receives and " + std::to_string(waits) +
             " waits, not " + std::to_string(want_sends) + ", " + std::to_string(want_recvs) +
             " and " + std::to_string(want_waits);
    }
  }
  return "";
}

std::string play_chain(int n, int root, const Cut& cut) {
  const std::string label = broadcast_label("chain", n, cut.count, root, cut.chunk);
  const std::vector<Schedule> piped =
      qcsim::build_all(qc::build_broadcast_chain, n, cut.count, 1, cut.chunk, root);
  const std::vector<Schedule> whole =
      qcsim::build_all(qc::build_broadcast_chain, n, cut.count, 1, 0, root);
  const size_t pieces = cut.count <= cut.chunk ? 1 : (cut.count + cut.chunk - 1) / cut.chunk;
  std::string failure;
  if (pieces == 1) {
    failure = qcsim::check_uncut(label, piped, whole);
  } else {
    // Only the root encodes: its pieces are the whole message's, cut.
    failure = qcsim::check_pieces(label, root, piped[static_cast<size_t>(root)],
                                  whole[static_cast<size_t>(root)], cut.chunk, pieces, cut.count);
    for (int r = 0; r < n && failure.empty(); ++r) {
      failure = qcsim::check_same_value_steps(label, r, piped[static_cast<size_t>(r)],
                                              whole[static_cast<size_t>(r)], cut.count);
    }
  }
  if (failure.empty()) failure = check_chain_transfers(label, n, root, piped, pieces, cut.count);
  if (failure.empty()) failure = play_broadcast(label, piped, cut.count, root);
  return failure;
}

TEST(BroadcastSchedule, ChainPiecesAreTheWholeEncodeCutAndDeliverIt) {
  for (int n = 1; n <= kMaxRanks; ++n) {
    for (int root : roots_for(n)) {
      for (const Cut& cut : kChainCuts) ASSERT_EQ(play_chain(n, root, cut), "");
    }
  }
}

struct Transfers {
  int sends = 0;
  int recvs = 0;
};

Transfers transfers(BuildFn build, int n, int r, size_t count, int root = 0) {
  Schedule s;
  qc::ScheduleShape shape;
  shape.ranks = n;
  shape.rank = r;
  shape.count = count;
  shape.root = root;
  build(shape, &s);
  Transfers t;
  for (const qc::Step& st : s.steps) {
    t.sends += st.kind == StepKind::kSend;
    t.recvs += st.kind == StepKind::kRecv;
  }
  return t;
}

// The messages each algorithm is documented to take, per rank (none for an
// empty call).
TEST(ShardedScheduleTransfers, MatchTheAlgorithms) {
  for (int n = 1; n <= kMaxRanks; ++n) {
    int log2n = 0;
    while ((1 << log2n) < n) ++log2n;
    for (size_t count : {size_t{0}, size_t{5}}) {
      const int some = count == 0 ? 0 : 1;
      const std::string at = " n=" + std::to_string(n) + " count=" + std::to_string(count);
      int tree_sends = 0, tree_recvs = 0;
      for (int r = 0; r < n; ++r) {
        const std::string rank_at = at + " rank " + std::to_string(r);
        // Direct and ring: one message to and from each peer, or each hop.
        for (BuildFn build : {qc::build_reduce_scatter_direct, qc::build_reduce_scatter_ring,
                              qc::build_allgather_direct, qc::build_allgather_ring}) {
          const Transfers t = transfers(build, n, r, count);
          EXPECT_EQ(t.sends, some * (n - 1)) << rank_at;
          EXPECT_EQ(t.recvs, some * (n - 1)) << rank_at;
        }
        if (qc::allgather_recursive_doubling_fits(n)) {
          const Transfers t = transfers(qc::build_allgather_recursive_doubling, n, r, count);
          EXPECT_EQ(t.sends, some * log2n) << "recursive doubling" << rank_at;
          EXPECT_EQ(t.recvs, some * log2n) << "recursive doubling" << rank_at;
        }
        const int root = n / 2;
        const Transfers t = transfers(qc::build_broadcast_tree, n, r, count, root);
        EXPECT_EQ(t.recvs, r == root ? 0 : some) << "tree" << rank_at;
        tree_sends += t.sends;
        tree_recvs += t.recvs;
      }
      // Tree: n-1 messages, none twice to a rank.
      EXPECT_EQ(tree_sends, some * (n - 1)) << "tree" << at;
      EXPECT_EQ(tree_recvs, some * (n - 1)) << "tree" << at;
    }
  }
}

}  // namespace
