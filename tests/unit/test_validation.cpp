// Checks that used to be in several places, or missing (issue 28, items 5,
// 8 and 9):
//  - timeouts: a huge timeout (1e12 s, QC_TIMEOUT=1e300) waits, in practice
//    for ever; it used to overflow the deadline and time out every call at
//    once (deadline_after, transports/transport.h);
//  - sizes: qc_codec_encoded_size (and every codec's size) never wraps around:
//    a size past SIZE_MAX is QC_ERROR_INVALID_ARGUMENT (core/checked_math.h);
//  - policies: one check (validate_policy) at every entry, the same one the
//    collectives apply (make_codec), so a policy that cannot run is refused
//    where it is given, never first in a later qc_allreduce.
// Internal API (deadline_after, validate_policy, make_codec, the codecs):
// links the internal objects; the rest goes through the public C API.
#include <gtest/gtest.h>

#include <cfloat>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/executors/block_list.h"
#include "core/checked_math.h"
#include "core/collective_context.h"
#include "core/codecs/codec.h"
#include "core/codecs/codec_topk.h"
#include "core/codecs/segmented_codec.h"
#include "core/policy.h"
#include "core/transports/transport.h"
#include "test_util.h"

namespace {

using namespace qct;
using qc::Clock;

constexpr size_t kCount = 64;

// ===========================================================================
// Item 5: huge timeouts
// ===========================================================================

TEST(Deadline, HugeTimeoutsAreFarInTheFuture) {
  const auto year = std::chrono::hours(24 * 365);
  for (double seconds : {1e10, 1e12, 1e18, 1e300, DBL_MAX,
                         std::numeric_limits<double>::infinity()}) {
    const Clock::time_point before = Clock::now();
    const qc::Deadline d = qc::deadline_after(seconds);
    EXPECT_GT(d, before + 30 * year) << seconds << " s: a deadline in the past times out at once";
  }
}

TEST(Deadline, OrdinaryTimeoutsAreExact) {
  const Clock::time_point before = Clock::now();
  const qc::Deadline d = qc::deadline_after(2.5);
  const Clock::time_point after = Clock::now();
  EXPECT_GE(d, before + std::chrono::milliseconds(2500));
  EXPECT_LE(d, after + std::chrono::milliseconds(2500));
}

TEST(Deadline, NonPositiveAndNanAreNow) {
  for (double seconds : {0.0, -0.0, -1.0, -1e300, std::nan("")}) {
    const qc::Deadline d = qc::deadline_after(seconds);
    EXPECT_LE(d, Clock::now()) << seconds;
  }
}

// Both ranks arrive, so the call must succeed at once with any timeout.
void expect_allreduce_succeeds_with_timeout(double timeout_seconds) {
  Group g(2, timeout_seconds);
  ASSERT_TRUE(g.ok()) << timeout_seconds << ": " << qc_last_error();
  qc_policy_t p = make_policy();
  p.codec = QC_CODEC_MINMAX;
  ASSERT_EQ(g.set_policy("*", p), QC_SUCCESS) << qc_last_error();
  const auto in = encode_all(random_inputs(2, kCount, 5), QC_DTYPE_FLOAT32);
  const RunResult res = allreduce_on(g, in, kCount, QC_DTYPE_FLOAT32, QC_OP_SUM);
  EXPECT_TRUE(res.all_ok()) << "timeout " << timeout_seconds << ": " << res.describe();
}

TEST(Timeout, HugeConfiguredTimeoutWaitsInsteadOfTimingOutAtOnce) {
  for (double seconds : {9.3e9, 1e12, 1e18, 1e300, DBL_MAX}) {
    expect_allreduce_succeeds_with_timeout(seconds);
  }
}

TEST(Timeout, NonFiniteOrNonPositiveConfiguredTimeoutIsRefused) {
  for (double seconds : {0.0, -1.0, std::nan(""), std::numeric_limits<double>::infinity(),
                         -std::numeric_limits<double>::infinity()}) {
    qc_comm_config_t cfg = QC_COMM_CONFIG_INIT;
    cfg.timeout_seconds = seconds;
    qc_comm_t comms[2] = {nullptr, nullptr};
    EXPECT_EQ(qc_comm_create_local_with_config(2, &cfg, comms), QC_ERROR_INVALID_ARGUMENT)
        << seconds;
    EXPECT_NE(std::string(qc_last_error()).find("timeout_seconds"), std::string::npos);
    EXPECT_EQ(comms[0], nullptr);
  }
}

// ===========================================================================
// Item 8: sizes never wrap around
// ===========================================================================

using u128 = unsigned __int128;

u128 ceil_div(u128 a, u128 b) { return a == 0 ? 0 : (a - 1) / b + 1; }

// Whether encode refuses the count whatever the size (topk's 32-bit
// indices): UNSUPPORTED, once the size itself fits.
bool count_unsupported(const qc_policy_t& p, size_t count) {
  return p.codec == QC_CODEC_TOPK && count > 0xffffffffu;
}

// The exact message size in 128 bits (codec_*.h, wire_format.h).
bool exact_size(const qc_policy_t& p, size_t count, u128* size) {
  const u128 n = count;
  const u128 header = 32;
  const u128 buckets = ceil_div(n, static_cast<u128>(p.bucket_size));
  switch (p.codec) {
    case QC_CODEC_NONE: *size = header + 4 * n; return true;
    case QC_CODEC_FP16:
    case QC_CODEC_BF16: *size = header + 2 * n; return true;
    case QC_CODEC_MINMAX: *size = header + 8 * buckets + ceil_div(n * p.bits, 8); return true;
    case QC_CODEC_QSGD: *size = header + 4 * buckets + ceil_div(n * p.bits, 8); return true;
    case QC_CODEC_ONEBIT: *size = header + 4 * buckets + ceil_div(n, 8); return true;
    case QC_CODEC_GLOBAL_LINEAR:
    case QC_CODEC_GLOBAL_EXP: *size = header + 4 + ceil_div(n * p.bits, 8); return true;
    case QC_CODEC_TOPK: {
      const size_t k = qc::TopkCodec::k_for(p.topk_ratio, count);
      *size = header + 4 + 8 * static_cast<u128>(k);
      return true;
    }
    // The block-scaled formats: the element width and block are the
    // format's, whatever the policy's bits and bucket_size.
    case QC_CODEC_MXFP8:
    case QC_CODEC_MXFP8_E5M2:
    case QC_CODEC_MXINT8: *size = header + ceil_div(n, 32) + n; return true;
    case QC_CODEC_MXFP6:
    case QC_CODEC_MXFP6_E3M2: *size = header + ceil_div(n, 32) + ceil_div(n * 6, 8); return true;
    case QC_CODEC_MXFP4: *size = header + ceil_div(n, 32) + ceil_div(n, 2); return true;
    case QC_CODEC_NVFP4: *size = header + 4 + ceil_div(n, 16) + ceil_div(n, 2); return true;
  }
  return false;
}

std::vector<qc_policy_t> size_policies() {
  std::vector<qc_policy_t> out;
  for (int c = QC_CODEC_NONE; c <= QC_CODEC_NVFP4; ++c) {
    for (int bits : {1, 2, 3, 8}) {
      for (int bucket : {1, 2, 7, 128, 2147483647}) {
        for (float ratio : {1e-6f, 0.3f, 1.0f}) {
          qc_policy_t p = make_policy();
          p.codec = static_cast<qc_codec_t>(c);
          p.bits = bits;
          p.bucket_size = bucket;
          p.topk_ratio = ratio;
          if (qc::validate_policy(p, "policy")) out.push_back(p);
        }
      }
    }
  }
  return out;
}

std::vector<size_t> size_counts() {
  const size_t top = SIZE_MAX / 8;  // the largest count qc_codec_encoded_size's count check lets by
  std::vector<size_t> out = {0, 1, 7, 8, 9, 1000, 0xffffffffu, size_t(0xffffffffu) + 1};
  for (size_t d : {size_t(0), size_t(1), size_t(7), size_t(64), size_t(1) << 20}) {
    out.push_back(top - d);
    out.push_back(top / 2 - d);
    out.push_back(top / 4 - d);
  }
  out.push_back(SIZE_MAX / 9);
  out.push_back(SIZE_MAX / 12);
  out.push_back(SIZE_MAX / 16);
  return out;
}

std::string policy_text(const qc_policy_t& p) {
  return qc::describe_policy(p) + ", ratio " + std::to_string(p.topk_ratio);
}

// The sizes the issue reported wrapping around.
TEST(EncodedSize, MinmaxBucketOneAtSizeMaxOver8IsRefused) {
  qc_policy_t p = make_policy();
  p.codec = QC_CODEC_MINMAX;
  p.bucket_size = 1;
  size_t size = 12345;
  EXPECT_EQ(qc_codec_encoded_size(&p, SIZE_MAX / 8, &size), QC_ERROR_INVALID_ARGUMENT)
      << "got " << size;
  EXPECT_NE(std::string(qc_last_error()).find("qc_codec_encoded_size: argument 'count'"),
            std::string::npos)
      << qc_last_error();
  EXPECT_EQ(size, 12345u) << "a failed call writes no output";
}

TEST(EncodedSize, TopkAtSizeMaxOver8IsRefused) {
  qc_policy_t p = make_policy();
  p.codec = QC_CODEC_TOPK;
  p.topk_ratio = 1.0f;
  size_t size = 12345;
  // 32 + 4 + 8 * count passes SIZE_MAX: an overflow, as the issue asks.
  EXPECT_EQ(qc_codec_encoded_size(&p, SIZE_MAX / 8, &size), QC_ERROR_INVALID_ARGUMENT)
      << "got " << size;
  EXPECT_NE(std::string(qc_last_error()).find("larger than SIZE_MAX bytes"), std::string::npos)
      << qc_last_error();
  EXPECT_EQ(size, 12345u);
  // A count past topk's 32-bit indices whose size fits: what qc_codec_encode says.
  EXPECT_EQ(qc_codec_encoded_size(&p, size_t(0xffffffffu) + 1, &size), QC_ERROR_UNSUPPORTED);
  EXPECT_NE(std::string(qc_last_error()).find("at most 4294967295 elements"), std::string::npos)
      << qc_last_error();
}

// Every codec, width, bucket and count: the size is exact, or the call
// fails with INVALID_ARGUMENT exactly when the exact size passes SIZE_MAX.
TEST(EncodedSize, ExactOrRefusedNeverWrapped) {
  size_t checked = 0;
  for (const qc_policy_t& p : size_policies()) {
    for (size_t count : size_counts()) {
      size_t size = 0;
      const qc_status_t s = qc_codec_encoded_size(&p, count, &size);
      u128 exact = 0;
      ASSERT_TRUE(exact_size(p, count, &exact)) << policy_text(p);
      ++checked;
      if (exact <= SIZE_MAX && count_unsupported(p, count)) {
        EXPECT_EQ(s, QC_ERROR_UNSUPPORTED) << policy_text(p) << ", count " << count;
      } else if (exact > SIZE_MAX) {
        EXPECT_EQ(s, QC_ERROR_INVALID_ARGUMENT)
            << policy_text(p) << ", count " << count << ": got " << size;
        EXPECT_NE(std::string(qc_last_error()).find("argument 'count'"), std::string::npos);
      } else {
        ASSERT_EQ(s, QC_SUCCESS) << policy_text(p) << ", count " << count << ": "
                                 << qc_last_error();
        EXPECT_EQ(u128(size), exact) << policy_text(p) << ", count " << count;
        EXPECT_GE(size, 32u);
      }
    }
  }
  EXPECT_GT(checked, 1000u);
}

// The internal sizes the algorithms use saturate instead of wrapping, and a
// fused call's bound adds its parts without wrapping.
TEST(EncodedSize, CodecSizesSaturate) {
  qc_policy_t p = make_policy();
  p.codec = QC_CODEC_MINMAX;
  p.bucket_size = 1;
  std::unique_ptr<qc::Codec> codec;
  ASSERT_TRUE(qc::make_codec(p, QC_DTYPE_FLOAT32, &codec));
  EXPECT_EQ(codec->max_encoded_size(SIZE_MAX / 8), SIZE_MAX);
  EXPECT_EQ(codec->max_encoded_size(SIZE_MAX), SIZE_MAX);
  EXPECT_EQ(codec->max_encoded_size(10), 32u + 80u + 5u);

  std::vector<qc::CodecSegment> segments(2);
  for (size_t i = 0; i < segments.size(); ++i) {
    qc_policy_t none = make_policy();
    ASSERT_TRUE(qc::make_codec(none, QC_DTYPE_FLOAT32, &segments[i].codec));
    segments[i].begin = i * (SIZE_MAX / 8);
    segments[i].count = SIZE_MAX / 8;  // each alone fits; together they do not
  }
  qc::SegmentedCodec fused(std::move(segments));
  EXPECT_EQ(fused.max_encoded_size(SIZE_MAX / 8), SIZE_MAX);
  size_t bytes = 0;
  EXPECT_EQ(fused.encoded_size(SIZE_MAX / 8, &bytes).code(), QC_ERROR_INVALID_ARGUMENT);
}

// What the algorithms derive from a saturated size stays saturated: a
// frame of blobs, a message's buffer (which used to wrap to a few bytes).
TEST(EncodedSize, FramesAndBuffersDoNotWrap) {
  EXPECT_EQ(qc::block_list_capacity(3, 10), 3u * (16u + 10u));
  EXPECT_EQ(qc::block_list_capacity(3, SIZE_MAX), SIZE_MAX);
  EXPECT_EQ(qc::block_list_capacity(2, SIZE_MAX / 2), SIZE_MAX);
  qc::Message msg;
  EXPECT_THROW(msg.reserve_payload(SIZE_MAX), std::bad_alloc);
  msg.reserve_payload(100);
  EXPECT_EQ(msg.payload_capacity(), 100u);
}

TEST(CheckedMath, MulAddAndBitBytes) {
  size_t out = 7;
  EXPECT_TRUE(qc::checked_mul(SIZE_MAX / 2, 2, &out));
  EXPECT_EQ(out, SIZE_MAX - 1);
  EXPECT_FALSE(qc::checked_mul(SIZE_MAX / 2 + 1, 2, &out));
  EXPECT_EQ(out, SIZE_MAX - 1) << "untouched on overflow";
  EXPECT_TRUE(qc::checked_add(SIZE_MAX - 1, 1, &out));
  EXPECT_FALSE(qc::checked_add(SIZE_MAX, 1, &out));
  EXPECT_FALSE(qc::checked_sum({SIZE_MAX / 2, SIZE_MAX / 2, 2}, &out));
  for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(8), size_t(9), size_t(1000)}) {
    for (size_t bits = 1; bits <= 8; ++bits) {
      ASSERT_TRUE(qc::checked_bit_bytes(count, bits, &out));
      EXPECT_EQ(out, (count * bits + 7) / 8) << count << " x " << bits;
    }
  }
  // count * 8 overflows, the byte count itself does not.
  ASSERT_TRUE(qc::checked_bit_bytes(SIZE_MAX, 8, &out));
  EXPECT_EQ(out, SIZE_MAX);
  ASSERT_TRUE(qc::checked_bit_bytes(SIZE_MAX, 1, &out));
  EXPECT_EQ(out, SIZE_MAX / 8 + 1);
  EXPECT_FALSE(qc::checked_bit_bytes(SIZE_MAX, 16, &out));  // wider than codes get
  EXPECT_EQ(qc::groups_of(SIZE_MAX, 2), SIZE_MAX / 2 + 1);
  EXPECT_EQ(qc::groups_of(0, 5), 0u);
}

