// The bucketed quantizing codecs: minmax, qsgd and onebit. They share a
// payload layout (codec_kernels.h has the arithmetic):
//
//   header (32 bytes) | metadata: per bucket, meta_floats float32 values |
//   codes: ceil(count * bits / 8) bytes, a little-endian bitstream
//
// minmax: meta (min, scale), bits 1..8. qsgd: meta (norm), bits 2..8.
// onebit: meta (scale), bits fixed at 1.
#pragma once

#include "core/codecs/codec.h"
#include "cpu/codec_kernels.h"

namespace qc {

class QuantizedCodec final : public Codec {
 public:
  size_t chunk_granule() const override { return bucket_; }
  // `policy` must have been validated for this codec (make_codec does).
  QuantizedCodec(qc_codec_t codec, int bits, int bucket_size, bool stochastic);

  qc_codec_t id() const override { return codec_; }
  bool is_lossless() const override { return false; }
  size_t max_encoded_size(size_t count) const override;
  Status encode(const float* src, size_t count, const RandomKey& key, uint8_t* dst,
                size_t capacity, size_t* written) const override;
  Status decode(const uint8_t* src, size_t size, float* dst, size_t count) const override;
  Status decode_typed(const uint8_t* src, size_t size, void* dst, size_t count,
                      qc_dtype_t dtype) const override;
  Status decode_accumulate(const uint8_t* src, size_t size, float* dst,
                           size_t count) const override;
  Status encode_error_compensated(const float* t, float* e, size_t count, const RandomKey& key,
                                  uint8_t* dst, size_t capacity, size_t* written) const override;

  Status encode_typed(const void* src, qc_dtype_t dtype, size_t count, const RandomKey& key,
                      uint8_t* dst, size_t capacity, size_t* written) const override;

  bool header_for(size_t count, WireHeader* header) const override;
  bool has_scales() const override { return true; }
  Status encode_reusing_scales(const float* src, float* e, size_t count, const RandomKey& key,
                               const uint8_t* previous, size_t previous_size, uint8_t* dst,
                               size_t capacity, size_t* written) const override;

 private:
  // src holds count values of dtype; e != nullptr only with float32;
  // reuse_meta: the metadata area of an earlier message, or nullptr.
  Status encode_impl(const void* src, qc_dtype_t dtype, float* e, size_t count,
                     const RandomKey& key, uint8_t* dst, size_t capacity, size_t* written,
                     const uint8_t* reuse_meta = nullptr) const;
  // The message's checks, all before decode writes anything.
  Status check_message(const uint8_t* src, size_t size, size_t count) const;
  Status decode_impl(const uint8_t* src, size_t size, float* dst, size_t count,
                     bool accumulate) const;
  size_t meta_bytes(size_t count) const;

  qc_codec_t codec_;
  int bits_;
  size_t bucket_;
  bool stochastic_;
  size_t meta_floats_;
  cpu::QuantEncodeFn encode_fn_;
  cpu::QuantDecodeFn decode_fn_;
};

}  // namespace qc
