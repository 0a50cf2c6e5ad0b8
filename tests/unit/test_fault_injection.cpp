// Fault injection (issue 10): one message of one rank is dropped, delayed,
// duplicated, truncated or corrupted, or the rank is killed (see
// fault_transport.h for what each fault does on the local transport), for
// every algorithm and alltoall, with 3 and 5 ranks. Each (collective, fault,
// ranks) is its own test.
//
// Every test runs the same three calls twice:
//  - a reference group (every rank wrapped with an empty plan, so the wrapper
//    itself is shown transparent): call A must equal qc_emulate_allreduce /
//    qc_emulate_alltoall bit for bit; B and C give the expected outputs;
//  - the faulted group, fault on rank 1 in call A or B. A warm-up call A
//    before the fault makes the error-feedback residuals non-zero, so "the
//    error buffer is unchanged on failure" means something.
// Then, per fault (qc.h, docs/architecture.md):
//  - detected faults: every rank returns the documented status (or, where a
//    rank had everything it needed before the fault hit, SUCCESS with the
//    exact expected output), within timeout + 1 s; failed ranks leave their
//    output and error buffer untouched; call C then fails on every rank at
//    once with the same status and a "broken" message;
//  - a short delay: every call succeeds with the exact reference output;
//  - a duplicate: its receiver fails with QC_ERROR_MISMATCH in call B or C
//    (the stale copy is never used as data; other ranks either fail alike
//    or, having had all they needed, return the exact result), and call D
//    then fails on every rank;
//  - faults the wire format cannot see (a flipped payload value): no crash,
//    hang or undocumented status.
// Each test prints one "[fault-report]" line (statuses and times per rank).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "fault_transport.h"
#include "test_util.h"

using namespace qct;
using qcfault::Anchor;
using qcfault::FaultKind;
using qcfault::FaultPlan;
using qcfault::FaultTransport;
using Clock = std::chrono::steady_clock;

