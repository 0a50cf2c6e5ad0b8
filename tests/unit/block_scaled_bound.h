// The block-scaled codecs' error bound (docs/wire-format.md, "Block-scaled
// formats") as the tests state it: the codec tests (test_codecs.cpp) and the
// round-trip fuzzer (tests/fuzz/fuzz_decode.cpp) check every decoded value
// against it. Written from the formats' definitions, not from the kernels.
#ifndef QC_TESTS_UNIT_BLOCK_SCALED_BOUND_H
#define QC_TESTS_UNIT_BLOCK_SCALED_BOUND_H

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "qc.h"

namespace qct {

inline bool is_block_scaled(qc_codec_t c) { return c >= QC_CODEC_MXFP8 && c <= QC_CODEC_NVFP4; }

// Values per block scale: 16 for nvfp4, 32 for the MX formats.
inline size_t block_of(qc_codec_t c) { return c == QC_CODEC_NVFP4 ? 16 : 32; }

// Bits per element.
inline int element_bits(qc_codec_t c) {
  switch (c) {
    case QC_CODEC_MXFP6:
    case QC_CODEC_MXFP6_E3M2: return 6;
    case QC_CODEC_MXFP4:
    case QC_CODEC_NVFP4: return 4;
    default: return 8;
  }
}

// The largest error relative to the block's largest |x|: half a unit of the
// top binade (a unit when stochastic) or the saturation gap below the
// scale's 2^(emax+1), the larger. nvfp4: the E4M3 block scale is within 2^-4
// of amax/6, and a unit of E2M1's top binade is 2 of its steps.
inline double block_scaled_bound(qc_codec_t codec, bool stochastic) {
  const double k = stochastic ? 2.0 : 1.0;
  switch (codec) {
    case QC_CODEC_MXFP8: return std::max(k / 16, 1 - 448.0 / 512);
    case QC_CODEC_MXFP8_E5M2: return std::max(k / 8, 1 - 57344.0 / 65536);
    case QC_CODEC_MXFP6: return std::max(k / 16, 1 - 7.5 / 8);
    case QC_CODEC_MXFP6_E3M2: return std::max(k / 8, 1 - 28.0 / 32);
    case QC_CODEC_MXFP4: return std::max(k / 4, 1 - 6.0 / 8);
    case QC_CODEC_MXINT8: return std::max(k / 128, 1 - 127.0 / 128);
    default: return k * (1 + 1.0 / 16) / 6 + 0.4 / 6;  // nvfp4
  }
}

// What the relative bound leaves out, in absolute terms: nvfp4's blocks
// under E4M3's normal range (below 2^-13 of the message's largest |x|), and
// the MX blocks below E8M0's range: a scale is at least 2^-127, so a block
// whose largest |x| is below 2^(emin - 127) rounds on a grid of up to
// 2^-126 (a float32 subnormal).
inline double block_scaled_floor(qc_codec_t codec, double message_max) {
  return codec == QC_CODEC_NVFP4 ? std::ldexp(message_max, -13) : std::ldexp(1.0, -126);
}

}  // namespace qct

#endif  // QC_TESTS_UNIT_BLOCK_SCALED_BOUND_H
