// Every entry of the AVX2 and AVX-512 kernel tables against the scalar
// reference (src/cpu/kernels_scalar.cpp), bit for bit: codes, metadata,
// decoded floats, decode-accumulate and the error-compensated residual e, on
// random data with NaN, Inf, -0 and denormals, bits 1..8, buckets
// 1..1000, counts 0, 1, 10007, stochastic rounding on and off, and element
// offsets near 2^32 (where the random-bit index crosses into its high word).
// Also: every table (scalar included) encoding float16 / bfloat16 input
// directly (QuantArgs::input_dtype) against widening to float32 first, and
// encoding with reused scales (QuantArgs::reuse_meta).
//
// An ISA this CPU (or build) lacks is skipped. Links the internal objects.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "cpu/codec_kernels.h"
#include "cpu/dtype_convert.h"
#include "cpu/random.h"
#include "kernel_test_data.h"

namespace {

using namespace qc_kernel_test;
using qc::cpu::Isa;
using qc::cpu::KernelTable;
using qc::cpu::QuantArgs;
using qc::cpu::QuantDecodeFn;
using qc::cpu::QuantEncodeFn;

constexpr size_t kGuard = 64;   // canary bytes after every output buffer
constexpr uint8_t kCanary = 0xCD;

// A byte buffer with canaries after `size` bytes.
struct Out {
  std::vector<uint8_t> b;
  size_t size;
  explicit Out(size_t n) : b(n + kGuard, kCanary), size(n) {}
  uint8_t* data() { return b.data(); }
  bool guard_intact() const {
    for (size_t i = size; i < b.size(); ++i)
      if (b[i] != kCanary) return false;
    return true;
  }
  bool same_as(const Out& o) const {
    return size == o.size && std::memcmp(b.data(), o.b.data(), size) == 0;
  }
};

long first_byte_diff(const Out& a, const Out& b) {
  for (size_t i = 0; i < a.size; ++i)
    if (a.b[i] != b.b[i]) return static_cast<long>(i);
  return -1;
}

std::string hexf(float f) {
  std::ostringstream os;
  os << f << " (0x" << std::hex << f32_bits(f) << ")";
  return os.str();
}

enum class Codec { kMinmax, kQsgd, kOnebit };

const char* codec_name(Codec c) {
  return c == Codec::kMinmax ? "minmax" : c == Codec::kQsgd ? "qsgd" : "onebit";
}

struct Fns {
  QuantEncodeFn enc;
  QuantDecodeFn dec;
};
Fns fns(const KernelTable& t, Codec c) {
  switch (c) {
    case Codec::kMinmax: return {t.minmax_encode, t.minmax_decode};
    case Codec::kQsgd: return {t.qsgd_encode, t.qsgd_decode};
    default: return {t.onebit_encode, t.onebit_decode};
  }
}
size_t meta_floats(Codec c) { return c == Codec::kMinmax ? 2 : 1; }

class KernelIdentity : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    ref_ = qc::cpu::scalar_kernels();
    ASSERT_NE(ref_, nullptr);
    simd_ = qc::cpu::kernels_for(GetParam());
    if (simd_ == nullptr) {
      GTEST_SKIP() << qc::cpu::isa_name(GetParam()) << " kernels not available on this CPU/build";
    }
  }

 public:
  const KernelTable* ref_ = nullptr;
  const KernelTable* simd_ = nullptr;

  // Encode (plain and error-compensated) and decode (plain and accumulate)
  // with both tables; every output must match bit for bit.
  void check_quant(Codec codec, int bits, size_t bucket, size_t count, bool stochastic,
                   uint64_t index_base, Data data, uint64_t seed) {
    std::ostringstream where;
    where << codec_name(codec) << " bits " << bits << " bucket " << bucket << " count " << count
          << (stochastic ? " stochastic" : " nearest") << " index_base " << index_base << " data "
          << static_cast<int>(data) << " isa " << simd_->name;
    SCOPED_TRACE(where.str());
    const std::vector<float> x = make_data(count, data, seed);
    QuantArgs a;
    a.bits = bits;
    a.bucket = bucket;
    a.stochastic = stochastic;
    a.rng = qc::cpu::make_random_stream(seed, static_cast<uint32_t>(seed % 7), seed % 5);
    a.index_base = index_base;
    const size_t nb = qc::cpu::bucket_count(count, bucket);
    const size_t meta_bytes = nb * meta_floats(codec) * 4;
    const size_t code_bytes = qc::cpu::codes_bytes(count, codec == Codec::kOnebit ? 1 : bits);
    const Fns r = fns(*ref_, codec), s = fns(*simd_, codec);
    ASSERT_NE(s.enc, nullptr);
    ASSERT_NE(s.dec, nullptr);

    // plain encode
    Out rm(meta_bytes), rc(code_bytes), sm(meta_bytes), sc(code_bytes);
    r.enc(x.data(), nullptr, count, a, rm.data(), rc.data());
    s.enc(x.data(), nullptr, count, a, sm.data(), sc.data());
    ASSERT_TRUE(sm.guard_intact() && sc.guard_intact()) << "SIMD encode wrote past its buffers";
    ASSERT_TRUE(rm.guard_intact() && rc.guard_intact()) << "scalar encode wrote past its buffers";
    ASSERT_TRUE(sm.same_as(rm)) << "meta differs at byte " << first_byte_diff(sm, rm);
    ASSERT_TRUE(sc.same_as(rc)) << "codes differ at byte " << first_byte_diff(sc, rc);

    // error-compensated encode: e in, e out
    std::vector<float> e0 = make_data(count, Data::kPlain, seed + 1);
    for (auto& v : e0) v *= 0.01f;
    if (data == Data::kSpecial && count > 3) e0[count / 2] = std::numeric_limits<float>::infinity();
    std::vector<float> re = e0, se = e0;
    Out rm2(meta_bytes), rc2(code_bytes), sm2(meta_bytes), sc2(code_bytes);
    r.enc(x.data(), re.data(), count, a, rm2.data(), rc2.data());
    s.enc(x.data(), se.data(), count, a, sm2.data(), sc2.data());
    ASSERT_TRUE(sm2.guard_intact() && sc2.guard_intact());
    ASSERT_TRUE(sm2.same_as(rm2)) << "EC meta differs at byte " << first_byte_diff(sm2, rm2);
    ASSERT_TRUE(sc2.same_as(rc2)) << "EC codes differ at byte " << first_byte_diff(sc2, rc2);
    long d = first_float_diff(se, re);
    ASSERT_LT(d, 0) << "EC residual differs at " << d << ": simd " << hexf(se[d]) << " scalar "
                    << hexf(re[d]);

    // scale reuse: other values encoded on x's metadata, plain and
    // error-compensated (NaN and zero-scale buckets of x are recomputed)
    std::vector<float> y = make_data(count, Data::kPlain, seed + 4);
    for (auto& v : y) v *= 1.5f;  // partly outside x's ranges: saturates
    QuantArgs ar = a;
    ar.reuse_meta = rm.data();
    Out rm3(meta_bytes), rc3(code_bytes), sm3(meta_bytes), sc3(code_bytes);
    r.enc(y.data(), nullptr, count, ar, rm3.data(), rc3.data());
    s.enc(y.data(), nullptr, count, ar, sm3.data(), sc3.data());
    ASSERT_TRUE(sm3.guard_intact() && sc3.guard_intact());
    ASSERT_TRUE(sm3.same_as(rm3)) << "reuse meta differs at byte " << first_byte_diff(sm3, rm3);
    ASSERT_TRUE(sc3.same_as(rc3)) << "reuse codes differ at byte " << first_byte_diff(sc3, rc3);
    std::vector<float> re3 = e0, se3 = e0;
    r.enc(y.data(), re3.data(), count, ar, rm3.data(), rc3.data());
    s.enc(y.data(), se3.data(), count, ar, sm3.data(), sc3.data());
    ASSERT_TRUE(sm3.same_as(rm3)) << "reuse EC meta differs at byte " << first_byte_diff(sm3, rm3);
    ASSERT_TRUE(sc3.same_as(rc3)) << "reuse EC codes differ at byte " << first_byte_diff(sc3, rc3);
    d = first_float_diff(se3, re3);
    ASSERT_LT(d, 0) << "reuse EC residual differs at " << d;

    // decode and decode-accumulate of the reference bytes
    std::vector<float> ry(count + 16, 1.5f), sy(count + 16, 1.5f);
    r.dec(rm.data(), rc.data(), count, bits, bucket, ry.data(), false);
    s.dec(rm.data(), rc.data(), count, bits, bucket, sy.data(), false);
    d = first_float_diff(sy, ry);
    ASSERT_LT(d, 0) << "decode differs at " << d << ": simd " << hexf(sy[d]) << " scalar "
                    << hexf(ry[d]);
    std::vector<float> acc = make_data(count + 16, Data::kSpecial, seed + 2);
    std::vector<float> racc = acc, sacc = acc;
    r.dec(rm.data(), rc.data(), count, bits, bucket, racc.data(), true);
    s.dec(rm.data(), rc.data(), count, bits, bucket, sacc.data(), true);
    d = first_float_diff(sacc, racc);
    ASSERT_LT(d, 0) << "decode-accumulate differs at " << d << ": simd " << hexf(sacc[d])
                    << " scalar " << hexf(racc[d]);

    // decode of arbitrary bytes (any meta, any codes): still identical
    Rng rng(seed + 3);
    Out gm(meta_bytes), gc(code_bytes);
    for (size_t i = 0; i < meta_bytes; i += 4) {
      const float v = (rng.next() % 5 == 0) ? bits_f32(static_cast<uint32_t>(rng.next()))
                                            : rng.uniform() * 10;
      std::memcpy(gm.data() + i, &v, 4);
    }
    for (size_t i = 0; i < code_bytes; ++i) gc.b[i] = static_cast<uint8_t>(rng.next());
    std::vector<float> rg(count, 0.0f), sg(count, 0.0f);
    r.dec(gm.data(), gc.data(), count, bits, bucket, rg.data(), false);
    s.dec(gm.data(), gc.data(), count, bits, bucket, sg.data(), false);
    d = first_float_diff(sg, rg);
    ASSERT_LT(d, 0) << "decode of random bytes differs at " << d << ": simd " << hexf(sg[d])
                    << " scalar " << hexf(rg[d]);
  }
};