// ===========================================================================
// Item 9: one policy check, at every entry
// ===========================================================================

// Policies whose every field is within its documented range, in every
// combination of codec, width, bucket, rounding, algorithm (native aside:
// it depends on the collective and the transport) and error feedback.
std::vector<qc_policy_t> in_range_policies() {
  std::vector<qc_policy_t> out;
  for (int c = QC_CODEC_NONE; c <= QC_CODEC_NVFP4; ++c) {
    for (int bits : {1, 2, 5, 8}) {
      for (int bucket : {1, 128}) {
        for (int rounding : {QC_ROUND_NEAREST_EVEN, QC_ROUND_STOCHASTIC}) {
          for (int algo = QC_ALGO_AUTO; algo <= QC_ALGO_TREE; ++algo) {
            for (int ef : {0, 1}) {
              qc_policy_t p = make_policy(static_cast<qc_algorithm_t>(algo), 2);
              p.codec = static_cast<qc_codec_t>(c);
              p.bits = bits;
              p.bucket_size = bucket;
              p.rounding = static_cast<qc_rounding_t>(rounding);
              p.error_feedback = ef;
              p.topk_ratio = 0.25f;
              out.push_back(p);
            }
          }
        }
      }
    }
  }
  return out;
}

// Policies with one field out of range, or out of range for the codec.
std::vector<qc_policy_t> invalid_policies() {
  std::vector<qc_policy_t> out;
  auto add = [&](qc_codec_t codec, auto&& change) {
    qc_policy_t p = make_policy();
    p.codec = codec;
    change(p);
    out.push_back(p);
  };
  for (int c = QC_CODEC_NONE; c <= QC_CODEC_NVFP4; ++c) {
    const auto codec = static_cast<qc_codec_t>(c);
    add(codec, [](qc_policy_t& p) { p.bits = 0; });
    add(codec, [](qc_policy_t& p) { p.bits = 9; });
    add(codec, [](qc_policy_t& p) { p.bucket_size = 0; });
    add(codec, [](qc_policy_t& p) { p.rounding = static_cast<qc_rounding_t>(3); });
    add(codec, [](qc_policy_t& p) { p.algorithm = static_cast<qc_algorithm_t>(6); });
    add(codec, [](qc_policy_t& p) { p.error_feedback = 2; });
    add(codec, [](qc_policy_t& p) { p.group_size = 0; });
    add(codec, [](qc_policy_t& p) { p.topk_ratio = 0.0f; });
    add(codec, [](qc_policy_t& p) { p.topk_ratio = 1.5f; });
    add(codec, [](qc_policy_t& p) { p.topk_ratio = std::nanf(""); });
    add(codec, [](qc_policy_t& p) { p.scale_update_period = 0; });
  }
  add(static_cast<qc_codec_t>(QC_CODEC_NVFP4 + 1), [](qc_policy_t&) {});
  for (qc_codec_t c : {QC_CODEC_QSGD, QC_CODEC_GLOBAL_LINEAR, QC_CODEC_GLOBAL_EXP}) {
    add(c, [](qc_policy_t& p) { p.bits = 1; });
  }
  return out;
}

