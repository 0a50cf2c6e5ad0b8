// Shared helpers for the qc unit tests: a local group of communicators driven
// by one std::thread per rank, deterministic data generators, fp16/bf16
// converters (round to nearest even) and error-bound checks.
//
// Everything goes through the public C API (include/qc.h) only.
#ifndef QC_TESTS_UNIT_TEST_UTIL_H
#define QC_TESTS_UNIT_TEST_UTIL_H

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "half_float.h"
#include "qc.h"

namespace qct {

// Long enough for a slow sanitizer build, short enough that a hang in the
// library turns into a failure instead of a stuck test run.
constexpr double kTimeoutSeconds = 20.0;

using Bytes = std::vector<uint8_t>;

// ---------------------------------------------------------------------------
// Names (for readable parameterized test names and messages)
// ---------------------------------------------------------------------------
inline const char* algo_name(qc_algorithm_t a) {
  switch (a) {
    case QC_ALGO_AUTO: return "Auto";
    case QC_ALGO_RING: return "Ring";
    case QC_ALGO_RECURSIVE_DOUBLING: return "RecDoubling";
    case QC_ALGO_SRA: return "SRA";
    case QC_ALGO_TREE: return "Tree";
    case QC_ALGO_NATIVE: return "Native";
  }
  return "UnknownAlgo";
}

inline const char* dtype_name(qc_dtype_t d) {
  switch (d) {
    case QC_DTYPE_FLOAT32: return "F32";
    case QC_DTYPE_FLOAT16: return "F16";
    case QC_DTYPE_BFLOAT16: return "BF16";
  }
  return "UnknownDtype";
}

inline const char* op_name(qc_reduce_op_t op) {
  return op == QC_OP_SUM ? "Sum" : (op == QC_OP_AVG ? "Avg" : "UnknownOp");
}

inline std::string st(qc_status_t s) { return qc_status_string(s); }

inline size_t dtype_size(qc_dtype_t d) { return d == QC_DTYPE_FLOAT32 ? 4 : 2; }

// The algorithms that every test sweeps (native needs a global codec).
inline std::vector<qc_algorithm_t> all_algorithms() {
  return {QC_ALGO_RING, QC_ALGO_RECURSIVE_DOUBLING, QC_ALGO_SRA, QC_ALGO_TREE,
          QC_ALGO_AUTO};
}
inline std::vector<qc_algorithm_t> explicit_algorithms() {
  return {QC_ALGO_RING, QC_ALGO_RECURSIVE_DOUBLING, QC_ALGO_SRA, QC_ALGO_TREE};
}


// Round a float to the precision of dtype (what the dtype can represent).
inline float round_to_dtype(float f, qc_dtype_t d) {
  switch (d) {
    case QC_DTYPE_FLOAT16: return f16_to_f32(f32_to_f16(f));
    case QC_DTYPE_BFLOAT16: return bf16_to_f32(f32_to_bf16(f));
    default: return f;
  }
}

// Unit roundoff of a dtype (half an ulp of 1).
inline double unit_roundoff(qc_dtype_t d) {
  switch (d) {
    case QC_DTYPE_FLOAT16: return std::ldexp(1.0, -11);
    case QC_DTYPE_BFLOAT16: return std::ldexp(1.0, -8);
    default: return std::ldexp(1.0, -24);
  }
}

// Encode float values into a byte buffer of dtype (values must already be
// representable if exactness matters; otherwise they are rounded RNE).
inline Bytes encode(const std::vector<float>& v, qc_dtype_t d) {
  Bytes b(v.size() * dtype_size(d));
  for (size_t i = 0; i < v.size(); ++i) {
    if (d == QC_DTYPE_FLOAT32) {
      std::memcpy(b.data() + 4 * i, &v[i], 4);
    } else {
      const uint16_t h = d == QC_DTYPE_FLOAT16 ? f32_to_f16(v[i]) : f32_to_bf16(v[i]);
      std::memcpy(b.data() + 2 * i, &h, 2);
    }
  }
  return b;
}

inline std::vector<float> decode(const Bytes& b, qc_dtype_t d) {
  const size_t n = b.size() / dtype_size(d);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    if (d == QC_DTYPE_FLOAT32) {
      std::memcpy(&v[i], b.data() + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, b.data() + 2 * i, 2);
      v[i] = d == QC_DTYPE_FLOAT16 ? f16_to_f32(h) : bf16_to_f32(h);
    }
  }
  return v;
}

