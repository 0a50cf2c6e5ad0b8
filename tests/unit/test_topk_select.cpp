// topk's selection (src/core/codecs/topk_select.h) against the definition it
// replaced: sort every index by (NaN first, larger |z|, lower index) and take
// the first k, ascending. Inputs include those the sample misjudges, which
// must take the slow path and still agree.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "core/codecs/topk_select.h"

namespace {

std::vector<uint32_t> indices_of(const std::vector<qc::TopkEntry>& sent,
                                 const std::vector<float>& z) {
  std::vector<uint32_t> idx;
  for (const qc::TopkEntry& s : sent) {
    idx.push_back(s.index);
    EXPECT_EQ(std::memcmp(&s.value, &z[s.index], sizeof(float)), 0) << "value of " << s.index;
  }
  return idx;
}

std::vector<uint32_t> oracle(const std::vector<float>& z, size_t k) {
  std::vector<uint32_t> idx(z.size());
  std::iota(idx.begin(), idx.end(), 0u);
  std::sort(idx.begin(), idx.end(), [&z](uint32_t a, uint32_t b) {
    const float x = std::fabs(z[a]), y = std::fabs(z[b]);
    const bool nx = std::isnan(x), ny = std::isnan(y);
    if (nx != ny) return nx;
    if (!nx && x != y) return x > y;
    return a < b;
  });
  idx.resize(k);
  std::sort(idx.begin(), idx.end());
  return idx;
}

float nan_with_payload(uint32_t payload, bool negative) {
  uint32_t bits = 0x7fc00000u | (payload & 0x3fffffu) | (negative ? 0x80000000u : 0u);
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

bool has_non_finite(const std::vector<float>& z) {
  return std::any_of(z.begin(), z.end(), [](float v) { return !std::isfinite(v); });
}

// Without and with error feedback (t + e formed in e), for each k.
void expect_selects_like_sorting(const std::vector<float>& z, const std::vector<size_t>& ks) {
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> small(-0.25f, 0.25f);
  for (size_t k : ks) {
    SCOPED_TRACE("count " + std::to_string(z.size()) + ", k " + std::to_string(k));
    const std::vector<uint32_t> want = oracle(z, k);
    std::vector<qc::TopkEntry> got;
    bool non_finite = false;
    qc::topk_select(z.data(), nullptr, z.size(), k, &got, &non_finite);
    EXPECT_EQ(indices_of(got, z), want);
    EXPECT_EQ(non_finite, has_non_finite(z));

    // Error feedback: t + e must be the same z, so e holds exact offsets.
    std::vector<float> e(z.size()), t(z.size());
    for (size_t i = 0; i < z.size(); ++i) {
      e[i] = std::isfinite(z[i]) ? small(gen) : 0.0f;
      t[i] = std::isfinite(z[i]) ? z[i] - e[i] : z[i];
    }
    std::vector<float> zf(z.size());
    for (size_t i = 0; i < z.size(); ++i) zf[i] = t[i] + e[i];
    std::vector<float> e_in = e;
    qc::topk_select(t.data(), e.data(), z.size(), k, &got, &non_finite);
    EXPECT_EQ(indices_of(got, zf), oracle(zf, k));
    for (size_t i = 0; i < z.size(); ++i) {
      ASSERT_EQ(std::memcmp(&e[i], &zf[i], sizeof(float)), 0) << "e[" << i << "] is not t + e";
    }
  }
}

std::vector<float> normal(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

TEST(TopkSelect, NormalDataEveryRatio) {
  for (size_t n : {size_t{1}, size_t{2}, size_t{17}, size_t{1000}, size_t{40000}, size_t{300001}}) {
    const std::vector<float> z = normal(n, static_cast<uint32_t>(n));
    std::vector<size_t> ks = {1, n};
    for (double r : {0.001, 0.01, 0.1, 0.5, 0.99}) ks.push_back(std::max<size_t>(1, static_cast<size_t>(r * n)));
    expect_selects_like_sorting(z, ks);
  }
}

TEST(TopkSelect, TiesGoByLowestIndex) {
  for (size_t n : {size_t{100}, size_t{70000}}) {
    std::vector<float> z(n);
    std::mt19937 gen(3);
    for (float& x : z) x = static_cast<float>(static_cast<int>(gen() % 5) - 2);  // -2..2, ±0
    for (size_t i = 0; i < n; i += 7) z[i] = -0.0f;
    expect_selects_like_sorting(z, {1, n / 100, n / 5, n / 2, n - 1});
    std::fill(z.begin(), z.end(), 1.5f);  // all equal
    expect_selects_like_sorting(z, {1, n / 3, n - 1});
  }
}

TEST(TopkSelect, NanFirstThenInfinities) {
  for (size_t n : {size_t{50}, size_t{100000}}) {
    std::vector<float> z = normal(n, 11);
    for (size_t i = 5; i < n; i += n / 10) z[i] = nan_with_payload(static_cast<uint32_t>(i), i % 2);
    z[3] = std::numeric_limits<float>::infinity();
    z[n - 1] = -std::numeric_limits<float>::infinity();
    z[n / 2 + 1] = std::numeric_limits<float>::denorm_min();
    expect_selects_like_sorting(z, {1, 5, 12, n / 100 + 1, n / 2});
  }
}

// The sampled positions (every count/S-th) carry the large values: the
// estimate is too high, fewer than k reach it, and the full pass must run.
// And the opposite: the large values hide between the samples.
TEST(TopkSelect, DataTheSampleMisjudges) {
  const size_t n = size_t{1} << 16;
  const size_t stride = 4;  // count / sample size in topk_select.cpp
  std::vector<float> z(n, 1.0f);
  for (size_t i = 0; i < n; i += stride) z[i] = 100.0f;
  expect_selects_like_sorting(z, {n / 100, n / 3, n / 2});
  std::vector<float> hidden(n, 1.0f);
  for (size_t i = 1; i < n; i += stride) hidden[i] = -100.0f - static_cast<float>(i % 13);
  expect_selects_like_sorting(hidden, {1, n / 100, n / 4, n / 2});
  // Sorted by magnitude, both ways.
  std::vector<float> up(n);
  for (size_t i = 0; i < n; ++i) up[i] = static_cast<float>(i) * (i % 2 ? -1.0f : 1.0f);
  expect_selects_like_sorting(up, {1, n / 100, n / 2});
  std::reverse(up.begin(), up.end());
  expect_selects_like_sorting(up, {1, n / 100, n / 2});
}

TEST(TopkSelect, ZeroElements) {
  std::vector<qc::TopkEntry> got = {{9, 1.0f}};
  bool non_finite = true;
  qc::topk_select(nullptr, nullptr, 0, 0, &got, &non_finite);
  EXPECT_TRUE(got.empty());
  EXPECT_FALSE(non_finite);
}

TEST(TopkSelect, KeyOrdersMagnitudes) {
  EXPECT_EQ(qc::topk_magnitude_key(-0.0f), qc::topk_magnitude_key(0.0f));
  EXPECT_LT(qc::topk_magnitude_key(1.0f), qc::topk_magnitude_key(-1.5f));
  EXPECT_LT(qc::topk_magnitude_key(std::numeric_limits<float>::max()),
            qc::topk_magnitude_key(-std::numeric_limits<float>::infinity()));
  EXPECT_EQ(qc::topk_magnitude_key(nan_with_payload(1, false)),
            qc::topk_magnitude_key(nan_with_payload(77, true)));
  EXPECT_LT(qc::topk_magnitude_key(std::numeric_limits<float>::infinity()),
            qc::topk_magnitude_key(nan_with_payload(1, false)));
}

}  // namespace
