// Reduce-scatter, allgather and broadcast on the local transport, through
// the public API: exact with codec none, within the per-hop bound when
// compressed, replicas bit-identical, emulation and non-blocking calls equal
// to the blocking threads bit for bit, error feedback's bookkeeping, and
// every rank told MISMATCH when the ranks disagree.
#include <cmath>

#include "test_util.h"

using namespace qct;

namespace {

enum class Kind { kReduceScatter, kAllgather, kBroadcast };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kReduceScatter: return "reduce_scatter";
    case Kind::kAllgather: return "allgather";
    case Kind::kBroadcast: return "broadcast";
  }
  return "?";
}

// The values one rank reads and writes for a call of `block` values per
// message on n ranks.
size_t in_count(Kind k, int n, size_t block) {
  return k == Kind::kReduceScatter ? block * static_cast<size_t>(n) : block;
}
size_t out_count(Kind k, int n, size_t block) {
  return k == Kind::kAllgather ? block * static_cast<size_t>(n) : block;
}

struct Call {
  Kind kind = Kind::kReduceScatter;
  size_t block = 0;
  qc_dtype_t dtype = QC_DTYPE_FLOAT32;
  qc_reduce_op_t op = QC_OP_SUM;
  int root = 0;
  const char* layer = nullptr;
};

qc_status_t start_blocking(qc_comm_t comm, const Call& c, const void* in, void* out,
                           qc_error_buffer_t eb) {
  switch (c.kind) {
    case Kind::kReduceScatter:
      return qc_reduce_scatter(comm, in, out, c.block, c.dtype, c.op, c.layer, eb, nullptr);
    case Kind::kAllgather:
      return qc_allgather(comm, in, out, c.block, c.dtype, c.layer, eb, nullptr);
    case Kind::kBroadcast:
      return qc_broadcast(comm, in, out, c.block, c.dtype, c.root, c.layer, nullptr);
  }
  return QC_ERROR_INTERNAL;
}

qc_status_t run_nonblocking(qc_comm_t comm, const Call& c, const void* in, void* out,
                            qc_error_buffer_t eb) {
  qc_request_t req = nullptr;
  qc_status_t s = QC_ERROR_INTERNAL;
  switch (c.kind) {
    case Kind::kReduceScatter:
      s = qc_ireduce_scatter(comm, in, out, c.block, c.dtype, c.op, c.layer, eb, &req);
      break;
    case Kind::kAllgather:
      s = qc_iallgather(comm, in, out, c.block, c.dtype, c.layer, eb, &req);
      break;
    case Kind::kBroadcast:
      s = qc_ibroadcast(comm, in, out, c.block, c.dtype, c.root, c.layer, &req);
      break;
  }
  if (s != QC_SUCCESS) return s;
  s = qc_request_wait(req);
  qc_request_free(req);
  return s;
}

// One call on every rank of `g` (threads); `ebs` one error buffer per rank or empty.
RunResult run_on(Group& g, const Call& c, const std::vector<Bytes>& in, bool nonblocking = false,
                 const std::vector<qc_error_buffer_t>& ebs = {}) {
  const int n = g.size();
  RunResult res;
  res.status.assign(static_cast<size_t>(n), QC_ERROR_INTERNAL);
  res.error.assign(static_cast<size_t>(n), "");
  res.out.assign(static_cast<size_t>(n), Bytes(out_count(c.kind, n, c.block) * dtype_size(c.dtype), 0xA5));
  run_ranks(n, [&](int r) {
    const auto ur = static_cast<size_t>(r);
    qc_error_buffer_t eb = ebs.empty() ? nullptr : ebs[ur];
    const void* send = in[ur].empty() ? nullptr : in[ur].data();
    qc_status_t s = nonblocking ? run_nonblocking(g[r], c, send, res.out[ur].data(), eb)
                                : start_blocking(g[r], c, send, res.out[ur].data(), eb);
    res.status[ur] = s;
    if (s != QC_SUCCESS) res.error[ur] = qc_last_error();
  });
  return res;
}