// The run-time gate of every collective (and of qc_codec_encode, the device path,
// a message header) refuses exactly what the set-time check refuses.
TEST(PolicyCheck, CollectivesRefuseExactlyWhatTheEntriesRefuse) {
  std::vector<qc_policy_t> all = in_range_policies();
  for (const qc_policy_t& p : invalid_policies()) all.push_back(p);
  for (const qc_policy_t& p : all) {
    const qc::Status at_set = qc::validate_policy(p, "policy");
    for (qc_dtype_t dtype : {QC_DTYPE_FLOAT32, QC_DTYPE_FLOAT16, QC_DTYPE_BFLOAT16}) {
      std::unique_ptr<qc::Codec> codec;
      const qc::Status at_run = qc::make_codec(p, dtype, &codec);
      EXPECT_EQ(at_run.code(), at_set.code())
          << policy_text(p) << ": set-time says '" << at_set.message() << "', run-time '"
          << at_run.message() << "'";
    }
  }
}

// Every policy the entries accept runs: qc_allreduce (every algorithm but
// native, with and without an error buffer), qc_alltoall and
// qc_codec_encode/qc_codec_decode succeed on it. A policy they accepted used to fail
// only here (global_linear / global_exp with bits 1).
TEST(PolicyCheck, EveryAcceptedPolicyRuns) {
  Group g(2);
  ASSERT_TRUE(g.ok()) << qc_last_error();
  const auto in = encode_all(random_inputs(2, kCount, 11), QC_DTYPE_FLOAT32);
  std::vector<float> x(kCount, 0.5f), y(kCount);
  std::vector<uint8_t> msg(4096);
  size_t tried = 0;
  for (const qc_policy_t& p : in_range_policies()) {
    if (g.set_policy("x", p) != QC_SUCCESS) {
      // Refused where it is given: it must also be refused as a policy.
      EXPECT_FALSE(qc::validate_policy(p, "policy")) << policy_text(p);
      continue;
    }
    ++tried;
    std::vector<qc_error_buffer_t> eb(2, nullptr);
    if (p.error_feedback) {
      for (int r = 0; r < 2; ++r) ASSERT_EQ(qc_error_buffer_create(g[r], kCount, &eb[r]), QC_SUCCESS);
    }
    RunResult res;
    res.status.assign(2, QC_ERROR_INTERNAL);
    res.error.assign(2, "");
    res.out.assign(2, Bytes(kCount * 4));
    run_ranks(2, [&](int r) {
      const qc_status_t s = qc_allreduce(g[r], in[r].data(), res.out[r].data(), kCount,
                                         QC_DTYPE_FLOAT32, QC_OP_SUM, "x", eb[r], nullptr);
      res.status[r] = s;
      if (s != QC_SUCCESS) res.error[r] = qc_last_error();
    });
    EXPECT_TRUE(res.all_ok()) << "accepted at set, refused by qc_allreduce: " << policy_text(p)
                              << ": " << res.describe();
    for (qc_error_buffer_t e : eb) qc_error_buffer_destroy(e);
    if (!res.all_ok()) break;  // a group that failed may be broken
    const RunResult a2a = alltoall_on(g, in, kCount / 2, QC_DTYPE_FLOAT32, "x");
    EXPECT_TRUE(a2a.all_ok()) << "accepted at set, refused by qc_alltoall: " << policy_text(p)
                              << ": " << a2a.describe();
    if (!a2a.all_ok()) break;
    size_t written = 0;
    EXPECT_EQ(qc_codec_encode(&p, x.data(), kCount, QC_DTYPE_FLOAT32, msg.data(), msg.size(), &written),
              QC_SUCCESS)
        << policy_text(p) << ": " << qc_last_error();
    EXPECT_EQ(qc_codec_decode(msg.data(), written, y.data(), kCount, QC_DTYPE_FLOAT32), QC_SUCCESS)
        << policy_text(p) << ": " << qc_last_error();
  }
  EXPECT_GT(tried, 500u);
}

