// The global codecs of paper 002: one norm for the whole message (and, in a
// collective, for the whole all-rank gradient), standard (linear) dithering
// and exponential dithering.
//
// Message layout (header: wire_format.h):
//
//   header (32 bytes: codec global_linear (5) or global_exp (6), bits q,
//           bucket_size 1 (ignored: there are no buckets), flags bit 0 =
//           stochastic rounding, bit 1 = max-abs scale, dtype 0, count,
//           payload bytes)
//   float32 scale, called the norm below (little-endian)
//   codes: ceil(count * q / 8) bytes, the little-endian bitstream of
//          codec_kernels.h (element i in bits [i*q, (i+1)*q)); unused high
//          bits of the last byte are zero
//
// Payload length is exactly 4 + ceil(count * q / 8). q is 2..8. Every code
// is sign (bit q-1, set iff z < 0) | magnitude (the low q-1 bits), with
// M = 2^(q-1) - 1, so every q-bit pattern is a valid code.
//
// norm = the shared scale: sqrt(canonical sum of z*z) over all `count`
// elements (cpu/canonical_sum.h; QC_SCALE_L2, paper 002) or max |z| (the
// max-abs scale, QC_SCALE_MAX_ABS and the default, paper 001's shared-scale
// INT8; one below 2^-120 is taken as 0, one above 2^127 as not finite:
// cpu/codec_kernels.h), or the
// externally agreed one set with set_global_norm(). Both are
// >= every |z|, so the decoder need not know which.
//
// global_linear (standard dithering):
//   inv = norm > 0 ? M / norm : 0;  t = |z| * inv;
//   level = clamp(round(t), 0, M), round = rint (nearest, ties to even) or
//   floor(t + u) with u = random_uniform(rng, element_offset + i);
//   decode: +-(level * (norm / M)).
//   The decoded values are integer multiples of one step norm / M, so with a
//   norm agreed by all ranks the signed levels of several ranks can be summed
//   exactly as integers (a native integer allreduce) and scaled once.
// global_exp (exponential dithering):
//   value(0) = 0, value(m) = 2^(m - M) for m = 1..M (value(M) = 1);
//   r = norm > 0 ? |z| / norm : 0 (clamped to 1); m with value(m) <= r <
//   value(m+1); stochastic: m + 1 iff u < (r - value(m)) / (value(m+1) -
//   value(m)) (unbiased: E[value] = r); nearest: the closer level, ties to
//   the even m; decode: +-(norm * value(m)), value(m) exact (ldexpf).
//   Codes are again exact integers on one (exponential) grid per norm.
//
// Rounding: the policy default (QC_ROUND_AUTO) is stochastic for these
// codecs, which makes them unbiased (paper 002: no error feedback needed);
// nearest is what a caller asks for explicitly.
//
// Non-finite values: if any z is NaN or infinite, or the norm itself is not
// finite (this includes a sum of squares that overflows float, i.e. an L2
// norm above ~1.8e19, and a max-abs scale above 2^127), the message carries a NaN norm and zero codes, so every
// element decodes to NaN (DESIGN.md promise 5), and the error-feedback
// residual is set to 0.
//
// An agreed norm smaller than the local values' magnitudes clips them to the
// top level (the collective must pass a norm >= every rank's |z|, which the
// all-rank norm is).
//
// The passes (sum of squares, max-abs, codes, decode) are CPU kernel table
// entries (cpu/codec_kernels.h): kernels_global_scalar.cpp is the reference
// and the AVX2 / AVX-512 tables write the same bytes and residuals.
#pragma once

#include "core/codecs/codec.h"

namespace qc {

class GlobalCodec final : public Codec {
 public:
  // `codec` is QC_CODEC_GLOBAL_LINEAR or QC_CODEC_GLOBAL_EXP; bits 2..8
  // (make_codec checks).
  GlobalCodec(qc_codec_t codec, int bits, bool stochastic, bool max_abs_scale);

  qc_codec_t id() const override { return codec_; }
  bool is_lossless() const override { return false; }
  size_t max_encoded_size(size_t count) const override;
  bool header_for(size_t count, WireHeader* header) const override;
  Status encode(const float* src, size_t count, const RandomKey& key, uint8_t* dst,
                size_t capacity, size_t* written) const override;
  Status decode(const uint8_t* src, size_t size, float* dst, size_t count) const override;
  Status decode_typed(const uint8_t* src, size_t size, void* dst, size_t count,
                      qc_dtype_t dtype) const override;
  Status decode_accumulate(const uint8_t* src, size_t size, float* dst,
                           size_t count) const override;
  // Fused: z = t + e is encoded and e becomes z - decode(z), in two passes
  // over memory (norm, then codes) without a scratch buffer.
  Status encode_error_compensated(const float* t, float* e, size_t count, const RandomKey& key,
                                  uint8_t* dst, size_t capacity, size_t* written) const override;

  // The externally agreed norm (the collectives pass the all-rank norm, the
  // same float on every rank) that later encodes use instead of the local
  // one. A non-finite norm makes every later message NaN; a negative one is
  // QC_ERROR_INVALID_ARGUMENT. Not thread-safe with a concurrent encode on
  // the same codec object.
  Status set_global_norm(float norm);
  void clear_global_norm() { has_global_norm_ = false; }
  bool has_global_norm() const { return has_global_norm_; }
  float global_norm() const { return global_norm_; }

  // This rank's share of the all-rank norm: the canonical sum of z*z with
  // z = t + e (e may be null). The all-rank norm is sqrt of the sum of the
  // ranks' shares, added in rank order, so that every rank gets the same float.
  static float sum_of_squares(const float* t, const float* e, size_t count);
  // This rank's max-abs scale: max |z| with z = t + e (e may be null); NaN
  // when some z is NaN, else Inf when some z is infinite. The all-rank scale is the largest of the
  // ranks' (exact in any order).
  static float max_abs(const float* t, const float* e, size_t count);
  bool max_abs_scale() const { return max_abs_scale_; }

  // The codes of a peer's message of `count` elements encoded on the agreed
  // `norm` (the native algorithm sums them as integers): the decoder's
  // checks, plus a norm that must be that one, bit for bit (a peer on
  // another grid is QC_ERROR_MISMATCH).
  Status codes_of(const uint8_t* src, size_t size, size_t count, float norm,
                  const uint8_t** codes) const;

 private:
  Status encode_impl(const float* src, float* e, size_t count, const RandomKey& key, uint8_t* dst,
                     size_t capacity, size_t* written) const;
  // The message's checks, all before decode writes anything.
  Status check_message(const uint8_t* src, size_t size, size_t count) const;
  Status decode_impl(const uint8_t* src, size_t size, float* dst, size_t count,
                     bool accumulate) const;
  size_t payload_bytes(size_t count) const;

  qc_codec_t codec_;
  int bits_;
  bool stochastic_;
  bool max_abs_scale_;
  bool has_global_norm_ = false;
  float global_norm_ = 0.0f;
};

}  // namespace qc
