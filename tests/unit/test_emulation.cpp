// The emulation (qc_emulate_*: virtual ranks as fibers, core/fiber_ranks.h)
// against a real run on the threaded local transport: the same result and
// the same residuals bit for bit, for every allreduce algorithm x codec
// with error feedback, and for the other collectives, at 1 to 128 ranks;
// and it runs 128 ranks without a thread per rank.
#include <dirent.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>

#include "cpu/cache_size.h"
#include "test_util.h"

using namespace qct;

namespace {

const int kRanks[] = {1, 2, 3, 8, 13, 64, 128};

std::vector<qc_codec_t> all_codecs() {
  return {QC_CODEC_NONE,   QC_CODEC_FP16,        QC_CODEC_BF16,   QC_CODEC_MINMAX,
          QC_CODEC_QSGD,   QC_CODEC_GLOBAL_LINEAR, QC_CODEC_GLOBAL_EXP, QC_CODEC_ONEBIT,
          QC_CODEC_TOPK,   QC_CODEC_MXFP8,       QC_CODEC_MXFP8_E5M2, QC_CODEC_MXFP6,
          QC_CODEC_MXINT8, QC_CODEC_MXFP6_E3M2,  QC_CODEC_MXFP4,  QC_CODEC_NVFP4};
}

// Uneven blocks at every rank count, and a few buckets per rank.
size_t count_for(int n) { return static_cast<size_t>(37 * n + 11); }

Bytes residual_image(qc_error_buffer_t eb) {
  size_t size = 0;
  EXPECT_EQ(qc_error_buffer_save(eb, nullptr, 0, &size), QC_SUCCESS) << qc_last_error();
  Bytes b(size);
  EXPECT_EQ(qc_error_buffer_save(eb, b.data(), b.size(), &size), QC_SUCCESS) << qc_last_error();
  b.resize(size);
  return b;
}

struct Outcome {
  std::vector<qc_status_t> status;
  std::vector<Bytes> out;
  std::vector<Bytes> residuals;
};

// Every rank's output and residual image after one call `call` run as
// run(rank, comm, eb): on the threaded group when `emulate` is null, else
// through `emulate`(sendbufs, recvbufs, error buffers).
class ErrorBuffers {
 public:
  ErrorBuffers(int n, size_t count, Group* g) : eb_(static_cast<size_t>(n), nullptr) {
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(qc_error_buffer_create(g != nullptr ? (*g)[r] : nullptr, count, &eb_[r]),
                QC_SUCCESS)
          << qc_last_error();
    }
  }
  ~ErrorBuffers() {
    for (auto b : eb_) qc_error_buffer_destroy(b);
  }
  qc_error_buffer_t* data() { return eb_.data(); }
  std::vector<Bytes> images() const {
    std::vector<Bytes> v;
    for (auto b : eb_) v.push_back(residual_image(b));
    return v;
  }

 private:
  std::vector<qc_error_buffer_t> eb_;
};

void expect_same(const Outcome& threads, const Outcome& emulated, int n) {
  for (int r = 0; r < n; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    if (threads.status[r] != QC_SUCCESS) continue;
    EXPECT_TRUE(bytes_equal(emulated.out[r], threads.out[r], "emulated vs threads"));
    if (!threads.residuals.empty()) {
      EXPECT_TRUE(bytes_equal(emulated.residuals[r], threads.residuals[r],
                              "residual image, emulated vs threads"));
    }
  }
}

// A failed threaded run fails on some rank; the emulation fails with that
// status too (the first failing rank's), else every rank must succeed.
void expect_same_status(const Outcome& threads, qc_status_t emulated, const std::string& why) {
  qc_status_t first = QC_SUCCESS;
  for (qc_status_t s : threads.status) {
    if (s != QC_SUCCESS) {
      first = s;
      break;
    }
  }
  EXPECT_EQ(st(emulated), st(first)) << why;
}

// ===========================================================================
// allreduce: every algorithm x codec, error feedback on
// ===========================================================================
// One ctest entry per algorithm x codec, the rank counts inside it: 96
// processes instead of 600, which the sanitizer builds start slowly.
struct AllreduceCase {
  qc_algorithm_t algo;
  qc_codec_t codec;
};

