// fp16 and bf16: every value cast to a 16-bit float (what PyTorch's
// fp16/bf16 compress hooks do). Payload: count little-endian uint16 values.
#pragma once

#include "core/codecs/codec.h"
#include "cpu/codec_kernels.h"

namespace qc {

class CastCodec final : public Codec {
 public:
  size_t chunk_granule() const override { return 1; }
  explicit CastCodec(qc_codec_t codec);

  qc_codec_t id() const override { return codec_; }
  bool is_lossless() const override { return false; }
  size_t max_encoded_size(size_t count) const override;
  bool header_for(size_t count, WireHeader* header) const override;
  Status encode(const float* src, size_t count, const RandomKey& key, uint8_t* dst,
                size_t capacity, size_t* written) const override;
  // 16-bit input in one pass: widened to float32 in L1-sized blocks and cast.
  Status encode_typed(const void* src, qc_dtype_t dtype, size_t count, const RandomKey& key,
                      uint8_t* dst, size_t capacity, size_t* written) const override;
  Status decode(const uint8_t* src, size_t size, float* dst, size_t count) const override;
  Status decode_typed(const uint8_t* src, size_t size, void* dst, size_t count,
                      qc_dtype_t dtype) const override;
  Status decode_accumulate(const uint8_t* src, size_t size, float* dst,
                           size_t count) const override;

 private:
  Status write_header(size_t count, uint8_t* dst, size_t capacity, size_t* written) const;
  // The message's checks, all before decode writes anything.
  Status check_message(const uint8_t* src, size_t size, size_t count) const;
  Status decode_impl(const uint8_t* src, size_t size, float* dst, size_t count,
                     bool accumulate) const;
  qc_codec_t codec_;
  cpu::CastEncodeFn encode_fn_;
  cpu::CastDecodeFn decode_fn_;
  cpu::CastDecodeFn fp16_widen_fn_;  // exact widening of 16-bit input
  cpu::CastDecodeFn bf16_widen_fn_;
};

}  // namespace qc