namespace {

constexpr double kTimeout = 0.5;         // the faulted group's timeout
constexpr double kCleanTimeout = 20.0;   // the reference group's
constexpr size_t kCount = 1001;          // allreduce elements (uneven blocks)
constexpr size_t kPerRank = 101;         // alltoall elements per block
constexpr int kVictim = 1;               // the rank whose message is hit

enum class Coll { kRing, kRecDoubling, kSra, kTree, kNative, kAlltoall };

const char* coll_name(Coll c) {
  switch (c) {
    case Coll::kRing: return "Ring";
    case Coll::kRecDoubling: return "RecDoubling";
    case Coll::kSra: return "SRA";
    case Coll::kTree: return "Tree";
    case Coll::kNative: return "NativeGlobalLinear";
    case Coll::kAlltoall: return "Alltoall";
  }
  return "?";
}

// Compressing policies with error feedback (alltoall has none); recursive
// doubling with group size 2 so that 3 and 5 ranks use every phase (fold,
// intra-group, halving, doubling, unfold).
qc_policy_t policy_for(Coll c) {
  qc_policy_t p = make_policy(QC_ALGO_AUTO);
  p.codec = QC_CODEC_MINMAX;
  p.bits = 4;
  p.bucket_size = 64;
  p.error_feedback = 1;
  switch (c) {
    case Coll::kRing: p.algorithm = QC_ALGO_RING; break;
    case Coll::kRecDoubling:
      p.algorithm = QC_ALGO_RECURSIVE_DOUBLING;
      p.group_size = 2;
      break;
    case Coll::kSra: p.algorithm = QC_ALGO_SRA; break;
    case Coll::kTree: p.algorithm = QC_ALGO_TREE; break;
    case Coll::kNative:
      p.algorithm = QC_ALGO_NATIVE;
      p.codec = QC_CODEC_GLOBAL_LINEAR;
      break;
    case Coll::kAlltoall: p.error_feedback = 0; break;
  }
  return p;
}

enum class Fault {
  kDrop,
  kDelayShort,
  kDelayLong,
  kDuplicateFirst,
  kDuplicateLast,
  kTruncateEnvelope,
  kTruncatePayload,
  kCorruptEnvelopeMagic,
  kCorruptEnvelopeStep,
  kCorruptEnvelopeSequence,
  kCorruptEnvelopeSignature,
  kCorruptWireHeader,
  kCorruptPayloadData,
  kKill,
};

const char* fault_name(Fault f) {
  switch (f) {
    case Fault::kDrop: return "Drop";
    case Fault::kDelayShort: return "DelayShort";
    case Fault::kDelayLong: return "DelayLong";
    case Fault::kDuplicateFirst: return "DuplicateFirst";
    case Fault::kDuplicateLast: return "DuplicateLast";
    case Fault::kTruncateEnvelope: return "TruncateEnvelope";
    case Fault::kTruncatePayload: return "TruncatePayload";
    case Fault::kCorruptEnvelopeMagic: return "CorruptEnvelopeMagic";
    case Fault::kCorruptEnvelopeStep: return "CorruptEnvelopeStep";
    case Fault::kCorruptEnvelopeSequence: return "CorruptEnvelopeSequence";
    case Fault::kCorruptEnvelopeSignature: return "CorruptEnvelopeSignature";
    case Fault::kCorruptWireHeader: return "CorruptWireHeader";
    case Fault::kCorruptPayloadData: return "CorruptPayloadData";
    case Fault::kKill: return "Kill";
  }
  return "?";
}

// What a fault must give.
enum class Outcome {
  kSuccess,     // every call succeeds with the reference output
  kError,       // call B fails with `status` (see the header comment)
  kDuplicate,   // MISMATCH in call B or C on every rank
  kUndetected,  // the wire format cannot see it: SUCCESS or CORRUPT_DATA
};

struct Expectation {
  Outcome outcome;
  qc_status_t status;  // for kError (the survivors' status for kill)
  qc_status_t alt;     // an equally documented alternative (drop)
};

Expectation expectation(Coll c, Fault f) {
  switch (f) {
    case Fault::kDrop:
      // A lost message is a gap in its sender's FIFO: when the sender sends
      // the receiver another message in the same call, the receiver sees a
      // tag it did not expect (QC_ERROR_MISMATCH, "the ranks are running
      // different collectives") at once; otherwise it times out.
      return {Outcome::kError, QC_ERROR_TIMEOUT, QC_ERROR_MISMATCH};
    case Fault::kDelayLong:
    case Fault::kKill: return {Outcome::kError, QC_ERROR_TIMEOUT, QC_ERROR_TIMEOUT};
    case Fault::kDelayShort: return {Outcome::kSuccess, QC_SUCCESS, QC_SUCCESS};
    case Fault::kDuplicateFirst:
    case Fault::kDuplicateLast: return {Outcome::kDuplicate, QC_ERROR_MISMATCH, QC_ERROR_MISMATCH};
    case Fault::kTruncateEnvelope:
    case Fault::kTruncatePayload:
    case Fault::kCorruptEnvelopeMagic: return {Outcome::kError, QC_ERROR_CORRUPT_DATA, QC_ERROR_CORRUPT_DATA};
    case Fault::kCorruptEnvelopeStep:
    case Fault::kCorruptEnvelopeSequence:
    case Fault::kCorruptEnvelopeSignature: return {Outcome::kError, QC_ERROR_MISMATCH, QC_ERROR_MISMATCH};
    case Fault::kCorruptWireHeader:
      // The native algorithm's first message (its scale share) has no wire
      // header: the flipped byte is a value (see CorruptPayloadData).
      if (c == Coll::kNative) return {Outcome::kUndetected, QC_ERROR_CORRUPT_DATA, QC_ERROR_CORRUPT_DATA};
      return {Outcome::kError, QC_ERROR_CORRUPT_DATA, QC_ERROR_CORRUPT_DATA};
    case Fault::kCorruptPayloadData: return {Outcome::kUndetected, QC_ERROR_CORRUPT_DATA, QC_ERROR_CORRUPT_DATA};
  }
  return {Outcome::kError, QC_ERROR_INTERNAL, QC_ERROR_INTERNAL};
}

enum class Position { kFirst, kMiddle, kLast };

// Which call (0 = A, 1 = B) and which of the victim's messages in it.
struct Target {
  int call;
  Position position;
};

Target target_of(Fault f) {
  switch (f) {
    case Fault::kDelayShort: return {0, Position::kMiddle};
    case Fault::kDuplicateFirst:
    case Fault::kCorruptWireHeader: return {1, Position::kFirst};
    case Fault::kDuplicateLast:
    case Fault::kTruncatePayload:
    case Fault::kCorruptPayloadData: return {1, Position::kLast};
    default: return {1, Position::kMiddle};
  }
}

FaultPlan plan_for(Fault f, long index) {
  FaultPlan p;
  p.rank = kVictim;
  p.message_index = index;
  auto flip = [&p](Anchor a, size_t offset, uint8_t mask) {
    p.kind = FaultKind::kCorrupt;
    p.flips.push_back({a, offset, mask});
  };
  switch (f) {
    case Fault::kDrop: p.kind = FaultKind::kDrop; break;
    case Fault::kDelayShort:
      p.kind = FaultKind::kDelay;
      p.delay_ms = 150;
      break;
    case Fault::kDelayLong:
      p.kind = FaultKind::kDelay;
      p.delay_ms = static_cast<int>(kTimeout * 1000) + 300;
      break;
    case Fault::kDuplicateFirst:
    case Fault::kDuplicateLast: p.kind = FaultKind::kDuplicate; break;
    case Fault::kTruncateEnvelope:
      p.kind = FaultKind::kTruncate;
      p.keep_bytes = 10;
      break;
    case Fault::kTruncatePayload:
      p.kind = FaultKind::kTruncate;
      p.cut_bytes = 1;
      break;
    case Fault::kCorruptEnvelopeMagic: flip(Anchor::kMessageStart, 0, 0xff); break;
    case Fault::kCorruptEnvelopeStep: flip(Anchor::kMessageStart, 4, 0x01); break;
    case Fault::kCorruptEnvelopeSequence: flip(Anchor::kMessageStart, 8, 0x01); break;
    case Fault::kCorruptEnvelopeSignature: flip(Anchor::kMessageStart, 16, 0x01); break;
    case Fault::kCorruptWireHeader: flip(Anchor::kWireHeader, 0, 0x01); break;
    case Fault::kCorruptPayloadData: flip(Anchor::kMessageEnd, 0, 0x01); break;
    case Fault::kKill: p.kind = FaultKind::kKill; break;
  }
  return p;
}

// A local group whose ranks all run through a FaultTransport, with one
// error buffer per rank (allreduce), destroyed with it.
class FaultGroup {
 public:
  FaultGroup(int n, double timeout, Coll c, const FaultPlan& plan) : g_(n, timeout), coll_(c) {
    EXPECT_TRUE(g_.ok());
    EXPECT_EQ(g_.set_policy("*", policy_for(c)), QC_SUCCESS);
    for (int r = 0; r < n; ++r) wrappers_.push_back(qcfault::install(g_[r], plan));
    ebs_.assign(static_cast<size_t>(n), nullptr);
    if (c != Coll::kAlltoall) {
      for (int r = 0; r < n; ++r)
        EXPECT_EQ(qc_error_buffer_create(g_[r], kCount, &ebs_[static_cast<size_t>(r)]),
                  QC_SUCCESS);
    }
  }
  ~FaultGroup() {
    for (auto eb : ebs_) qc_error_buffer_destroy(eb);
  }
  FaultGroup(const FaultGroup&) = delete;
  FaultGroup& operator=(const FaultGroup&) = delete;

