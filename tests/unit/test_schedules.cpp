// The schedules (src/core/schedules/) on their own, with no transport and no
// codec: a symbolic simulator (schedule_sim.h) plays all ranks' schedules
// together, for 1..64 ranks and counts around the rank count, and checks
//  - matching and progress: every send meets a receive of the same tag,
//    framing and slot sizes, in post order, and no rank deadlocks, also
//    when transfers are seen only at the wait that enqueues their group
//    (the device executor's order; DeviceOrder);
//  - buffer hygiene: no slot is written or received into while a transfer
//    on it is in flight, nor decoded while a receive into it is; nothing is
//    decoded unwritten; every span stays inside its buffer; every encode's
//    element offsets are inside the input (one residual each);
//  - the result: an allreduce sums each rank's contribution exactly once,
//    and all ranks decode each element from the same encode (its owner's);
//    an alltoall delivers each element, encoded exactly once;
//  - in place: an allreduce never reads an input element after writing
//    that output element, so sendbuf == recvbuf gives the same result.
// Internal API (the schedules): links the internal objects.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/schedules/registry.h"
#include "core/schedules/schedule.h"
#include "qc.h"
#include "schedule_checks.h"
#include "schedule_sim.h"

namespace {

using qc::Schedule;
using qc::ScheduleBuilder;
using qc::ScheduleShape;
using qc::StepKind;
using qcsim::build_all;
using qcsim::case_label;
using qcsim::check_allreduce_result;
using qcsim::check_alltoall_result;
using qcsim::Collective;
using qcsim::ScheduleSim;
using qcsim::Visibility;

constexpr int kMaxRanks = 64;
const int kGroupSizes[] = {1, 2, 3, 4, 8};

// Empty blocks, one element, blocks of 0 or 1, blocks of 1, uneven blocks,
// and many elements; past 16 ranks, the large count only costs time.
std::vector<size_t> counts_for(int n) {
  const size_t un = static_cast<size_t>(n);
  std::vector<size_t> counts = {0, 1, un - 1, un, 3 * un + 2};
  if (n <= 16) counts.push_back(1000);
  std::sort(counts.begin(), counts.end());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
  return counts;
}

// An alltoall's blocks are `count` each, never split: past 16 ranks the
// large counts only cost time (n * n * count values in all).
std::vector<size_t> alltoall_counts_for(int n) {
  if (n <= 16) return counts_for(n);
  return {0, 1, static_cast<size_t>(n) - 1};
}

// Plays one allreduce case; "" or the first failure.
std::string play_allreduce(const qc::AllreduceSchedule& entry, int n, size_t count,
                           int group_size, Visibility visibility = Visibility::kAtPost) {
  const bool sra = entry.algorithm == QC_ALGO_SRA;
  const std::string label = case_label(entry.name, n, count, group_size);
  ScheduleSim::Options options;
  options.collective = Collective::kAllreduce;
  options.count = count;
  options.rank_ordered_sums = sra;
  options.visibility = visibility;
  // Every allreduce runs with sendbuf == recvbuf too.
  options.in_place = true;
  ScheduleSim sim(label, build_all(entry.build, n, count, group_size), options);
  std::string failure = sim.run();
  if (!failure.empty()) return failure;
  // SRA requantizes each value at most twice: its contribution, the sum;
  // the ring at most n times: each hop's partial sum, the owner's total.
  const int max_depth = sra ? 2 : entry.algorithm == QC_ALGO_RING ? n : 0;
  return check_allreduce_result(label, sim, max_depth);
}

std::vector<qc_algorithm_t> every_algorithm() {
  std::vector<qc_algorithm_t> all;
  for (int a = QC_ALGO_AUTO; a <= QC_ALGO_NATIVE; ++a) {
    all.push_back(static_cast<qc_algorithm_t>(a));
  }
  return all;
}

TEST(ScheduleRegistry, NamesRingRecursiveDoublingSraAndTree) {
  std::vector<qc_algorithm_t> found;
  for (qc_algorithm_t a : every_algorithm()) {
    if (const qc::AllreduceSchedule* s = qc::find_allreduce_schedule(a)) {
      EXPECT_EQ(s->algorithm, a);
      ASSERT_NE(s->build, nullptr);
      found.push_back(a);
    }
  }
  // The parameterized suite below runs exactly these.
  EXPECT_EQ(found, (std::vector<qc_algorithm_t>{QC_ALGO_RING, QC_ALGO_RECURSIVE_DOUBLING,
                                                QC_ALGO_SRA, QC_ALGO_TREE}));
}

class AllreduceScheduleTest : public ::testing::TestWithParam<qc_algorithm_t> {};

TEST_P(AllreduceScheduleTest, EveryRankCountMatchesAndSumsEachRankOnce) {
  const qc::AllreduceSchedule* entry = qc::find_allreduce_schedule(GetParam());
  ASSERT_NE(entry, nullptr);
  std::vector<int> group_sizes = {1};
  if (GetParam() == QC_ALGO_RECURSIVE_DOUBLING) {
    group_sizes.assign(std::begin(kGroupSizes), std::end(kGroupSizes));
  }
  for (int n = 1; n <= kMaxRanks; ++n) {
    for (size_t count : counts_for(n)) {
      for (int group_size : group_sizes) {
        const std::string failure = play_allreduce(*entry, n, count, group_size);
        // One failure says enough; the rest would repeat it.
        ASSERT_EQ(failure, "");
      }
    }
  }
}

// The ring as host values run it (ScheduleShape::partials_in_scratch): the
// same checks, partial sums in one scratch block instead of the output.
void build_ring_partials_in_scratch(const ScheduleShape& shape, qc::Schedule* schedule) {
  ScheduleShape in_scratch = shape;
  in_scratch.partials_in_scratch = true;
  qc::build_allreduce_ring(in_scratch, schedule);
}

TEST(RingPartialsInScratch, EveryRankCountMatchesAndSumsEachRankOnce) {
  const qc::AllreduceSchedule entry{QC_ALGO_RING, "ring, partials in scratch",
                                    build_ring_partials_in_scratch};
  for (int n = 1; n <= kMaxRanks; ++n) {
    for (size_t count : counts_for(n)) ASSERT_EQ(play_allreduce(entry, n, count, 1), "");
  }
}

// It writes the output only with the allgather's decodes, and once per value.
TEST(RingPartialsInScratch, WritesTheOutputOnlyByDecodes) {
  for (int n : {2, 3, 8}) {
    const size_t count = 10 * static_cast<size_t>(n) + 3;
    qc::Schedule schedule;
    ScheduleShape shape{n, n - 1, count, 1};
    build_ring_partials_in_scratch(shape, &schedule);
    std::vector<int> writes(count, 0);
    for (const qc::Step& st : schedule.steps) {
      const bool writes_values = st.kind == qc::StepKind::kDecode ||
                                 st.kind == qc::StepKind::kDecodeAdd ||
                                 st.kind == qc::StepKind::kCopy || st.kind == qc::StepKind::kAdd;
      if (!writes_values || st.values.where != qc::Values::kOutput) continue;
      EXPECT_EQ(st.kind, qc::StepKind::kDecode);
      for (size_t i = 0; i < st.values.count; ++i) ++writes[st.values.begin + i];
    }
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(writes[i], 1) << "n " << n << " value " << i;
  }
}

std::string algorithm_name(const ::testing::TestParamInfo<qc_algorithm_t>& info) {
  switch (info.param) {
    case QC_ALGO_RING: return "Ring";
    case QC_ALGO_RECURSIVE_DOUBLING: return "RecursiveDoubling";
    case QC_ALGO_SRA: return "Sra";
    case QC_ALGO_TREE: return "Tree";
    default: return std::to_string(info.param);
  }
}

INSTANTIATE_TEST_SUITE_P(Registry, AllreduceScheduleTest,
                         ::testing::Values(QC_ALGO_RING, QC_ALGO_RECURSIVE_DOUBLING, QC_ALGO_SRA,
                                           QC_ALGO_TREE),
                         algorithm_name);

// Plays one alltoall case; "" or the first failure.
std::string play_alltoall(int n, size_t count, Visibility visibility = Visibility::kAtPost) {
  const std::string label = case_label("alltoall", n, count, 1);
  ScheduleSim::Options options;
  options.collective = Collective::kAlltoall;
  options.count = count;
  options.visibility = visibility;
  ScheduleSim sim(label, build_all(qc::build_alltoall_pairwise, n, count, 1), options);
  std::string failure = sim.run();
  if (failure.empty()) failure = check_alltoall_result(label, sim, count);
  return failure;
}

TEST(AlltoallSchedule, EveryRankCountDeliversEachElementEncodedOnce) {
  for (int n = 1; n <= kMaxRanks; ++n) {
    for (size_t count : alltoall_counts_for(n)) ASSERT_EQ(play_alltoall(n, count), "");
  }
}

// The device executor makes a transfer visible only at the wait that
// enqueues its group (schedule_sim.h): every schedule must progress so
// too. Counts that give empty and uneven blocks; the large ones add
// nothing to the order of transfers.
TEST(DeviceOrder, EveryScheduleProgressesWhenGroupsAreEnqueuedAtTheirWaits) {
  for (qc_algorithm_t a : {QC_ALGO_RING, QC_ALGO_RECURSIVE_DOUBLING, QC_ALGO_SRA, QC_ALGO_TREE}) {
    const qc::AllreduceSchedule* entry = qc::find_allreduce_schedule(a);
    ASSERT_NE(entry, nullptr);
    for (int n = 1; n <= kMaxRanks; ++n) {
      const size_t un = static_cast<size_t>(n);
      for (size_t count : {un - 1, 3 * un + 2}) {
        for (int group_size : kGroupSizes) {
          if (group_size != 1 && a != QC_ALGO_RECURSIVE_DOUBLING) continue;
          ASSERT_EQ(play_allreduce(*entry, n, count, group_size, Visibility::kAtWait), "");
        }
      }
    }
  }
  for (int n = 1; n <= kMaxRanks; ++n) {
    ASSERT_EQ(play_alltoall(n, 1, Visibility::kAtWait), "");
  }
}

struct Transfers {
  int sends = 0;
  int recvs = 0;
};

Transfers transfers(const Schedule& s) {
  Transfers t;
  for (const qc::Step& st : s.steps) {
    if (st.kind == StepKind::kSend) ++t.sends;
    if (st.kind == StepKind::kRecv) ++t.recvs;
  }
  return t;
}

int log2_exact(int p) {
  int l = 0;
  while ((1 << l) < p) ++l;
  return l;
}

// The messages each algorithm is documented to take, per rank.
TEST(ScheduleTransfers, MatchTheAlgorithms) {
  for (int n = 1; n <= kMaxRanks; ++n) {
    const std::string at = " at n=" + std::to_string(n);
    int tree_sends = 0, tree_recvs = 0;
    for (int r = 0; r < n; ++r) {
      const std::string rank_at = at + " rank " + std::to_string(r);
      const size_t count = 3 * static_cast<size_t>(n) + 2;
      Schedule s;
      ScheduleShape shape{n, r, count, 1};
      // Ring and SRA: n-1 messages each way in each of two phases.
      qc::build_allreduce_ring(shape, &s);
      EXPECT_EQ(transfers(s).sends, 2 * (n - 1)) << "ring" << rank_at;
      EXPECT_EQ(transfers(s).recvs, 2 * (n - 1)) << "ring" << rank_at;
      qc::build_allreduce_sra(shape, &s);
      EXPECT_EQ(transfers(s).sends, 2 * (n - 1)) << "SRA" << rank_at;
      EXPECT_EQ(transfers(s).recvs, 2 * (n - 1)) << "SRA" << rank_at;
      qc::build_alltoall_pairwise(shape, &s);
      EXPECT_EQ(transfers(s).sends, n - 1) << "alltoall" << rank_at;
      EXPECT_EQ(transfers(s).recvs, n - 1) << "alltoall" << rank_at;
      qc::build_allreduce_tree(shape, &s);
      tree_sends += transfers(s).sends;
      tree_recvs += transfers(s).recvs;
      // Recursive doubling: a core rank exchanges with G-1 members twice and
      // with log2(P) partners twice, plus its folded extra rank's data and
      // blocks; an extra rank sends its data and gets the blocks.
      for (int group_size : kGroupSizes) {
        shape.group_size = group_size;
        qc::build_allreduce_recursive_doubling(shape, &s);
        const int G = std::min(group_size, n);
        int P = 1;
        while (G * P * 2 <= n) P *= 2;
        const int M = G * P;
        const int expected = r >= M ? 1 : 2 * (G - 1) + 2 * log2_exact(P) + (r + M < n ? 1 : 0);
        EXPECT_EQ(transfers(s).sends, expected) << "recursive doubling G=" << group_size << rank_at;
        EXPECT_EQ(transfers(s).recvs, expected) << "recursive doubling G=" << group_size << rank_at;
      }
    }
    // Tree: every rank but the root sends its sum up once and gets the
    // result once.
    EXPECT_EQ(tree_sends, 2 * (n - 1)) << "tree" << at;
    EXPECT_EQ(tree_recvs, 2 * (n - 1)) << "tree" << at;
  }
}

TEST(ScheduleTransfers, OneRankHasNone) {
  for (size_t count : {size_t{0}, size_t{1}, size_t{1000}}) {
    for (int group_size : kGroupSizes) {
      ScheduleShape shape{1, 0, count, group_size};
      Schedule s;
      for (qc_algorithm_t a : every_algorithm()) {
        const qc::AllreduceSchedule* entry = qc::find_allreduce_schedule(a);
        if (entry == nullptr) continue;
        entry->build(shape, &s);
        EXPECT_EQ(transfers(s).sends + transfers(s).recvs, 0) << entry->name;
      }
      qc::build_alltoall_pairwise(shape, &s);
      EXPECT_EQ(transfers(s).sends + transfers(s).recvs, 0) << "alltoall";
    }
  }
}

// ---- the simulator catches what it is there to catch ------------------------
// Small schedules written wrong on purpose, so that a simulator that passes
// everything cannot pass this suite.

// An allreduce of `count` values on two ranks, each rank's schedule written
// by `write(builder, rank, peer)`; "" or the first failure.
template <typename Write>
std::string play_two_ranks(Write write, size_t count = 1, bool in_place = false) {
  std::vector<Schedule> schedules(2);
  for (int r = 0; r < 2; ++r) {
    ScheduleBuilder b(&schedules[static_cast<size_t>(r)]);
    // Reduced in place, as ring and tree do: the output starts as the input.
    b.copy(qc::output(0, count), qc::input(0, count));
    write(b, r, 1 - r);
  }
  ScheduleSim::Options options;
  options.count = count;
  options.in_place = in_place;
  ScheduleSim sim("two ranks", std::move(schedules), options);
  std::string failure = sim.run();
  if (failure.empty()) failure = check_allreduce_result("two ranks", sim, 0);
  return failure;
}

// Encodes the own value, swaps it with the peer's, and adds it in.
void exchange(ScheduleBuilder& b, int peer, uint32_t send_tag, uint32_t recv_tag) {
  const size_t mine = b.slot(1);
  const size_t theirs = b.slot(1);
  b.encode(qc::output(0, 1), mine);
  b.send(peer, mine, send_tag);
  b.recv(peer, theirs, recv_tag);
  b.wait();
  b.decode_add(theirs, qc::output(0, 1));
}

// Rank 1 sends its value to rank 0, which sums, encodes once and sends the
// sum back; both decode those bytes, rank 0 after its send completed or
// while it is in flight.
auto sum_on_rank_0(bool decode_in_flight) {
  return [decode_in_flight](ScheduleBuilder& b, int r, int peer) {
    const size_t slot = b.slot(1);
    if (r == 1) {
      b.encode(qc::output(0, 1), slot);
      b.send(peer, slot, 1);
      b.wait();
      b.recv(peer, slot, 2);
      b.wait();
    } else {
      b.recv(peer, slot, 1);
      b.wait();
      b.decode_add(slot, qc::output(0, 1));
      b.encode(qc::output(0, 1), slot);
      b.send(peer, slot, 2);
      if (decode_in_flight) b.decode(slot, qc::output(0, 1));
      b.wait();
      if (decode_in_flight) return;
    }
    b.decode(slot, qc::output(0, 1));
  };
}

TEST(ScheduleSim, PassesAWellFormedExchange) {
  EXPECT_EQ(play_two_ranks(sum_on_rank_0(false)), "");
  // In place too: the copy reads and writes the same elements in one step.
  EXPECT_EQ(play_two_ranks(sum_on_rank_0(false), 1, /*in_place=*/true), "");
}

TEST(ScheduleSim, CatchesADeadlock) {
  const std::string failure = play_two_ranks([](ScheduleBuilder& b, int, int peer) {
    const size_t in = b.slot(1), out = b.slot(1);
    b.recv(peer, in, 1);
    b.wait();
    b.encode(qc::output(0, 1), out);
    b.send(peer, out, 1);
    b.wait();
  });
  EXPECT_NE(failure.find("deadlock"), std::string::npos) << failure;
}

TEST(ScheduleSim, CatchesDifferentTags) {
  const std::string failure = play_two_ranks(
      [](ScheduleBuilder& b, int r, int peer) { exchange(b, peer, r == 0 ? 1 : 2, 1); });
  EXPECT_NE(failure.find("the tags differ"), std::string::npos) << failure;
}

TEST(ScheduleSim, CatchesDifferentSlotSizes) {
  const std::string failure = play_two_ranks(
      [](ScheduleBuilder& b, int r, int peer) {
        const size_t slot = b.slot(r == 0 ? 2 : 1);
        if (r == 0) {
          b.encode(qc::output(0, 2), slot);
          b.send(peer, slot, 1);
        } else {
          b.recv(peer, slot, 1);
        }
        b.wait();
      },
      2);
  EXPECT_NE(failure.find("the frames differ"), std::string::npos) << failure;
}

TEST(ScheduleSim, CatchesAValueCountedTwice) {
  const std::string failure = play_two_ranks([](ScheduleBuilder& b, int, int peer) {
    exchange(b, peer, 1, 1);
    b.decode_add(1, qc::output(0, 1));
  });
  EXPECT_NE(failure.find("twice"), std::string::npos) << failure;
}

TEST(ScheduleSim, CatchesAnIncompleteSum) {
  const std::string failure = play_two_ranks([](ScheduleBuilder& b, int, int peer) {
    const size_t mine = b.slot(1), theirs = b.slot(1);
    b.encode(qc::output(0, 1), mine);
    b.send(peer, mine, 1);
    b.recv(peer, theirs, 1);
    b.wait();
    b.decode(mine, qc::output(0, 1));  // the own value back, not the sum
  });
  EXPECT_NE(failure.find("not all 2"), std::string::npos) << failure;
}

TEST(ScheduleSim, CatchesReplicasDecodedFromDifferentEncodes) {
  // Each rank sums and encodes its own copy: right sums, different bytes.
  const std::string failure = play_two_ranks([](ScheduleBuilder& b, int, int peer) {
    exchange(b, peer, 1, 1);
    const size_t sum = b.slot(1);
    b.encode(qc::output(0, 1), sum);
    b.decode(sum, qc::output(0, 1));
  });
  EXPECT_NE(failure.find("another encode"), std::string::npos) << failure;
}

TEST(ScheduleSim, CatchesAnEncodeIntoASlotInFlight) {
  const std::string failure = play_two_ranks([](ScheduleBuilder& b, int, int peer) {
    const size_t mine = b.slot(1), theirs = b.slot(1);
    b.encode(qc::output(0, 1), mine);
    b.send(peer, mine, 1);
    b.encode(qc::output(0, 1), mine);
    b.recv(peer, theirs, 1);
    b.wait();
  });
  EXPECT_NE(failure.find("encodes into a slot while step"), std::string::npos) << failure;
}

TEST(ScheduleSim, CatchesADecodeBeforeTheWait) {
  const std::string failure = play_two_ranks([](ScheduleBuilder& b, int, int peer) {
    const size_t mine = b.slot(1), theirs = b.slot(1);
    b.encode(qc::output(0, 1), mine);
    b.send(peer, mine, 1);
    b.recv(peer, theirs, 1);
    b.decode_add(theirs, qc::output(0, 1));
    b.wait();
  });
  EXPECT_NE(failure.find("decodes a slot while step"), std::string::npos) << failure;
}

TEST(ScheduleSim, CatchesTransfersNeverAwaited) {
  const std::string failure = play_two_ranks([](ScheduleBuilder& b, int, int peer) {
    const size_t mine = b.slot(1), theirs = b.slot(1);
    b.encode(qc::output(0, 1), mine);
    b.send(peer, mine, 1);
    b.recv(peer, theirs, 1);
  });
  EXPECT_NE(failure.find("never awaited"), std::string::npos) << failure;
}

TEST(ScheduleSim, CatchesASpanOutsideItsBuffer) {
  const std::string failure = play_two_ranks([](ScheduleBuilder& b, int, int) {
    const size_t slot = b.slot(2);
    b.encode(qc::output(0, 2), slot);
  });
  EXPECT_NE(failure.find("outside its 1 values"), std::string::npos) << failure;
}

TEST(ScheduleSim, CatchesASumOutOfRankOrder) {
  std::vector<Schedule> schedules(2);
  for (int r = 0; r < 2; ++r) {
    ScheduleBuilder b(&schedules[static_cast<size_t>(r)]);
    const int peer = 1 - r;
    const size_t mine = b.slot(1), theirs = b.slot(1);
    b.copy(qc::output(0, 1), qc::input(0, 1));
    b.encode(qc::output(0, 1), mine);
    b.send(peer, mine, 1);
    b.recv(peer, theirs, 1);
    b.wait();
    b.zero_scratch(1);
    b.decode_add(theirs, qc::scratch(1));  // rank 0 adds rank 1 first
    b.add(qc::scratch(1), qc::output(0, 1));
  }
  ScheduleSim::Options options;
  options.count = 1;
  options.rank_ordered_sums = true;
  const std::string failure = ScheduleSim("rank order", std::move(schedules), options).run();
  EXPECT_NE(failure.find("not in rank order"), std::string::npos) << failure;
}

// With input and output one memory (sendbuf == recvbuf), an encode of the
// input after the copy into the output reads the copy's result: here the
// same value, but after any add or decode it would be the sum. The
// simulator fails that read in place, and only in place.
std::string play_input_read_after_copy(bool in_place) {
  std::vector<Schedule> schedules(2);
  for (int r = 0; r < 2; ++r) {
    ScheduleBuilder b(&schedules[static_cast<size_t>(r)]);
    const size_t mine = b.slot(1), theirs = b.slot(1);
    b.copy(qc::output(0, 1), qc::input(0, 1));
    b.encode(qc::input(0, 1), mine);
    b.send(1 - r, mine, 1);
    b.recv(1 - r, theirs, 1);
    b.wait();
    b.decode_add(theirs, qc::output(0, 1));
  }
  ScheduleSim::Options options;
  options.count = 1;
  options.in_place = in_place;
  return ScheduleSim("in place", std::move(schedules), options).run();
}

TEST(ScheduleSim, CatchesAnInputReadAfterItsOutputWasWrittenInPlace) {
  EXPECT_EQ(play_input_read_after_copy(false), "");
  const std::string failure = play_input_read_after_copy(true);
  EXPECT_NE(failure.find("encodes input element 0 after step 0 wrote output element 0"),
            std::string::npos)
      << failure;
}

// A reduce-scatter of one value per block on two ranks, in place
// (recvbuf == sendbuf + rank): the output is the own input block's memory,
// the peer's block is not. Each rank sends the peer its block, then either
// starts the sum with the peer's (reading the own block after writing its
// memory) or with the own block.
std::string play_reduce_scatter_in_place(bool own_first) {
  std::vector<Schedule> schedules(2);
  for (int r = 0; r < 2; ++r) {
    ScheduleBuilder b(&schedules[static_cast<size_t>(r)]);
    const int peer = 1 - r;
    const size_t mine = b.slot(1), theirs = b.slot(1);
    if (own_first) b.copy(qc::output(0, 1), qc::input(static_cast<size_t>(r), 1));
    // The peer's block, read after the output was written: other memory.
    b.encode(qc::input(static_cast<size_t>(peer), 1), mine);
    b.send(peer, mine, 1);
    b.recv(peer, theirs, 1);
    b.wait();
    if (own_first) {
      b.decode_add(theirs, qc::output(0, 1));
    } else {
      b.decode(theirs, qc::output(0, 1));
      b.add(qc::output(0, 1), qc::input(static_cast<size_t>(r), 1));
    }
  }
  ScheduleSim::Options options;
  options.collective = Collective::kReduceScatter;
  options.count = 1;
  options.in_place = true;
  return ScheduleSim("reduce-scatter in place", std::move(schedules), options).run();
}

TEST(ScheduleSim, CatchesAnInPlaceReduceScatterReadingItsOwnBlockAfterWritingIt) {
  EXPECT_EQ(play_reduce_scatter_in_place(/*own_first=*/true), "");
  const std::string failure = play_reduce_scatter_in_place(/*own_first=*/false);
  // Rank 1's block is input element 1, in output element 0's memory.
  EXPECT_NE(failure.find("rank 1 step 5 (add input[1, 2) -> output[0, 1)): adds from input "
                         "element 1 after step 4 wrote output element 0"),
            std::string::npos)
      << failure;
}

// Decoding a slot only reads it, as its send does: a rank may decode what
// it forwards while the forward is in flight (the broadcast chain does).
// Receiving into it is another matter (CatchesADecodeBeforeTheWait).
TEST(ScheduleSim, PassesADecodeOfASlotWhoseSendIsInFlight) {
  EXPECT_EQ(play_two_ranks(sum_on_rank_0(true)), "");
}

TEST(ScheduleSim, CatchesAnEncodeOffsetOutsideTheInput) {
  // The residual grid has one entry per input element: none at 1.
  const std::string failure = play_two_ranks([](ScheduleBuilder& b, int, int) {
    const size_t slot = b.slot(1);
    b.zero_scratch(1);
    b.encode_at(qc::scratch(1), 1, slot);
  });
  EXPECT_NE(failure.find("encodes at element offset 1, outside the input's 1 values"),
            std::string::npos)
      << failure;
}

// ---- transfer groups: a wait completes its group's transfers -----------------

// Two ranks' schedules, each written by `write(builder, rank, peer)`, played
// with the given visibility; "" or the first failure. No result check: these
// exchange values without a common final encode.
template <typename Write>
std::string play_groups(Write write, Visibility visibility) {
  std::vector<Schedule> schedules(2);
  for (int r = 0; r < 2; ++r) {
    ScheduleBuilder b(&schedules[static_cast<size_t>(r)]);
    b.copy(qc::output(0, 1), qc::input(0, 1));
    write(b, r, 1 - r);
  }
  ScheduleSim::Options options;
  options.count = 1;
  options.visibility = visibility;
  return ScheduleSim("groups", std::move(schedules), options).run();
}

// The own value to the peer in group 0, the peer's in group 1.
void post_two_groups(ScheduleBuilder& b, int peer, size_t mine, size_t theirs) {
  b.encode(qc::output(0, 1), mine);
  b.send(peer, mine, 1, 0);
  b.recv(peer, theirs, 1, 1);
}

TEST(ScheduleSim, AWaitOnAllGroupsCompletesEveryGroup) {
  for (Visibility v : {Visibility::kAtPost, Visibility::kAtWait}) {
    const std::string failure = play_groups(
        [](ScheduleBuilder& b, int, int peer) {
          const size_t mine = b.slot(1), theirs = b.slot(1);
          post_two_groups(b, peer, mine, theirs);
          b.wait();
          b.decode_add(theirs, qc::output(0, 1));
        },
        v);
    EXPECT_EQ(failure, "");
  }
}

TEST(ScheduleSim, CatchesADecodeOfAnotherGroupThanTheOneAwaited) {
  const std::string failure = play_groups(
      [](ScheduleBuilder& b, int, int peer) {
        const size_t mine = b.slot(1), theirs = b.slot(1);
        post_two_groups(b, peer, mine, theirs);
        b.wait_group(0);
        b.decode_add(theirs, qc::output(0, 1));  // group 1's receive is in flight
        b.wait_group(1);
      },
      Visibility::kAtPost);
  EXPECT_NE(failure.find("decodes a slot while step"), std::string::npos) << failure;
}

TEST(ScheduleSim, CatchesAGroupNeverAwaited) {
  const std::string failure = play_groups(
      [](ScheduleBuilder& b, int, int peer) {
        const size_t mine = b.slot(1), theirs = b.slot(1);
        post_two_groups(b, peer, mine, theirs);
        b.wait_group(1);
        b.decode_add(theirs, qc::output(0, 1));
      },
      Visibility::kAtPost);
  EXPECT_NE(failure.find("never awaited"), std::string::npos) << failure;
}

// Each rank awaits its receive's group first: the host posts the sends at
// once, so that works; the device enqueues only the receives (group 1) and
// then waits for them, so neither send is ever enqueued.
TEST(ScheduleSim, CatchesGroupsAwaitedInAnOrderOnlyTheHostProgresses) {
  auto receive_first = [](ScheduleBuilder& b, int, int peer) {
    const size_t mine = b.slot(1), theirs = b.slot(1);
    post_two_groups(b, peer, mine, theirs);
    b.wait_group(1);
    b.decode_add(theirs, qc::output(0, 1));
    b.wait_group(0);
  };
  EXPECT_EQ(play_groups(receive_first, Visibility::kAtPost), "");
  const std::string failure = play_groups(receive_first, Visibility::kAtWait);
  EXPECT_NE(failure.find("deadlock"), std::string::npos) << failure;
  EXPECT_NE(failure.find("not enqueued"), std::string::npos) << failure;
}

// A wait on all groups enqueues them in increasing number, not in post
// order: rank 0 posts tag 1 in group 1 before tag 2 in group 0, rank 1 its
// receives in post order but in the other groups. The host matches them;
// the device meets tag 2 with tag 1.
TEST(ScheduleSim, CatchesGroupsEnqueuedInAnotherOrderOnTheDevice) {
  auto write = [](ScheduleBuilder& b, int r, int peer) {
    const size_t first = b.slot(1), second = b.slot(1);
    if (r == 0) {
      b.encode(qc::output(0, 1), first);
      b.encode(qc::output(0, 1), second);
      b.send(peer, first, 1, 1);
      b.send(peer, second, 2, 0);
    } else {
      b.recv(peer, first, 1, 0);
      b.recv(peer, second, 2, 1);
    }
    b.wait();
  };
  EXPECT_EQ(play_groups(write, Visibility::kAtPost), "");
  const std::string failure = play_groups(write, Visibility::kAtWait);
  EXPECT_NE(failure.find("the tags differ"), std::string::npos) << failure;
}

}  // namespace