EmuResult emulate(int n, const Call& c, const std::vector<Bytes>& in, const qc_policy_t& pol) {
  EmuResult res;
  res.out.assign(static_cast<size_t>(n), Bytes(out_count(c.kind, n, c.block) * dtype_size(c.dtype), 0x5A));
  std::vector<const void*> sp(static_cast<size_t>(n));
  std::vector<void*> rp(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    sp[static_cast<size_t>(r)] = in[static_cast<size_t>(r)].data();
    rp[static_cast<size_t>(r)] = res.out[static_cast<size_t>(r)].data();
  }
  switch (c.kind) {
    case Kind::kReduceScatter:
      res.status = qc_emulate_reduce_scatter(n, sp.data(), rp.data(), c.block, c.dtype, c.op,
                                             c.layer, 0, &pol, nullptr);
      break;
    case Kind::kAllgather:
      res.status = qc_emulate_allgather(n, sp.data(), rp.data(), c.block, c.dtype, c.layer, 0,
                                        &pol, nullptr);
      break;
    case Kind::kBroadcast:
      res.status = qc_emulate_broadcast(n, sp.data(), rp.data(), c.block, c.dtype, c.root,
                                        c.layer, 0, &pol);
      break;
  }
  if (res.status != QC_SUCCESS) res.error = qc_last_error();
  return res;
}

// What rank r's output must be (float64): the exact result of the call.
std::vector<double> expected(const Call& c, int n, int r, const std::vector<std::vector<float>>& in) {
  std::vector<double> e(out_count(c.kind, n, c.block), 0.0);
  const size_t m = c.block;
  for (size_t i = 0; i < e.size(); ++i) {
    switch (c.kind) {
      case Kind::kReduceScatter:
        for (int s = 0; s < n; ++s) e[i] += in[static_cast<size_t>(s)][static_cast<size_t>(r) * m + i];
        if (c.op == QC_OP_AVG) e[i] /= n;
        break;
      case Kind::kAllgather: e[i] = in[i / m][i % m]; break;
      case Kind::kBroadcast: e[i] = in[static_cast<size_t>(c.root)][i]; break;
    }
  }
  return e;
}

// |got - exact| <= bound for every element of every rank.
::testing::AssertionResult within(const Call& c, int n, const std::vector<std::vector<float>>& in,
                                  const std::vector<Bytes>& out, double bound) {
  for (int r = 0; r < n; ++r) {
    const auto got = decode(out[static_cast<size_t>(r)], c.dtype);
    const auto want = expected(c, n, r, in);
    if (got.size() != want.size()) return ::testing::AssertionFailure() << "rank " << r << " size";
    for (size_t i = 0; i < got.size(); ++i) {
      if (!(std::fabs(got[i] - want[i]) <= bound)) {
        return ::testing::AssertionFailure() << "rank " << r << " element " << i << ": got "
                                             << got[i] << ", exact " << want[i] << ", bound "
                                             << bound;
      }
    }
  }
  return ::testing::AssertionSuccess();
}

struct Case {
  Kind kind;
  int n;
  size_t block;
  qc_algorithm_t algorithm;
  qc_dtype_t dtype;
};

std::string case_name(const Case& c) {
  return std::string(kind_name(c.kind)) + "_n" + std::to_string(c.n) + "_m" +
         std::to_string(c.block) + "_" + algo_name(c.algorithm) + "_" + dtype_name(c.dtype);
}

std::vector<Case> cases() {
  std::vector<Case> v;
  const std::vector<std::pair<Kind, std::vector<qc_algorithm_t>>> kinds = {
      {Kind::kReduceScatter, {QC_ALGO_AUTO, QC_ALGO_RING}},
      {Kind::kAllgather, {QC_ALGO_AUTO, QC_ALGO_RING, QC_ALGO_RECURSIVE_DOUBLING}},
      {Kind::kBroadcast, {QC_ALGO_AUTO, QC_ALGO_RING, QC_ALGO_TREE}}};
  for (const auto& k : kinds)
    for (int n : {1, 2, 3, 5, 8})
      for (size_t m : {0, 1, 7, 1000, 70001})
        for (qc_algorithm_t a : k.second) {
          if (m == 70001 && n > 3) continue;  // the pipelined sizes: a few ranks suffice
          v.push_back({k.first, n, m, a, QC_DTYPE_FLOAT32});
          if (m == 1000) v.push_back({k.first, n, m, a, QC_DTYPE_BFLOAT16});
        }
  return v;
}

