#include "core/algorithms/packed_integers.h"

#include <array>
#include <type_traits>
#include <utility>

#include "core/byte_order.h"

namespace qc {
namespace {

constexpr size_t kGroup = 64;  // values per group: `width` 8-byte words

template <class T>
T wrapping_add(T a, int64_t b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
}

int64_t sign_extend(uint64_t u, int width) {
  return static_cast<int64_t>(u << (64 - width)) >> (64 - width);
}

// Value by value, for the values after the last whole group.
template <class T>
void pack_tail(const T* v, size_t count, int width, uint8_t* out) {
  const uint64_t mask = ~uint64_t{0} >> (64 - width);
  uint64_t acc = 0;
  int used = 0;
  for (size_t i = 0; i < count; ++i) {
    acc |= (static_cast<uint64_t>(static_cast<int64_t>(v[i])) & mask) << used;  // used <= 7
    used += width;
    while (used >= 8) {
      *out++ = static_cast<uint8_t>(acc);
      acc >>= 8;
      used -= 8;
    }
  }
  if (used > 0) *out = static_cast<uint8_t>(acc);
}

template <class T, bool kAdd>
void unpack_tail(const uint8_t* in, size_t count, int width, T* dst) {
  const size_t total = packed_bytes(count, width);
  const uint64_t mask = ~uint64_t{0} >> (64 - width);
  for (size_t i = 0; i < count; ++i) {
    const size_t bit = i * static_cast<size_t>(width);
    uint64_t word = 0;
    for (size_t b = bit / 8; b < total && b < bit / 8 + 8; ++b)
      word |= static_cast<uint64_t>(in[b]) << (8 * (b - bit / 8));
    const int64_t v = sign_extend((word >> (bit % 8)) & mask, width);
    dst[i] = kAdd ? wrapping_add(dst[i], v) : static_cast<T>(v);
  }
}

// 64 values in `W` words: with W a constant every shift and word index is
// one, and the loop unrolls to straight-line code.
template <int W, class T>
void pack_group(const T* v, uint8_t* out) {
  constexpr uint64_t mask = ~uint64_t{0} >> (64 - W);
  uint64_t words[W + 1] = {};
#pragma GCC unroll 64
  for (int j = 0; j < 64; ++j) {
    const int bit = j * W, k = bit / 64, s = bit % 64;
    const uint64_t u = static_cast<uint64_t>(static_cast<int64_t>(v[j])) & mask;
    words[k] |= u << s;
    if (s + W > 64) words[k + 1] |= u >> (64 - s);
  }
  for (int k = 0; k < W; ++k) store_le64(out + 8 * k, words[k]);
}

template <int W, class T, bool kAdd>
void unpack_group(const uint8_t* in, T* dst) {
  uint64_t words[W + 1];
  for (int k = 0; k < W; ++k) words[k] = load_le64(in + 8 * k);
  words[W] = 0;
#pragma GCC unroll 64
  for (int j = 0; j < 64; ++j) {
    const int bit = j * W, k = bit / 64, s = bit % 64;
    uint64_t u = words[k] >> s;
    if (s + W > 64) u |= words[k + 1] << (64 - s);
    const int64_t v = static_cast<int64_t>(u << (64 - W)) >> (64 - W);
    dst[j] = kAdd ? wrapping_add(dst[j], v) : static_cast<T>(v);
  }
}

// Kernels for widths 2..32 (a width above 32 is the rare int64 case: the
// tail code takes all of it).
constexpr int kMinWidth = 2;
constexpr int kMaxKernelWidth = 32;

template <class T>
using PackFn = void (*)(const T*, uint8_t*);
template <class T>
using UnpackFn = void (*)(const uint8_t*, T*);

template <class T, size_t... I>
constexpr std::array<PackFn<T>, sizeof...(I)> pack_table(std::index_sequence<I...>) {
  return {{&pack_group<static_cast<int>(I) + kMinWidth, T>...}};
}
template <class T, bool kAdd, size_t... I>
constexpr std::array<UnpackFn<T>, sizeof...(I)> unpack_table(std::index_sequence<I...>) {
  return {{&unpack_group<static_cast<int>(I) + kMinWidth, T, kAdd>...}};
}
using Widths = std::make_index_sequence<kMaxKernelWidth - kMinWidth + 1>;

template <class T, bool kAdd>
void unpack(const uint8_t* in, size_t count, int width, T* dst) {
  static constexpr auto table = unpack_table<T, kAdd>(Widths{});
  size_t done = 0;
  if (width <= kMaxKernelWidth) {
    const UnpackFn<T> group = table[static_cast<size_t>(width - kMinWidth)];
    const size_t group_bytes = static_cast<size_t>(width) * 8;
    for (; done + kGroup <= count; done += kGroup) group(in + done / kGroup * group_bytes, dst + done);
  }
  unpack_tail<T, kAdd>(in + packed_bytes(done, width), count - done, width, dst + done);
}

}  // namespace

template <class T>
void pack_integers(const T* values, size_t count, int width, uint8_t* out) {
  static constexpr auto table = pack_table<T>(Widths{});
  size_t done = 0;
  if (width <= kMaxKernelWidth) {
    const PackFn<T> group = table[static_cast<size_t>(width - kMinWidth)];
    const size_t group_bytes = static_cast<size_t>(width) * 8;
    for (; done + kGroup <= count; done += kGroup)
      group(values + done, out + done / kGroup * group_bytes);
  }
  pack_tail(values + done, count - done, width, out + packed_bytes(done, width));
}

template <class T>
void unpack_integers(const uint8_t* in, size_t count, int width, T* dst) {
  unpack<T, false>(in, count, width, dst);
}

template <class T>
void unpack_add_integers(const uint8_t* in, size_t count, int width, T* dst) {
  unpack<T, true>(in, count, width, dst);
}

template void pack_integers<int32_t>(const int32_t*, size_t, int, uint8_t*);
template void pack_integers<int64_t>(const int64_t*, size_t, int, uint8_t*);
template void unpack_integers<int32_t>(const uint8_t*, size_t, int, int32_t*);
template void unpack_integers<int64_t>(const uint8_t*, size_t, int, int64_t*);
template void unpack_add_integers<int32_t>(const uint8_t*, size_t, int, int32_t*);
template void unpack_add_integers<int64_t>(const uint8_t*, size_t, int, int64_t*);

}  // namespace qc
