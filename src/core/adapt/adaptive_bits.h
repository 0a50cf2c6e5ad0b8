// Adaptive per-layer bit widths (paper 003, CGX, §5 "Adaptive layer-wise
// quantization").
//
// Problem (§5, para 3): choose widths b_1..b_L from an allowed set that
// minimise the wire bytes sum_l bytes_l(b_l), subject to the predicted
// compression error sum_l E_l(b_l) <= alpha * E_4, where E_4 is the error of
// sending every layer at 4 bits (the uniform width known to recover accuracy).
//
// This file is the pure algorithm: statistics in, widths out. It knows nothing
// of communicators; the caller collects LayerStats (e.g. averaged over the last
// calls) and applies the widths as per-layer policies. Every input is reduced
// to a canonical order (by name) before anything is computed and nothing
// random or hash-ordered is used, so every rank that holds the same statistics
// computes the same widths, whatever order it lists the layers in.
//
// Error model (per layer, squared L2 norm of decode(encode(x)) - x):
//   minmax, nearest rounding: the code step of a bucket is
//     delta = range / (2^b - 1); with the rounding error uniform on
//     [-delta/2, delta/2] each element contributes delta^2 / 12, so
//       E_l(b) = sq_range_sum_l / (12 (2^b - 1)^2),
//     sq_range_sum_l = sum over buckets of range^2 * bucket_len.
//     Stochastic rounding: E[f(1-f)] = 1/6 for a uniform fraction f, so /6.
//   qsgd (levels M = 2^(b-1) - 1 on [0, norm_bucket]): step = norm_bucket / M,
//     per element min(step^2 / 12, what the bucket holds); see
//     predict_layer_error for the bound used.
//   When sq_range_sum is 0 but sq_norm > 0 (only the norm was collected), the
//   values are taken as i.i.d. zero-mean Gaussian with sigma^2 = sq_norm/count
//   and the expected range of a bucket of n values is 2 * Phi^-1((n - 0.375) /
//   (n + 0.25)) * sigma (Blom's approximation of the expected maximum; the
//   variance of the range, ~2% of its square at n = 128, is ignored).
//   Heavy-tailed gradients have larger ranges than this, so measured statistics
//   (layer_stats_from_data) are preferred where they are available.
//
// Wire bytes (src/core/codecs/codec_quantized.h, wire_format.h):
//   32-byte header + per bucket meta floats (minmax: min and scale, 8 bytes;
//   qsgd: norm, 4 bytes) + ceil(count * b / 8) bytes of codes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "qc.h"

namespace qc {

struct LayerStats {
  std::string name;
  uint64_t count = 0;         // elements
  double sq_norm = 0.0;       // squared L2 norm of the gradient (averaged over calls)
  double sq_range_sum = 0.0;  // sum over buckets of (max - min)^2 * bucket_len, for the
                              // configured bucket size (averaged); 0 = unknown, estimate
                              // from sq_norm (Gaussian approximation, see above)
};

enum class AdaptMethod {
  kKmeans,  // paper 003 §5 Algorithm 1
  kLinear,  // the paper's simpler sort-by-sensitivity heuristic, budget-constrained
};

struct AdaptConfig {
  std::vector<int> allowed_bits{2, 3, 4, 8};  // each 1..8 (qsgd: 2..8); order irrelevant
  double alpha = 2.0;                         // error budget alpha * E4, alpha >= 1
  AdaptMethod method = AdaptMethod::kKmeans;
  int bucket_size = 128;                      // elements per bucket, >= 1
  qc_codec_t codec = QC_CODEC_MINMAX;         // QC_CODEC_MINMAX or QC_CODEC_QSGD
  bool stochastic = false;                    // stochastic rounding (error model only)
  int kmeans_iterations = 50;                 // Lloyd iterations (fixed upper bound)
  // Fraction of the extra budget (alpha - 1) * E4 held back when planning, in
  // [0, 1): the search keeps predicted_error <= E4 + (alpha - 1) * E4 *
  // (1 - headroom). The error model is within ~5% of the codec per layer for
  // Gaussian data (tests/unit/test_adaptive_bits.cpp), and the greedy method
  // fills the budget to the last percent, so without headroom the measured
  // error could exceed alpha * E4 by that model error. 0 plans to the budget.
  double headroom = 0.05;
};

struct AdaptResult {
  std::vector<int> bits;          // per layer, in the input order
  double predicted_error = 0.0;   // sum_l E_l(bits_l)
  double error_budget = 0.0;      // alpha * e4
  double e4 = 0.0;                // sum_l E_l(4)
  uint64_t predicted_bytes = 0;   // sum_l bytes_l(bits_l)
  uint64_t bytes_at_4 = 0;        // sum_l bytes_l(4)
  std::string note;               // why the budget could not be met, fallbacks taken; "" normally
};

// Predicted squared error of one layer at `bits` (model above). bits 1..8.
double predict_layer_error(const LayerStats& layer, int bits, const AdaptConfig& config);
// Exact encoded size of one layer at `bits` (header, metadata and codes).
uint64_t predict_layer_bytes(uint64_t count, int bits, const AdaptConfig& config);

// Statistics of one gradient, for one call: sq_norm and sq_range_sum for the
// given bucket size (non-finite values are the caller's problem).
LayerStats layer_stats_from_data(const std::string& name, const float* x, uint64_t count,
                                 int bucket_size);

// Checks config (INVALID_ARGUMENT with a message naming the field), then
// assigns one width from config.allowed_bits to every layer. Zero layers give
// an empty result. predicted_error <= error_budget always holds unless no
// uniform allowed width meets the budget (4 not allowed and every allowed
// width coarser than needed); then every layer gets the widest allowed width
// and `note` says so.
Status adapt_bit_widths(const std::vector<LayerStats>& layers, const AdaptConfig& config,
                        AdaptResult* result);

}  // namespace qc