class Sharded : public ::testing::TestWithParam<Case> {};

// Codec none: the exact result (a sum of n float32 terms: n-1 roundings),
// every rank agreeing, the emulation and the non-blocking calls bit for bit.
TEST_P(Sharded, CodecNoneExactAndEveryPathAgrees) {
  const Case k = GetParam();
  Call c;
  c.kind = k.kind;
  c.block = k.block;
  c.dtype = k.dtype;
  c.root = k.n - 1;
  const auto in_f = random_inputs(k.n, in_count(k.kind, k.n, k.block), 31 * k.n + k.block, k.dtype);
  const auto in = encode_all(in_f, k.dtype);
  qc_policy_t pol = make_policy(k.algorithm);
  pol.codec = QC_CODEC_NONE;
  Group g(k.n);
  ASSERT_TRUE(g.ok());
  ASSERT_EQ(g.set_policy("*", pol), QC_SUCCESS);
  const auto res = run_on(g, c, in);
  ASSERT_TRUE(res.all_ok()) << res.describe();
  // n terms in [-1, 1]: float32 rounding of each partial sum, then the dtype's.
  // 16-bit: codec none sends the dtype, so each hop's partial sum (up to n
  // in magnitude) is rounded to it (2^-8 relative for bfloat16).
  const double bound = k.n * k.n * (k.dtype == QC_DTYPE_FLOAT32 ? 6e-8 : 4e-3);
  EXPECT_TRUE(within(c, k.n, in_f, res.out, bound));
  if (k.kind != Kind::kReduceScatter) {
    EXPECT_TRUE(replicas_identical(res.out));
  }
  if (k.kind == Kind::kAllgather || k.kind == Kind::kBroadcast) {
    // Nothing is summed: the bytes themselves.
    for (int r = 0; r < k.n; ++r) {
      for (size_t i = 0; i < res.out[0].size(); ++i) {
        const size_t bytes = k.block * dtype_size(k.dtype);
        const size_t owner = k.kind == Kind::kBroadcast ? static_cast<size_t>(c.root) : i / bytes;
        const size_t at = k.kind == Kind::kBroadcast ? i : i % bytes;
        ASSERT_EQ(res.out[static_cast<size_t>(r)][i], in[owner][at]) << "rank " << r << " byte " << i;
      }
    }
  }
  const auto emu = emulate(k.n, c, in, pol);
  ASSERT_EQ(emu.status, QC_SUCCESS) << emu.error;
  for (int r = 0; r < k.n; ++r)
    EXPECT_TRUE(bytes_equal(emu.out[r], res.out[r], "emulated vs threads")) << "rank " << r;
  const auto nb = run_on(g, c, in, /*nonblocking=*/true);
  ASSERT_TRUE(nb.all_ok()) << nb.describe();
  for (int r = 0; r < k.n; ++r)
    EXPECT_TRUE(bytes_equal(nb.out[r], res.out[r], "non-blocking vs blocking")) << "rank " << r;
}

// minmax, 8 and 4 bits: within the bound of the encodes on a value's way
// (each at most one quantization step of its bucket's range), replicas of
// allgather and broadcast bit-identical (the owner's block too), the
// emulation the same bits.
class ShardedCompressed : public ::testing::TestWithParam<Case> {};