// ---------------------------------------------------------------------------
// Deterministic data (splitmix64: the same numbers on every platform)
// ---------------------------------------------------------------------------
struct Rng {
  uint64_t state;
  explicit Rng(uint64_t seed) : state(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull) {}
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [-1, 1].
  float uniform() {
    const double u = static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0);
    return static_cast<float>(2.0 * u - 1.0);
  }
  // Uniform integer in [lo, hi].
  int integer(int lo, int hi) {
    return lo + static_cast<int>(next() % static_cast<uint64_t>(hi - lo + 1));
  }
};

// inputs[r] = count values in [-1, 1], rounded to dtype.
inline std::vector<std::vector<float>> random_inputs(int n, size_t count, uint64_t seed,
                                                     qc_dtype_t d = QC_DTYPE_FLOAT32) {
  std::vector<std::vector<float>> in(static_cast<size_t>(n), std::vector<float>(count));
  for (int r = 0; r < n; ++r) {
    Rng rng(seed * 1000003ull + static_cast<uint64_t>(r) + 1);
    for (auto& x : in[static_cast<size_t>(r)]) x = round_to_dtype(rng.uniform(), d);
  }
  return in;
}

// inputs[r] = count integers in [lo, hi] (exact in every dtype for |x| <= 256).
inline std::vector<std::vector<float>> integer_inputs(int n, size_t count, uint64_t seed,
                                                      int lo = -8, int hi = 8) {
  std::vector<std::vector<float>> in(static_cast<size_t>(n), std::vector<float>(count));
  for (int r = 0; r < n; ++r) {
    Rng rng(seed * 7919ull + static_cast<uint64_t>(r) + 11);
    for (auto& x : in[static_cast<size_t>(r)]) x = static_cast<float>(rng.integer(lo, hi));
  }
  return in;
}

inline std::vector<Bytes> encode_all(const std::vector<std::vector<float>>& in, qc_dtype_t d) {
  std::vector<Bytes> out;
  out.reserve(in.size());
  for (const auto& v : in) out.push_back(encode(v, d));
  return out;
}

// ---------------------------------------------------------------------------
// Local groups and the thread driver
// ---------------------------------------------------------------------------
// The tests exercise codecs on small messages: they compress every size
// (min_compress_bytes 0) unless a test is about the threshold.
inline qc_policy_t make_policy(qc_algorithm_t algo = QC_ALGO_AUTO, int group_size = 8) {
  qc_policy_t p = QC_POLICY_INIT;
  p.min_compress_bytes = 0;
  p.algorithm = algo;
  p.group_size = group_size;
  return p;
}

// An in-process group; destroys whatever it still owns when it goes.
class Group {
 public:
  explicit Group(int n, double timeout_seconds = kTimeoutSeconds)
      : comms_(static_cast<size_t>(std::max(n, 0)), nullptr) {
    qc_comm_config_t cfg = QC_COMM_CONFIG_INIT;
    cfg.timeout_seconds = timeout_seconds;
    status_ = qc_comm_create_local_with_config(n, &cfg, comms_.data());
    if (status_ != QC_SUCCESS) std::fill(comms_.begin(), comms_.end(), nullptr);
  }
  ~Group() {
    for (auto& c : comms_) {
      if (c) qc_comm_destroy(c);
      c = nullptr;
    }
  }
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  qc_status_t status() const { return status_; }
  bool ok() const { return status_ == QC_SUCCESS; }
  int size() const { return static_cast<int>(comms_.size()); }
  qc_comm_t operator[](int r) const { return comms_[static_cast<size_t>(r)]; }
  // Destroy one rank early (e.g. to simulate a peer that disappears).
  qc_status_t destroy(int r) {
    qc_status_t s = qc_comm_destroy(comms_[static_cast<size_t>(r)]);
    comms_[static_cast<size_t>(r)] = nullptr;
    return s;
  }

  // Same policy for `pattern` on every rank (called from one thread, before
  // the rank threads start or after they joined).
  qc_status_t set_policy(const char* pattern, const qc_policy_t& p) {
    for (auto c : comms_) {
      qc_status_t s = qc_comm_set_layer_policy(c, pattern, &p);
      if (s != QC_SUCCESS) return s;
    }
    return QC_SUCCESS;
  }

 private:
  std::vector<qc_comm_t> comms_;
  qc_status_t status_;
};

// Run fn(rank) on n threads at once and join them all.
template <class F>
void run_ranks(int n, F&& fn) {
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) threads.emplace_back([&fn, r] { fn(r); });
  for (auto& t : threads) t.join();
}

