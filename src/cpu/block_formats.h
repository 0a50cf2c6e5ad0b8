// The element formats of the block-scaled codecs (OCP MX v1.0: FP8 E4M3 and
// E5M2, FP6 E2M3 and E3M2, FP4 E2M1, INT8; NVIDIA's NVFP4: E2M1 under an
// E4M3 block scale) and their scalar arithmetic: the definition that every
// other path (SIMD, CUDA) must reproduce bit for bit. docs/wire-format.md,
// "Block-scaled formats", states the same rules in prose.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/host_device.h"

namespace qc {
namespace cpu {

struct ElementFormat {
  int bits;           // code width: sign + magnitude (FP) or two's complement (INT8)
  int mbits;          // mantissa bits m (FP)
  int emin;           // exponent of the smallest normal (FP)
  int emax;           // exponent of the largest normal: the MX scale rule's emax_elem
  uint32_t max_code;  // largest finite magnitude code (FP); 127 (INT8)
  bool integer;       // INT8 with an implicit scale of 2^-6
  bool has_nan;       // E4M3: magnitude 0x7F is NaN; E5M2: 0x7C Inf, 0x7D..0x7F NaN
  bool has_inf;
};

// E4M3 by value, for device code (which cannot take a host constant's
// address): nvfp4's block scale.
QC_HOST_DEVICE constexpr ElementFormat e4m3_format() {
  return ElementFormat{8, 3, -6, 8, 0x7E, false, true, false};
}
constexpr ElementFormat kE4M3 = e4m3_format();
constexpr ElementFormat kE5M2{8, 2, -14, 15, 0x7B, false, true, true};
constexpr ElementFormat kE2M3{6, 3, 0, 2, 0x1F, false, false, false};
constexpr ElementFormat kE3M2{6, 2, -2, 4, 0x1F, false, false, false};
constexpr ElementFormat kE2M1{4, 1, 0, 2, 0x7, false, false, false};
constexpr ElementFormat kInt8{8, 0, 0, 0, 127, true, false, false};

// 2^k as a float, for k in [-126, 127] (a normal number: exact, and the same
// under flush-to-zero).
QC_HOST_DEVICE inline float pow2f(int k) {
  const uint32_t bits = static_cast<uint32_t>(k + 127) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// rint for |x| < 2^22 in the default rounding mode, without a libm call:
// adding 1.5 * 2^23 leaves no fraction bits, so the float addition itself
// rounds to nearest even.
QC_HOST_DEVICE inline float rint_small(float x) {
  const float magic = 12582912.0f;  // 1.5 * 2^23 (IEEE order: never reassociated)
  return (x + magic) - magic;
}
// floor for |x| < 2^22.
QC_HOST_DEVICE inline float floor_small(float x) {
  const float i = static_cast<float>(static_cast<int32_t>(x));  // toward zero
  return i > x ? i - 1.0f : i;
}

// The code of a finite q: nearest-even, or stochastic with u in [0, 1);
// saturating at the format's largest finite value.
QC_HOST_DEVICE inline uint32_t round_element(float q, const ElementFormat& f, bool stochastic,
                                             float u) {
  if (f.integer) {
    float t = q * 64.0f;  // exact; |q| < 2, so |t| < 128
    t = t > 256.0f ? 256.0f : (t < -256.0f ? -256.0f : t);  // (nvfp4 never gets here)
    float r = stochastic ? floor_small(t + u) : rint_small(t);
    r = r > 127.0f ? 127.0f : (r < -127.0f ? -127.0f : r);
    return static_cast<uint32_t>(static_cast<int32_t>(r)) & 0xFFu;
  }
  uint32_t qbits;
  std::memcpy(&qbits, &q, 4);
  const uint32_t sign = qbits >> 31;
  const float a = std::fabs(q);
  // floor(log2 a) for a normal float; a float subnormal or zero is below
  // every element format's emin.
  int e = static_cast<int>((qbits >> 23) & 0xFFu) - 127;
  if (e < f.emin) e = f.emin;
  const float scaled = a * pow2f(f.mbits - e);  // exact, in [0, 2^(m+1))
  const float n = stochastic ? floor_small(scaled + u) : rint_small(scaled);
  uint32_t c = static_cast<uint32_t>((e - f.emin) << f.mbits) + static_cast<uint32_t>(n);
  if (c > f.max_code) c = f.max_code;
  return (sign << (f.bits - 1)) | c;
}

// The value of any code (a received one may be NaN or Inf where the format
// has them).
QC_HOST_DEVICE inline float element_value(uint32_t code, const ElementFormat& f) {
  if (f.integer) return static_cast<float>(static_cast<int8_t>(code & 0xFFu)) * 0.015625f;
  const uint32_t sign_bit = 1u << (f.bits - 1);
  const uint32_t c = code & (sign_bit - 1u);
  float v;
  if (f.has_inf && c == 0x7Cu) {
    v = INFINITY;
  } else if (f.has_nan && c > f.max_code) {
    v = NAN;
  } else {
    const uint32_t M = 1u << f.mbits;
    if (c < M) {
      v = static_cast<float>(c) * pow2f(f.emin - f.mbits);
    } else {
      const int e = f.emin + static_cast<int>(c >> f.mbits) - 1;
      v = static_cast<float>(M + (c & (M - 1u))) * pow2f(e - f.mbits);
    }
  }
  return (code & sign_bit) != 0 ? -v : v;
}

// The MX block scale (E8M0) of a block whose largest |z| is amax (finite):
// the exponent s = floor(log2 amax) - emax, clamped to [-127, 127]; byte
// s + 127. A zero block gets byte 0. (OCP MX v1.0 §6.3.)
QC_HOST_DEVICE inline int mx_scale_exponent(float amax, const ElementFormat& f) {
  uint32_t bits;
  std::memcpy(&bits, &amax, 4);
  const int biased = static_cast<int>((bits >> 23) & 0xFFu);
  // floor(log2 amax) = biased - 127 for a normal amax; a zero or subnormal
  // one is below 2^-126, so s clamps to -127 whatever emax is.
  if (biased == 0) return -127;
  const int s = biased - 127 - f.emax;
  return s < -127 ? -127 : (s > 127 ? 127 : s);
}

// q = z 2^-s and decoded = value 2^s, each as two multiplications by
// powers of two in [2^-64, 2^64] (a = s >> 1, b = s - a): no factor is
// subnormal, so flush-to-zero changes nothing that rounding could see.
struct Pow2Pair {
  float first, second;
};
QC_HOST_DEVICE inline Pow2Pair pow2_pair(int s) {
  const int a = s >> 1;  // arithmetic shift: floor(s / 2)
  return {pow2f(a), pow2f(s - a)};
}

// E4M3 of a finite d >= 0 (nvfp4's block scale), nearest-even, saturating.
QC_HOST_DEVICE inline uint32_t e4m3_scale_code(float d) {
  return round_element(d, e4m3_format(), false, 0.0f);
}

constexpr float kNvfp4Range = 2688.0f;  // 448 (E4M3's largest) x 6 (E2M1's)
constexpr uint8_t kMxNanScale = 0xFF;    // E8M0 NaN
constexpr uint8_t kE4M3NanScale = 0x7F;  // E4M3 NaN

// nvfp4's message scale S: the largest finite |z| (z = t + e) / 2688.
inline float block_message_scale(const float* t, const float* e, size_t count) {
  float amax = 0.0f;
  for (size_t i = 0; i < count; ++i) {
    const float a = std::fabs(e != nullptr ? t[i] + e[i] : t[i]);
    if (a <= 3.40282347e38f && a > amax) amax = a;
  }
  return amax / kNvfp4Range;
}

// A block's scale byte and how q and the decoded value follow from z:
// nvfp4 q = z / x, decoded = value x; MX q = z enc.first enc.second,
// decoded = value dec.first dec.second. zero: every code 0.
struct BlockScale {
  uint8_t byte = 0;
  bool zero = true;
  float x = 0.0f;
  Pow2Pair enc{1.0f, 1.0f};
  Pow2Pair dec{1.0f, 1.0f};
};
template <class Args>
QC_HOST_DEVICE inline BlockScale block_scale(float amax, bool finite, float S, const Args& a) {
  BlockScale bs;
  if (!finite) {
    bs.byte = a.nvfp4 ? kE4M3NanScale : kMxNanScale;
  } else if (a.nvfp4) {
    if (S > 0.0f) {
      bs.byte = static_cast<uint8_t>(e4m3_scale_code((amax / 6.0f) / S));
      bs.x = element_value(bs.byte, e4m3_format()) * S;
      bs.zero = !(bs.x > 0.0f);
    }
  } else if (amax > 0.0f) {
    const int s = mx_scale_exponent(amax, a.format);
    bs.byte = static_cast<uint8_t>(s + 127);
    bs.enc = pow2_pair(-s);
    bs.dec = pow2_pair(s);
    bs.zero = false;
  }
  return bs;
}

// The decoding side of a block's scale byte.
struct BlockDecodeScale {
  bool is_nan = false;  // MX NaN scale (nvfp4's NaN byte gives a NaN x)
  float x = 0.0f;
  Pow2Pair dec{1.0f, 1.0f};
};
QC_HOST_DEVICE inline BlockDecodeScale block_decode_scale(uint8_t byte, float S, bool nvfp4) {
  BlockDecodeScale ds;
  if (nvfp4) ds.x = element_value(byte, e4m3_format()) * S;  // NaN for byte 0x7F
  else if (byte == kMxNanScale) ds.is_nan = true;
  else ds.dec = pow2_pair(static_cast<int>(byte) - 127);
  return ds;
}

}  // namespace cpu
}  // namespace qc