// ThreadSanitizer makes each of the threaded runs of 64 and 128 ranks cost
// about a second; there it checks the fibers' and threads' synchronisation
// on a few codecs at those sizes (the other builds check every pair).
#if defined(__SANITIZE_THREAD__)
constexpr bool kFewCodecsAtLargeRanks = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr bool kFewCodecsAtLargeRanks = true;
#else
constexpr bool kFewCodecsAtLargeRanks = false;
#endif
#else
constexpr bool kFewCodecsAtLargeRanks = false;
#endif

std::vector<AllreduceCase> allreduce_cases() {
  std::vector<AllreduceCase> v;
  std::vector<qc_algorithm_t> algos = explicit_algorithms();
  algos.push_back(QC_ALGO_AUTO);
  algos.push_back(QC_ALGO_NATIVE);
  for (qc_algorithm_t a : algos)
    for (qc_codec_t c : all_codecs()) {
      // native sums integer codes on one grid: only the global codecs and none
      const bool native_ok = c == QC_CODEC_GLOBAL_LINEAR || c == QC_CODEC_GLOBAL_EXP ||
                             c == QC_CODEC_NONE;
      if (a == QC_ALGO_NATIVE && !native_ok) continue;
      v.push_back({a, c});
    }
  return v;
}

std::vector<int> ranks_for(qc_codec_t c) {
  const bool few = c == QC_CODEC_NONE || c == QC_CODEC_QSGD || c == QC_CODEC_GLOBAL_LINEAR;
  std::vector<int> v;
  for (int n : kRanks) {
    if (kFewCodecsAtLargeRanks && n >= 64 && !few) continue;
    v.push_back(n);
  }
  return v;
}

qc_policy_t policy_for(qc_algorithm_t algo, qc_codec_t codec) {
  qc_policy_t p = make_policy(algo, /*group_size=*/3);
  p.codec = codec;
  p.bits = 4;
  p.bucket_size = 16;
  p.error_feedback = 1;
  p.seed = 11;
  return p;
}

void check_allreduce(const AllreduceCase& c, int n) {
  const size_t count = count_for(n);
  const auto bytes = encode_all(random_inputs(n, count, static_cast<uint64_t>(1000 * c.algo + 37 * c.codec + n)),
                                QC_DTYPE_FLOAT32);
  const qc_policy_t pol = policy_for(c.algo, c.codec);

  Outcome threads;
  {
    Group g(n);
    ASSERT_TRUE(g.ok());
    ASSERT_EQ(g.set_policy("*", pol), QC_SUCCESS) << qc_last_error();
    ErrorBuffers eb(n, count, &g);
    threads.status.assign(n, QC_ERROR_INTERNAL);
    threads.out.assign(n, Bytes(count * 4, 0xA5));
    run_ranks(n, [&](int r) {
      threads.status[r] = qc_allreduce(g[r], bytes[r].data(), threads.out[r].data(), count,
                                       QC_DTYPE_FLOAT32, QC_OP_SUM, nullptr, eb.data()[r],
                                       nullptr);
    });
    threads.residuals = eb.images();
  }
  // Twice: as this machine's cache has it (these results fit), and as if
  // they outgrew it, the results then copied past the cache
  // (CollectiveContext::decode_result).
  for (size_t cache_bytes : {size_t{0}, size_t{1}}) {
    SCOPED_TRACE(cache_bytes == 0 ? "results in cache" : "results past the cache");
    qc::cpu::set_last_level_cache_bytes_for_testing(cache_bytes);
    ErrorBuffers eb(n, count, nullptr);
    const auto emu =
        allreduce_emulate(n, bytes, count, QC_DTYPE_FLOAT32, QC_OP_SUM, pol, eb.data());
    qc::cpu::set_last_level_cache_bytes_for_testing(0);
    expect_same_status(threads, emu.status, emu.error);
    if (emu.status != QC_SUCCESS) return;
    Outcome emulated;
    emulated.out = emu.out;
    emulated.residuals = eb.images();
    expect_same(threads, emulated, n);
  }
}

class EmulationEqualsThreadsEveryCodec : public ::testing::TestWithParam<AllreduceCase> {};

