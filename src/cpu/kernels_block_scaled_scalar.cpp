// The block-scaled codecs' scalar kernels: the definition the SIMD tables
// reproduce bit for bit (codec_kernels.h, BlockEncodeFn / BlockDecodeFn).
#include <algorithm>
#include <cmath>
#include <limits>

#include "cpu/bitstream.h"
#include "cpu/block_formats.h"
#include "cpu/codec_kernels.h"

namespace qc {
namespace cpu {

void block_encode_scalar(const float* t, float* e, size_t count, const BlockArgs& a,
                         uint8_t* payload) {
  const ElementFormat& f = a.format;
  auto z_at = [t, e](size_t i) { return e != nullptr ? t[i] + e[i] : t[i]; };
  float S = 0.0f;
  uint8_t* p = payload;
  if (a.nvfp4) {
    S = block_message_scale(t, e, count);
    store_f32(p, S);
    p += 4;
  }
  const size_t blocks = count == 0 ? 0 : (count - 1) / a.block + 1;
  uint8_t* scales = p;
  BitWriter codes(p + blocks);
  float z[32];
  for (size_t b = 0; b < blocks; ++b) {
    const size_t first = b * a.block;
    const size_t n = std::min(a.block, count - first);
    bool finite = true;
    float amax = 0.0f;
    for (size_t j = 0; j < n; ++j) {
      z[j] = z_at(first + j);
      const float m = std::fabs(z[j]);
      if (!(m <= std::numeric_limits<float>::max())) finite = false;  // NaN or Inf
      else if (m > amax) amax = m;
    }
    const BlockScale bs = block_scale(amax, finite, S, a);
    scales[b] = bs.byte;
    for (size_t j = 0; j < n; ++j) {
      uint32_t code = 0;
      float decoded = 0.0f;
      if (!bs.zero) {
        const float q = a.nvfp4 ? z[j] / bs.x : (z[j] * bs.enc.first) * bs.enc.second;
        const float u = a.stochastic ? random_uniform(a.rng, a.index_base + first + j) : 0.0f;
        code = round_element(q, f, a.stochastic, u);
        if (e != nullptr) {
          const float v = element_value(code, f);
          decoded = a.nvfp4 ? v * bs.x : (v * bs.dec.first) * bs.dec.second;
        }
      }
      codes.put(code, f.bits);
      if (e != nullptr) e[first + j] = finite ? z[j] - decoded : 0.0f;
    }
  }
  codes.flush();
}

void block_decode_scalar(const uint8_t* payload, size_t count, const BlockArgs& a, float* dst,
                         bool accumulate) {
  const ElementFormat& f = a.format;
  const uint8_t* p = payload;
  float S = 0.0f;
  if (a.nvfp4) {
    S = load_f32(p);
    p += 4;
  }
  const size_t blocks = count == 0 ? 0 : (count - 1) / a.block + 1;
  const uint8_t* codes = p + blocks;
  float value[256];  // every code's element value
  for (uint32_t c = 0; c < (1u << f.bits); ++c) value[c] = element_value(c, f);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (size_t b = 0; b < blocks; ++b) {
    const size_t first = b * a.block;
    const size_t n = std::min(a.block, count - first);
    const BlockDecodeScale ds = block_decode_scale(p[b], S, a.nvfp4);
    for (size_t j = 0; j < n; ++j) {
      const float v = value[get_code(codes, first + j, f.bits)];
      const float d = ds.is_nan ? nan : a.nvfp4 ? v * ds.x : (v * ds.dec.first) * ds.dec.second;
      dst[first + j] = accumulate ? dst[first + j] + d : d;
    }
  }
}

}  // namespace cpu
}  // namespace qc