struct RunResult {
  std::vector<qc_status_t> status;  // per rank
  std::vector<Bytes> out;           // per rank
  std::vector<std::string> error;   // qc_last_error() of each rank on failure
  bool all_ok() const {
    return std::all_of(status.begin(), status.end(),
                       [](qc_status_t s) { return s == QC_SUCCESS; });
  }
  std::string describe() const {
    std::ostringstream os;
    for (size_t r = 0; r < status.size(); ++r) {
      os << "rank " << r << ": " << qc_status_string(status[r]);
      if (!error[r].empty()) os << " (" << error[r] << ")";
      os << "; ";
    }
    return os.str();
  }
};

// qc_allreduce on every rank of an existing group (one thread per rank).
inline RunResult allreduce_on(Group& g, const std::vector<Bytes>& in, size_t count,
                              qc_dtype_t dtype, qc_reduce_op_t op,
                              const char* layer = nullptr, bool in_place = false) {
  const int n = g.size();
  RunResult res;
  res.status.assign(static_cast<size_t>(n), QC_ERROR_INTERNAL);
  res.error.assign(static_cast<size_t>(n), "");
  res.out.assign(static_cast<size_t>(n), Bytes(count * dtype_size(dtype), 0xA5));
  if (in_place) {
    for (int r = 0; r < n; ++r) res.out[static_cast<size_t>(r)] = in[static_cast<size_t>(r)];
  }
  run_ranks(n, [&](int r) {
    const auto ur = static_cast<size_t>(r);
    const void* send = in_place ? res.out[ur].data() : in[ur].data();
    qc_status_t s = qc_allreduce(g[r], send, res.out[ur].data(), count, dtype, op, layer,
                                 nullptr, nullptr);
    res.status[ur] = s;
    if (s != QC_SUCCESS) res.error[ur] = qc_last_error();
  });
  return res;
}

// A fresh group of n ranks, policy on "*", one allreduce.
inline RunResult allreduce_threads(int n, const std::vector<Bytes>& in, size_t count,
                                   qc_dtype_t dtype, qc_reduce_op_t op,
                                   const qc_policy_t& policy, bool in_place = false) {
  Group g(n);
  if (!g.ok()) {
    RunResult res;
    res.status.assign(static_cast<size_t>(n), g.status());
    res.error.assign(static_cast<size_t>(n), "qc_comm_create_local_with_config failed");
    res.out.assign(static_cast<size_t>(n), Bytes());
    return res;
  }
  qc_status_t s = g.set_policy("*", policy);
  if (s != QC_SUCCESS) {
    RunResult res;
    res.status.assign(static_cast<size_t>(n), s);
    res.error.assign(static_cast<size_t>(n), std::string("qc_comm_set_layer_policy: ") + qc_last_error());
    res.out.assign(static_cast<size_t>(n), Bytes());
    return res;
  }
  return allreduce_on(g, in, count, dtype, op, nullptr, in_place);
}

struct EmuResult {
  qc_status_t status = QC_ERROR_INTERNAL;
  std::string error;
  std::vector<Bytes> out;
};

inline EmuResult allreduce_emulate(int n, const std::vector<Bytes>& in, size_t count,
                                   qc_dtype_t dtype, qc_reduce_op_t op, const qc_policy_t& policy,
                                   qc_error_buffer_t* error_buffers = nullptr,
                                   const char* layer = nullptr, uint64_t call_index = 0) {
  EmuResult res;
  res.out.assign(static_cast<size_t>(n), Bytes(count * dtype_size(dtype), 0x5A));
  std::vector<const void*> sp(static_cast<size_t>(n));
  std::vector<void*> rp(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    sp[static_cast<size_t>(r)] = in[static_cast<size_t>(r)].data();
    rp[static_cast<size_t>(r)] = res.out[static_cast<size_t>(r)].data();
  }
  res.status = qc_emulate_allreduce(n, sp.data(), rp.data(), count, dtype, op, layer, call_index,
                                    &policy, error_buffers);
  if (res.status != QC_SUCCESS) res.error = qc_last_error();
  return res;
}

