#include "core/algorithms/code_sums.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "cpu/bitstream.h"

namespace qc {
namespace {

constexpr int kExpLimbBits = 16;

template <class T>
T wrapping_add(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
}

// f(i, code) for `count` codes of B bits: groups of 8 codes are B whole
// bytes, so a group is one little-endian load and constant shifts (the
// high bits of `code` above B are garbage for f to mask).
template <int B, class F>
void for_each_code(const uint8_t* codes, size_t count, F f) {
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    uint64_t group = 0;
    for (int b = 0; b < B; ++b) group |= uint64_t{codes[i / 8 * B + b]} << (8 * b);
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) f(i + static_cast<size_t>(j), group >> (j * B));
  }
  for (; i < count; ++i) f(i, uint64_t{cpu::get_code(codes, i, B)});
}

// Linear codes: the signed level, branch-free.
template <int B, class T, bool kAdd>
void linear_levels(const uint8_t* codes, size_t count, T* out) {
  constexpr uint64_t mask = (uint64_t{1} << (B - 1)) - 1;
  for_each_code<B>(codes, count, [out](size_t i, uint64_t code) {
    const T level = static_cast<T>(code & mask);
    const T negative = static_cast<T>(-static_cast<T>((code >> (B - 1)) & 1u));  // 0 or -1
    const T v = static_cast<T>((level ^ negative) - negative);
    out[i] = kAdd ? wrapping_add(out[i], v) : v;
  });
}

template <class T, bool kAdd>
void linear_levels(const uint8_t* codes, size_t count, int bits, T* out) {
  switch (bits) {
    case 2: return linear_levels<2, T, kAdd>(codes, count, out);
    case 3: return linear_levels<3, T, kAdd>(codes, count, out);
    case 4: return linear_levels<4, T, kAdd>(codes, count, out);
    case 5: return linear_levels<5, T, kAdd>(codes, count, out);
    case 6: return linear_levels<6, T, kAdd>(codes, count, out);
    case 7: return linear_levels<7, T, kAdd>(codes, count, out);
    default: return linear_levels<8, T, kAdd>(codes, count, out);
  }
}

// Exp codes through a table per code: the limb its single bit lands in and
// that limb's value.
template <class T>
struct ExpTable {
  int limb[256];
  T value[256];
  explicit ExpTable(int bits) {
    const uint32_t sign_bit = 1u << (bits - 1);
    for (uint32_t code = 0; code < (1u << bits); ++code) {
      const uint32_t level = code & (sign_bit - 1u);
      const uint32_t bit = level > 0 ? level - 1 : 0;  // the value is 2^(level-1) units
      const T unit = level > 0 ? static_cast<T>(T{1} << (bit % kExpLimbBits)) : T{0};
      limb[code] = static_cast<int>(bit / kExpLimbBits);
      value[code] = (code & sign_bit) != 0 ? static_cast<T>(-unit) : unit;
    }
  }
};

// One limb (bits <= 5): out[i] = (or +=) value[code i].
template <int B, class T, bool kAdd>
void exp_one_limb(const uint8_t* codes, size_t count, const ExpTable<T>& t, T* out) {
  constexpr uint64_t mask = (uint64_t{1} << B) - 1;
  for_each_code<B>(codes, count, [&t, out](size_t i, uint64_t code) {
    const T v = t.value[code & mask];
    out[i] = kAdd ? wrapping_add(out[i], v) : v;
  });
}

template <class T, bool kAdd>
void exp_units(const uint8_t* codes, size_t count, const CodeIntegers& ci, T* out) {
  const ExpTable<T> t(ci.bits);
  switch (ci.limbs == 1 ? ci.bits : 0) {
    case 2: return exp_one_limb<2, T, kAdd>(codes, count, t, out);
    case 3: return exp_one_limb<3, T, kAdd>(codes, count, t, out);
    case 4: return exp_one_limb<4, T, kAdd>(codes, count, t, out);
    case 5: return exp_one_limb<5, T, kAdd>(codes, count, t, out);
    default: break;
  }
  const size_t limbs = static_cast<size_t>(ci.limbs);
  if (!kAdd) std::fill(out, out + count * limbs, T{0});
  for (size_t i = 0; i < count; ++i) {
    const uint32_t code = cpu::get_code(codes, i, ci.bits);
    T& slot = out[i * limbs + static_cast<size_t>(t.limb[code])];
    slot = wrapping_add(slot, t.value[code]);
  }
}

}  // namespace

CodeIntegers code_integers(qc_codec_t codec, int bits) {
  CodeIntegers ci;
  ci.linear = codec == QC_CODEC_GLOBAL_LINEAR;
  ci.bits = bits;
  const int M = (1 << (bits - 1)) - 1;
  ci.limbs = ci.linear ? 1 : (M + kExpLimbBits - 1) / kExpLimbBits;
  // A linear code is sign + (bits-1) magnitude bits; an exp limb holds at
  // most 2^(min(16, M) - 1), i.e. min(16, M) magnitude bits plus the sign.
  ci.value_width = ci.linear ? bits : std::min(kExpLimbBits, M) + 1;
  return ci;
}

template <class T>
void codes_to_integers(const uint8_t* codes, size_t count, const CodeIntegers& ci, T* out) {
  if (ci.linear) return linear_levels<T, false>(codes, count, ci.bits, out);
  exp_units<T, false>(codes, count, ci, out);
}

template <class T>
void add_codes_as_integers(const uint8_t* codes, size_t count, const CodeIntegers& ci, T* out) {
  if (ci.linear) return linear_levels<T, true>(codes, count, ci.bits, out);
  exp_units<T, true>(codes, count, ci, out);
}

template <class T>
void sums_to_floats(const T* sums, size_t count, const CodeIntegers& ci, float norm, float* dst) {
  const int M = (1 << (ci.bits - 1)) - 1;
  if (ci.linear) {
    const float step = norm / static_cast<float>(M);
    for (size_t i = 0; i < count; ++i) dst[i] = static_cast<float>(sums[i]) * step;
    return;
  }
  // Powers of two as factors: exact, as ldexp is, and vectorisable.
  const double unit = std::ldexp(1.0, 1 - M);
  const double n = static_cast<double>(norm);
  if (ci.limbs == 1) {
    for (size_t i = 0; i < count; ++i)
      dst[i] = static_cast<float>(n * (static_cast<double>(sums[i]) * unit));
    return;
  }
  const size_t limbs = static_cast<size_t>(ci.limbs);
  double weight[8];  // limbs <= 8 (bits <= 8)
  for (size_t k = 0; k < limbs; ++k) weight[k] = std::ldexp(1.0, kExpLimbBits * static_cast<int>(k));
  for (size_t i = 0; i < count; ++i) {
    double units = 0.0;
    for (size_t k = limbs; k-- > 0;) units += static_cast<double>(sums[i * limbs + k]) * weight[k];
    dst[i] = static_cast<float>(n * (units * unit));
  }
}

template void codes_to_integers<int32_t>(const uint8_t*, size_t, const CodeIntegers&, int32_t*);
template void codes_to_integers<int64_t>(const uint8_t*, size_t, const CodeIntegers&, int64_t*);
template void add_codes_as_integers<int32_t>(const uint8_t*, size_t, const CodeIntegers&,
                                             int32_t*);
template void add_codes_as_integers<int64_t>(const uint8_t*, size_t, const CodeIntegers&,
                                             int64_t*);
template void sums_to_floats<int32_t>(const int32_t*, size_t, const CodeIntegers&, float, float*);
template void sums_to_floats<int64_t>(const int64_t*, size_t, const CodeIntegers&, float, float*);

}  // namespace qc