TEST_P(ShardedCompressed, WithinPerHopBound) {
  const Case k = GetParam();
  for (int bits : {8, 4}) {
    SCOPED_TRACE("bits " + std::to_string(bits));
    Call c;
    c.kind = k.kind;
    c.block = k.block;
    c.root = k.n / 2;
    c.op = QC_OP_AVG;
    const auto in_f = random_inputs(k.n, in_count(k.kind, k.n, k.block), 7 * k.n + bits, k.dtype);
    const auto in = encode_all(in_f, k.dtype);
    qc_policy_t pol = make_policy(k.algorithm);
    pol.codec = QC_CODEC_MINMAX;
    pol.bits = bits;
    Group g(k.n);
    ASSERT_TRUE(g.ok());
    ASSERT_EQ(g.set_policy("*", pol), QC_SUCCESS);
    const auto res = run_on(g, c, in);
    ASSERT_TRUE(res.all_ok()) << res.describe();
    const double step = 1.0 / ((1 << bits) - 1);  // of a range, per encode (nearest: half)
    double bound = 0;
    if (k.kind == Kind::kReduceScatter) {
      // Direct: n-1 encodes of a value in [-1, 1] (range 2); ring: hop h
      // encodes a partial sum of h+1 values (range 2(h+1) plus the errors so far).
      for (int h = 0; h < k.n - 1; ++h)
        bound += step * (k.algorithm == QC_ALGO_RING ? 2.0 * (h + 1) * 1.1 : 2.0);
      bound /= k.n;  // AVG
    } else {
      bound = step * 2.0;
    }
    bound += 1e-6 * k.n;
    EXPECT_TRUE(within(c, k.n, in_f, res.out, bound));
    if (k.kind != Kind::kReduceScatter) {
      EXPECT_TRUE(replicas_identical(res.out));
      if (k.n > 1 && bits == 4 && k.block >= 7) {
        // Lossy for real: the owner's block is the decoded one, not its input.
        const auto got = decode(res.out[0], c.dtype);
        const auto want = expected(c, k.n, 0, in_f);
        double diff = 0;
        for (size_t i = 0; i < got.size(); ++i) diff += std::fabs(got[i] - want[i]);
        EXPECT_GT(diff, 0.0);
      }
    }
    const auto emu = emulate(k.n, c, in, pol);
    ASSERT_EQ(emu.status, QC_SUCCESS) << emu.error;
    for (int r = 0; r < k.n; ++r)
      EXPECT_TRUE(bytes_equal(emu.out[r], res.out[r], "emulated vs threads")) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Local, Sharded, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return case_name(i.param); });

// The compressed cases: float32 (16-bit adds only the dtype's rounding,
// covered with codec none) and non-empty blocks.
std::vector<Case> compressed_cases() {
  std::vector<Case> v;
  for (const Case& c : cases())
    if (c.block > 0 && c.dtype == QC_DTYPE_FLOAT32) v.push_back(c);
  return v;
}
INSTANTIATE_TEST_SUITE_P(Local, ShardedCompressed, ::testing::ValuesIn(compressed_cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return case_name(i.param); });

// Every codec runs every collective; stochastic rounding included, the
// emulation matches the threads.
TEST(ShardedCodecs, EveryCodecRunsAndEmulationMatches) {
  const int n = 3;
  const size_t m = 515;
  for (Kind kind : {Kind::kReduceScatter, Kind::kAllgather, Kind::kBroadcast}) {
    for (qc_codec_t codec : {QC_CODEC_NONE, QC_CODEC_FP16, QC_CODEC_BF16, QC_CODEC_MINMAX,
                             QC_CODEC_QSGD, QC_CODEC_GLOBAL_LINEAR, QC_CODEC_GLOBAL_EXP,
                             QC_CODEC_ONEBIT, QC_CODEC_TOPK}) {
      SCOPED_TRACE(std::string(kind_name(kind)) + " codec " + qc_codec_name(codec));
      qc_policy_t pol = make_policy();
      pol.codec = codec;
      pol.rounding = QC_ROUND_STOCHASTIC;
      pol.seed = 77;
      Call c;
      c.kind = kind;
      c.block = m;
      c.root = 1;
      const auto in = encode_all(random_inputs(n, in_count(kind, n, m), 5, QC_DTYPE_FLOAT32),
                                 QC_DTYPE_FLOAT32);
      Group g(n);
      ASSERT_TRUE(g.ok());
      ASSERT_EQ(g.set_policy("*", pol), QC_SUCCESS);
      const auto res = run_on(g, c, in);
      ASSERT_TRUE(res.all_ok()) << res.describe();
      if (kind != Kind::kReduceScatter) {
        EXPECT_TRUE(replicas_identical(res.out));
      }
      const auto emu = emulate(n, c, in, pol);
      ASSERT_EQ(emu.status, QC_SUCCESS) << emu.error;
      for (int r = 0; r < n; ++r)
        EXPECT_TRUE(bytes_equal(emu.out[r], res.out[r], "emulated vs threads")) << "rank " << r;
    }
  }
}