  int size() const { return g_.size(); }
  qc_comm_t comm(int r) const { return g_[r]; }
  qc_error_buffer_t eb(int r) const { return ebs_[static_cast<size_t>(r)]; }
  FaultTransport* wrapper(int r) const { return wrappers_[static_cast<size_t>(r)]; }
  Coll coll() const { return coll_; }

  Bytes eb_image(int r) const {
    if (eb(r) == nullptr) return {};
    size_t size = 0;
    EXPECT_EQ(qc_error_buffer_save(eb(r), nullptr, 0, &size), QC_SUCCESS);
    Bytes image(size);
    EXPECT_EQ(qc_error_buffer_save(eb(r), image.data(), image.size(), &size), QC_SUCCESS);
    return image;
  }

 private:
  Group g_;
  Coll coll_;
  std::vector<FaultTransport*> wrappers_;
  std::vector<qc_error_buffer_t> ebs_;
};

struct Call {
  std::vector<qc_status_t> status;
  std::vector<double> seconds;
  std::vector<std::string> error;
  std::vector<Bytes> out;
  double max_seconds() const { return *std::max_element(seconds.begin(), seconds.end()); }
  std::string describe() const {
    std::ostringstream os;
    for (size_t r = 0; r < status.size(); ++r) {
      os << "r" << r << "=" << qc_status_string(status[r]);
      char t[32];
      std::snprintf(t, sizeof t, "(%.3fs)", seconds[r]);
      os << t << " ";
    }
    return os.str();
  }
  std::string messages() const {
    std::ostringstream os;
    for (size_t r = 0; r < status.size(); ++r)
      if (!error[r].empty()) os << "\n  rank " << r << ": " << error[r];
    return os.str();
  }
};

constexpr uint8_t kSentinel = 0xA5;

size_t out_bytes(Coll c, int n) {
  return c == Coll::kAlltoall ? static_cast<size_t>(n) * kPerRank * 4 : kCount * 4;
}

// One collective on every rank at once, each rank timed.
Call run_call(const FaultGroup& fg, const std::vector<Bytes>& in) {
  const int n = fg.size();
  Call c;
  c.status.assign(static_cast<size_t>(n), QC_ERROR_INTERNAL);
  c.seconds.assign(static_cast<size_t>(n), 0.0);
  c.error.assign(static_cast<size_t>(n), "");
  c.out.assign(static_cast<size_t>(n), Bytes(out_bytes(fg.coll(), n), kSentinel));
  run_ranks(n, [&](int r) {
    const auto ur = static_cast<size_t>(r);
    const auto t0 = Clock::now();
    qc_status_t s;
    if (fg.coll() == Coll::kAlltoall) {
      s = qc_alltoall(fg.comm(r), in[ur].data(), c.out[ur].data(), kPerRank, QC_DTYPE_FLOAT32,
                      "w", nullptr);
    } else {
      s = qc_allreduce(fg.comm(r), in[ur].data(), c.out[ur].data(), kCount, QC_DTYPE_FLOAT32,
                       QC_OP_SUM, "w", fg.eb(r), nullptr);
    }
    c.seconds[ur] = seconds_since(t0);
    c.status[ur] = s;
    if (s != QC_SUCCESS) c.error[ur] = qc_last_error();
  });
  return c;
}

std::vector<Bytes> inputs(Coll c, int n, uint64_t seed) {
  const size_t count = c == Coll::kAlltoall ? static_cast<size_t>(n) * kPerRank : kCount;
  return encode_all(random_inputs(n, count, seed), QC_DTYPE_FLOAT32);
}

std::vector<Bytes> emulate(Coll c, int n, const std::vector<Bytes>& in) {
  std::vector<Bytes> out(static_cast<size_t>(n), Bytes(out_bytes(c, n), 0));
  std::vector<const void*> sp;
  std::vector<void*> rp;
  for (int r = 0; r < n; ++r) {
    sp.push_back(in[static_cast<size_t>(r)].data());
    rp.push_back(out[static_cast<size_t>(r)].data());
  }
  const qc_policy_t p = policy_for(c);
  qc_status_t s;
  if (c == Coll::kAlltoall) {
    s = qc_emulate_alltoall(n, sp.data(), rp.data(), kPerRank, QC_DTYPE_FLOAT32, "w", 0, &p);
  } else {
    std::vector<qc_error_buffer_t> ebs(static_cast<size_t>(n), nullptr);
    for (auto& eb : ebs) EXPECT_EQ(qc_error_buffer_create(nullptr, kCount, &eb), QC_SUCCESS);
    // Layer "w", as run_call's: it keys the random bits of stochastic
    // rounding (the global codecs' default).
    s = qc_emulate_allreduce(n, sp.data(), rp.data(), kCount, QC_DTYPE_FLOAT32, QC_OP_SUM, "w",
                             0, &p, ebs.data());
    for (auto eb : ebs) qc_error_buffer_destroy(eb);
  }
  EXPECT_EQ(s, QC_SUCCESS) << qc_last_error();
  return out;
}

using Param = std::tuple<Coll, Fault, int>;

class FaultInjection : public ::testing::TestWithParam<Param> {};

TEST_P(FaultInjection, DocumentedStatusNoHangNoDamage) {
  const Coll coll = std::get<0>(GetParam());
  const Fault fault = std::get<1>(GetParam());
  const int n = std::get<2>(GetParam());
  const std::vector<Bytes> in[3] = {inputs(coll, n, 11), inputs(coll, n, 12),
                                    inputs(coll, n, 13)};

  // Reference: the same three calls through empty plans.
  std::vector<Bytes> ref[3];
  long victim_sends[3] = {0, 0, 0};
  {
    FaultGroup clean(n, kCleanTimeout, coll, FaultPlan{});
    long before = 0;
    for (int k = 0; k < 3; ++k) {
      const Call c = run_call(clean, in[k]);
      ASSERT_TRUE(std::all_of(c.status.begin(), c.status.end(),
                              [](qc_status_t s) { return s == QC_SUCCESS; }))
          << "clean call " << k << ": " << c.describe() << c.messages();
      ref[k] = c.out;
      victim_sends[k] = clean.wrapper(kVictim)->sends_posted() - before;
      before = clean.wrapper(kVictim)->sends_posted();
    }
    const std::vector<Bytes> emu = emulate(coll, n, in[0]);
    for (int r = 0; r < n; ++r)
      ASSERT_TRUE(bytes_equal(ref[0][static_cast<size_t>(r)], emu[static_cast<size_t>(r)],
                              "call A through the wrapper vs qc_emulate"))
          << "rank " << r;
  }

  const Target t = target_of(fault);
  const long in_call = victim_sends[t.call];
  ASSERT_GT(in_call, 0) << "rank " << kVictim << " sends nothing";
  long index = t.call == 1 ? victim_sends[0] : 0;
  index += t.position == Position::kFirst ? 0
           : t.position == Position::kLast ? in_call - 1
                                           : in_call / 2;
  const Expectation want = expectation(coll, fault);

  FaultGroup fg(n, kTimeout, coll, plan_for(fault, index));
  std::vector<Call> calls;
  std::vector<std::vector<Bytes>> images;  // error buffers before each call
  for (int k = 0; k < 3; ++k) {
    std::vector<Bytes> im;
    for (int r = 0; r < n; ++r) im.push_back(fg.eb_image(r));
    images.push_back(im);
    calls.push_back(run_call(fg, in[k]));
  }
  EXPECT_EQ(fg.wrapper(kVictim)->times_fired(), 1) << "the fault did not hit exactly once";

  std::printf("[fault-report] %s n=%d %s: victim msg %ld of %ld (peer %d) | A: %s| B: %s| C: %s\n",
              coll_name(coll), n, fault_name(fault), index - (t.call == 1 ? victim_sends[0] : 0),
              in_call,
              index < static_cast<long>(fg.wrapper(kVictim)->sends().size())
                  ? fg.wrapper(kVictim)->sends()[static_cast<size_t>(index)].peer
                  : -1,
              calls[0].describe().c_str(), calls[1].describe().c_str(),
              calls[2].describe().c_str());

  // No call may take longer than the timeout plus a second.
  for (int k = 0; k < 3; ++k)
    EXPECT_LE(calls[static_cast<size_t>(k)].max_seconds(), kTimeout + 1.0)
        << "call " << k << ": " << calls[static_cast<size_t>(k)].describe();

  // A failed call leaves its rank's output and error buffer as they were.
  for (int k = 0; k < 3; ++k) {
    const Call& c = calls[static_cast<size_t>(k)];
    for (int r = 0; r < n; ++r) {
      const auto ur = static_cast<size_t>(r);
      if (c.status[ur] == QC_SUCCESS) continue;
      EXPECT_STRNE(c.error[ur].c_str(), "") << "call " << k << " rank " << r << ": no message";
      EXPECT_TRUE(bytes_equal(c.out[ur], Bytes(c.out[ur].size(), kSentinel),
                              "output of a failed call"))
          << "call " << k << " rank " << r;
      const Bytes after = k + 1 < 3 ? images[static_cast<size_t>(k + 1)][ur] : fg.eb_image(r);
      EXPECT_TRUE(bytes_equal(after, images[static_cast<size_t>(k)][ur],
                              "error buffer image across a failed call"))
          << "call " << k << " rank " << r;
    }
  }
  // A successful call gives the reference output, except where the fault is
  // one the wire format cannot see.
  auto expect_reference = [&](int k, int r) {
    EXPECT_TRUE(bytes_equal(calls[static_cast<size_t>(k)].out[static_cast<size_t>(r)],
                            ref[k][static_cast<size_t>(r)], "output vs the reference run"))
        << "call " << k << " rank " << r;
  };

  const Call& a = calls[0];
  const Call& b = calls[1];
  const Call& c = calls[2];
  switch (want.outcome) {
    case Outcome::kSuccess:
      for (int k = 0; k < 3; ++k)
        for (int r = 0; r < n; ++r) {
          EXPECT_EQ(calls[static_cast<size_t>(k)].status[static_cast<size_t>(r)], QC_SUCCESS)
              << "call " << k << ": " << calls[static_cast<size_t>(k)].describe()
              << calls[static_cast<size_t>(k)].messages();
          expect_reference(k, r);
        }
      break;

    case Outcome::kError: {
      for (int r = 0; r < n; ++r) {
        EXPECT_EQ(a.status[static_cast<size_t>(r)], QC_SUCCESS) << a.describe() << a.messages();
        expect_reference(0, r);
      }
      // The group's status: the first failure breaks the whole group, so
      // every rank that fails (the killed rank aside) reports the same one.
      qc_status_t group = QC_SUCCESS;
      for (int r = 0; r < n && group == QC_SUCCESS; ++r)
        if (!(fault == Fault::kKill && r == kVictim)) group = b.status[static_cast<size_t>(r)];
      EXPECT_TRUE(group == want.status || group == want.alt)
          << "the group failed with " << qc_status_string(group) << ", want "
          << qc_status_string(want.status) << ": " << b.describe() << b.messages();
      int failed = 0;
      for (int r = 0; r < n; ++r) {
        const auto ur = static_cast<size_t>(r);
        const bool killed_rank = fault == Fault::kKill && r == kVictim;
        const qc_status_t want_r = killed_rank ? QC_ERROR_TRANSPORT : group;
        if (b.status[ur] == QC_SUCCESS && !killed_rank) {
          // Only a rank that had everything it needed before the fault.
          expect_reference(1, r);
        } else {
          EXPECT_EQ(b.status[ur], want_r) << "call B rank " << r << ": " << b.describe()
                                          << b.messages();
          ++failed;
        }
        // The communicator refuses further use with the same status.
        EXPECT_EQ(c.status[ur], want_r) << "call C rank " << r << ": " << c.describe()
                                        << c.messages();
        EXPECT_NE(c.error[ur].find("broken"), std::string::npos)
            << "call C rank " << r << ": " << c.error[ur];
        EXPECT_LT(c.seconds[ur], 0.25) << "a broken communicator must fail at once";
      }
      EXPECT_GT(failed, 0) << "the fault went unnoticed: " << b.describe();
      break;
    }

    case Outcome::kDuplicate:
      for (int r = 0; r < n; ++r) {
        const auto ur = static_cast<size_t>(r);
        EXPECT_EQ(a.status[ur], QC_SUCCESS) << a.describe() << a.messages();
        if (b.status[ur] == QC_SUCCESS) {
          expect_reference(1, r);
        } else {
          EXPECT_EQ(b.status[ur], QC_ERROR_MISMATCH) << b.describe() << b.messages();
        }
        // Never accepted as data of the next call: MISMATCH, or (a rank
        // that had all it needed from the others before the receiver found
        // the stale copy, e.g. in alltoall) the exact result of call C.
        if (c.status[ur] == QC_SUCCESS) {
          expect_reference(2, r);
        } else {
          EXPECT_EQ(c.status[ur], QC_ERROR_MISMATCH) << c.describe() << c.messages();
        }
      }
      {
        // The rank the copy went to finds it, in call B or C.
        const std::vector<qcfault::SendRecord>& log = fg.wrapper(kVictim)->sends();
        ASSERT_LT(static_cast<size_t>(index), log.size());
        const auto to = static_cast<size_t>(log[static_cast<size_t>(index)].peer);
        EXPECT_TRUE(b.status[to] == QC_ERROR_MISMATCH || c.status[to] == QC_ERROR_MISMATCH)
            << "the duplicate's receiver, rank " << to << ", never noticed it: B: "
            << b.describe() << " C: " << c.describe();
      }
      {
        // And from then on the communicator is broken.
        const Call d = run_call(fg, in[2]);
        for (int r = 0; r < n; ++r) {
          const auto ur = static_cast<size_t>(r);
          EXPECT_EQ(d.status[ur], QC_ERROR_MISMATCH) << d.describe() << d.messages();
          EXPECT_NE(d.error[ur].find("broken"), std::string::npos) << d.error[ur];
          EXPECT_LT(d.seconds[ur], 0.25) << "a broken communicator must fail at once";
        }
      }
      break;

    case Outcome::kUndetected: {
      for (int r = 0; r < n; ++r) {
        const auto ur = static_cast<size_t>(r);
        EXPECT_EQ(a.status[ur], QC_SUCCESS) << a.describe() << a.messages();
        EXPECT_TRUE(b.status[ur] == QC_SUCCESS || b.status[ur] == want.status)
            << b.describe() << b.messages();
        EXPECT_TRUE(c.status[ur] == QC_SUCCESS || c.status[ur] == want.status)
            << c.describe() << c.messages();
      }
      // Report what an undetected flip did to the result.
      int wrong = 0;
      bool consistent = true;
      for (int r = 0; r < n; ++r) {
        const auto ur = static_cast<size_t>(r);
        if (b.status[ur] != QC_SUCCESS) continue;
        if (b.out[ur] != ref[1][ur]) ++wrong;
        if (r > 0 && coll != Coll::kAlltoall && b.status[0] == QC_SUCCESS &&
            b.out[ur] != b.out[0])
          consistent = false;
      }
      std::printf("[fault-report]   undetected flip: %d of %d ranks got a wrong result, "
                  "replicas %s\n",
                  wrong, n, coll == Coll::kAlltoall ? "n/a" : consistent ? "identical" : "DIFFER");
      break;
    }
  }
}

std::string param_name(const ::testing::TestParamInfo<Param>& i) {
  return std::string(coll_name(std::get<0>(i.param))) + "_" + fault_name(std::get<1>(i.param)) +
         "_n" + std::to_string(std::get<2>(i.param));
}

INSTANTIATE_TEST_SUITE_P(
    Local, FaultInjection,
    ::testing::Combine(::testing::Values(Coll::kRing, Coll::kRecDoubling, Coll::kSra, Coll::kTree,
                                         Coll::kNative, Coll::kAlltoall),
                       ::testing::Values(Fault::kDrop, Fault::kDelayShort, Fault::kDelayLong,
                                         Fault::kDuplicateFirst, Fault::kDuplicateLast,
                                         Fault::kTruncateEnvelope, Fault::kTruncatePayload,
                                         Fault::kCorruptEnvelopeMagic, Fault::kCorruptEnvelopeStep,
                                         Fault::kCorruptEnvelopeSequence,
                                         Fault::kCorruptEnvelopeSignature,
                                         Fault::kCorruptWireHeader, Fault::kCorruptPayloadData,
                                         Fault::kKill),
                       ::testing::Values(3, 5)),
    param_name);

// A fault chosen by transport tag instead of message index: the wrapper's
// other selector. Rank 1's only message of the second call in a tree (its
// reduce to rank 0, step kReduce + 1), dropped: every rank times out.
TEST(FaultInjectionByTag, DropChosenByTagTimesOut) {
  const int n = 3;
  FaultPlan plan;
  plan.kind = FaultKind::kDrop;
  plan.rank = kVictim;
  plan.match_tag = true;
  plan.tag = (uint64_t{2} << 20) | 0x301u;  // call 2, tree kReduce + mask 1
  FaultGroup fg(n, kTimeout, Coll::kTree, plan);
  const Call a = run_call(fg, inputs(Coll::kTree, n, 1));
  const Call b = run_call(fg, inputs(Coll::kTree, n, 2));
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(a.status[static_cast<size_t>(r)], QC_SUCCESS) << a.describe() << a.messages();
    EXPECT_EQ(b.status[static_cast<size_t>(r)], QC_ERROR_TIMEOUT) << b.describe() << b.messages();
  }
  EXPECT_EQ(fg.wrapper(kVictim)->times_fired(), 1);
  EXPECT_LE(b.max_seconds(), kTimeout + 1.0) << b.describe();
}

