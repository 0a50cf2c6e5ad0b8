// Signed integers packed at `width` bits each on the wire: two's complement,
// value i in bits [i*width, (i+1)*width) of a little-endian bitstream (the
// codes' layout, cpu/bitstream.h); unused high bits of the last byte are 0.
// The form in which the native algorithm's integer sums travel
// (native.cpp). Whole groups of 64 values (width bytes x 8) go
// through kernels specialised per width; the rest value by value.
#pragma once

#include <cstddef>
#include <cstdint>

namespace qc {

// Bytes of `count` values at `width` bits.
inline size_t packed_bytes(size_t count, int width) {
  return (count * static_cast<size_t>(width) + 7) / 8;
}

// The widest value each element type packs: int32_t 2..32, int64_t 2..56
// (a value then spans at most 8 bytes at any bit offset).
template <class T>
constexpr int max_packed_width() {
  return sizeof(T) == 4 ? 32 : 56;
}

// Writes packed_bytes(count, width) bytes: each value's low `width` bits.
template <class T>
void pack_integers(const T* values, size_t count, int width, uint8_t* out);

// dst[i] = the i-th packed value, sign-extended.
template <class T>
void unpack_integers(const uint8_t* in, size_t count, int width, T* dst);

// dst[i] += the i-th packed value, sign-extended; the sum wraps (no UB
// whatever a peer sent: a corrupt sum is wrong, never undefined).
template <class T>
void unpack_add_integers(const uint8_t* in, size_t count, int width, T* dst);

}  // namespace qc