const std::vector<size_t> kBuckets = {1, 7, 100, 127, 128, 129, 1000};
const std::vector<size_t> kCounts = {0, 1, 10007};

void sweep(KernelIdentity* t, Codec codec, int bits_lo, int bits_hi, bool with_stochastic) {
  uint64_t seed = 1;
  for (int bits = bits_lo; bits <= bits_hi; ++bits) {
    for (size_t bucket : kBuckets) {
      for (size_t count : kCounts) {
        for (bool sto : {false, true}) {
          if (sto && !with_stochastic) continue;
          for (uint64_t base : {uint64_t{0}, (uint64_t{1} << 32) - 5000}) {
            // the index only matters for stochastic rounding
            if (!sto && base != 0) continue;
            for (Data data :
                 {Data::kPlain, Data::kSpecial, Data::kTies, Data::kConstant, Data::kHuge}) {
              // ties, constants and huge values only on the big count
              if (count < 100 && data != Data::kPlain && data != Data::kSpecial) continue;
              t->check_quant(codec, bits, bucket, count, sto, base, data, seed++);
              if (::testing::Test::HasFatalFailure()) return;
            }
          }
        }
      }
    }
  }
  // odd counts around the SIMD widths
  for (size_t count : {2u, 3u, 7u, 8u, 9u, 15u, 16u, 17u, 31u, 33u, 63u, 65u, 257u}) {
    for (size_t bucket : {size_t{1}, size_t{7}, size_t{16}, size_t{128}}) {
      t->check_quant(codec, bits_hi, bucket, count, with_stochastic, 12345, Data::kSpecial,
                     seed++);
      t->check_quant(codec, bits_lo, bucket, count, false, 0, Data::kPlain, seed++);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST_P(KernelIdentity, Minmax) { sweep(this, Codec::kMinmax, 1, 8, true); }
TEST_P(KernelIdentity, Qsgd) { sweep(this, Codec::kQsgd, 2, 8, true); }
TEST_P(KernelIdentity, Onebit) { sweep(this, Codec::kOnebit, 1, 1, false); }

// Scale reuse (codec_kernels.h), on the scalar reference and the table in
// use: kept metadata is written again and values beyond it saturate (the
// excess stays in e); NaN and zero-scale kept buckets are recomputed, and a
// bucket with a NaN now is still NaN.
TEST(ScaleReuse, SaturatesAndRecomputesWhatCannotBeReused) {
  for (const KernelTable* t : {qc::cpu::scalar_kernels(), &qc::cpu::kernels()}) {
    SCOPED_TRACE(t->name);
    const size_t bucket = 4, count = 16;
    // bucket 0: range [0, 3]; 1: all zero (scale 0); 2: a NaN; 3: range [-1, 1]
    const std::vector<float> x = {0, 1, 2, 3, 0, 0, 0, 0, 1, NAN, 1, 1, -1, 0, 1, 0.5f};
    // bucket 0 partly outside [0, 3]; 3 holds a NaN now
    const std::vector<float> y = {-2, 1, 2, 9, 1, 2, 3, 4, 0, 1, 2, 3, 1, NAN, 0, 0};
    QuantArgs a;
    a.bits = 2;  // minmax: L = 3, so x's bucket 0 has lo 0, scale 1
    a.bucket = bucket;
    std::vector<uint8_t> xm(8 * 4), xc(4), ym(8 * 4), yc(4), fm(8 * 4), fc(4);
    t->minmax_encode(x.data(), nullptr, count, a, xm.data(), xc.data());
    t->minmax_encode(y.data(), nullptr, count, a, fm.data(), fc.data());  // fresh
    QuantArgs ar = a;
    ar.reuse_meta = xm.data();
    std::vector<float> e(count, 0.0f);
    t->minmax_encode(y.data(), e.data(), count, ar, ym.data(), yc.data());
    std::vector<float> dec(count);
    t->minmax_decode(ym.data(), yc.data(), count, a.bits, bucket, dec.data(), false);
    EXPECT_EQ(0, std::memcmp(ym.data(), xm.data(), 8)) << "bucket 0 keeps x's lo and scale";
    EXPECT_EQ(std::vector<float>(dec.begin(), dec.begin() + 4), (std::vector<float>{0, 1, 2, 3}));
    EXPECT_EQ(e[0], -2.0f) << "the clipped part stays in the residual";
    EXPECT_EQ(e[3], 6.0f);
    EXPECT_EQ(0, std::memcmp(ym.data() + 8, fm.data() + 8, 16)) << "buckets 1, 2 recomputed";
    EXPECT_TRUE(std::isnan(dec[12]) && std::isnan(dec[15])) << "a NaN now still makes NaN";

    // qsgd: the kept norm caps the magnitude; onebit: the kept scale is used.
    std::vector<float> xs(8, 1.0f), ys(8, 4.0f);
    ys[1] = -4.0f;
    QuantArgs q;
    q.bits = 4;
    q.bucket = 8;
    std::vector<uint8_t> qm(4), qcode(4), rm(4), rcode(4);
    t->qsgd_encode(xs.data(), nullptr, 8, q, qm.data(), qcode.data());
    q.reuse_meta = qm.data();
    t->qsgd_encode(ys.data(), nullptr, 8, q, rm.data(), rcode.data());
    std::vector<float> qd(8);
    t->qsgd_decode(rm.data(), rcode.data(), 8, 4, 8, qd.data(), false);
    const float norm = std::sqrt(8.0f);
    EXPECT_EQ(0, std::memcmp(rm.data(), qm.data(), 4));
    EXPECT_FLOAT_EQ(qd[0], norm);
    EXPECT_FLOAT_EQ(qd[1], -norm);
    QuantArgs o;
    o.bits = 1;
    o.bucket = 8;
    std::vector<uint8_t> om(4), oc(1), pm(4), pc(1);
    t->onebit_encode(xs.data(), nullptr, 8, o, om.data(), oc.data());
    o.reuse_meta = om.data();
    t->onebit_encode(ys.data(), nullptr, 8, o, pm.data(), pc.data());
    std::vector<float> od(8);
    t->onebit_decode(pm.data(), pc.data(), 8, 1, 8, od.data(), false);
    EXPECT_EQ(od[0], 1.0f);
    EXPECT_EQ(od[1], -1.0f);
  }
}

// Residual hygiene (codec_kernels.h), on every table: an error-compensated
// encode writes the same bytes as a plain encode of z = x + e, and leaves
// e = z - decode(z) in every bucket except those whose residuals cannot be
// carried forward, which are zero: a NaN bucket, a bucket beyond the codec's
// float range, and a bucket whose gauge is just over the limit (just under
// it is kept).
TEST(ResidualHygiene, DropsExactlyTheBucketsItCannotCarry) {
  const size_t n = 16;  // bucket
  struct Case {
    Codec codec;
    int bits;
    bool stochastic;
  };
  for (const KernelTable* t : {qc::cpu::scalar_kernels(), qc::cpu::avx2_kernels(),
                               qc::cpu::avx512_kernels()}) {
    if (t == nullptr || qc::cpu::kernels_for(t->isa) == nullptr) continue;
    for (const Case c : {Case{Codec::kMinmax, 1, false}, Case{Codec::kMinmax, 1, true},
                         Case{Codec::kMinmax, 4, false}, Case{Codec::kQsgd, 4, false},
                         Case{Codec::kQsgd, 2, true}, Case{Codec::kOnebit, 1, false}}) {
      SCOPED_TRACE(std::string(t->name) + " " + codec_name(c.codec) + " bits " +
                   std::to_string(c.bits) + (c.stochastic ? " stochastic" : ""));
      const float M = static_cast<float>((1u << (c.bits - 1)) - 1u);
      const float limit = c.codec == Codec::kMinmax  ? qc::cpu::minmax_residual_limit()
                          : c.codec == Codec::kQsgd ? qc::cpu::qsgd_residual_limit(n)
                                                    : qc::cpu::onebit_residual_limit(n);
      // A bucket whose gauge is `f` times the limit (all values equal for
      // qsgd and onebit: norm = 4 |v|, scale = |v|; minmax bits 1: 0 and hi).
      auto at_gauge = [&](float f, float* b) {
        for (size_t i = 0; i < n; ++i) {
          if (c.codec == Codec::kMinmax) b[i] = i % 2 == 0 ? 0.0f : limit * f;
          else if (c.codec == Codec::kQsgd) b[i] = (i % 3 == 0 ? -1.0f : 1.0f) * limit * f * M / 4;
          else b[i] = (i % 3 == 0 ? -1.0f : 1.0f) * limit * f;
        }
      };
      std::vector<float> x = make_data(7 * n, Data::kPlain, 5);
      std::vector<bool> kept(7, true);
      x[n + 3] = std::numeric_limits<float>::quiet_NaN();  // bucket 1
      kept[1] = false;
      if (c.codec == Codec::kMinmax) {                     // bucket 2: beyond float
        x[2 * n] = 3e38f, x[2 * n + 1] = -3e38f;
      } else {
        x[2 * n] = c.codec == Codec::kQsgd ? 1e20f : 3e38f;
        if (c.codec == Codec::kOnebit) x[2 * n + 1] = 3e38f;
      }
      kept[2] = false;
      const bool minmax_reaches = c.codec != Codec::kMinmax || c.bits == 1;
      if (minmax_reaches) {
        at_gauge(0.99f, &x[3 * n]);  // kept
        at_gauge(1.01f, &x[4 * n]);  // dropped
        kept[4] = false;
      }
      std::vector<float> e0 = make_data(7 * n, Data::kPlain, 6);
      for (auto& v : e0) v *= 0.01f;
      std::vector<float> z(7 * n);
      for (size_t i = 0; i < z.size(); ++i) z[i] = x[i] + e0[i];

      QuantArgs a;
      a.bits = c.bits;
      a.bucket = n;
      a.stochastic = c.stochastic;
      a.rng = qc::cpu::make_random_stream(1, 2, 3);
      const Fns f = fns(*t, c.codec);
      const size_t meta_bytes = 7 * meta_floats(c.codec) * 4;
      const size_t code_bytes = qc::cpu::codes_bytes(7 * n, c.bits);
      Out pm(meta_bytes), pc(code_bytes), em(meta_bytes), ec(code_bytes);
      f.enc(z.data(), nullptr, 7 * n, a, pm.data(), pc.data());
      std::vector<float> e = e0;
      f.enc(x.data(), e.data(), 7 * n, a, em.data(), ec.data());
      ASSERT_TRUE(em.same_as(pm)) << "meta differs at byte " << first_byte_diff(em, pm);
      ASSERT_TRUE(ec.same_as(pc)) << "codes differ at byte " << first_byte_diff(ec, pc);
      std::vector<float> dec(7 * n);
      f.dec(pm.data(), pc.data(), 7 * n, c.bits, n, dec.data(), false);
      for (size_t b = 0; b < 7; ++b) {
        for (size_t i = b * n; i < (b + 1) * n; ++i) {
          const float want = kept[b] ? z[i] - dec[i] : 0.0f;
          ASSERT_EQ(f32_bits(e[i]), f32_bits(want))
              << "bucket " << b << (kept[b] ? " (kept)" : " (dropped)") << ", element " << i
              << ": " << e[i] << " vs " << want;
          if (kept[b]) {
            ASSERT_TRUE(std::isfinite(e[i]));
          }
        }
      }
    }
  }
}

// With reused scales (host only) the residual is not bounded by the
// metadata: a value far outside a reused minmax range near -FLT_MAX leaves
// z - level = +inf. That bucket's residuals are dropped, on every table;
// the next bucket (an ordinary saturation) keeps its excess.
TEST(ResidualHygiene, ReusedScalesDropANonFiniteResidual) {
  const size_t n = 16;
  std::vector<float> x(2 * n), y(2 * n);
  for (size_t i = 0; i < n; ++i) {
    x[i] = -3e38f + static_cast<float>(i) * 1e36f;  // lo -3e38, scale 1e36
    y[i] = 3e38f;                                   // far above: e = 3e38 - (-2.85e38)
    x[n + i] = static_cast<float>(i);               // lo 0, scale 1
    y[n + i] = 20.0f;                               // saturates at 15: e = 5
  }
  for (const KernelTable* t : {qc::cpu::scalar_kernels(), qc::cpu::avx2_kernels(),
                               qc::cpu::avx512_kernels()}) {
    if (t == nullptr || qc::cpu::kernels_for(t->isa) == nullptr) continue;
    SCOPED_TRACE(t->name);
    QuantArgs a;
    a.bits = 4;
    a.bucket = n;
    std::vector<uint8_t> xm(16), xc(16), ym(16), yc(16);
    t->minmax_encode(x.data(), nullptr, 2 * n, a, xm.data(), xc.data());
    a.reuse_meta = xm.data();
    std::vector<float> e(2 * n, 0.0f);
    t->minmax_encode(y.data(), e.data(), 2 * n, a, ym.data(), yc.data());
    ASSERT_EQ(0, std::memcmp(ym.data(), xm.data(), 16)) << "both buckets reuse x's metadata";
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(e[i], 0.0f) << "element " << i << ": the +inf residual's bucket is dropped";
      ASSERT_EQ(e[n + i], 5.0f) << "element " << n + i << ": the saturated excess stays";
    }
  }
}

// A bucket whose range is subnormal (error-feedback residuals decaying on a
// zero gradient): 1 / scale would overflow, so the bucket codes all zero and
// decodes to lo; nothing becomes NaN, on every table, with and without e.
TEST(MinmaxSubnormalRange, DecodesFiniteAndClose) {
  for (const KernelTable* t : {qc::cpu::scalar_kernels(), qc::cpu::avx2_kernels(),
                               qc::cpu::avx512_kernels()}) {
    if (t == nullptr || qc::cpu::kernels_for(t->isa) == nullptr) continue;
    SCOPED_TRACE(t->name);
    for (size_t bucket : {size_t{4}, size_t{128}}) {
      std::vector<float> x(bucket);
      for (size_t i = 0; i < bucket; ++i) x[i] = bits_f32(static_cast<uint32_t>(i * 37 % 1000));
      x[1] = -x[2];
      for (int bits : {1, 4, 8}) {
        QuantArgs a;
        a.bits = bits;
        a.bucket = bucket;
        std::vector<uint8_t> meta(8), codes(bucket);
        std::vector<float> e(bucket, 0.0f), dec(bucket);
        for (bool with_e : {false, true}) {
          t->minmax_encode(x.data(), with_e ? e.data() : nullptr, bucket, a, meta.data(),
                           codes.data());
          t->minmax_decode(meta.data(), codes.data(), bucket, bits, bucket, dec.data(), false);
          for (size_t i = 0; i < bucket; ++i) {
            ASSERT_TRUE(std::isfinite(dec[i])) << "bits " << bits << " element " << i;
            EXPECT_LE(std::fabs(dec[i] - x[i]), 1e-36f);
            if (with_e) {
              ASSERT_TRUE(std::isfinite(e[i]));
            }
          }
        }
      }
    }
  }
}

// Buckets whose range reaches FLT_MAX: the top level lo + L * scale (or the
// product j * scale alone, when lo is near -FLT_MAX) rounds past FLT_MAX.
// Found by fuzz_decode: a finite input decoded to +Inf, and after a first
// fix that only saturated, an element near 0 decoded to FLT_MAX. Every
// table, every width, with and without e: the decode is finite, within half
// a step of the input and inside [lo, hi]; the residual is finite; a NaN
// bucket next to them still decodes to NaN.
TEST(MinmaxNearFltMax, RangesReachingFltMaxDecodeWithinTheBound) {
  const float kMax = std::numeric_limits<float>::max();
  const float below = std::nextafter(kMax, 0.0f);
  const std::vector<std::pair<float, float>> ranges = {
      {0.0f, kMax}, {-1.0f, below}, {1e38f, kMax}, {-kMax, 3.35538182e-37f}, {-kMax, 0.0f},
      {-kMax, -1e38f}, {-0.5f * kMax, 0.5f * kMax}};
  for (const KernelTable* t : {qc::cpu::scalar_kernels(), qc::cpu::avx2_kernels(),
                               qc::cpu::avx512_kernels()}) {
    if (t == nullptr || qc::cpu::kernels_for(t->isa) == nullptr) continue;
    SCOPED_TRACE(t->name);
    const size_t bucket = 19, nb = ranges.size(), count = (nb + 1) * bucket;
    std::vector<float> x(count);
    for (size_t i = 0; i < count; ++i) {
      const size_t b = i / bucket, k = i % bucket;
      if (b == nb) {
        x[i] = k == 5 ? std::numeric_limits<float>::quiet_NaN() : 1.0f;
        continue;
      }
      const auto [lo, hi] = ranges[b];
      // lo, hi, then points spread between them (including one tiny value)
      x[i] = k == 0   ? lo
             : k == 1 ? hi
             : k == 2 ? 3.47045578e-41f * (lo <= 0 && hi >= 0 ? 1.0f : 0.0f) + (lo > 0 ? lo : hi < 0 ? hi : 0.0f)
                      : (lo / 2 + (hi / 2 - lo / 2) * (static_cast<float>(k) / bucket)) * 2;
    }
    for (int bits = 1; bits <= 8; ++bits) {
      SCOPED_TRACE("bits " + std::to_string(bits));
      QuantArgs a;
      a.bits = bits;
      a.bucket = bucket;
      const double L = static_cast<double>((1u << bits) - 1u);
      std::vector<uint8_t> meta(8 * (nb + 1)), codes(count);
      std::vector<float> e(count, 0.0f), dec(count);
      for (bool with_e : {false, true}) {
        std::fill(e.begin(), e.end(), 0.0f);
        t->minmax_encode(x.data(), with_e ? e.data() : nullptr, count, a, meta.data(), codes.data());
        t->minmax_decode(meta.data(), codes.data(), count, bits, bucket, dec.data(), false);
        for (size_t i = 0; i < nb * bucket; ++i) {
          const size_t b0 = i / bucket * bucket;
          const float lo = x[b0], hi = x[b0 + 1];
          ASSERT_TRUE(std::isfinite(dec[i])) << "element " << i << " (" << x[i] << ") decoded as " << dec[i];
          // float32 rounding of the levels, as the codec tests' bound allows
          const double slack = 4.0 * std::ldexp(std::max(std::fabs(lo), std::fabs(hi)), -23);
          EXPECT_GE(dec[i], lo - slack) << "element " << i;
          EXPECT_LE(dec[i], hi + slack) << "element " << i;
          // half a step, in double: (hi - lo) itself is finite here
          const double half_step = (static_cast<double>(hi) - lo) / L / 2;
          EXPECT_LE(std::fabs(static_cast<double>(dec[i]) - x[i]), half_step * (1 + 1e-6) + slack)
              << "element " << i << " (" << x[i] << ") decoded as " << dec[i];
          if (with_e) {
            ASSERT_TRUE(std::isfinite(e[i])) << "residual of element " << i;
          }
        }
        for (size_t i = nb * bucket; i < count; ++i) EXPECT_TRUE(std::isnan(dec[i])) << "element " << i;
      }
    }
  }
}

// fp16 / bf16 casts: every special class, then every 16-bit pattern back.
TEST_P(KernelIdentity, Casts) {
  struct CastFns {
    const char* name;
    qc::cpu::CastEncodeFn renc, senc;
    qc::cpu::CastDecodeFn rdec, sdec;
  };
  const CastFns all[] = {
      {"fp16", ref_->fp16_encode, simd_->fp16_encode, ref_->fp16_decode, simd_->fp16_decode},
      {"bf16", ref_->bf16_encode, simd_->bf16_encode, ref_->bf16_decode, simd_->bf16_decode}};
  for (const CastFns& f : all) {
    SCOPED_TRACE(f.name);
    ASSERT_NE(f.senc, nullptr);
    ASSERT_NE(f.sdec, nullptr);
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{33}, size_t{10007}}) {
      SCOPED_TRACE("count " + std::to_string(count));
      std::vector<float> x = make_data(count, Data::kSpecial, count + 17);
      // values around the half/bfloat16 rounding and overflow boundaries
      Rng rng(count + 5);
      for (size_t i = 0; i < count; i += 3) {
        const uint32_t pick = static_cast<uint32_t>(rng.next() % 6);
        const uint32_t base[] = {0x477fe000u, 0x477ff000u, 0x38800000u, 0x33800000u,
                                 0x7f7f8000u, 0x3f808000u};
        x[i] = bits_f32(base[pick] + static_cast<uint32_t>(rng.next() % 3) - 1u);
        if (rng.next() & 1) x[i] = -x[i];
      }
      Out ro(2 * count), so(2 * count);
      f.renc(x.data(), count, ro.data());
      f.senc(x.data(), count, so.data());
      ASSERT_TRUE(so.guard_intact()) << "SIMD cast encode wrote past its buffer";
      ASSERT_TRUE(so.same_as(ro)) << "encode differs at byte " << first_byte_diff(so, ro);
    }
    // decode every 16-bit pattern, plain and accumulate
    const size_t n = 65536;
    Out in(2 * n);
    for (size_t i = 0; i < n; ++i) {
      in.b[2 * i] = static_cast<uint8_t>(i);
      in.b[2 * i + 1] = static_cast<uint8_t>(i >> 8);
    }
    std::vector<float> ry(n, 2.0f), sy(n, 2.0f);
    f.rdec(in.data(), n, ry.data(), false);
    f.sdec(in.data(), n, sy.data(), false);
    long d = first_float_diff(sy, ry);
    ASSERT_LT(d, 0) << "decode of pattern 0x" << std::hex << d << ": simd " << hexf(sy[d])
                    << " scalar " << hexf(ry[d]);
    std::vector<float> acc = make_data(n, Data::kSpecial, 99);
    std::vector<float> racc = acc, sacc = acc;
    f.rdec(in.data(), n, racc.data(), true);
    f.sdec(in.data(), n, sacc.data(), true);
    d = first_float_diff(sacc, racc);
    ASSERT_LT(d, 0) << "decode-accumulate of pattern 0x" << std::hex << d << ": simd "
                    << hexf(sacc[d]) << " scalar " << hexf(racc[d]);
    // odd lengths and an unaligned input
    for (size_t count : {size_t{1}, size_t{5}, size_t{17}, size_t{31}}) {
      std::vector<float> r1(count, 0.0f), s1(count, 0.0f);
      f.rdec(in.data() + 1, count, r1.data(), false);
      f.sdec(in.data() + 1, count, s1.data(), false);
      ASSERT_LT(first_float_diff(s1, r1), 0) << "unaligned decode of " << count;
    }
  }
}