// Recursive doubling's unfold message (core rank 0 to the extra rank 2 of
// 3, group size 2) with its first block index flipped: the extra rank must
// see corrupt data. (It used to find a block missing only when decoding and
// return QC_ERROR_INTERNAL.)
TEST(FaultInjectionUnfold, RecDoublingUnfoldWithWrongBlockIsCorrupt) {
  const int n = 3;
  // Rank 0's messages in one call: intra-group reduce to 1, intra-group
  // gather to 1, unfold to 2.
  FaultPlan plan;
  plan.kind = FaultKind::kCorrupt;
  plan.rank = 0;
  plan.peer = 2;
  plan.flips.push_back({Anchor::kMessageStart, 24, 0x01});  // after the envelope: block 0 -> 1
  FaultGroup fg(n, kTimeout, Coll::kRecDoubling, plan);
  const Call a = run_call(fg, inputs(Coll::kRecDoubling, n, 1));
  const Call c = run_call(fg, inputs(Coll::kRecDoubling, n, 2));
  EXPECT_EQ(fg.wrapper(0)->times_fired(), 1);
  for (int r : {0, 1})  // they had everything before rank 2 found the damage
    EXPECT_TRUE(a.status[static_cast<size_t>(r)] == QC_SUCCESS ||
                a.status[static_cast<size_t>(r)] == QC_ERROR_CORRUPT_DATA)
        << a.describe() << a.messages();
  EXPECT_EQ(a.status[2], QC_ERROR_CORRUPT_DATA) << a.describe() << a.messages();
  for (int r = 0; r < n; ++r)
    EXPECT_EQ(c.status[static_cast<size_t>(r)], QC_ERROR_CORRUPT_DATA) << c.describe();
  EXPECT_LE(a.max_seconds(), kTimeout + 1.0) << a.describe();
}

