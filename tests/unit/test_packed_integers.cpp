// Packed integers (src/core/algorithms/packed_integers.h) against their
// definition: bit j of value i is bit i*width + j of the stream, little-endian
// bytes, two's complement, high bits of the last byte zero. Every width of
// both element types, counts around the 64-value groups the kernels take.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <type_traits>
#include <vector>

#include "core/algorithms/packed_integers.h"

namespace {

template <class T>
std::vector<uint8_t> reference_pack(const std::vector<T>& v, int width) {
  std::vector<uint8_t> out(qc::packed_bytes(v.size(), width), 0);
  for (size_t i = 0; i < v.size(); ++i) {
    const uint64_t u = static_cast<uint64_t>(static_cast<int64_t>(v[i]));
    for (int j = 0; j < width; ++j) {
      const size_t bit = i * static_cast<size_t>(width) + static_cast<size_t>(j);
      if ((u >> j) & 1u) out[bit / 8] |= static_cast<uint8_t>(1u << (bit % 8));
    }
  }
  return out;
}

template <class T>
std::vector<T> random_values(size_t count, int width, std::mt19937_64& rng) {
  const int64_t lo = -(int64_t{1} << (width - 1));
  const int64_t hi = (int64_t{1} << (width - 1)) - 1;
  std::uniform_int_distribution<int64_t> pick(lo, hi);
  std::vector<T> v(count);
  for (size_t i = 0; i < count; ++i) {
    // the extremes often: they are where sign extension goes wrong
    const int kind = static_cast<int>(rng() % 8);
    v[i] = static_cast<T>(kind == 0 ? lo : kind == 1 ? hi : kind == 2 ? -1 : pick(rng));
  }
  return v;
}

template <class T>
void check_width(int width, size_t count, std::mt19937_64& rng) {
  SCOPED_TRACE("width " + std::to_string(width) + ", count " + std::to_string(count) +
               ", int" + std::to_string(8 * sizeof(T)));
  const std::vector<T> v = random_values<T>(count, width, rng);
  const size_t bytes = qc::packed_bytes(count, width);
  std::vector<uint8_t> packed(bytes + 8, 0xA5);  // a canary after the stream
  qc::pack_integers(v.data(), count, width, packed.data());
  const std::vector<uint8_t> want = reference_pack(v, width);
  ASSERT_EQ(std::vector<uint8_t>(packed.begin(), packed.begin() + static_cast<long>(bytes)), want);
  for (size_t b = bytes; b < packed.size(); ++b) ASSERT_EQ(packed[b], 0xA5) << "byte " << b;

  std::vector<T> back(count + 1, T{7});
  qc::unpack_integers(packed.data(), count, width, back.data());
  ASSERT_EQ(std::vector<T>(back.begin(), back.begin() + static_cast<long>(count)), v);
  ASSERT_EQ(back[count], T{7});

  std::vector<T> base = random_values<T>(count, width, rng);
  std::vector<T> sum = base;
  qc::unpack_add_integers(packed.data(), count, width, sum.data());
  using U = std::make_unsigned_t<T>;
  for (size_t i = 0; i < count; ++i) {  // wrapping where the sum leaves T
    ASSERT_EQ(sum[i], static_cast<T>(static_cast<U>(base[i]) + static_cast<U>(v[i])))
        << "value " << i;
  }
}

const size_t kCounts[] = {0, 1, 7, 63, 64, 65, 127, 128, 129, 1000};

TEST(PackedIntegers, Int32EveryWidthMatchesTheDefinition) {
  std::mt19937_64 rng(32);
  for (int width = 2; width <= qc::max_packed_width<int32_t>(); ++width)
    for (size_t count : kCounts) check_width<int32_t>(width, count, rng);
}

TEST(PackedIntegers, Int64EveryWidthMatchesTheDefinition) {
  std::mt19937_64 rng(64);
  for (int width = 2; width <= qc::max_packed_width<int64_t>(); ++width)
    for (size_t count : kCounts) check_width<int64_t>(width, count, rng);
}

// A sum that leaves the type wraps instead of being undefined (a corrupt or
// hostile peer's values are wrong, never a crash under UBSan).
TEST(PackedIntegers, AddWrapsAtTheTypesLimits) {
  const std::vector<int32_t> one = {1, -1};
  std::vector<uint8_t> packed(qc::packed_bytes(2, 2));
  qc::pack_integers(one.data(), 2, 2, packed.data());
  std::vector<int32_t> sum = {INT32_MAX, INT32_MIN};
  qc::unpack_add_integers(packed.data(), 2, 2, sum.data());
  EXPECT_EQ(sum[0], INT32_MIN);
  EXPECT_EQ(sum[1], INT32_MAX);
}

}  // namespace