// A process-wide environment variable, restored when the test ends.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_) ::setenv(name_.c_str(), old_.c_str(), 1);
    else ::unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::string old_;
  bool had_ = false;
};

const char* env_codec_name(qc_codec_t c) { return qc::codec_name(c); }

// Every entry that takes a policy refuses every invalid one, with
// QC_ERROR_INVALID_ARGUMENT naming the argument and the field.
TEST(PolicyCheck, EveryEntryRefusesEveryInvalidPolicy) {
  Group g(2);
  ASSERT_TRUE(g.ok()) << qc_last_error();
  std::vector<float> x(kCount, 1.0f), y(kCount, 0.0f);
  std::vector<uint8_t> msg(4096);
  const void* sends[2] = {x.data(), x.data()};
  std::vector<float> y1(kCount), y2(kCount);
  void* recvs[2] = {y1.data(), y2.data()};
  const std::vector<float> x2(kCount * 2, 1.0f);
  const void* sends2[2] = {x2.data(), x2.data()};
  std::vector<float> z1(kCount * 2), z2(kCount * 2);
  void* recvs2[2] = {z1.data(), z2.data()};
  for (const qc_policy_t& p : invalid_policies()) {
    const std::string what = policy_text(p);
    auto expect_refused = [&](qc_status_t s, const char* entry, const char* arg) {
      EXPECT_EQ(s, QC_ERROR_INVALID_ARGUMENT) << entry << " accepted " << what;
      const std::string error = qc_last_error();
      EXPECT_NE(error.find(std::string(entry) + ": argument '" + arg + "'"), std::string::npos)
          << entry << ", " << what << ": " << error;
    };
    expect_refused(qc_comm_set_layer_policy(g[0], "x", &p), "qc_comm_set_layer_policy", "policy");
    expect_refused(qc_comm_apply_preset(g[0], "cgx", &p), "qc_comm_apply_preset", "base");
    size_t size = 0;
    expect_refused(qc_codec_encoded_size(&p, kCount, &size), "qc_codec_encoded_size", "policy");
    expect_refused(qc_codec_encode(&p, x.data(), kCount, QC_DTYPE_FLOAT32, msg.data(), msg.size(), &size),
                   "qc_codec_encode", "policy");
    expect_refused(qc_emulate_allreduce(2, sends, recvs, kCount, QC_DTYPE_FLOAT32, QC_OP_SUM,
                                        nullptr, 0, &p, nullptr),
                   "qc_emulate_allreduce", "policy");
    expect_refused(qc_emulate_alltoall(2, sends2, recvs2, kCount, QC_DTYPE_FLOAT32, nullptr, 0, &p),
                   "qc_emulate_alltoall", "policy");
  }
  // Nothing was set: "x" still resolves to the default.
  qc_policy_t back = QC_POLICY_INIT;
  ASSERT_EQ(qc_comm_get_layer_policy(g[0], "x", &back), QC_SUCCESS);
  EXPECT_EQ(back.codec, QC_CODEC_NONE);
}