// Error feedback's bookkeeping: over several calls, what the outputs
// received plus the change of every rank's residuals is what the inputs
// held (to float rounding), for reduce-scatter (both schedules) and
// allgather; and the residuals are not zero (feedback is on).
TEST(ShardedErrorFeedback, OutputsPlusResidualChangeSumToInputs) {
  for (Kind kind : {Kind::kReduceScatter, Kind::kAllgather}) {
    for (qc_algorithm_t a : {QC_ALGO_AUTO, QC_ALGO_RING}) {
      for (int n : {2, 3, 5}) {
        SCOPED_TRACE(std::string(kind_name(kind)) + " " + algo_name(a) + " n" + std::to_string(n));
        const size_t m = 333;
        qc_policy_t pol = make_policy(a);
        pol.codec = QC_CODEC_MINMAX;
        pol.bits = 2;
        pol.error_feedback = 1;
        Group g(n);
        ASSERT_TRUE(g.ok());
        ASSERT_EQ(g.set_policy("*", pol), QC_SUCCESS);
        const size_t in_n = in_count(kind, n, m);
        std::vector<qc_error_buffer_t> ebs(static_cast<size_t>(n));
        for (int r = 0; r < n; ++r) ASSERT_EQ(qc_error_buffer_create(g[r], in_n, &ebs[r]), QC_SUCCESS);
        // Totals per logical element: inputs fed, outputs received.
        std::vector<double> fed(in_count(Kind::kReduceScatter, n, m), 0.0), got(fed.size(), 0.0);
        Call c;
        c.kind = kind;
        c.block = m;
        for (int call = 0; call < 4; ++call) {
          const auto in_f = random_inputs(n, in_n, 100 + call, QC_DTYPE_FLOAT32);
          const auto res = run_on(g, c, encode_all(in_f, QC_DTYPE_FLOAT32), false, ebs);
          ASSERT_TRUE(res.all_ok()) << res.describe();
          for (int r = 0; r < n; ++r) {
            const auto out = decode(res.out[static_cast<size_t>(r)], QC_DTYPE_FLOAT32);
            if (kind == Kind::kReduceScatter) {
              for (size_t i = 0; i < in_n; ++i) fed[i] += in_f[static_cast<size_t>(r)][i];
              for (size_t i = 0; i < m; ++i) got[static_cast<size_t>(r) * m + i] += out[i];
            } else {
              // Logical element (owner, i): rank 0's copy counts (replicas are identical).
              for (size_t i = 0; i < m; ++i) fed[static_cast<size_t>(r) * m + i] += in_f[static_cast<size_t>(r)][i];
              if (r == 0) for (size_t i = 0; i < out.size(); ++i) got[i] += out[i];
            }
          }
        }
        double worst = 0, residual_norm = 0;
        std::vector<double> left(fed.size(), 0.0);  // residuals still held, per logical element
        for (int r = 0; r < n; ++r) {
          const auto e = residuals(ebs[static_cast<size_t>(r)]);
          ASSERT_EQ(e.size(), in_n);
          for (size_t i = 0; i < in_n; ++i) {
            const size_t logical = kind == Kind::kReduceScatter ? i : static_cast<size_t>(r) * m + i;
            left[logical] += e[i];
            residual_norm += e[i] * e[i];
          }
        }
        for (size_t i = 0; i < fed.size(); ++i)
          worst = std::max(worst, std::fabs(got[i] + left[i] - fed[i]));
        EXPECT_LT(worst, 1e-4 * n) << "outputs + residuals differ from the inputs by " << worst;
        EXPECT_GT(residual_norm, 0.0);
        for (auto eb : ebs) qc_error_buffer_destroy(eb);
      }
    }
  }
}

