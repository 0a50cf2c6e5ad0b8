// The golden wire-format vectors (tests/data/golden_*.bin): which messages
// exist, and the fixed input they encode. Shared by the generator
// (tests/tools/make_golden.cpp) and the check (tests/unit/test_codecs.cpp).
// docs/wire-format.md documents the input formula; keep the three in step.
//
// Every golden message is qc_codec_encode(policy, golden_input(), 300, float32)
// with policy.seed = 42 (qc_codec_encode keys its random bits with rank 0, call 0,
// element offset 0), bucket_size 32 unless a case says otherwise.
#ifndef QC_TESTS_TOOLS_GOLDEN_CASES_H
#define QC_TESTS_TOOLS_GOLDEN_CASES_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "qc.h"

namespace qc_golden {

constexpr size_t kCount = 300;
constexpr uint64_t kSeed = 42;
constexpr int kBucket = 32;

// x[i] = ((37 i) mod 101 - 50) / 16 * (1 + (i mod 7) / 8), except
// x[i] = 0.75 for 128 <= i < 192 (two constant buckets of 32) and
// x[i] = -0.0 for i = 299. Every step is exact in float32 (small integers,
// power-of-two divisions, products of short mantissas), so the input is the
// same on every platform and compiler.
inline std::vector<float> golden_input() {
  std::vector<float> x(kCount);
  for (size_t i = 0; i < kCount; ++i) {
    const float a = static_cast<float>(static_cast<int>((37 * i) % 101) - 50) / 16.0f;
    const float b = 1.0f + static_cast<float>(i % 7) / 8.0f;
    x[i] = a * b;
  }
  for (size_t i = 128; i < 192; ++i) x[i] = 0.75f;
  x[299] = -0.0f;
  return x;
}

struct GoldenCase {
  const char* file;  // under tests/data
  qc_codec_t codec;
  int bits;
  int bucket;
  qc_rounding_t rounding;
  float topk_ratio;
  bool required;  // false: codec may be missing from this build (skip then)
  // The global codecs' scale: the first vectors were made with the L2 norm,
  // before max-abs became the default; they keep it.
  qc_scale_t scale = QC_SCALE_L2;
};

inline std::vector<GoldenCase> golden_cases() {
  const qc_rounding_t N = QC_ROUND_NEAREST_EVEN;
  const qc_rounding_t S = QC_ROUND_STOCHASTIC;
  return {
      {"golden_none_32_32_nearest.bin", QC_CODEC_NONE, 4, kBucket, N, 0.01f, true},
      {"golden_fp16_16_32_nearest.bin", QC_CODEC_FP16, 4, kBucket, N, 0.01f, true},
      {"golden_bf16_16_32_nearest.bin", QC_CODEC_BF16, 4, kBucket, N, 0.01f, true},
      {"golden_minmax_1_32_nearest.bin", QC_CODEC_MINMAX, 1, kBucket, N, 0.01f, true},
      {"golden_minmax_2_32_nearest.bin", QC_CODEC_MINMAX, 2, kBucket, N, 0.01f, true},
      {"golden_minmax_4_32_nearest.bin", QC_CODEC_MINMAX, 4, kBucket, N, 0.01f, true},
      {"golden_minmax_8_32_nearest.bin", QC_CODEC_MINMAX, 8, kBucket, N, 0.01f, true},
      {"golden_minmax_4_32_stochastic.bin", QC_CODEC_MINMAX, 4, kBucket, S, 0.01f, true},
      {"golden_qsgd_4_32_stochastic.bin", QC_CODEC_QSGD, 4, kBucket, S, 0.01f, true},
      {"golden_qsgd_8_32_nearest.bin", QC_CODEC_QSGD, 8, kBucket, N, 0.01f, true},
      {"golden_onebit_1_32_nearest.bin", QC_CODEC_ONEBIT, 1, kBucket, N, 0.01f, true},
      {"golden_global_linear_4_32_stochastic.bin", QC_CODEC_GLOBAL_LINEAR, 4, kBucket, S, 0.01f,
       false},
      {"golden_global_exp_4_32_stochastic.bin", QC_CODEC_GLOBAL_EXP, 4, kBucket, S, 0.01f, false},
      // Paper 001's shared-scale INT8: the max-abs scale, nearest rounding.
      {"golden_global_linear_8_32_nearest_maxabs.bin", QC_CODEC_GLOBAL_LINEAR, 8, kBucket, N,
       0.01f, false, QC_SCALE_MAX_ABS},
      {"golden_topk_r0.1_32_nearest.bin", QC_CODEC_TOPK, 4, kBucket, N, 0.1f, false},
      // The block-scaled codecs (bits and bucket: the format's, which the
      // policy does not set). bindings/python/tests/test_mx_reference.py
      // checks these files against its independent encoder too.
      {"golden_mxfp8_8_32_nearest.bin", QC_CODEC_MXFP8, 8, 32, N, 0.01f, true},
      {"golden_mxfp8_8_32_stochastic.bin", QC_CODEC_MXFP8, 8, 32, S, 0.01f, true},
      {"golden_mxfp8_e5m2_8_32_nearest.bin", QC_CODEC_MXFP8_E5M2, 8, 32, N, 0.01f, true},
      {"golden_mxfp6_6_32_nearest.bin", QC_CODEC_MXFP6, 6, 32, N, 0.01f, true},
      {"golden_mxfp6_e3m2_6_32_nearest.bin", QC_CODEC_MXFP6_E3M2, 6, 32, N, 0.01f, true},
      {"golden_mxfp4_4_32_nearest.bin", QC_CODEC_MXFP4, 4, 32, N, 0.01f, true},
      {"golden_mxint8_8_32_nearest.bin", QC_CODEC_MXINT8, 8, 32, N, 0.01f, true},
      {"golden_nvfp4_4_16_nearest.bin", QC_CODEC_NVFP4, 4, 16, N, 0.01f, true},
      {"golden_nvfp4_4_16_stochastic.bin", QC_CODEC_NVFP4, 4, 16, S, 0.01f, true},
  };
}

inline qc_policy_t golden_policy(const GoldenCase& c) {
  qc_policy_t p = QC_POLICY_INIT;
  p.codec = c.codec;
  p.bits = c.bits;
  p.bucket_size = c.bucket;
  p.rounding = c.rounding;
  p.topk_ratio = c.topk_ratio;
  p.scale = c.scale;
  p.seed = kSeed;
  return p;
}

// Encode the golden input for a case. Returns the qc status; *out is the
// message on success.
inline qc_status_t golden_encode(const GoldenCase& c, std::vector<uint8_t>* out) {
  const qc_policy_t p = golden_policy(c);
  const std::vector<float> x = golden_input();
  size_t cap = 0;
  qc_status_t s = qc_codec_encoded_size(&p, kCount, &cap);
  if (s != QC_SUCCESS) return s;
  out->assign(cap, 0);
  size_t written = 0;
  s = qc_codec_encode(&p, x.data(), kCount, QC_DTYPE_FLOAT32, out->data(), cap, &written);
  if (s != QC_SUCCESS) return s;
  out->resize(written);
  return QC_SUCCESS;
}

}  // namespace qc_golden

#endif  // QC_TESTS_TOOLS_GOLDEN_CASES_H
