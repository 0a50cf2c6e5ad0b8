// Bad input never hangs: timeouts, disagreements between ranks, peers that
// disappear, and invalid arguments.
#include <atomic>

#include "test_util.h"

using namespace qct;
using Clock = std::chrono::steady_clock;

namespace {

constexpr double kShortTimeout = 0.5;

struct Outcome {
  std::vector<qc_status_t> status;
  std::vector<double> seconds;
  std::vector<std::string> error;
  std::string describe() const {
    std::ostringstream os;
    for (size_t r = 0; r < status.size(); ++r)
      os << "rank " << r << ": " << qc_status_string(status[r]) << " after " << seconds[r]
         << " s" << (error[r].empty() ? "" : " (" + error[r] + ")") << "; ";
    return os.str();
  }
};

// Each rank runs call(rank) -> status; timing and messages are recorded.
template <class F>
Outcome run_timed(int n, F&& call) {
  Outcome o;
  o.status.assign(n, QC_ERROR_INTERNAL);
  o.seconds.assign(n, 0.0);
  o.error.assign(n, "");
  run_ranks(n, [&](int r) {
    const auto t0 = Clock::now();
    o.status[r] = call(r);
    o.seconds[r] = seconds_since(t0);
    if (o.status[r] != QC_SUCCESS) o.error[r] = qc_last_error();
  });
  return o;
}

// ---------------------------------------------------------------------------
// (a) a rank that never arrives
// ---------------------------------------------------------------------------
class MissingRank : public ::testing::TestWithParam<qc_algorithm_t> {};

TEST_P(MissingRank, CallersTimeOutAndCommIsBroken) {
  const int n = 4;
  const size_t count = 1000;
  Group g(n, kShortTimeout);
  ASSERT_TRUE(g.ok());
  ASSERT_EQ(g.set_policy("*", make_policy(GetParam())), QC_SUCCESS);
  const auto bytes = encode_all(random_inputs(n, count, 1), QC_DTYPE_FLOAT32);
  std::vector<Bytes> out(n, Bytes(count * 4));
  const Outcome o = run_timed(n, [&](int r) {
    if (r == n - 1) return QC_SUCCESS;  // the last rank never calls
    return qc_allreduce(g[r], bytes[r].data(), out[r].data(), count, QC_DTYPE_FLOAT32,
                        QC_OP_SUM, nullptr, nullptr, nullptr);
  });
  for (int r = 0; r < n - 1; ++r) {
    EXPECT_EQ(o.status[r], QC_ERROR_TIMEOUT) << o.describe();
    EXPECT_LT(o.seconds[r], 10.0) << o.describe();
    EXPECT_STRNE(o.error[r].c_str(), "") << "rank " << r << " gave no message";
  }
  // The communicator is broken now: the next collective fails at once with
  // the same status (qc.h), on every rank that saw the failure.
  const Outcome again = run_timed(n - 1, [&](int r) {
    return qc_allreduce(g[r], bytes[r].data(), out[r].data(), count, QC_DTYPE_FLOAT32,
                        QC_OP_SUM, nullptr, nullptr, nullptr);
  });
  for (int r = 0; r < n - 1; ++r) {
    EXPECT_NE(again.status[r], QC_SUCCESS) << again.describe();
    EXPECT_EQ(again.status[r], QC_ERROR_TIMEOUT) << "qc.h: a broken comm returns the same status; "
                                                 << again.describe();
    EXPECT_LT(again.seconds[r], 0.4) << "a broken comm should fail at once; " << again.describe();
  }
  const Outcome a2a = run_timed(1, [&](int r) {
    return qc_alltoall(g[r], bytes[r].data(), out[r].data(), count / n, QC_DTYPE_FLOAT32,
                       nullptr, nullptr);
  });
  EXPECT_NE(a2a.status[0], QC_SUCCESS) << a2a.describe();
  EXPECT_LT(a2a.seconds[0], 0.4) << a2a.describe();
}

INSTANTIATE_TEST_SUITE_P(Local, MissingRank, ::testing::ValuesIn(all_algorithms()),
                         [](const ::testing::TestParamInfo<qc_algorithm_t>& i) {
                           return std::string(algo_name(i.param));
                         });

TEST(MissingRankAlltoall, CallersTimeOut) {
  const int n = 3;
  Group g(n, kShortTimeout);
  ASSERT_TRUE(g.ok());
  const auto bytes = encode_all(random_inputs(n, n * 5, 1), QC_DTYPE_FLOAT32);
  std::vector<Bytes> out(n, Bytes(n * 5 * 4));
  const Outcome o = run_timed(n, [&](int r) {
    if (r == 1) return QC_SUCCESS;
    return qc_alltoall(g[r], bytes[r].data(), out[r].data(), 5, QC_DTYPE_FLOAT32, nullptr,
                       nullptr);
  });
  for (int r : {0, 2}) {
    EXPECT_EQ(o.status[r], QC_ERROR_TIMEOUT) << o.describe();
    EXPECT_LT(o.seconds[r], 10.0) << o.describe();
  }
}

// ---------------------------------------------------------------------------
// (b)-(d) ranks that disagree: MISMATCH on every rank, not TIMEOUT
// ---------------------------------------------------------------------------
class Mismatch : public ::testing::TestWithParam<qc_algorithm_t> {};

// Runs an allreduce where rank 0's call differs as `differ` says; n = 3.
template <class Differ>
Outcome mismatch_run(qc_algorithm_t algo, Differ differ, double timeout = 5.0) {
  const int n = 3;
  Group g(n, timeout);
  EXPECT_TRUE(g.ok());
  g.set_policy("*", make_policy(algo));
  const size_t cap = 64;
  const auto bytes = encode_all(random_inputs(n, cap, 1), QC_DTYPE_FLOAT32);
  std::vector<Bytes> out(n, Bytes(cap * 4));
  return run_timed(n, [&](int r) {
    size_t count = 11;
    qc_dtype_t dtype = QC_DTYPE_FLOAT32;
    qc_reduce_op_t op = QC_OP_SUM;
    const char* layer = "w";
    differ(r, g[r], count, dtype, op, layer);
    return qc_allreduce(g[r], bytes[r].data(), out[r].data(), count, dtype, op, layer,
                        nullptr, nullptr);
  });
}

void expect_mismatch_everywhere(const Outcome& o, double timeout) {
  for (size_t r = 0; r < o.status.size(); ++r) {
    EXPECT_EQ(o.status[r], QC_ERROR_MISMATCH) << o.describe();
    if (o.status[r] == QC_ERROR_TIMEOUT)
      ADD_FAILURE() << "FINDING: rank " << r << " timed out instead of reporting MISMATCH";
    EXPECT_LT(o.seconds[r], timeout) << o.describe();
  }
}

TEST_P(Mismatch, CountsDiffer) {
  const Outcome o = mismatch_run(GetParam(), [](int r, qc_comm_t, size_t& count, qc_dtype_t&,
                                                qc_reduce_op_t&, const char*&) {
    count = r == 0 ? 10 : 11;
  });
  expect_mismatch_everywhere(o, 5.0);
}

TEST_P(Mismatch, DtypesDiffer) {
  const Outcome o = mismatch_run(GetParam(), [](int r, qc_comm_t, size_t&, qc_dtype_t& d,
                                                qc_reduce_op_t&, const char*&) {
    d = r == 1 ? QC_DTYPE_FLOAT16 : QC_DTYPE_FLOAT32;
  });
  expect_mismatch_everywhere(o, 5.0);
}

TEST_P(Mismatch, OpsDiffer) {
  const Outcome o = mismatch_run(GetParam(), [](int r, qc_comm_t, size_t&, qc_dtype_t&,
                                                qc_reduce_op_t& op, const char*&) {
    op = r == 2 ? QC_OP_AVG : QC_OP_SUM;
  });
  expect_mismatch_everywhere(o, 5.0);
}

TEST_P(Mismatch, LayersDiffer) {
  const Outcome o = mismatch_run(GetParam(), [](int r, qc_comm_t, size_t&, qc_dtype_t&,
                                                qc_reduce_op_t&, const char*& layer) {
    layer = r == 0 ? "w" : "v";  // both resolve to "*": still a disagreement (qc.h)
  });
  expect_mismatch_everywhere(o, 5.0);
}

TEST_P(Mismatch, AlgorithmsDifferViaPolicy) {
  const qc_algorithm_t base = GetParam();
  const Outcome o = mismatch_run(base, [base](int r, qc_comm_t c, size_t&, qc_dtype_t&,
                                              qc_reduce_op_t&, const char*&) {
    if (r == 2) {
      const qc_policy_t p =
          make_policy(base == QC_ALGO_RING ? QC_ALGO_TREE : QC_ALGO_RING);
      qc_comm_set_layer_policy(c, "*", &p);
    }
  });
  expect_mismatch_everywhere(o, 5.0);
}

TEST_P(Mismatch, OtherPolicyFieldDiffers) {
  // Same algorithm, but one rank has a different seed / group size.
  const qc_algorithm_t base = GetParam();
  const Outcome o = mismatch_run(base, [base](int r, qc_comm_t c, size_t&, qc_dtype_t&,
                                              qc_reduce_op_t&, const char*&) {
    if (r == 1) {
      qc_policy_t p = make_policy(base, 2);
      p.seed = 77;
      qc_comm_set_layer_policy(c, "*", &p);
    }
  });
  expect_mismatch_everywhere(o, 5.0);
}

TEST_P(Mismatch, CommIsBrokenAfterwards) {
  const int n = 3;
  Group g(n, 5.0);
  ASSERT_TRUE(g.ok());
  g.set_policy("*", make_policy(GetParam()));
  const auto bytes = encode_all(random_inputs(n, 16, 1), QC_DTYPE_FLOAT32);
  std::vector<Bytes> out(n, Bytes(16 * 4));
  const Outcome first = run_timed(n, [&](int r) {
    return qc_allreduce(g[r], bytes[r].data(), out[r].data(), r == 0 ? 15 : 16,
                        QC_DTYPE_FLOAT32, QC_OP_SUM, nullptr, nullptr, nullptr);
  });
  for (int r = 0; r < n; ++r) ASSERT_NE(first.status[r], QC_SUCCESS) << first.describe();
  const Outcome second = run_timed(n, [&](int r) {
    return qc_allreduce(g[r], bytes[r].data(), out[r].data(), 16, QC_DTYPE_FLOAT32, QC_OP_SUM,
                        nullptr, nullptr, nullptr);
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(second.status[r], first.status[r]) << second.describe();
    EXPECT_LT(second.seconds[r], 1.0) << second.describe();
  }
}

INSTANTIATE_TEST_SUITE_P(Local, Mismatch, ::testing::ValuesIn(all_algorithms()),
                         [](const ::testing::TestParamInfo<qc_algorithm_t>& i) {
                           return std::string(algo_name(i.param));
                         });

TEST(MismatchAlltoall, CountsAndDtypesDiffer) {
  const int n = 3;
  const auto bytes = encode_all(random_inputs(n, n * 8, 1), QC_DTYPE_FLOAT32);
  std::vector<Bytes> out(n, Bytes(n * 8 * 4));
  for (int variant = 0; variant < 2; ++variant) {
    SCOPED_TRACE(variant == 0 ? "count" : "dtype");
    Group g(n, 5.0);
    ASSERT_TRUE(g.ok());
    const Outcome o = run_timed(n, [&](int r) {
      const size_t cpr = variant == 0 && r == 1 ? 7 : 8;
      const qc_dtype_t d = variant == 1 && r == 2 ? QC_DTYPE_BFLOAT16 : QC_DTYPE_FLOAT32;
      return qc_alltoall(g[r], bytes[r].data(), out[r].data(), cpr, d, nullptr, nullptr);
    });
    expect_mismatch_everywhere(o, 5.0);
  }
}

// ---------------------------------------------------------------------------
// (e) a peer that destroys its communicator: TRANSPORT at once, not TIMEOUT
// ---------------------------------------------------------------------------
class DestroyedPeer : public ::testing::TestWithParam<qc_algorithm_t> {};

TEST_P(DestroyedPeer, DestroyedBeforeTheCall) {
  Group g(2, kTimeoutSeconds);
  ASSERT_TRUE(g.ok());
  ASSERT_EQ(g.set_policy("*", make_policy(GetParam())), QC_SUCCESS);
  ASSERT_EQ(g.destroy(1), QC_SUCCESS);
  std::vector<float> in(100, 1.0f), out(100);
  const auto t0 = Clock::now();
  const qc_status_t s = qc_allreduce(g[0], in.data(), out.data(), in.size(), QC_DTYPE_FLOAT32,
                                     QC_OP_SUM, nullptr, nullptr, nullptr);
  const double dt = seconds_since(t0);
  EXPECT_EQ(s, QC_ERROR_TRANSPORT) << st(s) << ": " << qc_last_error();
  EXPECT_LT(dt, 5.0);
}

TEST_P(DestroyedPeer, DestroyedWhileWaiting) {
  Group g(2, kTimeoutSeconds);
  ASSERT_TRUE(g.ok());
  ASSERT_EQ(g.set_policy("*", make_policy(GetParam())), QC_SUCCESS);
  std::vector<float> in(100, 1.0f), out(100);
  qc_status_t s = QC_ERROR_INTERNAL;
  double dt = 0;
  std::thread caller([&] {
    const auto t0 = Clock::now();
    s = qc_allreduce(g[0], in.data(), out.data(), in.size(), QC_DTYPE_FLOAT32, QC_OP_SUM,
                     nullptr, nullptr, nullptr);
    dt = seconds_since(t0);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ASSERT_EQ(g.destroy(1), QC_SUCCESS);
  caller.join();
  EXPECT_EQ(s, QC_ERROR_TRANSPORT) << st(s);
  EXPECT_LT(dt, 5.0);
}

TEST_P(DestroyedPeer, ThreeRanksNobodyHangs) {
  // Rank 1 leaves; ranks 0 and 2 call. Whoever waits on rank 1 gets TRANSPORT
  // at once; nobody waits past the (short) timeout.
  const double timeout = 3.0;
  Group g(3, timeout);
  ASSERT_TRUE(g.ok());
  ASSERT_EQ(g.set_policy("*", make_policy(GetParam())), QC_SUCCESS);
  ASSERT_EQ(g.destroy(1), QC_SUCCESS);
  const auto bytes = encode_all(random_inputs(3, 300, 1), QC_DTYPE_FLOAT32);
  std::vector<Bytes> out(3, Bytes(300 * 4));
  const Outcome o = run_timed(3, [&](int r) {
    if (r == 1) return QC_ERROR_TRANSPORT;
    return qc_allreduce(g[r], bytes[r].data(), out[r].data(), 300, QC_DTYPE_FLOAT32,
                        QC_OP_SUM, nullptr, nullptr, nullptr);
  });
  for (int r : {0, 2}) {
    EXPECT_NE(o.status[r], QC_SUCCESS) << o.describe();
    EXPECT_LT(o.seconds[r], timeout + 2.0) << o.describe();
  }
  EXPECT_TRUE(o.status[0] == QC_ERROR_TRANSPORT || o.status[2] == QC_ERROR_TRANSPORT)
      << o.describe();
}

INSTANTIATE_TEST_SUITE_P(Local, DestroyedPeer, ::testing::ValuesIn(all_algorithms()),
                         [](const ::testing::TestParamInfo<qc_algorithm_t>& i) {
                           return std::string(algo_name(i.param));
                         });

TEST(DestroyedPeerAlltoall, TransportError) {
  Group g(2, kTimeoutSeconds);
  ASSERT_TRUE(g.ok());
  ASSERT_EQ(g.destroy(0), QC_SUCCESS);
  std::vector<float> in(20, 1.0f), out(20);
  const auto t0 = Clock::now();
  const qc_status_t s = qc_alltoall(g[1], in.data(), out.data(), 10, QC_DTYPE_FLOAT32, nullptr,
                                    nullptr);
  EXPECT_EQ(s, QC_ERROR_TRANSPORT) << st(s);
  EXPECT_LT(seconds_since(t0), 5.0);
}

// ---------------------------------------------------------------------------
// (f) qc_comm_get_async_error: a rank learns that its group broke without
// making a call, and a watchdog thread can poll while a call is blocked
// ---------------------------------------------------------------------------
qc_status_t async_error_of(qc_comm_t comm, std::string* message = nullptr) {
  qc_status_t e = QC_ERROR_INTERNAL;
  const qc_status_t s = qc_comm_get_async_error(comm, &e);
  EXPECT_EQ(s, QC_SUCCESS) << qc_last_error();
  if (message != nullptr) *message = qc_last_error();
  return e;
}

TEST(AsyncError, HealthyGroupReportsSuccessAndKeepsTheLastError) {
  const int n = 3;
  Group g(n, 5.0);
  ASSERT_TRUE(g.ok());
  const auto bytes = encode_all(random_inputs(n, 64, 1), QC_DTYPE_FLOAT32);
  std::vector<Bytes> out(n, Bytes(64 * 4));
  const Outcome o = run_timed(n, [&](int r) {
    return qc_allreduce(g[r], bytes[r].data(), out[r].data(), 64, QC_DTYPE_FLOAT32, QC_OP_SUM,
                        nullptr, nullptr, nullptr);
  });
  for (int r = 0; r < n; ++r) ASSERT_EQ(o.status[r], QC_SUCCESS) << o.describe();
  // A failed call on this thread sets the last error; a healthy query must
  // leave it alone (a success never clears it, like errno).
  ASSERT_EQ(qc_comm_rank(g[0], nullptr), QC_ERROR_INVALID_ARGUMENT);
  const std::string before = qc_last_error();
  for (int r = 0; r < n; ++r) {
    std::string message;
    EXPECT_EQ(async_error_of(g[r], &message), QC_SUCCESS) << "rank " << r;
    EXPECT_EQ(message, before);
  }
}

TEST(AsyncError, RankThatNeverCalledLearnsOfThePeersTimeout) {
  const int n = 3;
  Group g(n, kShortTimeout);
  ASSERT_TRUE(g.ok());
  const auto bytes = encode_all(random_inputs(n, 100, 1), QC_DTYPE_FLOAT32);
  std::vector<Bytes> out(n, Bytes(100 * 4));
  EXPECT_EQ(async_error_of(g[2]), QC_SUCCESS);
  const Outcome o = run_timed(n - 1, [&](int r) {
    return qc_allreduce(g[r], bytes[r].data(), out[r].data(), 100, QC_DTYPE_FLOAT32, QC_OP_SUM,
                        nullptr, nullptr, nullptr);
  });
  for (int r = 0; r < n - 1; ++r) ASSERT_EQ(o.status[r], QC_ERROR_TIMEOUT) << o.describe();
  std::string message;
  EXPECT_EQ(async_error_of(g[2], &message), QC_ERROR_TIMEOUT);
  EXPECT_NE(message.find("qc_comm_get_async_error: "), std::string::npos) << message;
  EXPECT_GT(message.size(), std::string("qc_comm_get_async_error: ").size()) << message;
  // What it reported is what the rank's next collective returns, at once.
  const auto t0 = Clock::now();
  EXPECT_EQ(qc_allreduce(g[2], bytes[2].data(), out[2].data(), 100, QC_DTYPE_FLOAT32, QC_OP_SUM,
                         nullptr, nullptr, nullptr),
            QC_ERROR_TIMEOUT);
  EXPECT_LT(seconds_since(t0), 0.4) << "a broken group fails at once, not after the 0.5 s timeout";
}

TEST(AsyncError, WatchdogPollsWhileACallIsBlocked) {
  Group g(2, 2.0);
  ASSERT_TRUE(g.ok());
  std::vector<float> in(100, 1.0f), out(100);
  std::atomic<bool> returned{false};
  qc_status_t s = QC_ERROR_INTERNAL;
  std::thread caller([&] {
    s = qc_allreduce(g[0], in.data(), out.data(), in.size(), QC_DTYPE_FLOAT32, QC_OP_SUM,
                     nullptr, nullptr, nullptr);
    returned.store(true);
  });
  // Rank 1 never calls. While rank 0 waits the group is still healthy, and
  // polling it neither blocks nor disturbs the waiting call.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  int healthy_polls = 0;
  while (!returned.load()) {
    const auto t0 = Clock::now();
    const qc_status_t e = async_error_of(g[0]);
    // Generous for loaded sanitizer runs; a blocking query would wait for
    // the 2 s timeout.
    EXPECT_LT(seconds_since(t0), 1.0) << "qc_comm_get_async_error must not block";
    if (e != QC_SUCCESS) {
      EXPECT_EQ(e, QC_ERROR_TIMEOUT);
      break;
    }
    ++healthy_polls;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  caller.join();
  EXPECT_GT(healthy_polls, 0);
  EXPECT_EQ(s, QC_ERROR_TIMEOUT) << st(s);
  EXPECT_EQ(async_error_of(g[0]), QC_ERROR_TIMEOUT);
}

TEST(AsyncError, MismatchBreaksEveryRank) {
  const int n = 3;
  Group g(n, 5.0);
  ASSERT_TRUE(g.ok());
  const auto bytes = encode_all(random_inputs(n, 16, 1), QC_DTYPE_FLOAT32);
  std::vector<Bytes> out(n, Bytes(16 * 4));
  const Outcome o = run_timed(n, [&](int r) {
    return qc_allreduce(g[r], bytes[r].data(), out[r].data(), r == 1 ? 15 : 16,
                        QC_DTYPE_FLOAT32, QC_OP_SUM, nullptr, nullptr, nullptr);
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(o.status[r], QC_ERROR_MISMATCH) << o.describe();
    std::string message;
    EXPECT_EQ(async_error_of(g[r], &message), QC_ERROR_MISMATCH) << "rank " << r;
  }
}

// ---------------------------------------------------------------------------
// invalid arguments: an error status and a message, no waiting, and the
// communicator stays usable (it is not one of the breaking failures)
// ---------------------------------------------------------------------------
TEST(InvalidArguments, RejectedLocallyAndCommStaysUsable) {
  const int n = 3;
  Group g(n, 5.0);
  ASSERT_TRUE(g.ok());
  std::vector<float> a(8, 1.0f), b(8);
  struct Bad {
    const char* what;
    qc_status_t (*call)(qc_comm_t, float*, float*);
  };
  const Bad bad[] = {
      {"recvbuf NULL", [](qc_comm_t c, float* s, float*) {
         return qc_allreduce(c, s, nullptr, 8, QC_DTYPE_FLOAT32, QC_OP_SUM, nullptr, nullptr, nullptr);
       }},
      {"sendbuf NULL", [](qc_comm_t c, float*, float* r) {
         return qc_allreduce(c, nullptr, r, 8, QC_DTYPE_FLOAT32, QC_OP_SUM, nullptr, nullptr, nullptr);
       }},
      {"dtype 7", [](qc_comm_t c, float* s, float* r) {
         return qc_allreduce(c, s, r, 8, static_cast<qc_dtype_t>(7), QC_OP_SUM, nullptr, nullptr, nullptr);
       }},
      {"op 9", [](qc_comm_t c, float* s, float* r) {
         return qc_allreduce(c, s, r, 8, QC_DTYPE_FLOAT32, static_cast<qc_reduce_op_t>(9), nullptr, nullptr, nullptr);
       }},
      {"count overflows", [](qc_comm_t c, float* s, float* r) {
         return qc_allreduce(c, s, r, SIZE_MAX / 2, QC_DTYPE_FLOAT32, QC_OP_SUM, nullptr, nullptr, nullptr);
       }},
      {"overlapping buffers", [](qc_comm_t c, float* s, float*) {
         return qc_allreduce(c, s, s + 1, 4, QC_DTYPE_FLOAT32, QC_OP_SUM, nullptr, nullptr, nullptr);
       }},
      {"alltoall recvbuf NULL", [](qc_comm_t c, float* s, float*) {
         return qc_alltoall(c, s, nullptr, 1, QC_DTYPE_FLOAT32, nullptr, nullptr);
       }},
  };
  for (const auto& x : bad) {
    // Only rank 0 makes the bad call; it must fail at once without waiting.
    const auto t0 = Clock::now();
    const qc_status_t s = x.call(g[0], a.data(), b.data());
    EXPECT_EQ(s, QC_ERROR_INVALID_ARGUMENT) << x.what << ": " << st(s);
    EXPECT_STRNE(qc_last_error(), "") << x.what;
    EXPECT_LT(seconds_since(t0), 1.0) << x.what;
  }
  EXPECT_EQ(qc_allreduce(nullptr, a.data(), b.data(), 8, QC_DTYPE_FLOAT32, QC_OP_SUM, nullptr,
                         nullptr, nullptr),
            QC_ERROR_INVALID_ARGUMENT);
  // The group still works afterwards, for every rank.
  const auto in = integer_inputs(n, 8, 3);
  const auto res = allreduce_on(g, encode_all(in, QC_DTYPE_FLOAT32), 8, QC_DTYPE_FLOAT32,
                                QC_OP_SUM);
  ASSERT_TRUE(res.all_ok()) << res.describe();
  const auto out = decode(res.out[1], QC_DTYPE_FLOAT32);
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ(out[i], in[0][i] + in[1][i] + in[2][i]);
}

// qc.h: alltoall's sendbuf and recvbuf must not overlap. Only rank 0 makes the
// bad call: it must be rejected locally (INVALID_ARGUMENT), not sent into the
// collective where it would wait for peers that never come.
TEST(InvalidArguments, AlltoallOverlappingBuffers) {
  const int n = 3;
  Group g(n, 2.0);
  ASSERT_TRUE(g.ok());
  // In place (recvbuf == sendbuf) is allowed; a partial overlap is not.
  std::vector<float> a(3 * 4, 1.0f);
  const auto t0 = Clock::now();
  const qc_status_t s =
      qc_alltoall(g[0], a.data(), a.data() + 1, 1, QC_DTYPE_FLOAT32, nullptr, nullptr);
  EXPECT_EQ(s, QC_ERROR_INVALID_ARGUMENT) << st(s) << ": " << qc_last_error();
  EXPECT_LT(seconds_since(t0), 1.0);
}

TEST(InvalidArguments, ErrorBufferForAnotherCount) {
  // An error buffer created for another count is a mismatch, found before
  // anything is sent.
  Group g(1, 5.0);
  ASSERT_TRUE(g.ok());
  qc_policy_t p = make_policy();
  p.error_feedback = 1;
  ASSERT_EQ(g.set_policy("*", p), QC_SUCCESS);
  qc_error_buffer_t eb = nullptr;
  ASSERT_EQ(qc_error_buffer_create(g[0], 5, &eb), QC_SUCCESS);
  std::vector<float> a(8, 1.0f), b(8);
  EXPECT_EQ(qc_allreduce(g[0], a.data(), b.data(), 8, QC_DTYPE_FLOAT32, QC_OP_SUM, nullptr, eb,
                         nullptr),
            QC_ERROR_MISMATCH);
  EXPECT_NE(std::string(qc_last_error()).find("error_buffer"), std::string::npos);
  qc_error_buffer_destroy(eb);
}

TEST(InvalidArguments, GroupAndEmulationArguments) {
  qc_comm_t comms[4] = {nullptr, nullptr, nullptr, nullptr};
  EXPECT_EQ(qc_comm_create_local(0, comms), QC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(qc_comm_create_local(-1, comms), QC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(qc_comm_create_local(2, nullptr), QC_ERROR_INVALID_ARGUMENT);
  qc_comm_config_t cfg = QC_COMM_CONFIG_INIT;
  cfg.timeout_seconds = 0.0;
  EXPECT_EQ(qc_comm_create_local_with_config(2, &cfg, comms), QC_ERROR_INVALID_ARGUMENT);
  cfg.timeout_seconds = -1.0;
  EXPECT_EQ(qc_comm_create_local_with_config(2, &cfg, comms), QC_ERROR_INVALID_ARGUMENT);
  cfg.timeout_seconds = NAN;
  EXPECT_EQ(qc_comm_create_local_with_config(2, &cfg, comms), QC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(qc_comm_destroy(nullptr), QC_SUCCESS);

  // A NULL config means the defaults.
  ASSERT_EQ(qc_comm_create_local_with_config(4, nullptr, comms), QC_SUCCESS) << qc_last_error();
  for (int r = 0; r < 4; ++r) {
    int rank = -1, size = -1;
    EXPECT_EQ(qc_comm_rank(comms[r], &rank), QC_SUCCESS);
    EXPECT_EQ(qc_comm_size(comms[r], &size), QC_SUCCESS);
    EXPECT_EQ(rank, r);
    EXPECT_EQ(size, 4);
    qc_comm_destroy(comms[r]);
  }

  const qc_policy_t pol = make_policy();
  float x = 1, y = 0;
  const void* sp[1] = {&x};
  void* rp[1] = {&y};
  EXPECT_EQ(
      qc_emulate_allreduce(0, sp, rp, 1, QC_DTYPE_FLOAT32, QC_OP_SUM, nullptr, 0, &pol, nullptr),
      QC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(qc_emulate_allreduce(1, nullptr, rp, 1, QC_DTYPE_FLOAT32, QC_OP_SUM, nullptr, 0, &pol,
                                 nullptr),
            QC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(qc_emulate_alltoall(0, sp, rp, 1, QC_DTYPE_FLOAT32, nullptr, 0, &pol),
            QC_ERROR_INVALID_ARGUMENT);
  ASSERT_EQ(
      qc_emulate_allreduce(1, sp, rp, 1, QC_DTYPE_FLOAT32, QC_OP_SUM, nullptr, 0, &pol, nullptr),
      QC_SUCCESS)
      << qc_last_error();
  EXPECT_EQ(y, 1.0f);
}

}  // namespace