// Ranks that disagree on the call's shape all fail with MISMATCH.
TEST(ShardedMismatch, DisagreementsFailOnEveryRank) {
  const int n = 3;
  struct Variant {
    const char* what;
    Kind kind;
    std::function<void(int, Call*, qc_policy_t*)> change;  // rank r's deviation
  };
  const std::vector<Variant> variants = {
      {"reduce_scatter recvcount", Kind::kReduceScatter, [](int r, Call* c, qc_policy_t*) { if (r == 1) c->block += 1; }},
      {"reduce_scatter op", Kind::kReduceScatter, [](int r, Call* c, qc_policy_t*) { if (r == 2) c->op = QC_OP_AVG; }},
      {"reduce_scatter algorithm", Kind::kReduceScatter, [](int r, Call*, qc_policy_t* p) { if (r == 0) p->algorithm = QC_ALGO_RING; }},
      {"allgather sendcount", Kind::kAllgather, [](int r, Call* c, qc_policy_t*) { if (r == 0) c->block -= 1; }},
      {"allgather bits", Kind::kAllgather, [](int r, Call*, qc_policy_t* p) { if (r == 1) p->bits = 2; }},
      {"allgather algorithm", Kind::kAllgather, [](int r, Call*, qc_policy_t* p) { if (r == 1) p->algorithm = QC_ALGO_RING; }},
      {"broadcast algorithm", Kind::kBroadcast, [](int r, Call*, qc_policy_t* p) { if (r == 0) p->algorithm = QC_ALGO_RING; }},
      {"broadcast root", Kind::kBroadcast, [](int r, Call* c, qc_policy_t*) { if (r == 2) c->root = 1; }},
      {"broadcast count", Kind::kBroadcast, [](int r, Call* c, qc_policy_t*) { if (r == 1) c->block = 5; }},
      {"broadcast layer", Kind::kBroadcast, [](int r, Call* c, qc_policy_t*) { if (r == 0) c->layer = "other"; }},
  };
  for (const Variant& v : variants) {
    SCOPED_TRACE(v.what);
    Group g(n, 20.0);
    ASSERT_TRUE(g.ok());
    std::vector<qc_status_t> status(n, QC_ERROR_INTERNAL);
    run_ranks(n, [&](int r) {
      Call c;
      c.kind = v.kind;
      c.block = 64;
      qc_policy_t pol = make_policy();
      pol.codec = QC_CODEC_MINMAX;
      v.change(r, &c, &pol);
      qc_comm_set_layer_policy(g[r], "*", &pol);
      std::vector<float> in(in_count(c.kind, n, c.block) + 8, 1.0f);
      std::vector<float> out(out_count(c.kind, n, c.block) + 8);
      status[r] = start_blocking(g[r], c, in.data(), out.data(), nullptr);
    });
    for (int r = 0; r < n; ++r) EXPECT_EQ(status[r], QC_ERROR_MISMATCH) << "rank " << r;
  }
}

