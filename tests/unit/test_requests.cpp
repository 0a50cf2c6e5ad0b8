// Non-blocking collectives (qc.h section 6): requests run in start order on
// every rank and give the blocking calls' bits; failures, timeouts and
// destroys with requests outstanding are defined; bad handles are refused.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "qc.h"
#include "test_util.h"

using namespace qct;

namespace {

constexpr size_t kCount = 3000;  // per request; odd-sized blocks for every rank count

// One call of the mixed sequence: an allreduce, a fused (segments) allreduce
// or an alltoall, on its own layer, with or without an error buffer.
struct Call {
  enum Kind { kAllreduce, kSegments, kAlltoall } kind;
  const char* layer;
  bool feedback;
};

// Eight calls of different layers, codecs and algorithms (policies below).
const std::vector<Call>& mixed_calls() {
  static const std::vector<Call> calls = {
      {Call::kAllreduce, "minmax4.sra", true},  {Call::kAllreduce, "qsgd.ring", false},
      {Call::kAlltoall, "minmax8", false},      {Call::kAllreduce, "onebit.rd", true},
      {Call::kSegments, "", true},              {Call::kAllreduce, "topk.tree", true},
      {Call::kAllreduce, "fp16.auto", false},   {Call::kAlltoall, "qsgd.a2a", false},
  };
  return calls;
}

qc_policy_t policy_of(qc_codec_t codec, int bits, qc_algorithm_t algo, int ef,
                      qc_rounding_t rounding = QC_ROUND_NEAREST_EVEN) {
  qc_policy_t p = make_policy(algo);
  p.codec = codec;
  p.bits = bits;
  p.error_feedback = ef;
  p.rounding = rounding;
  p.seed = 42;
  return p;
}

void set_mixed_policies(Group& g) {
  ASSERT_EQ(g.set_policy("minmax4.sra", policy_of(QC_CODEC_MINMAX, 4, QC_ALGO_SRA, 1)), QC_SUCCESS);
  ASSERT_EQ(g.set_policy("qsgd.ring", policy_of(QC_CODEC_QSGD, 4, QC_ALGO_RING, 0,
                                                QC_ROUND_STOCHASTIC)),
            QC_SUCCESS);
  ASSERT_EQ(g.set_policy("minmax8", policy_of(QC_CODEC_MINMAX, 8, QC_ALGO_AUTO, 0)), QC_SUCCESS);
  ASSERT_EQ(g.set_policy("onebit.rd",
                         policy_of(QC_CODEC_ONEBIT, 1, QC_ALGO_RECURSIVE_DOUBLING, 1)),
            QC_SUCCESS);
  ASSERT_EQ(g.set_policy("seg.*", policy_of(QC_CODEC_MINMAX, 2, QC_ALGO_AUTO, 1)), QC_SUCCESS);
  qc_policy_t topk = policy_of(QC_CODEC_TOPK, 8, QC_ALGO_TREE, 1);
  topk.topk_ratio = 0.1f;
  ASSERT_EQ(g.set_policy("topk.tree", topk), QC_SUCCESS);
  ASSERT_EQ(g.set_policy("fp16.auto", policy_of(QC_CODEC_FP16, 8, QC_ALGO_AUTO, 0)), QC_SUCCESS);
  ASSERT_EQ(g.set_policy("qsgd.a2a", policy_of(QC_CODEC_QSGD, 3, QC_ALGO_AUTO, 0,
                                               QC_ROUND_STOCHASTIC)),
            QC_SUCCESS);
}

// What one rank ends with: every call's output and error buffer image.
struct RankOutcome {
  std::vector<qc_status_t> status;
  std::vector<std::string> error;
  std::vector<std::vector<float>> out;
  std::vector<Bytes> residuals;
};

size_t elements_of(const Call& c, int n) {
  return c.kind == Call::kAlltoall ? kCount * static_cast<size_t>(n) : kCount;
}

// Runs mixed_calls() twice over (16 calls, so error feedback carries from
// the first round into the second) on rank r of g: as requests all started
// before any is waited for, or as blocking calls.
RankOutcome run_mixed(Group& g, int r, bool nonblocking) {
  const int n = g.size();
  const std::vector<Call>& calls = mixed_calls();
  const size_t total = 2 * calls.size();
  RankOutcome o;
  o.status.assign(total, QC_ERROR_INTERNAL);
  o.error.assign(total, "");
  o.out.resize(total);
  std::vector<std::vector<float>> in(total);
  std::vector<qc_error_buffer_t> ebs(calls.size(), nullptr);
  for (size_t i = 0; i < calls.size(); ++i) {
    if (calls[i].feedback) {
      EXPECT_EQ(qc_error_buffer_create(g[r], kCount, &ebs[i]), QC_SUCCESS);
    }
  }
  std::vector<qc_request_t> reqs(total, nullptr);
  const size_t seg_counts[3] = {1000, 1500, 500};
  const char* seg_layers[3] = {"seg.a", "seg.b", "seg.c"};
  for (size_t k = 0; k < total; ++k) {
    const Call& c = calls[k % calls.size()];
    const size_t count = elements_of(c, n);
    Rng rng(1000 * k + static_cast<uint64_t>(r) + 7);
    in[k].resize(count);
    for (float& x : in[k]) x = rng.uniform();
    o.out[k].assign(count, -7.0f);
    qc_error_buffer_t eb = ebs[k % calls.size()];
    qc_status_t s = QC_ERROR_INTERNAL;
    switch (c.kind) {
      case Call::kAllreduce:
        s = nonblocking ? qc_iallreduce(g[r], in[k].data(), o.out[k].data(), count,
                                        QC_DTYPE_FLOAT32, QC_OP_SUM, c.layer, eb, &reqs[k])
                        : qc_allreduce(g[r], in[k].data(), o.out[k].data(), count,
                                       QC_DTYPE_FLOAT32, QC_OP_SUM, c.layer, eb, nullptr);
        break;
      case Call::kSegments:
        s = nonblocking ? qc_iallreduce_segments(g[r], in[k].data(), o.out[k].data(), 3,
                                                 seg_counts, seg_layers, QC_DTYPE_FLOAT32,
                                                 QC_OP_AVG, eb, &reqs[k])
                        : qc_allreduce_segments(g[r], in[k].data(), o.out[k].data(), 3,
                                                seg_counts, seg_layers, QC_DTYPE_FLOAT32,
                                                QC_OP_AVG, eb, nullptr);
        break;
      case Call::kAlltoall:
        s = nonblocking ? qc_ialltoall(g[r], in[k].data(), o.out[k].data(), kCount,
                                       QC_DTYPE_FLOAT32, c.layer, &reqs[k])
                        : qc_alltoall(g[r], in[k].data(), o.out[k].data(), kCount,
                                      QC_DTYPE_FLOAT32, c.layer, nullptr);
        break;
    }
    o.status[k] = s;
    if (s != QC_SUCCESS) o.error[k] = qc_last_error();
    if (nonblocking && k + 1 == calls.size()) {
      // The second round reuses the error buffers, which the first round's
      // requests hold until they are done: wait for those first.
      for (size_t j = 0; j <= k; ++j) {
        if (reqs[j] != nullptr && calls[j].feedback) {
          o.status[j] = qc_request_wait(reqs[j]);
          if (o.status[j] != QC_SUCCESS) o.error[j] = qc_last_error();
        }
      }
    }
  }
  if (nonblocking) {
    // Waited for out of order, on purpose: completion order is start order
    // whatever the caller waits for first.
    for (size_t j = total; j-- > 0;) {
      if (reqs[j] == nullptr) continue;
      const qc_status_t s = qc_request_wait(reqs[j]);
      if (o.status[j] == QC_SUCCESS) {
        o.status[j] = s;
        if (s != QC_SUCCESS) o.error[j] = qc_last_error();
      }
      EXPECT_EQ(qc_request_free(reqs[j]), QC_SUCCESS);
    }
  }
  for (qc_error_buffer_t eb : ebs) {
    if (eb == nullptr) continue;
    size_t size = 0;
    EXPECT_EQ(qc_error_buffer_save(eb, nullptr, 0, &size), QC_SUCCESS);
    Bytes image(size);
    EXPECT_EQ(qc_error_buffer_save(eb, image.data(), image.size(), &size), QC_SUCCESS);
    o.residuals.push_back(image);
    qc_error_buffer_destroy(eb);
  }
  return o;
}

std::vector<RankOutcome> run_group(int n, bool nonblocking) {
  Group g(n);
  EXPECT_TRUE(g.ok());
  set_mixed_policies(g);
  std::vector<RankOutcome> out(static_cast<size_t>(n));
  run_ranks(n, [&](int r) { out[static_cast<size_t>(r)] = run_mixed(g, r, nonblocking); });
  return out;
}

class RequestsMatchBlocking : public ::testing::TestWithParam<int> {};

TEST_P(RequestsMatchBlocking, SixteenOutstandingRequestsGiveTheBlockingBits) {
  const int n = GetParam();
  const auto blocking = run_group(n, false);
  const auto requests = run_group(n, true);
  for (int r = 0; r < n; ++r) {
    const RankOutcome& b = blocking[static_cast<size_t>(r)];
    const RankOutcome& q = requests[static_cast<size_t>(r)];
    for (size_t k = 0; k < b.status.size(); ++k) {
      ASSERT_EQ(b.status[k], QC_SUCCESS) << "blocking rank " << r << " call " << k << ": "
                                         << b.error[k];
      ASSERT_EQ(q.status[k], QC_SUCCESS) << "request rank " << r << " call " << k << ": "
                                         << q.error[k];
      ASSERT_EQ(q.out[k].size(), b.out[k].size());
      EXPECT_EQ(0, std::memcmp(q.out[k].data(), b.out[k].data(), b.out[k].size() * 4))
          << "rank " << r << " call " << k << " (" << mixed_calls()[k % 8].layer << ")";
    }
    EXPECT_EQ(q.residuals, b.residuals) << "rank " << r << ": error feedback differs";
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, RequestsMatchBlocking, ::testing::Values(1, 2, 3, 5, 8),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return "n" + std::to_string(i.param);
                         });

// A blocking call and a policy change between requests come after the
// requests started before them: the results are those of the same calls,
// all blocking, in the same order.
TEST(Requests, BlockingCallsAndPolicyChangesKeepStartOrder) {
  const int n = 3;
  auto run = [&](bool nonblocking) {
    Group g(n);
    EXPECT_TRUE(g.ok());
    std::vector<std::vector<float>> out(static_cast<size_t>(n) * 3);
    const qc_policy_t first = policy_of(QC_CODEC_MINMAX, 2, QC_ALGO_RING, 0);
    const qc_policy_t second = policy_of(QC_CODEC_QSGD, 5, QC_ALGO_SRA, 0, QC_ROUND_STOCHASTIC);
    EXPECT_EQ(g.set_policy("x", first), QC_SUCCESS);
    run_ranks(n, [&](int r) {
      auto in = random_inputs(1, kCount, 99 + static_cast<uint64_t>(r))[0];
      std::vector<float>* o = &out[static_cast<size_t>(r) * 3];
      for (int i = 0; i < 3; ++i) o[i].assign(kCount, 0.0f);
      qc_request_t a = nullptr, c = nullptr;
      if (nonblocking) {
        EXPECT_EQ(qc_iallreduce(g[r], in.data(), o[0].data(), kCount, QC_DTYPE_FLOAT32, QC_OP_SUM,
                                "x", nullptr, &a),
                  QC_SUCCESS);
      } else {
        EXPECT_EQ(qc_allreduce(g[r], in.data(), o[0].data(), kCount, QC_DTYPE_FLOAT32, QC_OP_SUM,
                               "x", nullptr, nullptr),
                  QC_SUCCESS);
      }
      // Applies to calls started from here on, not to request a.
      EXPECT_EQ(qc_comm_set_layer_policy(g[r], "x", &second), QC_SUCCESS);
      EXPECT_EQ(qc_allreduce(g[r], in.data(), o[1].data(), kCount, QC_DTYPE_FLOAT32, QC_OP_SUM,
                             "x", nullptr, nullptr),
                QC_SUCCESS);
      if (nonblocking) {
        EXPECT_EQ(qc_iallreduce(g[r], o[1].data(), o[2].data(), kCount, QC_DTYPE_FLOAT32,
                                QC_OP_AVG, "x", nullptr, &c),
                  QC_SUCCESS);
        EXPECT_EQ(qc_request_wait(c), QC_SUCCESS);
        EXPECT_EQ(qc_request_wait(a), QC_SUCCESS);
        EXPECT_EQ(qc_request_free(a), QC_SUCCESS);
        EXPECT_EQ(qc_request_free(c), QC_SUCCESS);
      } else {
        EXPECT_EQ(qc_allreduce(g[r], o[1].data(), o[2].data(), kCount, QC_DTYPE_FLOAT32,
                               QC_OP_AVG, "x", nullptr, nullptr),
                  QC_SUCCESS);
      }
    });
    return out;
  };
  const auto blocking = run(false);
  const auto requests = run(true);
  for (size_t i = 0; i < blocking.size(); ++i) {
    EXPECT_EQ(0, std::memcmp(blocking[i].data(), requests[i].data(), kCount * 4)) << "output " << i;
  }
}

// A peer that never starts its request: the others' waits end with
// QC_ERROR_TIMEOUT within the timeout (plus a second), and every request
// they started after it fails with that status without running.
TEST(Requests, APeerThatNeverStartsTimesOutEveryWait) {
  const double timeout = 1.0;
  Group g(3, timeout);
  ASSERT_TRUE(g.ok());
  std::vector<float> in(kCount, 1.0f);
  std::vector<std::vector<float>> out(4, std::vector<float>(kCount));
  std::vector<qc_status_t> first(2), later(2);
  std::vector<double> seconds(2);
  std::vector<std::string> later_error(2);
  run_ranks(2, [&](int r) {
    const auto start = std::chrono::steady_clock::now();
    qc_request_t a = nullptr, b = nullptr;
    ASSERT_EQ(qc_iallreduce(g[r], in.data(), out[2 * r].data(), kCount, QC_DTYPE_FLOAT32,
                            QC_OP_SUM, nullptr, nullptr, &a),
              QC_SUCCESS);
    ASSERT_EQ(qc_iallreduce(g[r], in.data(), out[2 * r + 1].data(), kCount, QC_DTYPE_FLOAT32,
                            QC_OP_SUM, nullptr, nullptr, &b),
              QC_SUCCESS);
    first[r] = qc_request_wait(a);
    seconds[r] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    later[r] = qc_request_wait(b);
    later_error[r] = qc_last_error();
    qc_request_free(a);
    qc_request_free(b);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(first[r], QC_ERROR_TIMEOUT) << "rank " << r;
    EXPECT_LE(seconds[r], timeout + 1.0) << "rank " << r;
    EXPECT_EQ(later[r], QC_ERROR_TIMEOUT) << "rank " << r;
    EXPECT_NE(later_error[r].find("did not run"), std::string::npos) << later_error[r];
  }
}

// qc_comm_destroy with requests outstanding (a peer never joins): it waits
// up to the timeout, then interrupts the running request; the queued ones
// complete without running; the handles stay valid until freed.
TEST(Requests, DestroyWithRequestsOutstandingEndsThemAll) {
  Group g(2, 1.0);
  ASSERT_TRUE(g.ok());
  std::vector<float> in(kCount, 1.0f);
  std::vector<std::vector<float>> out(3, std::vector<float>(kCount));
  std::vector<qc_request_t> reqs(3, nullptr);
  for (size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_EQ(qc_iallreduce(g[0], in.data(), out[i].data(), kCount, QC_DTYPE_FLOAT32, QC_OP_SUM,
                            nullptr, nullptr, &reqs[i]),
              QC_SUCCESS);
  }
  // Another thread waits on the last one while the communicator goes.
  std::atomic<int> waited{-1};
  std::thread waiter([&] { waited = qc_request_wait(reqs[2]); });
  EXPECT_EQ(g.destroy(0), QC_SUCCESS);
  waiter.join();
  for (qc_request_t req : reqs) {
    int done = 0;
    const qc_status_t s = qc_request_test(req, &done);
    EXPECT_EQ(done, 1);
    EXPECT_TRUE(s == QC_ERROR_TIMEOUT || s == QC_ERROR_TRANSPORT) << st(s);
    EXPECT_EQ(qc_request_wait(req), s);
    EXPECT_EQ(qc_request_free(req), QC_SUCCESS);
  }
  EXPECT_TRUE(waited == QC_ERROR_TIMEOUT || waited == QC_ERROR_TRANSPORT) << waited;
}

// Destroying right after starting: what has not run is ended, nothing is
// freed under the progress thread (ASan), every request completes.
TEST(Requests, DestroyRightAfterStartIsSafe) {
  for (int round = 0; round < 20; ++round) {
    Group g(1);
    ASSERT_TRUE(g.ok());
    std::vector<float> in(kCount, 1.0f), out(kCount);
    qc_request_t req = nullptr;
    ASSERT_EQ(qc_iallreduce(g[0], in.data(), out.data(), kCount, QC_DTYPE_FLOAT32, QC_OP_SUM,
                            nullptr, nullptr, &req),
              QC_SUCCESS);
    EXPECT_EQ(g.destroy(0), QC_SUCCESS);
    int done = 0;
    (void)qc_request_test(req, &done);
    EXPECT_EQ(done, 1);
    EXPECT_EQ(qc_request_free(req), QC_SUCCESS);
  }
}

TEST(Requests, TestSaysNotDoneUntilThePeersArrive) {
  Group g(2);
  ASSERT_TRUE(g.ok());
  std::vector<float> in0(kCount, 1.0f), in1(kCount, 2.0f), out0(kCount), out1(kCount);
  qc_request_t a = nullptr;
  ASSERT_EQ(qc_iallreduce(g[0], in0.data(), out0.data(), kCount, QC_DTYPE_FLOAT32, QC_OP_SUM,
                          nullptr, nullptr, &a),
            QC_SUCCESS);
  int done = -1;
  EXPECT_EQ(qc_request_test(a, &done), QC_SUCCESS);
  EXPECT_EQ(done, 0) << "rank 1 has not started, so the allreduce cannot be done";
  qc_request_t b = nullptr;
  ASSERT_EQ(qc_iallreduce(g[1], in1.data(), out1.data(), kCount, QC_DTYPE_FLOAT32, QC_OP_SUM,
                          nullptr, nullptr, &b),
            QC_SUCCESS);
  EXPECT_EQ(qc_request_wait(a), QC_SUCCESS);
  EXPECT_EQ(qc_request_wait(b), QC_SUCCESS);
  EXPECT_EQ(qc_request_test(a, &done), QC_SUCCESS);
  EXPECT_EQ(done, 1);
  for (size_t i = 0; i < kCount; ++i) ASSERT_EQ(out0[i], 3.0f) << i;
  EXPECT_EQ(out0, out1);
  EXPECT_EQ(qc_request_free(a), QC_SUCCESS);
  EXPECT_EQ(qc_request_free(b), QC_SUCCESS);
}

// An error buffer belongs to its request until the request is done.
TEST(Requests, AnErrorBufferServesOneOutstandingRequest) {
  Group g(2);
  ASSERT_TRUE(g.ok());
  ASSERT_EQ(g.set_policy("*", policy_of(QC_CODEC_MINMAX, 4, QC_ALGO_AUTO, 1)), QC_SUCCESS);
  std::vector<float> in(kCount, 0.3f), out(kCount), out2(kCount), peer_out(kCount);
  qc_error_buffer_t eb = nullptr;
  ASSERT_EQ(qc_error_buffer_create(g[0], kCount, &eb), QC_SUCCESS);
  qc_request_t a = nullptr, b = nullptr;
  ASSERT_EQ(qc_iallreduce(g[0], in.data(), out.data(), kCount, QC_DTYPE_FLOAT32, QC_OP_SUM,
                          nullptr, eb, &a),
            QC_SUCCESS);
  // Rank 1 has not started: request a cannot be done, so eb is in use.
  EXPECT_EQ(qc_iallreduce(g[0], in.data(), out2.data(), kCount, QC_DTYPE_FLOAT32, QC_OP_SUM,
                          nullptr, eb, &b),
            QC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(qc_last_error()).find("in use"), std::string::npos) << qc_last_error();
  EXPECT_EQ(b, nullptr);
  double norm = 0;
  EXPECT_EQ(qc_error_buffer_norm(eb, &norm), QC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(qc_allreduce(g[1], in.data(), peer_out.data(), kCount, QC_DTYPE_FLOAT32, QC_OP_SUM,
                         nullptr, nullptr, nullptr),
            QC_SUCCESS);
  EXPECT_EQ(qc_request_wait(a), QC_SUCCESS);
  // Done, so the buffer is free again at once.
  EXPECT_EQ(qc_error_buffer_norm(eb, &norm), QC_SUCCESS);
  EXPECT_EQ(qc_request_free(a), QC_SUCCESS);
  EXPECT_EQ(qc_error_buffer_destroy(eb), QC_SUCCESS);
}

TEST(Requests, BadArgumentsAndHandlesAreRefused) {
  Group g(1);
  ASSERT_TRUE(g.ok());
  std::vector<float> buf(16, 1.0f);
  EXPECT_EQ(qc_iallreduce(g[0], buf.data(), buf.data(), 16, QC_DTYPE_FLOAT32, QC_OP_SUM, nullptr,
                          nullptr, nullptr),
            QC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(qc_last_error()).find("'request'"), std::string::npos);
  qc_request_t req = reinterpret_cast<qc_request_t>(uintptr_t{12345});
  EXPECT_EQ(qc_iallreduce(g[0], nullptr, buf.data(), 16, QC_DTYPE_FLOAT32, QC_OP_SUM, nullptr,
                          nullptr, &req),
            QC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(req, nullptr) << "a failed start leaves no handle";
  EXPECT_EQ(qc_ialltoall(nullptr, buf.data(), buf.data(), 16, QC_DTYPE_FLOAT32, nullptr, &req),
            QC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(qc_iallreduce_segments(g[0], buf.data(), buf.data(), 2, nullptr, nullptr,
                                   QC_DTYPE_FLOAT32, QC_OP_SUM, nullptr, &req),
            QC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(qc_last_error()).find("'counts'"), std::string::npos);

  ASSERT_EQ(qc_iallreduce(g[0], buf.data(), buf.data(), 16, QC_DTYPE_FLOAT32, QC_OP_SUM, nullptr,
                          nullptr, &req),
            QC_SUCCESS);
  int done = 0;
  EXPECT_EQ(qc_request_test(req, nullptr), QC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(qc_request_wait(req), QC_SUCCESS);
  EXPECT_EQ(qc_request_wait(req), QC_SUCCESS) << "waiting twice gives the status again";
  EXPECT_EQ(qc_request_free(req), QC_SUCCESS);
  // Freed: refused by every call, forever.
  EXPECT_EQ(qc_request_wait(req), QC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(qc_last_error()).find("not a live qc request"), std::string::npos);
  EXPECT_EQ(qc_request_test(req, &done), QC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(qc_request_free(req), QC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(qc_request_free(nullptr), QC_SUCCESS);
  // A communicator is not a request.
  EXPECT_EQ(qc_request_wait(reinterpret_cast<qc_request_t>(g[0])), QC_ERROR_INVALID_ARGUMENT);
}

// Without a progress thread (QC_PROGRESS_THREAD=0) a request runs when it is
// started: it is done when the start returns, with the same bits.
TEST(Requests, WithoutAProgressThreadARequestRunsAtItsStart) {
  ASSERT_EQ(setenv("QC_PROGRESS_THREAD", "0", 1), 0);
  Group g(2);
  unsetenv("QC_PROGRESS_THREAD");
  ASSERT_TRUE(g.ok());
  auto in = random_inputs(2, kCount, 5);
  std::vector<std::vector<float>> out(2, std::vector<float>(kCount));
  std::vector<int> done(2, -1);
  run_ranks(2, [&](int r) {
    qc_request_t req = nullptr;
    ASSERT_EQ(qc_iallreduce(g[r], in[r].data(), out[r].data(), kCount, QC_DTYPE_FLOAT32,
                            QC_OP_SUM, nullptr, nullptr, &req),
              QC_SUCCESS);
    EXPECT_EQ(qc_request_test(req, &done[r]), QC_SUCCESS);
    EXPECT_EQ(qc_request_free(req), QC_SUCCESS);
  });
  EXPECT_EQ(done[0], 1);
  EXPECT_EQ(done[1], 1);
  EXPECT_EQ(out[0], out[1]);
}

}  // namespace
