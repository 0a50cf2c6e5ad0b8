// Size arithmetic that cannot wrap around. Every byte count the library
// derives from a caller's count (encoded sizes, buffers, images) goes
// through these, so an overflow is a clear error instead of a small number
// that later passes a capacity check.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

namespace qc {

// *out = a * b; false (and *out untouched) when the product overflows size_t.
inline bool checked_mul(size_t a, size_t b, size_t* out) {
  size_t product = 0;
  if (__builtin_mul_overflow(a, b, &product)) return false;
  *out = product;
  return true;
}

// *out = a + b; false (and *out untouched) when the sum overflows size_t.
inline bool checked_add(size_t a, size_t b, size_t* out) {
  size_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum)) return false;
  *out = sum;
  return true;
}

// *out = the sum of `terms`; false when it overflows.
inline bool checked_sum(std::initializer_list<size_t> terms, size_t* out) {
  size_t sum = 0;
  for (size_t t : terms) {
    if (!checked_add(sum, t, &sum)) return false;
  }
  *out = sum;
  return true;
}

// *out = ceil(count * bits / 8): the bytes of `count` codes of `bits` bits.
// Computed without forming count * bits, which overflows first.
inline bool checked_bit_bytes(size_t count, size_t bits, size_t* out) {
  const size_t whole = count / 8;  // groups of 8 codes: exactly `bits` bytes each
  const size_t rest_bits = (count % 8) * bits;
  size_t bytes = 0;
  if (!checked_mul(whole, bits, &bytes)) return false;
  return checked_add(bytes, (rest_bits + 7) / 8, out);
}

// ceil(count / group) for group >= 1 (0 for count 0), without forming
// count + group - 1, which overflows first.
inline size_t groups_of(size_t count, size_t group) {
  return count == 0 ? 0 : 1 + (count - 1) / group;
}

}  // namespace qc