// Argument errors: a clear status, nothing started, the message naming the argument.
TEST(ShardedArguments, BadInputsAreRefusedWithAMessage) {
  Group g(1);
  ASSERT_TRUE(g.ok());
  float a[8] = {0}, b[8] = {0};
  auto expect = [](qc_status_t got, qc_status_t want, const char* words) {
    EXPECT_EQ(got, want);
    EXPECT_NE(std::string(qc_last_error()).find(words), std::string::npos) << qc_last_error();
  };
  expect(qc_reduce_scatter(g[0], nullptr, b, 4, QC_DTYPE_FLOAT32, QC_OP_SUM, nullptr, nullptr, nullptr),
         QC_ERROR_INVALID_ARGUMENT, "sendbuf");
  expect(qc_reduce_scatter(g[0], a, b, 4, QC_DTYPE_FLOAT32, static_cast<qc_reduce_op_t>(9), nullptr, nullptr, nullptr),
         QC_ERROR_INVALID_ARGUMENT, "op");
  expect(qc_reduce_scatter(g[0], a, a + 1, 4, QC_DTYPE_FLOAT32, QC_OP_SUM, nullptr, nullptr, nullptr),
         QC_ERROR_INVALID_ARGUMENT, "overlap");
  expect(qc_allgather(g[0], a, nullptr, 4, QC_DTYPE_FLOAT32, nullptr, nullptr, nullptr),
         QC_ERROR_INVALID_ARGUMENT, "recvbuf");
  expect(qc_allgather(g[0], a, b, 4, static_cast<qc_dtype_t>(7), nullptr, nullptr, nullptr),
         QC_ERROR_INVALID_ARGUMENT, "dtype");
  expect(qc_broadcast(g[0], a, b, 4, QC_DTYPE_FLOAT32, 1, nullptr, nullptr),
         QC_ERROR_INVALID_ARGUMENT, "root");
  expect(qc_broadcast(g[0], a, b, 4, QC_DTYPE_FLOAT32, -1, nullptr, nullptr),
         QC_ERROR_INVALID_ARGUMENT, "root");
  expect(qc_broadcast(g[0], nullptr, b, 4, QC_DTYPE_FLOAT32, 0, nullptr, nullptr),
         QC_ERROR_INVALID_ARGUMENT, "sendbuf");
  expect(qc_broadcast(nullptr, a, b, 4, QC_DTYPE_FLOAT32, 0, nullptr, nullptr),
         QC_ERROR_INVALID_ARGUMENT, "comm");
  qc_request_t req = reinterpret_cast<qc_request_t>(1);
  expect(qc_iallgather(g[0], a, b, SIZE_MAX / 2, QC_DTYPE_FLOAT32, nullptr, nullptr, &req),
         QC_ERROR_INVALID_ARGUMENT, "sendcount");
  EXPECT_EQ(req, nullptr);
  // An error buffer of the wrong size: MISMATCH (the group breaks: a fresh one after).
  qc_error_buffer_t eb = nullptr;
  ASSERT_EQ(qc_error_buffer_create(g[0], 3, &eb), QC_SUCCESS);
  qc_policy_t pol = make_policy();
  pol.codec = QC_CODEC_MINMAX;
  pol.error_feedback = 1;
  ASSERT_EQ(qc_comm_set_layer_policy(g[0], "*", &pol), QC_SUCCESS);
  expect(qc_reduce_scatter(g[0], a, b, 4, QC_DTYPE_FLOAT32, QC_OP_SUM, nullptr, eb, nullptr),
         QC_ERROR_MISMATCH, "residuals");
  qc_error_buffer_destroy(eb);
}

// In place, as NCCL's in-place forms: reduce-scatter's recvbuf at its own
// block of sendbuf, allgather's sendbuf at its own block of recvbuf.
TEST(ShardedInPlace, NcclInPlaceFormsGiveTheSameResult) {
  const int n = 3;
  const size_t m = 100;
  for (Kind kind : {Kind::kReduceScatter, Kind::kAllgather}) {
    SCOPED_TRACE(kind_name(kind));
    qc_policy_t pol = make_policy();
    pol.codec = QC_CODEC_MINMAX;
    Group g(n);
    ASSERT_TRUE(g.ok());
    ASSERT_EQ(g.set_policy("*", pol), QC_SUCCESS);
    Call c;
    c.kind = kind;
    c.block = m;
    const auto in = encode_all(random_inputs(n, in_count(kind, n, m), 9, QC_DTYPE_FLOAT32),
                               QC_DTYPE_FLOAT32);
    const auto ref = run_on(g, c, in);
    ASSERT_TRUE(ref.all_ok()) << ref.describe();
    std::vector<std::vector<float>> buf(n, std::vector<float>(n * m));
    std::vector<qc_status_t> status(n);
    run_ranks(n, [&](int r) {
      float* big = buf[r].data();
      if (kind == Kind::kReduceScatter) {
        std::memcpy(big, in[r].data(), n * m * 4);
        status[r] = qc_reduce_scatter(g[r], big, big + r * m, m, QC_DTYPE_FLOAT32, QC_OP_SUM,
                                      nullptr, nullptr, nullptr);
      } else {
        std::memcpy(big + r * m, in[r].data(), m * 4);
        status[r] = qc_allgather(g[r], big + r * m, big, m, QC_DTYPE_FLOAT32, nullptr, nullptr,
                                 nullptr);
      }
    });
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(status[r], QC_SUCCESS) << qc_status_string(status[r]);
      const float* got = kind == Kind::kReduceScatter ? buf[r].data() + r * m : buf[r].data();
      EXPECT_EQ(std::memcmp(got, ref.out[r].data(), ref.out[r].size()), 0) << "rank " << r;
    }
  }
}

}  // namespace
