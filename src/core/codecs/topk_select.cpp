#include "core/codecs/topk_select.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace qc {
namespace {

constexpr uint32_t kInfKey = 0x7f800000u;
constexpr uint32_t kNanKey = 0x7fffffffu;
// Below this many elements every element is a candidate: the sample would
// cost more than it saves.
constexpr size_t kDirectBelow = size_t{1} << 15;
constexpr size_t kSampleSize = size_t{1} << 14;

// The k-th largest (k >= 1) of keys; reorders keys.
uint32_t kth_largest(std::vector<uint32_t>* keys, size_t k) {
  const auto kth = keys->begin() + static_cast<std::ptrdiff_t>(k - 1);
  std::nth_element(keys->begin(), kth, keys->end(), std::greater<uint32_t>());
  return *kth;
}

// A key that a few more than k of the count elements reach, estimated from
// a fixed sample (0: every element is a candidate).
uint32_t estimate_threshold(const float* t, const float* e, size_t count, size_t k) {
  if (count < kDirectBelow) return 0;
  std::vector<uint32_t> sample(kSampleSize);
  for (size_t s = 0; s < kSampleSize; ++s) {
    const size_t p = static_cast<size_t>(static_cast<uint64_t>(s) * count / kSampleSize);
    sample[s] = topk_magnitude_key(e != nullptr ? t[p] + e[p] : t[p]);
  }
  // Sample elements expected above the k-th, plus four standard deviations:
  // the estimate falls short of k only for data the sample misjudges.
  const double expect = static_cast<double>(k) * kSampleSize / static_cast<double>(count);
  const double margin = expect + 4.0 * std::sqrt(expect) + 4.0;
  if (margin >= static_cast<double>(kSampleSize)) return 0;
  return kth_largest(&sample, static_cast<size_t>(margin));
}

// One pass: z (into e with error feedback) and the candidates, the
// elements whose key reaches threshold (none are collected when it is 0).
// Returns whether any z was NaN or infinite. SSE2 (baseline x86-64) takes 16
// elements a step and looks at single keys only where one of them reaches
// the threshold; the scalar loop is the definition (and the tail).
template <bool WithE>
bool collect_candidates(const float* t, float* e, size_t count, uint32_t threshold,
                        std::vector<TopkEntry>* candidates) {
  size_t i = 0;
  bool non_finite = false;
#if defined(__SSE2__)
  constexpr size_t kStep = 16;
  const __m128i abs_mask = _mm_set1_epi32(0x7fffffff);
  const __m128i inf_key = _mm_set1_epi32(static_cast<int32_t>(kInfKey));
  // key >= threshold as a signed compare (keys are below 2^31).
  const __m128i below = _mm_set1_epi32(static_cast<int32_t>(threshold) - 1);
  __m128i seen = _mm_setzero_si128();
  for (; i + kStep <= count; i += kStep) {
    int reach = 0;
    for (size_t v = 0; v < kStep / 4; ++v) {
      __m128 z = _mm_loadu_ps(t + i + 4 * v);
      if (WithE) {
        z = _mm_add_ps(z, _mm_loadu_ps(e + i + 4 * v));
        _mm_storeu_ps(e + i + 4 * v, z);
      }
      __m128i key = _mm_and_si128(_mm_castps_si128(z), abs_mask);
      const __m128i nan = _mm_cmpgt_epi32(key, inf_key);
      seen = _mm_or_si128(seen, _mm_cmpeq_epi32(key, inf_key));
      seen = _mm_or_si128(seen, nan);
      key = _mm_or_si128(key, _mm_srli_epi32(nan, 1));  // every NaN -> kNanKey
      reach |= _mm_movemask_ps(_mm_castsi128_ps(_mm_cmpgt_epi32(key, below))) << (4 * v);
    }
    if (threshold > 0 && reach != 0) {
      const float* z = WithE ? e : t;
      for (size_t j = 0; j < kStep; ++j)
        if (reach & (1 << j)) candidates->push_back({static_cast<uint32_t>(i + j), z[i + j]});
    }
  }
  non_finite = _mm_movemask_epi8(seen) != 0;
#endif
  for (; i < count; ++i) {
    float z = t[i];
    if (WithE) {
      z += e[i];
      e[i] = z;
    }
    const uint32_t key = topk_magnitude_key(z);
    non_finite = non_finite || key >= kInfKey;
    if (threshold > 0 && key >= threshold) candidates->push_back({static_cast<uint32_t>(i), z});
  }
  return non_finite;
}

}  // namespace

uint32_t topk_magnitude_key(float z) {
  uint32_t bits;
  std::memcpy(&bits, &z, sizeof bits);
  bits &= 0x7fffffffu;
  return bits > kInfKey ? kNanKey : bits;
}

void topk_select(const float* t, float* e, size_t count, size_t k, std::vector<TopkEntry>* sent,
                 bool* saw_non_finite) {
  const uint32_t threshold = k < count ? estimate_threshold(t, e, count, k) : 0;
  std::vector<TopkEntry> candidates;
  if (threshold > 0) candidates.reserve(std::min(count, 2 * k + 1024));
  *saw_non_finite = e != nullptr
                        ? collect_candidates<true>(t, e, count, threshold, &candidates)
                        : collect_candidates<false>(t, e, count, threshold, &candidates);
  if (candidates.size() < k) {  // every element, or the sample misjudged the data
    const float* z = e != nullptr ? e : t;
    candidates.resize(count);
    for (size_t i = 0; i < count; ++i) candidates[i] = {static_cast<uint32_t>(i), z[i]};
  }

  sent->clear();
  if (k >= candidates.size()) {
    sent->swap(candidates);
    return;
  }
  std::vector<uint32_t> keys(candidates.size());
  for (size_t j = 0; j < candidates.size(); ++j)
    keys[j] = topk_magnitude_key(candidates[j].value);
  const uint32_t kth = kth_largest(&keys, k);
  // keys[0..k) now hold the k largest: those above kth are all taken, the
  // rest of the k are ties at kth, taken by lowest index.
  size_t above = 0;
  for (size_t j = 0; j < k; ++j) above += keys[j] > kth;
  size_t ties = k - above;
  sent->reserve(k);
  for (const TopkEntry& c : candidates) {
    const uint32_t key = topk_magnitude_key(c.value);
    if (key > kth || (key == kth && ties > 0)) {
      if (key == kth) --ties;
      sent->push_back(c);
    }
  }
}

}  // namespace qc
