// Top-k sparsification (paper 003): only the k elements of largest magnitude
// travel, as (index, value) pairs; error feedback keeps the rest.
//
// k = ceil(topk_ratio * count) (computed in double, clamped to 1..count) for
// count > 0, and 0 for count 0. Selection: the k largest |z|; NaN counts as
// larger than every number (so non-finite values are transmitted, never
// hidden; +-Inf come next), ties go to the lower index. Deterministic.
//
// Message layout (header: wire_format.h):
//
//   header (32 bytes: codec topk (8), bits 32, bucket_size 1 (ignored),
//           flags 0, dtype 0, count, payload bytes)
//   u32 k (little-endian)
//   k entries sorted by strictly ascending index, each 8 bytes:
//     u32 index (little-endian), float32 value (little-endian IEEE bits of z)
//
// Payload length is exactly 4 + 8k, so the message has exactly
// max_encoded_size(count) = 32 + 4 + 8 * k(ratio, count) bytes. A decoder
// built from a header alone does not know the ratio: it takes k from the
// payload and checks k <= count, payload length == 4 + 8k, and indices
// strictly increasing and < count (else QC_ERROR_CORRUPT_DATA), all before
// it writes dst. Decode writes 0 everywhere except the k positions;
// decode_accumulate adds at the k positions only.
//
// Error feedback (fused): z = t + e; e = z at the unsent positions, 0 at the
// sent ones (the sent values are exact).
//
// Indices are 32-bit: encoding more than 2^32 - 1 elements is
// QC_ERROR_UNSUPPORTED.
#pragma once

#include "core/codecs/codec.h"

namespace qc {

class TopkCodec final : public Codec {
 public:
  // `ratio` in (0, 1] (validate_policy checks).
  explicit TopkCodec(float ratio) : ratio_(ratio) {}

  qc_codec_t id() const override { return QC_CODEC_TOPK; }
  bool is_lossless() const override { return false; }
  size_t max_encoded_size(size_t count) const override;
  // As Codec's, and QC_ERROR_UNSUPPORTED past 2^32 - 1 elements.
  Status encoded_size(size_t count, size_t* bytes) const override;
  Status encode(const float* src, size_t count, const RandomKey& key, uint8_t* dst,
                size_t capacity, size_t* written) const override;
  Status decode(const uint8_t* src, size_t size, float* dst, size_t count) const override;
  Status decode_accumulate(const uint8_t* src, size_t size, float* dst,
                           size_t count) const override;
  Status encode_error_compensated(const float* t, float* e, size_t count, const RandomKey& key,
                                  uint8_t* dst, size_t capacity, size_t* written) const override;

  // The number of elements sent for `count` elements at `ratio`.
  static size_t k_for(float ratio, size_t count);

 private:
  Status encode_impl(const float* src, float* e, size_t count, uint8_t* dst, size_t capacity,
                     size_t* written) const;
  Status decode_impl(const uint8_t* src, size_t size, float* dst, size_t count,
                     bool accumulate) const;

  float ratio_;
};

}  // namespace qc
