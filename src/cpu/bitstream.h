// The little-endian bitstream every quantizing codec writes (codec_kernels.h):
// element i's q-bit code occupies bits [i*q, (i+1)*q), q = 1..8.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace qc {
namespace cpu {

class BitWriter {
 public:
  explicit BitWriter(uint8_t* out) : out_(out) {}
  void put(uint32_t code, int q) {
    acc_ |= static_cast<uint64_t>(code) << used_;
    used_ += q;
    while (used_ >= 8) {
      *out_++ = static_cast<uint8_t>(acc_);
      acc_ >>= 8;
      used_ -= 8;
    }
  }
  // Writes the last partial byte (its unused high bits are zero).
  void flush() {
    if (used_ > 0) *out_++ = static_cast<uint8_t>(acc_);
    acc_ = 0;
    used_ = 0;
  }

 private:
  uint8_t* out_;
  uint64_t acc_ = 0;
  int used_ = 0;
};

inline uint32_t get_code(const uint8_t* codes, size_t i, int q) {
  const size_t bit = i * static_cast<size_t>(q);
  const size_t byte = bit / 8;
  const int shift = static_cast<int>(bit % 8);
  uint32_t v = codes[byte];
  if (shift + q > 8) v |= static_cast<uint32_t>(codes[byte + 1]) << 8;
  return (v >> shift) & ((1u << q) - 1u);
}

// float32 metadata, little-endian, at any alignment (x86 is little-endian;
// the library's wire format is defined as little-endian everywhere).
inline void store_f32(uint8_t* p, float v) { std::memcpy(p, &v, 4); }
inline float load_f32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}

}  // namespace cpu
}  // namespace qc