// The cases, one by one: bits 1 for the global codecs.
TEST(PolicyCheck, GlobalCodecsWithOneBitAreRefusedAtSetTime) {
  Group g(1);
  ASSERT_TRUE(g.ok());
  for (qc_codec_t c : {QC_CODEC_GLOBAL_LINEAR, QC_CODEC_GLOBAL_EXP, QC_CODEC_QSGD}) {
    qc_policy_t p = make_policy();
    p.codec = c;
    p.bits = 1;
    const std::string needs = std::string("codec ") + qc::codec_name(c) + " needs 2..8";
    EXPECT_EQ(qc_comm_set_layer_policy(g[0], "x", &p), QC_ERROR_INVALID_ARGUMENT) << qc::codec_name(c);
    EXPECT_NE(std::string(qc_last_error()).find("argument 'policy': field 'bits' is 1; " + needs),
              std::string::npos)
        << qc_last_error();
    EXPECT_EQ(qc_comm_apply_preset(g[0], "cgx", &p), QC_ERROR_INVALID_ARGUMENT) << qc::codec_name(c);
    EXPECT_NE(std::string(qc_last_error()).find("argument 'base': field 'bits' is 1"),
              std::string::npos)
        << qc_last_error();
  }
}

TEST(PolicyCheck, EnvironmentWithGlobalCodecAndOneBitFailsAtCreation) {
  for (qc_codec_t c : {QC_CODEC_GLOBAL_LINEAR, QC_CODEC_GLOBAL_EXP}) {
    ScopedEnv codec("QC_CODEC", env_codec_name(c));
    ScopedEnv bits("QC_BITS", "1");
    qc_comm_t comms[2] = {nullptr, nullptr};
    EXPECT_EQ(qc_comm_create_local(2, comms), QC_ERROR_INVALID_ARGUMENT) << qc::codec_name(c);
    const std::string error = qc_last_error();
    EXPECT_NE(error.find("QC_* environment variables make an invalid default policy"),
              std::string::npos)
        << error;
    EXPECT_NE(error.find("field 'bits' is 1"), std::string::npos) << error;
    for (qc_comm_t comm : comms) {
      EXPECT_EQ(comm, nullptr);
      qc_comm_destroy(comm);
    }
  }
}