inline RunResult alltoall_on(Group& g, const std::vector<Bytes>& in, size_t count_per_rank,
                             qc_dtype_t dtype, const char* layer = nullptr) {
  const int n = g.size();
  RunResult res;
  res.status.assign(static_cast<size_t>(n), QC_ERROR_INTERNAL);
  res.error.assign(static_cast<size_t>(n), "");
  res.out.assign(static_cast<size_t>(n),
                 Bytes(static_cast<size_t>(n) * count_per_rank * dtype_size(dtype), 0xA5));
  run_ranks(n, [&](int r) {
    const auto ur = static_cast<size_t>(r);
    qc_status_t s = qc_alltoall(g[r], in[ur].data(), res.out[ur].data(), count_per_rank,
                                dtype, layer, nullptr);
    res.status[ur] = s;
    if (s != QC_SUCCESS) res.error[ur] = qc_last_error();
  });
  return res;
}

// ---------------------------------------------------------------------------
// Checks
// ---------------------------------------------------------------------------

// Every rank's output is byte-identical to rank 0's.
inline ::testing::AssertionResult replicas_identical(const std::vector<Bytes>& out) {
  for (size_t r = 1; r < out.size(); ++r) {
    if (out[r].size() != out[0].size())
      return ::testing::AssertionFailure()
             << "rank " << r << " output has " << out[r].size() << " bytes, rank 0 has "
             << out[0].size();
    if (!out[r].empty() && std::memcmp(out[r].data(), out[0].data(), out[0].size()) != 0) {
      size_t i = 0;
      while (out[r][i] == out[0][i]) ++i;
      return ::testing::AssertionFailure()
             << "rank " << r << " output differs from rank 0's first at byte " << i;
    }
  }
  return ::testing::AssertionSuccess();
}

inline ::testing::AssertionResult bytes_equal(const Bytes& a, const Bytes& b,
                                              const char* what) {
  if (a.size() != b.size())
    return ::testing::AssertionFailure()
           << what << ": sizes differ (" << a.size() << " vs " << b.size() << ")";
  if (!a.empty() && std::memcmp(a.data(), b.data(), a.size()) != 0) {
    size_t i = 0;
    while (a[i] == b[i]) ++i;
    return ::testing::AssertionFailure() << what << ": first differing byte " << i;
  }
  return ::testing::AssertionSuccess();
}

// |out_i - exact_i| <= slack * (n * u * sum_r |x_{r,i}|) + abs_floor, where
// exact is the float64 sum (divided by n for AVG, and so is the bound).
inline ::testing::AssertionResult within_sum_bound(const std::vector<std::vector<float>>& in,
                                                   const std::vector<float>& out,
                                                   qc_reduce_op_t op, double u,
                                                   double slack = 2.0,
                                                   double abs_floor = 0.0) {
  const size_t n = in.size();
  const size_t count = n ? in[0].size() : 0;
  if (out.size() != count)
    return ::testing::AssertionFailure() << "output has " << out.size() << " elements, want "
                                         << count;
  for (size_t i = 0; i < count; ++i) {
    double exact = 0.0, mag = 0.0;
    for (size_t r = 0; r < n; ++r) {
      exact += static_cast<double>(in[r][i]);
      mag += std::fabs(static_cast<double>(in[r][i]));
    }
    double bound = slack * static_cast<double>(n) * u * mag;
    if (op == QC_OP_AVG) {
      exact /= static_cast<double>(n);
      bound /= static_cast<double>(n);
    }
    bound += abs_floor;
    const double got = static_cast<double>(out[i]);
    if (!(std::fabs(got - exact) <= bound)) {
      return ::testing::AssertionFailure()
             << "element " << i << ": got " << got << ", exact " << exact << ", |diff| "
             << std::fabs(got - exact) << " > bound " << bound;
    }
  }
  return ::testing::AssertionSuccess();
}

// The residuals of an error buffer, read from its checkpoint image (56-byte
// header, then little-endian float32: this host is little-endian).
inline std::vector<float> residuals(qc_error_buffer_t eb) {
  size_t size = 0;
  EXPECT_EQ(qc_error_buffer_save(eb, nullptr, 0, &size), QC_SUCCESS) << qc_last_error();
  Bytes image(size);
  EXPECT_EQ(qc_error_buffer_save(eb, image.data(), image.size(), &size), QC_SUCCESS);
  std::vector<float> e(size >= 56 ? (size - 56) / 4 : 0);
  if (!e.empty()) std::memcpy(e.data(), image.data() + 56, e.size() * 4);
  return e;
}

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Sanitized string for test names.
inline std::string sanitize(std::string s) {
  for (auto& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}

}  // namespace qct

#endif  // QC_TESTS_UNIT_TEST_UTIL_H
