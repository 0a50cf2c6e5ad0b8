// The global codecs' codes as exact integers, for the native algorithm
// (native.cpp), and the integer sums back to floats.
//
// global_linear: a code is sign | level (bits-1 magnitude bits) with value
// level * norm / M, M = 2^(bits-1) - 1: its integer is the signed level, and
// a sum of k of them needs bits + ceil(log2 k) bits.
// global_exp: level m > 0 has value norm * 2^(m - M), i.e. 2^(m - 1) units of
// norm * 2^(1 - M): fixed point with a single bit set. It is split into limbs
// of 16 bits (one limb for bits <= 5), each an integer of min(16, M) + 1
// bits; a value's limbs are recombined in double, high to low.
#pragma once

#include <cstddef>
#include <cstdint>

#include "qc.h"

namespace qc {

struct CodeIntegers {
  bool linear = true;
  int bits = 0;         // code width, 2..8
  int limbs = 1;        // integers per value
  int value_width = 0;  // bits of one rank's integer (two's complement)
};

CodeIntegers code_integers(qc_codec_t codec, int bits);

// out[i * limbs + k] = limb k of code i's integer (`count` codes at
// `codes`, the codec's bitstream).
template <class T>
void codes_to_integers(const uint8_t* codes, size_t count, const CodeIntegers& ci, T* out);
// out[i * limbs + k] += the same (wrapping: a hostile peer's codes make
// wrong sums, never undefined ones).
template <class T>
void add_codes_as_integers(const uint8_t* codes, size_t count, const CodeIntegers& ci, T* out);

// dst[i] = the float of value i's summed integers (count * limbs of them).
template <class T>
void sums_to_floats(const T* sums, size_t count, const CodeIntegers& ci, float norm, float* dst);

}  // namespace qc