TEST_P(EmulationEqualsThreadsEveryCodec, ResultsAndResiduals) {
  for (int n : ranks_for(GetParam().codec)) {
    SCOPED_TRACE("ranks " + std::to_string(n));
    check_allreduce(GetParam(), n);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Local, EmulationEqualsThreadsEveryCodec, ::testing::ValuesIn(allreduce_cases()),
    [](const ::testing::TestParamInfo<AllreduceCase>& i) {
      return std::string(algo_name(i.param.algo)) + "_" + qc_codec_name(i.param.codec);
    });

// ===========================================================================
// the other collectives, a few codecs each
// ===========================================================================
struct OtherCase {
  qc_codec_t codec;
  int n;
};

std::vector<OtherCase> other_cases() {
  std::vector<OtherCase> v;
  for (qc_codec_t c : {QC_CODEC_NONE, QC_CODEC_MINMAX, QC_CODEC_QSGD, QC_CODEC_MXFP4})
    for (int n : kRanks) v.push_back({c, n});
  return v;
}

class OtherCollectivesEmulationEqualsThreads : public ::testing::TestWithParam<OtherCase> {
 protected:
  qc_policy_t policy() const {
    qc_policy_t p = policy_for(QC_ALGO_AUTO, GetParam().codec);
    p.error_feedback = 1;
    return p;
  }
  // `per_rank` elements in, `out_per_rank` out, on the threads; fills
  // status/out/residuals (residuals: with error buffers of `eb_count`).
  template <class Call>
  Outcome threads(const std::vector<Bytes>& in, size_t out_elems, size_t eb_count, Call call) {
    const int n = GetParam().n;
    Outcome o;
    Group g(n);
    EXPECT_TRUE(g.ok());
    EXPECT_EQ(g.set_policy("*", policy()), QC_SUCCESS) << qc_last_error();
    ErrorBuffers eb(n, eb_count, &g);
    o.status.assign(n, QC_ERROR_INTERNAL);
    o.out.assign(n, Bytes(out_elems * 4, 0xA5));
    run_ranks(n, [&](int r) { o.status[r] = call(g[r], r, in[r].data(), o.out[r].data(), eb.data()[r]); });
    if (eb_count > 0) o.residuals = eb.images();
    return o;
  }
  template <class Emulate>
  Outcome emulated(const std::vector<Bytes>& in, size_t out_elems, size_t eb_count,
                   qc_status_t* status, Emulate emulate) {
    const int n = GetParam().n;
    Outcome o;
    ErrorBuffers eb(n, eb_count, nullptr);
    o.out.assign(n, Bytes(out_elems * 4, 0x5A));
    std::vector<const void*> sp;
    std::vector<void*> rp;
    for (int r = 0; r < n; ++r) {
      sp.push_back(in[r].data());
      rp.push_back(o.out[r].data());
    }
    *status = emulate(sp.data(), rp.data(), eb.data());
    if (eb_count > 0) o.residuals = eb.images();
    return o;
  }
};

TEST_P(OtherCollectivesEmulationEqualsThreads, Alltoall) {
  const int n = GetParam().n;
  const size_t per = 21;
  const auto in = encode_all(random_inputs(n, per * n, 71 + n), QC_DTYPE_FLOAT32);
  const qc_policy_t pol = policy();
  const Outcome t = threads(in, per * n, 0, [&](qc_comm_t c, int, const void* s, void* d, qc_error_buffer_t) {
    return qc_alltoall(c, s, d, per, QC_DTYPE_FLOAT32, nullptr, nullptr);
  });
  qc_status_t s = QC_ERROR_INTERNAL;
  const Outcome e = emulated(in, per * n, 0, &s, [&](const void* const* sp, void* const* rp, qc_error_buffer_t*) {
    return qc_emulate_alltoall(n, sp, rp, per, QC_DTYPE_FLOAT32, nullptr, 0, &pol);
  });
  expect_same_status(t, s, qc_last_error());
  if (s == QC_SUCCESS) expect_same(t, e, n);
}

TEST_P(OtherCollectivesEmulationEqualsThreads, ReduceScatter) {
  const int n = GetParam().n;
  const size_t per = 19;
  const auto in = encode_all(random_inputs(n, per * n, 73 + n), QC_DTYPE_FLOAT32);
  const qc_policy_t pol = policy();
  const Outcome t = threads(in, per, per * n, [&](qc_comm_t c, int, const void* s, void* d, qc_error_buffer_t eb) {
    return qc_reduce_scatter(c, s, d, per, QC_DTYPE_FLOAT32, QC_OP_SUM, nullptr, eb, nullptr);
  });
  qc_status_t s = QC_ERROR_INTERNAL;
  const Outcome e = emulated(in, per, per * n, &s, [&](const void* const* sp, void* const* rp, qc_error_buffer_t* eb) {
    return qc_emulate_reduce_scatter(n, sp, rp, per, QC_DTYPE_FLOAT32, QC_OP_SUM, nullptr, 0, &pol, eb);
  });
  expect_same_status(t, s, qc_last_error());
  if (s == QC_SUCCESS) expect_same(t, e, n);
}

TEST_P(OtherCollectivesEmulationEqualsThreads, Allgather) {
  const int n = GetParam().n;
  const size_t per = 23;
  const auto in = encode_all(random_inputs(n, per, 79 + n), QC_DTYPE_FLOAT32);
  const qc_policy_t pol = policy();
  const Outcome t = threads(in, per * n, per, [&](qc_comm_t c, int, const void* s, void* d, qc_error_buffer_t eb) {
    return qc_allgather(c, s, d, per, QC_DTYPE_FLOAT32, nullptr, eb, nullptr);
  });
  qc_status_t s = QC_ERROR_INTERNAL;
  const Outcome e = emulated(in, per * n, per, &s, [&](const void* const* sp, void* const* rp, qc_error_buffer_t* eb) {
    return qc_emulate_allgather(n, sp, rp, per, QC_DTYPE_FLOAT32, nullptr, 0, &pol, eb);
  });
  expect_same_status(t, s, qc_last_error());
  if (s == QC_SUCCESS) expect_same(t, e, n);
}

TEST_P(OtherCollectivesEmulationEqualsThreads, Broadcast) {
  const int n = GetParam().n;
  const size_t count = 29;
  const int root = n / 2;
  const auto in = encode_all(random_inputs(n, count, 83 + n), QC_DTYPE_FLOAT32);
  const qc_policy_t pol = policy();
  const Outcome t = threads(in, count, 0, [&](qc_comm_t c, int r, const void* s, void* d, qc_error_buffer_t) {
    return qc_broadcast(c, r == root ? s : nullptr, d, count, QC_DTYPE_FLOAT32, root, nullptr, nullptr);
  });
  qc_status_t s = QC_ERROR_INTERNAL;
  const Outcome e = emulated(in, count, 0, &s, [&](const void* const* sp, void* const* rp, qc_error_buffer_t*) {
    return qc_emulate_broadcast(n, sp, rp, count, QC_DTYPE_FLOAT32, root, nullptr, 0, &pol);
  });
  expect_same_status(t, s, qc_last_error());
  if (s == QC_SUCCESS) expect_same(t, e, n);
}

INSTANTIATE_TEST_SUITE_P(Local, OtherCollectivesEmulationEqualsThreads,
                         ::testing::ValuesIn(other_cases()),
                         [](const ::testing::TestParamInfo<OtherCase>& i) {
                           return std::string(qc_codec_name(i.param.codec)) + "_n" +
                                  std::to_string(i.param.n);
                         });

// ===========================================================================
// buffers kept from call to call (QC_EMULATION_KEEP)
// ===========================================================================
// Sets an environment variable for its lifetime, then restores it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) had_ = true, old_ = old;
    EXPECT_EQ(::setenv(name, value, 1), 0);
  }
  ~ScopedEnv() {
    if (had_) {
      ::setenv(name_, old_.c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

struct StreamCall {
  int n;
  size_t count;
  qc_algorithm_t algo;
  qc_codec_t codec;
  qc_dtype_t dtype;
};

// Every call's outputs and residual images, in order: larger and smaller
// groups, longer and shorter tensors, float32 (worked in the output) and
// bf16 (worked in a float copy), so each call finds buffers an earlier
// call of another shape sized and filled.
std::vector<Bytes> run_stream() {
  const StreamCall calls[] = {
      {13, 5000, QC_ALGO_RING, QC_CODEC_MINMAX, QC_DTYPE_FLOAT32},
      {64, 3001, QC_ALGO_SRA, QC_CODEC_QSGD, QC_DTYPE_BFLOAT16},
      {3, 777, QC_ALGO_RING, QC_CODEC_MXFP4, QC_DTYPE_FLOAT32},
      {13, 5000, QC_ALGO_RECURSIVE_DOUBLING, QC_CODEC_ONEBIT, QC_DTYPE_BFLOAT16},
      {13, 5000, QC_ALGO_RING, QC_CODEC_MINMAX, QC_DTYPE_FLOAT32},
      {8, 12345, QC_ALGO_TREE, QC_CODEC_TOPK, QC_DTYPE_FLOAT32},
      {3, 777, QC_ALGO_RING, QC_CODEC_MXFP4, QC_DTYPE_FLOAT32},
  };
  std::vector<Bytes> seen;
  uint64_t seed = 5;
  for (const StreamCall& c : calls) {
    SCOPED_TRACE(std::to_string(c.n) + " ranks x " + std::to_string(c.count));
    const auto in = encode_all(random_inputs(c.n, c.count, ++seed), c.dtype);
    qc_policy_t pol = policy_for(c.algo, c.codec);
    pol.rounding = QC_ROUND_STOCHASTIC;  // nor may the random streams depend on them
    ErrorBuffers eb(c.n, c.count, nullptr);
    const auto emu = allreduce_emulate(c.n, in, c.count, c.dtype, QC_OP_SUM, pol, eb.data());
    EXPECT_EQ(emu.status, QC_SUCCESS) << emu.error;
    for (const Bytes& b : emu.out) seen.push_back(b);
    for (const Bytes& b : eb.images()) seen.push_back(b);
  }
  return seen;
}

TEST(EmulationKeep, KeptBuffersGiveTheSameBitsAsFreshOnes) {
  std::vector<Bytes> fresh, kept;
  {
    ScopedEnv off("QC_EMULATION_KEEP", "0");
    fresh = run_stream();
  }
  {
    ScopedEnv on("QC_EMULATION_KEEP", "1G");
    kept = run_stream();
    kept = run_stream();  // the second time from the first one's buffers
  }
  ASSERT_EQ(kept.size(), fresh.size());
  for (size_t i = 0; i < kept.size(); ++i) {
    SCOPED_TRACE("output " + std::to_string(i));
    EXPECT_TRUE(bytes_equal(kept[i], fresh[i], "kept vs fresh buffers"));
  }
}

TEST(EmulationKeep, ABadValueFailsTheCallWithTheVariableNamed) {
  ScopedEnv bad("QC_EMULATION_KEEP", "lots");
  const auto in = encode_all(random_inputs(2, 100, 3), QC_DTYPE_FLOAT32);
  const auto emu = allreduce_emulate(2, in, 100, QC_DTYPE_FLOAT32, QC_OP_SUM,
                                     policy_for(QC_ALGO_RING, QC_CODEC_MINMAX));
  EXPECT_EQ(emu.status, QC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(emu.error.find("QC_EMULATION_KEEP"), std::string::npos) << emu.error;
}

// ===========================================================================
// no thread per rank
// ===========================================================================
int thread_count() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
  }
  return n;
}

TEST(EmulationThreads, AtMostOnePerCoreWhateverTheRanks) {
  if (thread_count() == 0) GTEST_SKIP() << "no /proc/self/task here";
  const int n = 128;
  const size_t count = 1 << 15;
  const auto bytes = encode_all(random_inputs(n, count, 9), QC_DTYPE_FLOAT32);
  qc_policy_t pol = policy_for(QC_ALGO_RING, QC_CODEC_MINMAX);
  pol.error_feedback = 0;
  std::atomic<bool> done{false};
  std::atomic<int> most{0};
  // Samples the process's threads while the emulation runs.
  std::thread watcher([&] {
    while (!done.load()) {
      const int now = thread_count();
      if (now > most.load()) most.store(now);
      std::this_thread::yield();
    }
  });
  // A first call starts whatever a runtime starts once (a sanitizer's
  // background thread); the threads counted from here on are the calls'.
  EXPECT_EQ(allreduce_emulate(2, {bytes[0], bytes[1]}, count, QC_DTYPE_FLOAT32, QC_OP_SUM, pol).status,
            QC_SUCCESS);
  const int before = thread_count();  // the watcher included
  most.store(before);
  for (int rep = 0; rep < 3; ++rep) {
    const auto emu = allreduce_emulate(n, bytes, count, QC_DTYPE_FLOAT32, QC_OP_SUM, pol);
    ASSERT_EQ(emu.status, QC_SUCCESS) << emu.error;
    EXPECT_TRUE(replicas_identical(emu.out));
  }
  done.store(true);
  watcher.join();
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  // the caller's thread is a worker: at most cores - 1 more
  EXPECT_LE(most.load(), before + (cores - 1))
      << "threads before: " << before << ", cores: " << cores;
}

}  // namespace