// The native algorithm's codes carry the norm they were encoded on; one on
// another grid (here its lowest bit flipped) would add integers of another
// scale, so its receiver refuses it with MISMATCH instead of summing.
TEST(FaultInjectionNative, CodesOnAnotherGridAreAMismatch) {
  const int n = 3;
  // Rank 1's messages in one call: its scale share to 2 and 0, then the
  // codes of blocks 2 and 0, then its block's sums to 2 and 0.
  FaultPlan plan;
  plan.kind = FaultKind::kCorrupt;
  plan.rank = 1;
  plan.message_index = 2;
  plan.flips.push_back({Anchor::kWireHeader, 32, 0x01});  // the norm after the 32-byte header
  FaultGroup fg(n, kTimeout, Coll::kNative, plan);
  const Call a = run_call(fg, inputs(Coll::kNative, n, 1));
  EXPECT_EQ(fg.wrapper(1)->times_fired(), 1);
  EXPECT_EQ(a.status[2], QC_ERROR_MISMATCH) << a.describe() << a.messages();
  EXPECT_NE(a.error[2].find("agreed"), std::string::npos) << a.messages();
  for (int r : {0, 1})  // they may have finished before rank 2 broke the group
    EXPECT_TRUE(a.status[static_cast<size_t>(r)] == QC_SUCCESS ||
                a.status[static_cast<size_t>(r)] == QC_ERROR_MISMATCH)
        << a.describe() << a.messages();
  EXPECT_LE(a.max_seconds(), kTimeout + 1.0) << a.describe();
}

}  // namespace
