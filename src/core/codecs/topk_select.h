// Which elements topk sends: the k largest |z| in a strict total order (NaN
// first, then larger |z|, then lower index), returned in increasing index
// order. The codec (codec_topk.h) writes exactly these, so how they are
// found is free; this finds them in expected linear time instead of by
// sorting:
//
//  1. A fixed sample (every count/S-th element) estimates a threshold that a
//     few more than k elements reach.
//  2. One pass over z collects the candidates (index and value) at or
//     above it, in index order (with error feedback the same pass forms z = t + e in e).
//  3. The exact k-th key among the candidates (nth_element on a few times k
//     keys) splits them: every candidate above it, and the lowest-index ones
//     equal to it until there are k.
//  If fewer than k elements reach the estimate (data the sample misjudges),
//  the selection runs again over all keys: slower, never different.
//
// The order's key is |z|'s bit pattern as an unsigned integer (it orders
// non-negative floats like their values; +0 and -0 are one key) with every
// NaN mapped above +Inf, so NaNs tie with each other and go by index.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace qc {

// The order key of one value (see above).
uint32_t topk_magnitude_key(float z);

struct TopkEntry {
  uint32_t index;
  float value;  // z[index], as it is sent
};

// The k (k <= count) entries that topk sends, by ascending index, for
// z = t + e. With e != nullptr, e[i] becomes t[i] + e[i] for every i (the
// caller then zeroes the sent positions); with e == nullptr t is only read.
// *saw_non_finite reports whether any z was NaN or infinite. The values come
// from the pass over z, so sending them reads z no second time.
void topk_select(const float* t, float* e, size_t count, size_t k, std::vector<TopkEntry>* sent,
                 bool* saw_non_finite);

}  // namespace qc