// The table is complete and names itself.
TEST_P(KernelIdentity, TableComplete) {
  EXPECT_EQ(simd_->isa, GetParam());
  EXPECT_STREQ(simd_->name, qc::cpu::isa_name(GetParam()));
  const void* entries[] = {
      reinterpret_cast<const void*>(simd_->minmax_encode),
      reinterpret_cast<const void*>(simd_->minmax_decode),
      reinterpret_cast<const void*>(simd_->qsgd_encode),
      reinterpret_cast<const void*>(simd_->qsgd_decode),
      reinterpret_cast<const void*>(simd_->onebit_encode),
      reinterpret_cast<const void*>(simd_->onebit_decode),
      reinterpret_cast<const void*>(simd_->fp16_encode),
      reinterpret_cast<const void*>(simd_->fp16_decode),
      reinterpret_cast<const void*>(simd_->bf16_encode),
      reinterpret_cast<const void*>(simd_->bf16_decode),
      reinterpret_cast<const void*>(simd_->squared_norm),
      reinterpret_cast<const void*>(simd_->copy_streaming)};
  for (const void* e : entries) EXPECT_NE(e, nullptr);
}

// The copy past the caches gives exactly the source's bytes (NaN payloads
// too) at every alignment of the destination around a 64-byte line, and
// writes nothing outside it; so does the scalar table's plain copy.
TEST_P(KernelIdentity, CopyStreaming) {
  constexpr float kGuard = -7.25f;
  for (const KernelTable* t : {ref_, simd_}) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{33},
                         size_t{1000}, size_t{10007}}) {
      const std::vector<float> src = make_data(count, Data::kSpecial, count + 5);
      for (size_t shift = 0; shift < 17; ++shift) {
        SCOPED_TRACE(std::string(t->name) + " count " + std::to_string(count) + " shift " +
                     std::to_string(shift));
        // 64-byte aligned storage with room for the shift and a guard on each side.
        std::vector<float> storage(count + 64, kGuard);
        float* base = storage.data();
        while (reinterpret_cast<uintptr_t>(base) % 64 != 0) ++base;
        float* dst = base + 16 + shift;
        t->copy_streaming(dst, src.data(), count);
        ASSERT_EQ(count == 0 ? 0 : std::memcmp(dst, src.data(), count * sizeof(float)), 0);
        for (float* p = storage.data(); p < dst; ++p) ASSERT_EQ(*p, kGuard);
        for (float* p = dst + count; p < storage.data() + storage.size(); ++p) {
          ASSERT_EQ(*p, kGuard);
        }
      }
    }
  }
}