// A message header is the same check's input: a global codec with bits 1
// is a corrupt message, never a codec that divides by zero levels.
TEST(PolicyCheck, MessageHeaderWithGlobalCodecAndOneBitIsCorrupt) {
  qc_policy_t p = make_policy();
  p.codec = QC_CODEC_GLOBAL_EXP;
  p.bits = 4;
  std::vector<float> x(kCount, 0.5f), y(kCount);
  std::vector<uint8_t> msg(4096);
  size_t written = 0;
  ASSERT_EQ(qc_codec_encode(&p, x.data(), kCount, QC_DTYPE_FLOAT32, msg.data(), msg.size(), &written),
            QC_SUCCESS);
  msg[6] = 1;  // bits
  EXPECT_EQ(qc_codec_decode(msg.data(), written, y.data(), kCount, QC_DTYPE_FLOAT32),
            QC_ERROR_CORRUPT_DATA);
  EXPECT_NE(std::string(qc_last_error()).find("field 'bits' is 1"), std::string::npos)
      << qc_last_error();
}

// qc_comm_adapt_policies decides every group before it sets any policy: a
// failure in a later group (qsgd cannot use 1 bit) leaves an earlier one
// (minmax) as it was.
TEST(PolicyCheck, AdaptPoliciesChangesNothingWhenAGroupFails) {
  Group g(2);
  ASSERT_TRUE(g.ok());
  qc_policy_t minmax = make_policy();
  minmax.codec = QC_CODEC_MINMAX;
  qc_policy_t qsgd = minmax;
  qsgd.codec = QC_CODEC_QSGD;
  ASSERT_EQ(g.set_policy("a", minmax), QC_SUCCESS);
  ASSERT_EQ(g.set_policy("b", qsgd), QC_SUCCESS);
  const auto in = encode_all(random_inputs(2, 1024, 3), QC_DTYPE_FLOAT32);
  ASSERT_TRUE(allreduce_on(g, in, 1024, QC_DTYPE_FLOAT32, QC_OP_SUM, "a").all_ok());
  ASSERT_TRUE(allreduce_on(g, in, 1024, QC_DTYPE_FLOAT32, QC_OP_SUM, "b").all_ok());
  qc_adapt_config_t cfg = QC_ADAPT_CONFIG_INIT;
  cfg.num_allowed = 2;
  cfg.allowed_bits[0] = 1;
  cfg.allowed_bits[1] = 2;
  std::vector<qc_status_t> status(2, QC_ERROR_INTERNAL);
  run_ranks(2, [&](int r) { status[r] = qc_comm_adapt_policies(g[r], &cfg, nullptr); });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(status[r], QC_ERROR_INVALID_ARGUMENT) << "rank " << r;
    qc_policy_t back = QC_POLICY_INIT;
    ASSERT_EQ(qc_comm_get_layer_policy(g[r], "a", &back), QC_SUCCESS);
    EXPECT_EQ(back.bits, 4) << "rank " << r << ": layer a changed by a failed qc_comm_adapt_policies";
  }
}

}  // namespace