// The squared norm (layer statistics): the scalar kernel is the rule's 16
// double lanes and fold, spelled out again here; every SIMD table gives its
// bits, for lengths around the 16-lane step, unaligned input, and values
// whose squares overflow float (but not double), NaN and infinity.
TEST_P(KernelIdentity, SquaredNorm) {
  auto rule = [](const float* x, size_t n) {
    double d[16] = {};
    for (size_t i = 0; i < n; ++i) d[i % 16] += static_cast<double>(x[i]) * x[i];
    for (size_t w = 8; w >= 1; w /= 2)
      for (size_t j = 0; j < w; ++j) d[j] += d[j + w];
    return d[0];
  };
  // NaN is NaN: which NaN's payload survives an add depends on operand order
  // the compiler may swap.
  auto same = [](double a, double b) {
    return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, sizeof a) == 0;
  };
  for (Data data : {Data::kPlain, Data::kSpecial}) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{33},
                         size_t{1000}, size_t{10007}}) {
      SCOPED_TRACE("count " + std::to_string(count) + " data " +
                   std::to_string(static_cast<int>(data)));
      std::vector<float> x = make_data(count + 1, data, count + 3);
      if (count > 2) x[count / 2] = 3e30f;  // its square is far past FLT_MAX
      for (const float* at : {x.data(), x.data() + 1}) {
        const double want = rule(at, count);
        const double ref = ref_->squared_norm(at, count);
        const double got = simd_->squared_norm(at, count);
        EXPECT_TRUE(same(ref, want)) << "scalar " << ref << " rule " << want;
        EXPECT_TRUE(same(got, want)) << simd_->name << " " << got << " rule " << want;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, KernelIdentity, ::testing::Values(Isa::kAvx2, Isa::kAvx512),
                         [](const ::testing::TestParamInfo<Isa>& info) {
                           return std::string(qc::cpu::isa_name(info.param));
                         });

// 16-bit input read by the kernels (QuantArgs::input_dtype): for every table,
// the bytes equal those of widening to float32 and encoding with the scalar
// kernel. Halves cover NaN (quiet and signalling), +-Inf, -0, subnormals and
// the whole exponent range; the input sits at an odd address.
std::vector<uint16_t> make_halves(size_t n, qc_dtype_t dtype, bool special, uint64_t seed) {
  Rng rng(seed);
  const std::vector<float> base = make_data(n, Data::kPlain, seed);
  const bool f16 = dtype == QC_DTYPE_FLOAT16;
  std::vector<uint16_t> h(n);
  for (size_t i = 0; i < n; ++i) {
    h[i] = f16 ? qc::cpu::float_to_half(base[i]) : qc::cpu::float_to_bfloat16(base[i]);
    if (!special) continue;
    const uint64_t r = rng.next() % 61;
    const uint16_t sign = (rng.next() & 1) ? 0x8000u : 0u;
    const uint16_t exp_all = f16 ? 0x7c00u : 0x7f80u;
    const uint16_t man = f16 ? 0x03ffu : 0x007fu;
    const uint16_t quiet = f16 ? 0x0200u : 0x0040u;
    const uint16_t payload = static_cast<uint16_t>(rng.next() & man);
    if (r == 0) h[i] = static_cast<uint16_t>(sign | exp_all | quiet | payload);  // quiet NaN
    else if (r == 1) h[i] = static_cast<uint16_t>(sign | exp_all | ((payload & ~quiet) | 1u));  // sNaN
    else if (r == 2) h[i] = static_cast<uint16_t>(sign | exp_all);                 // +-Inf
    else if (r == 3) h[i] = static_cast<uint16_t>(sign | (payload | 1u));          // subnormal
    else if (r == 4) h[i] = 0x8000u;                                                // -0
    else if (r < 12) h[i] = static_cast<uint16_t>(rng.next() & ~exp_all & 0xffffu);  // small/finite
    else if (r < 16) h[i] = static_cast<uint16_t>(sign | (exp_all - (f16 ? 0x0400u : 0x0080u)) |
                                                  payload);  // largest binade
  }
  return h;
}

TEST(KernelTypedInput, SixteenBitMatchesWidenedScalar) {
  const KernelTable* tables[] = {qc::cpu::scalar_kernels(), qc::cpu::kernels_for(Isa::kAvx2),
                                 qc::cpu::kernels_for(Isa::kAvx512)};
  const KernelTable& ref = *qc::cpu::scalar_kernels();
  uint64_t seed = 1000;
  for (const KernelTable* t : tables) {
    if (t == nullptr) continue;
    for (qc_dtype_t dtype : {QC_DTYPE_FLOAT16, QC_DTYPE_BFLOAT16}) {
      for (Codec codec : {Codec::kMinmax, Codec::kQsgd, Codec::kOnebit}) {
        const int lo = codec == Codec::kMinmax ? 1 : codec == Codec::kQsgd ? 2 : 1;
        const int hi = codec == Codec::kOnebit ? 1 : 8;
        for (int bits = lo; bits <= hi; ++bits) {
          for (size_t count : {size_t{0}, size_t{1}, size_t{17}, size_t{10007}}) {
            for (size_t bucket : {size_t{7}, size_t{128}, size_t{129}}) {
              for (bool sto : {false, true}) {
                if (sto && codec == Codec::kOnebit) continue;
                for (bool special : {false, true}) {
                  ++seed;
                  std::ostringstream where;
                  where << t->name << " " << (dtype == QC_DTYPE_FLOAT16 ? "fp16" : "bf16") << " "
                        << codec_name(codec) << " bits " << bits << " count " << count
                        << " bucket " << bucket << (sto ? " stochastic" : "")
                        << (special ? " special" : "");
                  SCOPED_TRACE(where.str());
                  const std::vector<uint16_t> h = make_halves(count, dtype, special, seed);
                  std::vector<uint8_t> raw(2 * count + 1);  // at an odd address
                  if (count > 0) std::memcpy(raw.data() + 1, h.data(), 2 * count);
                  std::vector<float> wide(count);
                  qc::cpu::to_float32(h.data(), dtype, wide.data(), count);
                  QuantArgs a;
                  a.bits = codec == Codec::kOnebit ? 1 : bits;
                  a.bucket = bucket;
                  a.stochastic = sto;
                  a.rng = qc::cpu::make_random_stream(seed, 3, 1);
                  a.index_base = seed * 977;
                  const size_t meta_bytes =
                      qc::cpu::bucket_count(count, bucket) * meta_floats(codec) * 4;
                  const size_t code_bytes = qc::cpu::codes_bytes(count, a.bits);
                  Out rm(meta_bytes), rc(code_bytes), sm(meta_bytes), sc(code_bytes);
                  fns(ref, codec).enc(wide.data(), nullptr, count, a, rm.data(), rc.data());
                  QuantArgs at = a;
                  at.input_dtype = dtype;
                  fns(*t, codec).enc(reinterpret_cast<const float*>(raw.data() + 1), nullptr,
                                     count, at, sm.data(), sc.data());
                  ASSERT_TRUE(sm.guard_intact() && sc.guard_intact())
                      << "typed encode wrote past its buffers";
                  ASSERT_TRUE(sm.same_as(rm)) << "meta differs at byte " << first_byte_diff(sm, rm);
                  ASSERT_TRUE(sc.same_as(rc)) << "codes differ at byte " << first_byte_diff(sc, rc);
                }
              }
            }
          }
        }
      }
    }
  }
}

// The random bits of random.h: pinned values, so a change of the generator
// (which would change every stochastic message) cannot go unnoticed.
TEST(RandomBits, PinnedValues) {
  const qc::cpu::RandomStream s = qc::cpu::make_random_stream(42, 0, 0);
  const qc::cpu::RandomStream t = qc::cpu::make_random_stream(42, 1, 0);
  EXPECT_TRUE(s.k0 != t.k0 || s.k1 != t.k1);
  EXPECT_EQ(s.k0, 0x6466471fu);
  EXPECT_EQ(s.k1, 0x483374f0u);
  const qc::cpu::RandomStream w = qc::cpu::make_random_stream(1, 2, 3);
  EXPECT_EQ(w.k0, 0x291fef64u);
  EXPECT_EQ(w.k1, 0xd62a7f6eu);
  EXPECT_EQ(qc::cpu::random_bits(s, 0), 0x96ec4a25u);
  EXPECT_EQ(qc::cpu::random_bits(s, 1), 0x8c7c851eu);
  EXPECT_EQ(qc::cpu::random_bits(s, 0xffffffffu), 0xa130ffffu);
  EXPECT_EQ(qc::cpu::random_bits(s, uint64_t{1} << 32), 0x3654c9a1u);
  // uniform is a multiple of 2^-24 in [0, 1)
  for (uint64_t i : {uint64_t{0}, uint64_t{1}, uint64_t{0xffffffffu}, uint64_t{1} << 32,
                     ~uint64_t{0}}) {
    const float u = qc::cpu::random_uniform(s, i);
    EXPECT_GE(u, 0.0f);
    EXPECT_LT(u, 1.0f);
    EXPECT_EQ(u * 16777216.0f, std::floor(u * 16777216.0f));
    EXPECT_EQ(static_cast<uint32_t>(u * 16777216.0f), qc::cpu::random_bits(s, i) >> 8);
  }
  // the formula of random.h, spelled out
  auto lowbias = [](uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
  };
  for (uint64_t i : {uint64_t{7}, (uint64_t{3} << 32) + 9}) {
    const uint32_t want =
        lowbias(lowbias(static_cast<uint32_t>(i) ^ s.k0) ^ (static_cast<uint32_t>(i >> 32) ^ s.k1));
    EXPECT_EQ(qc::cpu::random_bits(s, i), want);
  }
}

}  // namespace
